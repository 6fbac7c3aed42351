"""Paper-style reports: the seed papers' tables and figures, regenerated from run records.

Per (task, preset), ``write_paper_report`` writes ``paper_<task>_<preset>.md`` / ``.tex`` and
figures (``harness.reporting.figures``):
- the main table, in the layout of the seed paper that reports this kind of task, chosen from the
  task's primary metric: S-SA Tables 1-3 for accuracy (√(Acc×Skip), Skip %, accuracy, effective
  FLOPs), S-SA Table 4 for an MSE task that records ``solved`` (solved, MSE, Skip %, FLOPs),
  S-EI Table 1 otherwise (D_h, # params, metric). One row per method variant (runs differing only
  by seed), labelled by the config values that vary among a method's variants; cells are
  mean ± sample std over seeds, the seed count is shown, the best mean per column is bold
  (direction-aware; nothing is bold where every row ties);
- a significance column: each variant against the best one on the primary metric, Welch's t-test
  over seeds (``n/a`` with fewer than 2 seeds on a side, or zero variance on both);
- one "paper vs harness" table per published table of the task (``harness.reporting.published``):
  each paper row beside the harness variant of that method matching most of the paper's config.
  Methods that a published table lists come first in the main table, in its order.
The header (``harness.reporting.text.header``) names the records, commits, devices, FLOP unit and
the rule that chose each test metric. pandas and scipy are imported inside the functions.
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
from harness.reporting.published import PaperTable, tables_for
from harness.reporting.text import TITLES, arrow, fmt_p, fmt_pm, header
from harness.results import flat_config, latest

if TYPE_CHECKING:
    import pandas as pd

Cell = tuple[str, bool]  # (text, bold)
TEX_SYMBOLS = r"\% \_ \# \& $\pm$ $\uparrow$ $\downarrow$ $\lambda$ -- $\times$"
KEYS = "geo_mean skip_pct accuracy solved mse perplexity flops params hidden_size".split()
TEX_FIGURE = r"""\begin{figure}[ht]\centering
\includegraphics[width=\linewidth]{%s}
\caption{%s}
\end{figure}
"""
TEX_TABLE = r"""\begin{table}[ht]
\centering\small
\begin{tabular}{l%s}
\toprule
%s \\
\midrule
%s
\bottomrule
\end{tabular}
\caption{%s}
\end{table}
"""


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
        varying = sorted(k for k in cfgs[0] if len({repr(c.get(k)) for c in cfgs}) > 1)
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
                "config": cfg,
                "records": list(g["record"]),
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


def _unit(values: Sequence[float], large: bool) -> int:
    """Power of ten for a column: values like S-SA's 25.7 x10^4, or S-EI's 0.47 x10^-3."""
    finite = [abs(v) for v in values if not math.isnan(v) and v != 0]
    if not finite:
        return 0
    top = math.floor(math.log10(max(finite)))
    if large:
        return top - 1 if top >= 5 else 0
    return top if top < -1 else 0


def _scaled(title: str, scale: int) -> str:
    return f"{title} (×10^{scale})" if scale else title


def layout(agg: pd.DataFrame, primary: str, higher: bool) -> list[Column]:
    """The seed paper's columns for this kind of task (see the module docstring)."""
    s = _unit(agg["flops"], True)
    flops = Column(_scaled("FLOPs, effective", s) + " ↓", "flops", False, s)
    if primary == "accuracy":
        return [
            Column("√(Acc×Skip) ↑", "geo_mean", True),
            Column("Skip % ↑", "skip_pct", True),
            Column("Accuracy % ↑", "accuracy", True),
            flops,
        ]
    if primary == "mse" and agg["solved"].notna().any():
        s = _unit(agg["mse"], False)
        return [
            Column("Solved", "solved", True, kind="solved"),
            Column(_scaled("MSE", s) + " ↓", "mse", False, s),
            Column("Skip % ↑", "skip_pct", True),
            flops,
        ]
    s = _unit(agg[primary], False)
    title = _scaled(TITLES.get(primary, primary), s) + arrow(higher)
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
        return fmt_pm(mean * 10.0**-col.scale) if col.scale else f"{mean:.0f}"
    if col.kind == "solved":  # Yes / No when the seeds agree, else the count solved
        vals = row[f"{col.key}_vals"]
        k = int(sum(v > 0 for v in vals))
        return {0: "No", len(vals): "Yes"}.get(k, f"{k}/{len(vals)}") if vals else "–"
    f = 10.0**-col.scale
    return fmt_pm(mean * f, row[f"{col.key}_std"] * f, row["seeds"])


def _bold(means: Sequence[float], higher: bool | None) -> list[bool]:
    """True at the best finite mean (ties included); all False if every row ties."""
    finite = [m for m in means if m is not None and not math.isnan(m)]
    if higher is None or not finite or max(finite) == min(finite):
        return [False] * len(means)
    best = max(finite) if higher else min(finite)
    return [m is not None and not math.isnan(m) and math.isclose(m, best) for m in means]


def main_table(agg: pd.DataFrame, primary: str, higher: bool) -> tuple[list[str], list[list[Cell]]]:
    """The S-SA / S-EI style table with seeds and the Welch column (see the module docstring)."""
    cols = layout(agg, primary, higher)
    means = [_nan_low(m, higher) for m in agg[primary]]
    best = means.index(max(means) if higher else min(means)) if agg[primary].notna().any() else -1
    ref = agg.iloc[best] if best >= 0 else None
    shown = {c.key for c in cols}  # D_h as a column is not repeated in the variant label
    labels = [", ".join(t for k, t in p.items() if k not in shown) for p in agg["parts"]]
    titles = ["Method"] + (["Variant"] if any(labels) else []) + ["Seeds"]
    titles += [c.title for c in cols] + [f"p vs best ({TITLES.get(primary, primary)}, Welch)"]
    bolds = [_bold(list(agg[c.key]), c.higher) for c in cols]
    rows = []
    for i, (_, r) in enumerate(agg.iterrows()):
        cells: list[Cell] = [(r["method"], False)]
        cells += [(labels[i], False)] if "Variant" in titles else []
        cells.append((str(r["seeds"]), False))
        cells += [(_cell(r, c), bolds[j][i]) for j, c in enumerate(cols)]
        p = welch_p(r[f"{primary}_vals"], ref[f"{primary}_vals"]) if ref is not None else None
        rows.append(cells + [("best" if i == best else fmt_p(p), False)])
    return titles, rows


def match_variant(row: Any, agg: pd.DataFrame, primary: str, higher: bool) -> tuple[Any, str]:
    """The harness variant of the paper row's method that best matches the row's config.

    The variant matching most of the config wins (then: nearest in log scale, best primary
    mean); it comes with a text naming its config, with the paper's where they differ.
    """
    cand = agg[agg["method"] == row.method]
    if cand.empty:
        return None, "not run"

    def rank(kv: tuple[Any, Any]) -> tuple[int, float, float]:
        cfg, mean = kv[1]["config"], _nan_low(kv[1][primary], higher)
        same = {k: _same(cfg.get(k), v) for k, v in row.config.items()}
        gap = sum(_log_gap(cfg.get(k), v) for k, v in row.config.items() if not same[k])
        return -sum(same.values()), gap, -mean if higher else mean

    best = min(cand.iterrows(), key=rank)[1]
    parts = [
        f"{k}={best['config'].get(k)}"
        + ("" if _same(best["config"].get(k), v) else f" (paper {v})")
        for k, v in row.config.items()
    ]
    return best, ", ".join(parts) or best["label"] or "default"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-15)
    return a == b


def _log_gap(a: Any, b: Any) -> float:
    """How far apart two mismatched config values are: |log10 a - log10 b| (0 as 1e-12)."""
    if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return 0.0
    return abs(math.log10(abs(a) + 1e-12) - math.log10(abs(b) + 1e-12))


def _nan_low(x: float, higher: bool) -> float:
    return (-math.inf if higher else math.inf) if x is None or math.isnan(x) else x


def paper_vs_harness(
    table: PaperTable, agg: pd.DataFrame, primary: str, higher: bool
) -> tuple[list[str], list[list[Cell]]]:
    """Each paper row beside the matched harness variant, column by column."""
    titles, scales = ["Paper row"], {}
    for k in table.columns:
        scales[k] = _unit([r.values[k] for r in table.rows], k in ("flops", "params"))
        t = _scaled(TITLES.get(k, k), scales[k])
        titles += [f"Paper: {t}", f"Ours: {t}"]
    titles += ["Ours: config (paper value if different)", "Ours: seeds"]
    rows = []
    for prow in table.rows:
        ours, cfg_text = match_variant(prow, agg, primary, higher)
        cells: list[Cell] = [(prow.label, False)]
        for k in table.columns:
            kind = {"solved": "solved", "params": "int"}.get(k, "num")
            col = Column(k, k, scale=scales[k], kind=kind)
            paper, f = prow.values[k], 10.0 ** -scales[k]
            ptxt = (
                ("Yes" if paper else "No")
                if k == "solved"
                else fmt_pm(paper * f, prow.std.get(k, 0) * f, 2 if k in prow.std else 1)
            )
            cells += [(ptxt, False), (_cell(ours, col) if ours is not None else "–", False)]
        cells += [(cfg_text, False), (str(ours["seeds"]) if ours is not None else "0", False)]
        rows.append(cells)
    return titles, rows


def render_md(titles: list[str], rows: list[list[Cell]]) -> str:
    """A GitHub Markdown table; bold cells as ``**x**``."""
    import pandas as pd

    body = [[f"**{t}**" if b and t not in ("", "–") else t for t, b in r] for r in rows]
    return pd.DataFrame(body, columns=titles).to_markdown(index=False, disable_numparse=True)


def tex_escape(s: str) -> str:
    """Plain LaTeX for the symbols used in the tables (needs only booktabs)."""
    s = re.sub(r"×10\^(-?\d+)", r"$\\times 10^{\1}$", s)
    s = s.replace("√(Acc×Skip)", r"$\sqrt{\mathrm{Acc}\times\mathrm{Skip}}$")
    for a, b in zip("% _ # & ± ↑ ↓ λ – ×".split(), TEX_SYMBOLS.split(), strict=True):
        s = s.replace(a, b)
    return s


def render_tex(titles: list[str], rows: list[list[Cell]], caption: str) -> str:
    r"""A booktabs ``table`` environment; bold cells as ``\\textbf{x}``."""
    lines = [" & ".join(tex_escape(t) for t in titles)]
    lines += [
        " & ".join(rf"\textbf{{{tex_escape(t)}}}" if b else tex_escape(t) for t, b in r)
        for r in rows
    ]
    return TEX_TABLE % (
        "r" * (len(titles) - 1),
        lines[0],
        "\n".join(x + r" \\" for x in lines[1:]),
        tex_escape(caption),
    )


def _markdown(head: str, tables: list, figs: list, out: Path) -> str:
    parts = [head]
    for caption, (titles, rows) in tables:
        parts += [f"## {caption}\n", render_md(titles, rows) + "\n"]
    for caption, paths in figs:
        parts.append(f"![{caption}]({paths[0].relative_to(out).as_posix()})\n\n*{caption}*\n")
    return "\n".join(parts)


def _latex(head: str, tables: list, figs: list, out: Path) -> str:
    text = head.replace("<!-- ", "").replace(" -->", "").replace("`", "")
    parts = ["% " + line for line in text.splitlines() if line.strip()]
    parts.append("% Needs \\usepackage{booktabs,graphicx}.\n")
    parts += [render_tex(titles, rows, caption) for caption, (titles, rows) in tables]
    for caption, paths in figs:
        parts.append(TEX_FIGURE % (paths[1].relative_to(out).as_posix(), tex_escape(caption)))
    return "\n".join(parts)


def write_paper_report(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    out_dir: str | Path,
    tasks: Sequence[str] | None = None,
    presets: Sequence[str] | None = None,
    formats: Sequence[str] = ("md", "tex"),
    figures: bool = True,
    published: str | Path | None = None,
) -> list[Path]:
    """Write the paper-style report of every chosen (task, preset) with ok runs.

    Args:
        records: run records (any status; failed runs are counted, not tabulated).
        sources: the records files, named in the header.
        out_dir: directory for ``paper_<task>_<preset>.{md,tex}`` and ``figures/``.
        tasks: restrict to these tasks (None: all in the records).
        presets: restrict to these presets (None: all in the records).
        formats: any of ``md``, ``tex``.
        figures: also draw the figures (PNG and PDF).
        published: the published-results file to compare with (None: the shipped one; see
            ``harness.reporting.published.load_tables``).

    Returns:
        The paths written. Raises HarnessError if nothing matches the selection.
    """
    if set(formats) - {"md", "tex"}:
        raise HarnessError(f"unknown report formats {sorted(formats)}; use md and/or tex")
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
        return _write(records, runs, sources, Path(out_dir), formats, figures, published)
    except OSError as e:
        raise HarnessError(
            f"cannot write the paper report to {out_dir}: {e.strerror or e}"
        ) from None


def _write(
    records: list[dict[str, Any]],
    runs: pd.DataFrame,
    sources: Sequence[str],
    out: Path,
    formats: Sequence[str],
    figures: bool,
    published: str | Path | None,
) -> list[Path]:
    """One report per (task, preset) of ``runs``; see ``write_paper_report``."""
    from harness.reporting.figures import report_figures

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for (task, preset), t_runs in runs.groupby(["task", "preset"]):
        primary, higher = t_runs["primary"].iloc[0], bool(t_runs["higher"].iloc[0])
        papers = tables_for(task, published)
        order = list(dict.fromkeys(r.method for t in papers for r in t.rows))
        agg = aggregate(t_runs, list(dict.fromkeys([primary, *KEYS])), order)
        seeds = ", ".join(map(str, sorted(t_runs["seed"].unique())))
        ours = f"harness, preset {preset}, seeds {seeds}"
        tables = [
            (
                f"{task} ({preset} preset), one row per method variant; {ours}",
                main_table(agg, primary, higher),
            )
        ]
        tables += [
            (f"{t.title} vs harness ({ours}). {t.note}", paper_vs_harness(t, agg, primary, higher))
            for t in papers
        ]
        title, stem = TITLES.get(primary, primary), f"{task}_{preset}"
        figs = (
            report_figures(t_runs, agg, primary, higher, title, out / "figures" / stem)
            if figures
            else []
        )
        written += [p for _, ps in figs for p in ps]
        in_group = [r for r in records if r["task"] == task and r["preset"] == preset]
        failed = sum(r.get("status") != "ok" for r in in_group)
        head = header(in_group, sources, f"{task} ({preset} preset): paper-style report") + (
            "- Bold: best mean per column (arrow = direction). p: Welch's t-test of the "
            f"per-seed {primary} against the best variant's; n/a with < 2 seeds on a side.\n"
            f"- Failed runs (not tabulated): {failed}.\n"
        )
        for fmt, render in (("md", _markdown), ("tex", _latex)):
            if fmt in formats:
                path = out / f"paper_{stem}.{fmt}"
                path.write_text(render(head, tables, figs, out), encoding="utf-8")
                written.append(path)
    return written
