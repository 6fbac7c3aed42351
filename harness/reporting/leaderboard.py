"""Records -> pandas -> leaderboards (generated files; never edited by hand).

One table per (task, preset). Rows are method variants: runs that differ only by seed are
aggregated over seeds, with the number of seeds shown (``1*``: one seed). Cells use the one number
format of the reports (``harness.reporting.text.fmt_cell``: one unit per column, the digits set by
the std, no "± 0"); the primary metric also gets its 95 % CI, and each row the commit of its
records. Arrows give each column's direction. The header (``harness.reporting.text.header``) says
which records, commits, devices and torch versions the numbers come from, the rule that chose each
test metric, and the FLOP unit. With a selection rule (``harness.selection``) each method has one
row, the variant the rule picked on validation data.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.reporting.text import (
    NOTES,
    TITLES,
    arrow,
    column_scale,
    commit_label,
    fmt_cell,
    fmt_ci,
    header,
    scaled,
    seeds_cell,
)
from harness.results import flat_config, latest

# (column title, metric key, higher is better); None direction means "no arrow".
TRACE_COLUMNS = [
    ("Skip %", "skip_pct", True),
    ("Activity sparsity %", "read_skip_pct", True),
    ("Mean depth", "mean_depth", None),
    ("Depth-skip %", "depth_skip_pct", True),
]
LOWER_BETTER = {"mse", "perplexity", "nll"}
LARGE = {"effective", "dense", "params"}  # count-like columns: S-SA's x10^k
PERCENT = {
    "skip_pct",
    "read_skip_pct",
    "depth_skip_pct",
    "accuracy",
    "geo_mean",
}  # percent: never rescaled


def variant_label(group: list[dict[str, Any]], all_method_runs: list[dict[str, Any]]) -> str:
    """The config fields (other than seed) that vary among a method's runs in one table."""
    flats = [flat_config(r) for r in all_method_runs]
    fields = {k for f in flats for k in f}  # a key one config lacks varies too (old records)
    varying = sorted(k for k in fields if len({repr(f.get(k)) for f in flats}) > 1)
    here = flat_config(group[0])
    return ", ".join(f"{k}={here.get(k)}" for k in varying)


def failed_runs(records: Sequence[dict[str, Any]]) -> list[str]:
    """Each failed run among the latest ``records`` as one line of text.

    The line names the method, what sets its variant apart from the method's other runs on the
    same task and preset, the seed, the run id and the recorded error (a diverged run's names
    the epoch and batch).
    """
    recs = latest(records)
    lines = []
    for r in recs:
        if r.get("status") == "ok":
            continue
        same = [
            x
            for x in recs
            if (x["method"], x["task"], x["preset"]) == (r["method"], r["task"], r["preset"])
        ]
        label = variant_label([r], same)
        lines.append(
            f"{r['method']}{f' ({label})' if label else ''} on {r['task']} ({r['preset']}, "
            f"seed {r['seed']}, run {r['run_id']}): {r.get('error')}"
        )
    return lines


def _values(group: list[dict[str, Any]], get: Any) -> list[float]:
    vals = [get(r) for r in group]
    return [float(v) for v in vals if v is not None and not math.isnan(v)]


def _measures(in_table: list[dict[str, Any]], primary: str, higher: bool) -> list[tuple]:
    """(title, key, direction, getter) of every numeric column, in order."""
    metric_keys = [primary] + sorted(
        {k for r in in_table for k in r["metrics"]}
        - {primary, "skip_pct", "read_skip_pct", "depth_skip_pct", "mean_depth", "nll", "solved"}
    )
    out = []
    for k in metric_keys:
        h = higher if k == primary else (k not in LOWER_BETTER)
        out.append((TITLES.get(k, k), k, h, lambda r, k=k: r["metrics"].get(k)))
    if any("solved" in r["metrics"] for r in in_table):
        out.append(("Solved", "solved", None, lambda r: r["metrics"].get("solved")))
    for title, key, h in TRACE_COLUMNS:
        if key == "skip_pct" or any(key in r["metrics"] for r in in_table):
            out.append((title, key, h, lambda r, k=key: r["metrics"].get(k)))
    for kind in ("effective", "dense"):
        out.append(
            (
                f"{kind.capitalize()} FLOPs",
                kind,
                False if kind == "effective" else None,
                lambda r, k=kind: (r.get("flops") or {}).get(k),
            )
        )
    return out


def leaderboard_rows(
    records: Sequence[dict[str, Any]], picked: dict[str, str] | None = None
) -> dict[tuple[str, str], pd.DataFrame]:
    """``{(task, preset): DataFrame}`` of formatted rows (ok runs only).

    Args:
        records: run records.
        picked: variant id -> why a selection rule picked it (adds a "Picked by" column).
    """
    recs = [r for r in latest(records) if r.get("status") == "ok"]
    tables: dict[tuple[str, str], pd.DataFrame] = {}
    for task, preset in sorted({(r["task"], r["preset"]) for r in recs}):
        in_table = [r for r in recs if r["task"] == task and r["preset"] == preset]
        primary = in_table[0].get("primary", "")
        higher = bool(in_table[0].get("higher_is_better"))
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in in_table:
            groups.setdefault(r["variant_id"], []).append(r)
        measures = _measures(in_table, primary, higher)
        stats = [[_values(g, get) for *_, get in measures] for g in groups.values()]
        scales = [
            0
            if measures[j][1] in PERCENT
            else column_scale(
                [statistics.fmean(s[j]) for s in stats if s[j]], large=measures[j][1] in LARGE
            )
            for j in range(len(measures))
        ]
        rows = []
        for (vid, group), vals in zip(groups.items(), stats, strict=True):
            method = group[0]["method"]
            same_method = [r for r in in_table if r["method"] == method]
            row: dict[str, Any] = {
                "Method": method,
                "Variant": variant_label(group, same_method),
                "D": group[0]["config"]["model"]["hidden_size"],
                "Seeds": seeds_cell(len({r["seed"] for r in group})),
            }
            for (title, key, h, _), v, sc in zip(measures, vals, scales, strict=True):
                mean = statistics.fmean(v) if v else math.nan
                std = statistics.stdev(v) if len(v) > 1 else None
                if key == "solved":
                    k = sum(x > 0 for x in v)
                    row[title] = {0: "No", len(v): "Yes"}.get(k, f"{k}/{len(v)}") if v else None
                    continue
                row[scaled(title, sc) + arrow(h)] = (
                    fmt_cell(mean, std, len(group), sc) if v else None
                )
                if key == primary:
                    row["_sort"] = mean
                    ci = scaled(f"95 % CI, {TITLES.get(key, key)}", sc)
                    row[ci] = fmt_ci(mean, v, sc, key)  # "–" below 2 seeds
            row["Params"] = group[0].get("params", {}).get("total", "–")
            m = _values(group, lambda r: (r.get("time") or {}).get("train_s"))
            row["Train s"] = fmt_cell(statistics.fmean(m)) if m else "–"
            row["Commit"] = commit_label(group)
            if picked is not None:
                row["Picked by"] = picked.get(vid, "–")
            rows.append(row)
        df = pd.DataFrame(rows)
        df = df.sort_values("_sort", ascending=not higher, na_position="last").drop(columns="_sort")
        if not df["Variant"].astype(bool).any():
            df = df.drop(columns="Variant")
        # Depth columns only when some method in the table has a depth trace.
        for title in list(df.columns):
            if df[title].isna().all():
                df = df.drop(columns=title)
        tables[(task, preset)] = df.fillna("–")
    return tables


def leaderboard_markdown(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    problems: Sequence[str] = (),
    select: Any = None,
) -> str:
    """The full LEADERBOARD.md text: header, one table per (task, preset), failed runs.

    Args:
        records: run records.
        sources: the files they came from (named in the header).
        problems: malformed-line messages, listed at the end.
        select: a ``harness.selection.Rule``; None: every variant has a row.
    """
    picked = None
    if select is not None:
        from harness.selection import select as select_records

        records, picked = select_records(records, select)
    parts = [header(records, sources, "Leaderboard")]
    parts.append(
        f"- Rows: {select.describe() if select else 'every variant (no --select rule)'}.\n" + NOTES
    )
    for (task, preset), df in leaderboard_rows(records, picked).items():
        parts.append(f"## {task} ({preset} preset)\n")
        parts.append(df.to_markdown(index=False, disable_numparse=True) + "\n")
        missing = [k for k in picked or {} if k.startswith(f"{task}/{preset}/")]
        parts += [f"- {k.split('/')[-1]}: no row ({picked[k]})." for k in missing]
        parts += [""] if missing else []
    failed = failed_runs(records)
    if failed:
        parts.append("## Failed runs\n")
        parts += [f"- {line}" for line in failed] + [""]
    if problems:
        parts.append("## Records skipped as malformed\n")
        parts += [f"- {p}" for p in problems] + [""]
    return "\n".join(parts)


def leaderboard_tex(records: Sequence[dict[str, Any]], select: Any = None) -> str:
    """The leaderboard as LaTeX tables (booktabs, graphicx), one per (task, preset)."""
    from harness.reporting.paper import render_tex

    picked = None
    if select is not None:
        from harness.selection import select as select_records

        records, picked = select_records(records, select)
    parts = ["% Generated by harness report. Needs \\usepackage{booktabs,graphicx}.\n"]
    for (task, preset), df in leaderboard_rows(records, picked).items():
        rows = [[(str(v), False) for v in row] for row in df.itertuples(index=False)]
        label = "tab:leaderboard-" + "".join(c if c.isalnum() else "-" for c in f"{task}-{preset}")
        parts.append(render_tex(list(df.columns), rows, f"{task} ({preset} preset)", label))
    return "\n".join(parts)


def leaderboard_frame(records: Sequence[dict[str, Any]], select: Any = None) -> pd.DataFrame:
    """The leaderboard's numbers (not text) for csv / parquet: one row per variant.

    Columns: task, preset, method, variant, variant_id, seeds, commit, picked_by, and per measure
    its mean, ``_std`` (NaN for one seed) and ``_ci95`` (half-width), in the measure's own unit.
    """
    from harness.reporting.paper import KEYS, aggregate, runs_frame, tidy

    picked = None
    if select is not None:
        from harness.selection import select as select_records

        records, picked = select_records(records, select)
    runs = runs_frame(records)
    if runs.empty:
        return pd.DataFrame()
    frames = []
    for (task, preset), g in runs.groupby(["task", "preset"]):
        keys = list(dict.fromkeys([g["primary"].iloc[0], *KEYS]))
        frames.append(tidy(aggregate(g, keys), task, preset, picked))
    return pd.concat(frames, ignore_index=True)
