"""Paper-style reports: the seed papers' tables and figures, regenerated from run records.

Per (task, preset), ``write_paper_report`` writes ``paper_<task>_<preset>.md`` / ``.tex`` (and
``.csv`` / ``.parquet``: the main table's numbers) and figures (``harness.reporting.figures``):
- the main table, in the layout of the seed paper that reports this kind of task, chosen from the
  task's primary metric: S-SA Tables 1-3 for accuracy (√(Acc×Skip), Skip %, accuracy, effective
  FLOPs), S-SA Table 4 for an MSE task that records ``solved`` (solved, MSE, Skip %, FLOPs),
  S-EI Table 1 otherwise (D_h, # params, metric). One row per method variant (runs differing only
  by seed), labelled by the config values that vary among a method's variants, or with a
  selection rule (``harness.selection``) one row per method, picked on validation data. Cells
  are ``harness.reporting.text.fmt_cell`` (mean ± std over seeds, one unit per column); the best
  mean per measured column is bold; a 95 % CI of the primary metric, the commit of the row's
  records, and a Welch's t-test column against the best variant (left out when all n/a);
- one "paper vs harness" table per published table of the task (``harness.reporting.published``):
  each paper row beside the harness variant that has all of the row's knobs (``match_variant``),
  or ``not run`` and the command that would run it; the paper's numbers as printed, ours minus
  the paper's, and where the harness setting differs from the paper's (``setting_diff``), with
  the task's documented differences under the table. Methods that a published table lists come
  first in the main table, in its order.
The header (``harness.reporting.text.header``) names the records, commits, devices, FLOP unit and
the rule that chose each test metric. LaTeX output compiles with booktabs and graphicx
(``tex_escape``, ``render_tex``). pandas and scipy are imported inside the functions.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.outputs import write_bytes, write_text
from harness.reporting.published import PaperRow, PaperTable, tables_for
from harness.reporting.text import (
    NOTES,
    TITLES,
    arrow,
    ci95,
    column_scale,
    commit_label,
    fmt_cell,
    fmt_ci,
    fmt_p,
    header,
    scaled,
    seeds_cell,
)
from harness.results import flat_config, latest
from harness.selection import Rule, choose
from harness.selection import select as select_records

if TYPE_CHECKING:
    import pandas as pd

Cell = tuple[str, bool]  # (text, bold)
KEYS = "geo_mean skip_pct read_skip_pct accuracy solved mse perplexity flops params hidden_size"
KEYS = KEYS.split()


@dataclass(frozen=True)
class Column:
    """A table column: title, the measure key, direction (None: no bold), 10^scale unit, kind."""

    title: str
    key: str
    higher: bool | None = None
    scale: int = 0
    kind: str = "num"  # num | int | solved


def runs_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per ok run (the latest line of each run id): identity, metrics, FLOPs, params."""
    import pandas as pd

    rows = []
    for r in latest(records):
        if r.get("status") != "ok":
            continue
        cfg = flat_config(r)
        row = {k: r[k] for k in ("task", "preset", "method", "variant_id", "seed", "primary")}
        row.update(higher=bool(r["higher_is_better"]), record=r, config=cfg)
        row.update(hidden_size=cfg.get("hidden_size"), lam=cfg.get("lam"))
        row["flops"] = (r.get("flops") or {}).get("effective", math.nan)
        row["params"] = (r.get("params") or {}).get("total", math.nan)
        row.update({k: math.nan if v is None else v for k, v in (r.get("metrics") or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _sort_key(v: Any) -> tuple[int, Any]:
    return (0, float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v))


def aggregate(runs: pd.DataFrame, keys: Sequence[str], order: Sequence[str] = ()) -> pd.DataFrame:
    """Aggregate runs over seeds into one row per method variant.

    Each row has ``method``, ``label`` (the config values that vary among the method's variants;
    ``parts`` by key), ``seeds``, ``config``, ``records``, and per key ``k`` the mean, ``k_std``
    (sample std, 0 for one seed), ``k_vals`` (per seed). Methods in ``order`` come first.
    """
    import pandas as pd

    rows = []
    for _, m_runs in runs.groupby("method", sort=False):
        groups = list(m_runs.groupby("variant_id", sort=False))
        cfgs = [g["config"].iloc[0] for _, g in groups]
        fields = {k for c in cfgs for k in c}  # a key one config lacks varies too (old records)
        varying = sorted(k for k in fields if len({repr(c.get(k)) for c in cfgs}) > 1)
        for (_, g), cfg in zip(groups, cfgs, strict=True):
            g = g.sort_values("seed")
            row = {
                "method": g["method"].iloc[0],
                "parts": {
                    k: f"{k}={cfg[k]:g}" if isinstance(cfg.get(k), float) else f"{k}={cfg.get(k)}"
                    for k in varying
                },
                "sort": tuple(_sort_key(cfg.get(k)) for k in varying),
                "seeds": g["seed"].nunique(),
                "variant_id": g["variant_id"].iloc[0],
                "config": cfg,
                "records": list(g["record"]),
                "commit": commit_label(list(g["record"])),
            }
            for k in keys:
                vals = [float(v) for v in g[k] if not math.isnan(v)] if k in g else []
                row[k] = statistics.fmean(vals) if vals else math.nan
                row[f"{k}_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
                row[f"{k}_vals"] = vals
            rows.append(row)
    agg = pd.DataFrame(rows)
    agg["label"] = [", ".join(p.values()) for p in agg["parts"]]
    rank = {m: i for i, m in enumerate(order)}
    agg["rank"] = [
        (rank.get(m, len(rank)), m, s) for m, s in zip(agg["method"], agg["sort"], strict=True)
    ]
    return agg.sort_values("rank").drop(columns=["rank", "sort"]).reset_index(drop=True)


def welch_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Welch's t-test p-value of two samples; None with fewer than 2 values on a side."""
    if len(a) < 2 or len(b) < 2:
        return None
    import warnings

    from scipy.stats import ttest_ind

    with warnings.catch_warnings():  # identical samples: scipy warns and returns NaN (n/a)
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(ttest_ind(a, b, equal_var=False).pvalue)


def layout(agg: pd.DataFrame, primary: str, higher: bool) -> list[Column]:
    """The seed paper's columns for this kind of task (see the module docstring)."""
    s = column_scale(agg["flops"], large=True)
    flops = Column(scaled("FLOPs, effective", s) + " ↓", "flops", False, s)
    skip = [Column("Skip % ↑", "skip_pct", True)]
    if "read_skip_pct" in agg and agg["read_skip_pct"].notna().any():  # activity-sparse rows
        skip.append(Column("Activity sparsity % ↑", "read_skip_pct", True))
    if primary == "accuracy":
        return [
            Column("√(Acc×Skip) ↑", "geo_mean", True),
            *skip,
            Column("Accuracy % ↑", "accuracy", True),
            flops,
        ]
    if primary == "mse" and agg["solved"].notna().any():
        s = column_scale(agg["mse"])
        return [
            Column("Solved", "solved", None, kind="solved"),
            Column(scaled("MSE", s) + " ↓", "mse", False, s),
            *skip,
            flops,
        ]
    s = column_scale(agg[primary])
    title = scaled(TITLES.get(primary, primary), s) + arrow(higher)
    return [
        Column("D_h", "hidden_size", kind="int"),
        Column("# params", "params", kind="int"),
        Column(title, primary, higher, s),
    ]


def _cell(row: Any, col: Column) -> str:
    mean = row[col.key]
    if col.kind == "int":
        if mean is None or math.isnan(mean):
            return "–"
        return fmt_cell(mean, scale=col.scale) if col.scale else f"{mean:.0f}"
    if col.kind == "solved":  # Yes / No when the seeds agree, else the count solved
        vals = row[f"{col.key}_vals"]
        k = int(sum(v > 0 for v in vals))
        return {0: "No", len(vals): "Yes"}.get(k, f"{k}/{len(vals)}") if vals else "–"
    return fmt_cell(mean, row[f"{col.key}_std"], row["seeds"], col.scale)


def _bold(means: Sequence[float], higher: bool | None) -> list[bool]:
    """True at the best finite mean (ties included); all False if every row ties."""
    finite = [m for m in means if m is not None and not math.isnan(m)]
    if higher is None or not finite or max(finite) == min(finite):
        return [False] * len(means)
    best = max(finite) if higher else min(finite)
    return [m is not None and not math.isnan(m) and math.isclose(m, best) for m in means]


def main_table(
    agg: pd.DataFrame, primary: str, higher: bool, picked: dict[str, str] | None = None
) -> tuple[list[str], list[list[Cell]]]:
    """The S-SA / S-EI style table (see the module docstring).

    Args:
        agg: ``aggregate``'s rows.
        primary: the primary metric's key.
        higher: its direction.
        picked: variant id -> why the selection rule picked it (adds a "Picked by" column).
    """
    cols = layout(agg, primary, higher)
    means = [_nan_low(m, higher) for m in agg[primary]]
    best = means.index(max(means) if higher else min(means)) if agg[primary].notna().any() else -1
    ref = agg.iloc[best] if best >= 0 else None
    shown = {c.key for c in cols}  # D_h as a column is not repeated in the variant label
    labels = [", ".join(t for k, t in p.items() if k not in shown) for p in agg["parts"]]
    pcol = next(c for c in cols if c.key == primary)
    pvals = []
    for i, (_, r) in enumerate(agg.iterrows()):
        p = welch_p(r[f"{primary}_vals"], ref[f"{primary}_vals"]) if ref is not None else None
        pvals.append("best" if i == best else fmt_p(p))
    with_p = any(p not in ("best", "n/a") for p in pvals)  # an all-n/a p column is left out
    ptitle = TITLES.get(primary, primary)
    titles = ["Method"] + (["Variant"] if any(labels) else []) + ["Seeds"]
    titles += [c.title for c in cols] + [scaled(f"95 % CI, {ptitle}", pcol.scale)]
    titles += [f"p vs best ({ptitle}, Welch)"] if with_p else []
    titles += ["Commit"] + (["Picked by"] if picked is not None else [])
    bolds = [_bold(list(agg[c.key]), c.higher if c.kind == "num" else None) for c in cols]
    rows = []
    for i, (_, r) in enumerate(agg.iterrows()):
        cells: list[Cell] = [(r["method"], False)]
        cells += [(labels[i], False)] if "Variant" in titles else []
        cells.append((seeds_cell(r["seeds"]), False))
        cells += [(_cell(r, c), bolds[j][i]) for j, c in enumerate(cols)]
        cells.append((fmt_ci(r[primary], r[f"{primary}_vals"], pcol.scale, primary), False))
        cells += [(pvals[i], False)] if with_p else []
        cells.append((r["commit"], False))
        cells += [(picked.get(r["variant_id"], "–"), False)] if picked is not None else []
        rows.append(cells)
    return titles, rows


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-15)
    return a == b


def _nan_low(x: float, higher: bool) -> float:
    return (-math.inf if higher else math.inf) if x is None or math.isnan(x) else x


def match_variant(row: PaperRow, agg: pd.DataFrame, rule: Rule) -> tuple[Any, str]:
    """The harness variant that fills a paper row, and how it was picked.

    A variant qualifies only if it is of the row's method and has every one of the row's knobs
    (``row.config``). One qualifying variant fills the row; among several, ``rule`` picks on
    validation metrics (``harness.selection.choose``). None qualifies: ``(None, "not run")``.
    """
    cand = [
        r
        for _, r in agg[agg["method"] == row.method].iterrows()
        if all(_same(r["config"].get(k), v) for k, v in row.config.items())
    ]
    if not cand:
        return None, "not run"
    if len(cand) == 1:
        return cand[0], "the one variant with the row's knobs"
    vid, why = choose({r["variant_id"]: r["records"] for r in cand}, rule)
    if vid is None:
        return None, f"not picked ({why})"
    return next(r for r in cand if r["variant_id"] == vid), why


# Short names of settings in the "setting vs paper" notes; other keys print as their last part.
SETTING_NAMES = {
    "task.seq_len": "T",
    "task.n_train": "training sequences",
    "task.chunk": "chunk",
    "hidden_size": "D",
    "train.batch_size": "batch",
    "train.epochs": "epochs",
    "train.lr": "lr",
}


def _value_text(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def setting_diff(setting: dict[str, Any], cfg: dict[str, Any], seeds: int, preset: str) -> str:
    """Where a harness variant's setting differs from a paper table's: ``T 50 (paper 500); ...``.

    Args:
        setting: the paper's (``PaperTable.setting``; a string value such as ``n.s.`` is shown
            as is and always counts as a difference).
        cfg: the variant's flat config.
        seeds: its seed count.
        preset: the harness preset.
    """
    parts = [f"preset {preset}"]
    for k, paper in setting.items():
        ours = seeds if k == "seeds" else cfg.get(k, "?")
        if not _same(ours, paper):
            name = SETTING_NAMES.get(k, k.rsplit(".", 1)[-1])
            parts.append(f"{name} {_value_text(ours)} (paper {_value_text(paper)})")
    if cfg.get("train.compile"):  # same equations, fused float operations (docs/methods.md)
        parts.append("trained with its step compiled (train.compile)")
    return "; ".join(parts)


def _decimals_of(text: str) -> int:
    return len(text.partition(".")[2]) if "." in text and "e" not in text.lower() else 0


def _headline(table: PaperTable, primary: str) -> str:
    """The column the "ours − paper" difference is taken on: the primary metric if printed."""
    if primary in table.columns:
        return primary
    return next((c for c in table.columns if c not in ("solved", "flops", "params")), "")


def run_command(task: str, preset: str, method: str, knobs: dict[str, Any], seeds: int) -> str:
    """The ``harness run`` command that would fill a paper row."""
    cmd = f"harness run --tasks {task} --methods {method} --preset {preset}"
    cmd += f" --seeds 0-{seeds - 1}" if seeds > 1 else ""
    return cmd + "".join(f" --set {k}={_value_text(v)}" for k, v in knobs.items())


@dataclass
class PaperVsHarness:
    """One paper-vs-harness table: cells, and the notes printed under it."""

    titles: list[str]
    rows: list[list[Cell]]
    notes: list[str]


def paper_vs_harness(
    table: PaperTable,
    agg: pd.DataFrame,
    primary: str,
    rule: Rule,
    task: str = "",
    preset: str = "",
) -> PaperVsHarness:
    """Each paper row beside the harness variant with that row's knobs (``match_variant``).

    Paper numbers are printed as the paper prints them, in its units (``table.scale``); ours are
    in the same units. Rows that no variant fills say ``not run`` and the notes give the command
    that would run them; the setting differences (``setting_diff``) are lettered notes.
    """
    head = _headline(table, primary)
    titles = ["Paper row"]
    for k in table.columns:
        t = scaled(TITLES.get(k, k), table.scale.get(k, 0))
        titles += [f"Paper: {t}", f"Ours: {t}"]
    if head:
        titles.append(f"Ours − paper: {scaled(TITLES.get(head, head), table.scale.get(head, 0))}")
    titles += ["Ours: knobs", "Ours: seeds", "Setting vs paper", "Commit", "Picked by"]
    rows, letters, commands = [], {}, []
    n_seeds = int(agg["seeds"].max()) if len(agg) else 1
    for prow in table.rows:
        ours, why = match_variant(prow, agg, rule)
        cells: list[Cell] = [(prow.label, False)]
        for k in table.columns:
            sc = table.scale.get(k, 0)
            kind = {"solved": "solved", "params": "int"}.get(k, "num")
            paper = prow.printed[k]
            if k in prow.printed_std:
                paper += f" ± {prow.printed_std[k]}"
            mine = _cell(ours, Column(k, k, scale=sc, kind=kind)) if ours is not None else "not run"
            cells += [(paper, False), (mine, False)]
        if head:
            diff = "–"
            if ours is not None and not math.isnan(ours[head]):
                d = (ours[head] - prow.values[head]) * 10.0 ** -table.scale.get(head, 0)
                diff = f"{d:+.{_decimals_of(prow.printed[head])}f}".replace("-", "−")
            cells.append((diff, False))
        knobs = ", ".join(f"{k}={_value_text(v)}" for k, v in prow.config.items()) or "–"
        if ours is None:
            commands.append(run_command(task, preset, prow.method, prow.config, n_seeds))
            cells += [(knobs, False), ("0", False), ("–", False), ("–", False), (why, False)]
        else:
            diff_text = setting_diff(table.setting, ours["config"], ours["seeds"], preset)
            letter = letters.setdefault(diff_text, f"({chr(ord('a') + len(letters))})")
            cells += [
                (knobs, False),
                (seeds_cell(ours["seeds"]), False),
                (letter, False),
                (ours["commit"], False),
                (why, False),
            ]
        rows.append(cells)
    notes = [f"Setting vs paper {letter}: {text}." for text, letter in letters.items()]
    if commands:
        notes.append(
            "Not run (no harness variant has the row's knobs); to run them: "
            + "; ".join(f"`{c}`" for c in dict.fromkeys(commands))
            + "."
        )
    return PaperVsHarness(titles, rows, notes)


def task_differences(task: str) -> list[str]:
    """The bullets under "Differences from the paper:" in the task module's docstring."""
    import sys

    from harness.registry import TASKS

    try:
        cls = TASKS.get(task)
    except HarnessError:
        return []
    doc = sys.modules[cls.__module__].__doc__ or ""
    _, found, rest = doc.partition("Differences from the paper:")
    if not found:
        return []
    bullets: list[str] = []
    for line in rest.strip("\n").splitlines():
        if not line.strip():
            break
        if line.lstrip().startswith("- "):
            bullets.append(line.strip()[2:])
        elif bullets:
            bullets[-1] += " " + line.strip()
    return [b.replace("``", "`") for b in bullets]


MATCH_RULE = (
    "- Paper vs harness: a harness variant fills a paper row only if it has every one of the "
    "row's knobs (Ours: knobs, e.g. λ, p, depth); with several such variants, {rule} picks one "
    "on validation data; the test set never breaks a tie. A row no variant fills says `not run`, "
    "and the command that would run it is listed under the table. Settings shared by the table "
    "(preset, T, data size, D, epochs, batch, lr, seeds) may differ from the paper's: "
    "Setting vs paper names, per row, a note listing each difference. Paper numbers are printed "
    "as the paper prints them; Ours − paper is in the paper's unit.\n"
)


def render_md(titles: list[str], rows: list[list[Cell]]) -> str:
    """A GitHub Markdown table; bold cells as ``**x**``."""
    import pandas as pd

    body = [[f"**{t}**" if b and t not in ("", "–") else t for t, b in r] for r in rows]
    return pd.DataFrame(body, columns=titles).to_markdown(index=False, disable_numparse=True)


# Text that becomes math in LaTeX, and the math it becomes.
_MATH = re.compile(r"[×x]10\^\{?(-?\d+)\}?|√\(Acc×Skip\)|\b([DR])_(h|t|z|max)\b|\^")
_TEX_PLAIN = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "±": r"$\pm$",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "λ": r"$\lambda$",
    "–": "--",
    "−": "$-$",
    "×": r"$\times$",
    "·": r"$\cdot$",
    "√": r"$\surd$",
    "≠": r"$\neq$",
    "`": "",
}


def _tex_math(m: re.Match) -> str:
    text = m.group(0)
    if m.group(1) is not None:
        return rf"$\times 10^{{{m.group(1)}}}$"
    if text.startswith("√"):
        return r"$\sqrt{\mathrm{Acc}\times\mathrm{Skip}}$"
    if m.group(2):
        sub = r"\mathrm{max}" if m.group(3) == "max" else m.group(3)
        return f"${m.group(2)}_{{{sub}}}$"
    return r"\textasciicircum{}"


def tex_escape(s: str) -> str:
    r"""LaTeX for a cell, title or note (needs only booktabs and graphicx).

    ``x10^5`` / ``×10^5`` become ``$\times 10^{5}$``, ``D_h``, ``R_t``, ``R_max`` math; every
    other LaTeX special character is escaped (no ``^`` or ``_`` is left outside math).
    """
    out, pos = [], 0
    for m in _MATH.finditer(s):
        out.append("".join(_TEX_PLAIN.get(c, c) for c in s[pos : m.start()]))
        out.append(_tex_math(m))
        pos = m.end()
    out.append("".join(_TEX_PLAIN.get(c, c) for c in s[pos:]))
    return "".join(out)


TEX_TABLE = r"""\begin{%(env)s}[tbp]
\centering\small
\caption{%(caption)s}\label{%(label)s}
\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%%
\begin{tabular}{l%(cols)s}
\toprule
%(head)s \\
\midrule
%(body)s
\bottomrule
\end{tabular}}%(notes)s
\end{%(env)s}
"""
TEX_FIGURE = r"""\begin{figure}[tbp]\centering
\includegraphics[width=\linewidth]{%s}
\caption{%s}\label{%s}
\end{figure}
"""


def render_tex(
    titles: list[str],
    rows: list[list[Cell]],
    caption: str,
    label: str = "tab:table",
    notes: Sequence[str] = (),
) -> str:
    r"""A booktabs table: caption and ``\label`` above, shrunk to the line width if wider.

    Bold cells are ``\textbf{x}``; ``notes`` are printed under the tabular, in the float. A
    table wider than about 90 characters is a ``table*`` (both columns of a two-column paper).
    """
    lines = [" & ".join(tex_escape(t) for t in titles)]
    lines += [
        " & ".join(rf"\textbf{{{tex_escape(t)}}}" if b else tex_escape(t) for t, b in r)
        for r in rows
    ]
    cols = zip(titles, *[[t for t, _ in r] for r in rows], strict=True)
    widths = [max(len(t) for t in col) for col in cols]
    text = "".join(f"\n\\par\\smallskip\\footnotesize\\raggedright {tex_escape(n)}" for n in notes)
    return TEX_TABLE % {
        "env": "table*" if sum(widths) + 3 * len(widths) > 90 else "table",
        "caption": tex_escape(caption),
        "label": label,
        "cols": "r" * (len(titles) - 1),
        "head": lines[0],
        "body": "\n".join(x + r" \\" for x in lines[1:]),
        "notes": text,
    }


@dataclass
class Table:
    """A table of a report: caption, label, cells, and the notes under it."""

    caption: str
    label: str
    titles: list[str]
    rows: list[list[Cell]]
    notes: list[str]


def _markdown(head: str, tables: list[Table], figs: list, out: Path) -> str:
    parts = [head]
    for t in tables:
        parts += [f"## {t.caption}\n", render_md(t.titles, t.rows) + "\n"]
        parts += [f"- {n}" for n in t.notes] + ([""] if t.notes else [])
    for caption, paths in figs:
        parts.append(f"![{caption}]({paths[0].relative_to(out).as_posix()})\n\n*{caption}*\n")
    return "\n".join(parts)


def _latex(head: str, tables: list[Table], figs: list, out: Path) -> str:
    text = head.replace("<!-- ", "").replace(" -->", "").replace("`", "")
    parts = ["% " + line for line in text.splitlines() if line.strip()]
    parts.append("% Needs \\usepackage{booktabs,graphicx}.\n")
    parts += [render_tex(t.titles, t.rows, t.caption, t.label, t.notes) for t in tables]
    for caption, paths in figs:
        label = "fig:" + paths[1].stem.replace("_", "-")
        parts.append(
            TEX_FIGURE % (paths[1].relative_to(out).as_posix(), tex_escape(caption), label)
        )
    return "\n".join(parts)


def tidy(agg: pd.DataFrame, task: str, preset: str, picked: dict[str, str] | None) -> pd.DataFrame:
    """One row per variant with numbers, not text: the csv / parquet form of the main table."""
    import pandas as pd

    rows = []
    for _, r in agg.iterrows():
        row = {
            "task": task,
            "preset": preset,
            "method": r["method"],
            "variant": r["label"],
            "variant_id": r["variant_id"],
            "seeds": r["seeds"],
            "commit": r["commit"],
            "picked_by": (picked or {}).get(r["variant_id"], ""),
        }
        for k in KEYS:
            if k in r:
                row[k], row[f"{k}_std"] = r[k], r[f"{k}_std"] if r["seeds"] > 1 else math.nan
                row[f"{k}_ci95"] = ci95(r[f"{k}_vals"]) or math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def write_frame(df: pd.DataFrame, path: Path) -> None:
    """``df`` as ``.csv`` or ``.parquet`` (pyarrow needed; its absence is one HarnessError line).

    Written through ``harness.outputs.write_bytes``: atomically, never over a records store.
    """
    import io

    if path.suffix == ".csv":
        write_text(path, df.to_csv(index=False))
        return
    if not _has_pyarrow():
        raise HarnessError(NO_PYARROW)
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    write_bytes(path, buf.getvalue())


FORMATS = ("md", "tex", "csv", "parquet")
NO_PYARROW = "--format parquet needs pyarrow (pip install pyarrow); csv needs nothing more"


def write_paper_report(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    out_dir: str | Path,
    tasks: Sequence[str] | None = None,
    presets: Sequence[str] | None = None,
    formats: Sequence[str] = ("md", "tex"),
    figures: bool = True,
    published: str | Path | None = None,
    select: Rule | None = None,
) -> list[Path]:
    """Write the paper-style report of every chosen (task, preset) with ok runs.

    Args:
        records: run records (any status; failed runs are counted, not tabulated).
        sources: the records files, named in the header.
        out_dir: directory for ``paper_<task>_<preset>.{md,tex,csv,parquet}`` and ``figures/``.
        tasks: restrict to these tasks (None: all in the records).
        presets: restrict to these presets (None: all in the records).
        formats: any of ``md``, ``tex``, ``csv``, ``parquet`` (csv / parquet: the main table's
            numbers, one row per variant).
        figures: also draw the figures (PNG and PDF).
        published: the published-results file to compare with (None: the shipped one; see
            ``harness.reporting.published.load_tables``).
        select: a selection rule (``harness.selection``): the main table then has one row per
            method, the variant the rule picks on validation data. It also picks among several
            variants with a paper row's knobs (None: ``best-val`` there, all variants in the
            main table).

    Returns:
        The paths written. Raises HarnessError if nothing matches the selection.
    """
    if unknown := sorted(set(formats) - set(FORMATS)):
        raise HarnessError(f"unknown report formats {unknown}; use any of {', '.join(FORMATS)}")
    if "parquet" in formats and not _has_pyarrow():
        raise HarnessError(NO_PYARROW)
    records = latest(records)
    runs = runs_frame(records)
    if not runs.empty:
        chosen = runs["task"].isin(tasks or runs["task"])
        runs = runs[chosen & runs["preset"].isin(presets or runs["preset"])]
    if runs.empty:
        raise HarnessError(
            f"no ok runs for tasks {list(tasks or ['all'])}, presets "
            f"{list(presets or ['all'])} in {', '.join(sources)}"
        )
    try:
        return _write(records, runs, sources, Path(out_dir), formats, figures, published, select)
    except OSError as e:
        raise HarnessError(
            f"cannot write the paper report to {out_dir}: {e.strerror or e}"
        ) from None


def _has_pyarrow() -> bool:
    from importlib.util import find_spec

    return find_spec("pyarrow") is not None


def _write(
    records: list[dict[str, Any]],
    runs: pd.DataFrame,
    sources: Sequence[str],
    out: Path,
    formats: Sequence[str],
    figures: bool,
    published: str | Path | None,
    select: Rule | None,
) -> list[Path]:
    """One report per (task, preset) of ``runs``; see ``write_paper_report``."""
    from harness.reporting.figures import report_figures

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    rule = select or Rule("best-val")
    for (task, preset), t_runs in runs.groupby(["task", "preset"]):
        primary, higher = t_runs["primary"].iloc[0], bool(t_runs["higher"].iloc[0])
        papers = tables_for(task, published)
        order = list(dict.fromkeys(r.method for t in papers for r in t.rows))
        keys = list(dict.fromkeys([primary, *KEYS]))
        agg = aggregate(t_runs, keys, order)
        picked = None
        shown = agg
        if select is not None:
            _, picked = select_records(list(t_runs["record"]), select)
            shown = agg[agg["variant_id"].isin(picked)].reset_index(drop=True)
        seeds = ", ".join(map(str, sorted(t_runs["seed"].unique())))
        ours = f"harness, preset {preset}, seeds {seeds}"
        stem = f"{task}_{preset}"
        slug = re.sub(r"[^a-z0-9]+", "-", stem.lower())
        rows_rule = f"rows picked by {select}" if select else "every variant"
        titles, rows = main_table(shown, primary, higher, picked)
        unpicked = sorted(k for k in (picked or {}) if "/" in k)
        tables = [
            Table(
                f"{task} ({preset} preset), {rows_rule}; {ours}",
                f"tab:{slug}",
                titles,
                rows,
                [f"{k.split('/')[-1]}: no row ({picked[k]})." for k in unpicked],
            )
        ]
        differences = task_differences(task)
        for j, t in enumerate(papers):
            pvh = paper_vs_harness(t, agg, primary, rule, task, preset)
            notes = ([t.note] if t.note else []) + pvh.notes
            if differences:
                notes.append(
                    f"The harness's {task} differs from the paper: " + " ".join(differences)
                )
            tables.append(
                Table(
                    f"{t.title} vs harness ({ours}); paper rows filled by knob match, "
                    f"ties by {rule}",
                    f"tab:{slug}-paper-{j + 1}",
                    pvh.titles,
                    pvh.rows,
                    notes,
                )
            )
        title = TITLES.get(primary, primary)
        figs = (
            report_figures(t_runs, agg, primary, higher, title, out / "figures" / stem)
            if figures
            else []
        )
        written += [p for _, ps in figs for p in ps]
        in_group = [r for r in records if r["task"] == task and r["preset"] == preset]
        from harness.reporting.leaderboard import failed_runs

        failed = failed_runs(in_group)
        head = header(in_group, sources, f"{task} ({preset} preset): paper-style report") + (
            "- Bold: best mean per column (arrow = direction); Solved, counts and p-values are "
            f"never bold. p: Welch's t-test of the per-seed {primary} against the best "
            "variant's (the column is left out when every p is n/a: < 2 seeds on a side).\n"
            f"- Rows: {select.describe() if select else 'every variant (no --select rule)'}.\n"
            + MATCH_RULE.format(rule=rule)
            + NOTES
            + f"- Failed runs (not tabulated): {len(failed)}{'.' if not failed else ':'}\n"
            + "".join(f"  - {line}\n" for line in failed)
        )
        for fmt, render in (("md", _markdown), ("tex", _latex)):
            if fmt in formats:
                path = out / f"paper_{stem}.{fmt}"
                write_text(path, render(head, tables, figs, out))
                written.append(path)
        for fmt in ("csv", "parquet"):
            if fmt in formats:
                path = out / f"paper_{stem}.{fmt}"
                write_frame(tidy(shown, task, preset, picked), path)
                written.append(path)
    return written
