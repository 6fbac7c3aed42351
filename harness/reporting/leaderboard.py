"""Records -> pandas -> leaderboards (generated files; never edited by hand).

One table per (task, preset). Rows are method variants: runs that differ only by seed are
aggregated over seeds, with the number of seeds shown (``1*``: one seed). Cells use the one number
format of the reports (``harness.reporting.text.fmt_cell``: one unit per column, the digits set by
the std, no "± 0"); the primary metric also gets its 95 % CI, and each row the commit of its
records. Arrows give each column's direction. The header (``harness.reporting.text.header``) says
which records, commits, devices and torch versions the numbers come from, the rule that chose each
test metric, and the FLOP unit. Each measure's title, direction, unit and cell form are the metric
registry's (``harness.components.metrics``). With a selection rule
(``harness.components.selection``) each method has one row, the variant the rule picked on
validation data.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.components.metrics import METRICS, get_metric, higher_is_better
from harness.components.selection import empty_tables, no_row_line
from harness.components.selection import select as select_records
from harness.persistence.records import is_reference, latest
from harness.reporting.references import method_cell, record_notes
from harness.reporting.render import render_tex
from harness.reporting.runs import (
    KEYS,
    aggregate,
    failed_records,
    failed_summary,
    runs_frame,
    tidy,
    variant_label,
)
from harness.reporting.text import (
    NOTES,
    arrow,
    ci_title,
    column_scale,
    commit_label,
    fmt_cell,
    fmt_ci,
    header,
    scaled,
    seeds_cell,
)


def _values(group: list[dict[str, Any]], get: Any) -> list[float]:
    vals = [get(r) for r in group]
    return [float(v) for v in vals if v is not None and not math.isnan(v)]


def _measures(in_table: list[dict[str, Any]], primary: str, higher: bool) -> list[tuple]:
    """(key, direction, getter) of every numeric column, in order.

    The primary metric first, then the task's other scores (by name), its yes / no outcomes, the
    trace measures in registry order (Skip % always) and the effective and dense FLOPs. A
    ``detail`` measure (the NLL) gets no column.
    """
    recorded = {k for r in in_table for k in r["metrics"]}
    described = {k: get_metric(k) for k in sorted(recorded | {primary})}
    scores = [k for k, m in described.items() if m.group == "score" and m.form == "num"]
    keys = [(primary, higher)] + [(k, described[k].higher) for k in scores if k != primary]
    keys += [(k, None) for k, m in described.items() if m.form == "yes-no"]
    keys += [
        (m.name, m.higher)
        for m in list(METRICS.values())
        if m.group == "compute" and (m.name == "skip_pct" or m.name in recorded)
    ]
    out = [(k, h, lambda r, k=k: r["metrics"].get(k)) for k, h in keys]
    for key, kind in (("flops", "effective"), ("dense_flops", "dense")):
        out.append(
            (key, get_metric(key).higher, lambda r, kind=kind: (r.get("flops") or {}).get(kind))
        )
    return out


def _scale(key: str, means: list[float]) -> int:
    """A column's power of ten: none for a percentage or a whole-number or yes / no column."""
    m = get_metric(key)
    return 0 if m.percent or m.form != "num" else column_scale(means, large=m.large)


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
        higher = higher_is_better(in_table[0])  # the registry's direction of the primary
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in in_table:
            groups.setdefault(r["variant_id"], []).append(r)
        measures = _measures(in_table, primary, higher)
        stats = [[_values(g, get) for *_, get in measures] for g in groups.values()]
        scales = [
            _scale(key, [statistics.fmean(s[j]) for s in stats if s[j]])
            for j, (key, _, _) in enumerate(measures)
        ]
        rows = []
        for (vid, group), vals in zip(groups.items(), stats, strict=True):
            method = group[0]["method"]
            same_method = [r for r in in_table if r["method"] == method]
            row: dict[str, Any] = {
                "Method": method_cell(method),
                "Variant": variant_label(group, same_method),
                # a reference predictor has no model (harness.references)
                get_metric("hidden_size").title: (group[0]["config"].get("model") or {}).get(
                    "hidden_size", "–"
                ),
                "Seeds": seeds_cell(len({r["seed"] for r in group})),
                "_ref": not is_reference(method),  # reference rows first
            }
            for (key, h, _), v, sc in zip(measures, vals, scales, strict=True):
                m = get_metric(key)
                mean = statistics.fmean(v) if v else math.nan
                std = statistics.stdev(v) if len(v) > 1 else None
                if m.form == "yes-no":
                    k = sum(x > 0 for x in v)
                    row[m.title] = {0: "No", len(v): "Yes"}.get(k, f"{k}/{len(v)}") if v else None
                    continue
                row[scaled(m.title, sc) + arrow(h)] = (
                    fmt_cell(mean, std, len(group), sc) if v else None
                )
                if key == primary:
                    row["_sort"] = mean
                    ci = ci_title(m.title, sc)
                    row[ci] = fmt_ci(mean, v, sc, key)  # "–" below 2 seeds
            row[get_metric("params").title] = group[0].get("params", {}).get("total", "–")
            m = _values(group, lambda r: (r.get("time") or {}).get("train_s"))
            row["Train s"] = fmt_cell(statistics.fmean(m)) if m else "–"
            row["Commit"] = commit_label(group)
            if picked is not None:
                row["Picked by"] = picked.get(vid, "–")
            rows.append(row)
        df = pd.DataFrame(rows)
        df = df.sort_values(["_ref", "_sort"], ascending=[True, not higher], na_position="last")
        df = df.drop(columns=["_ref", "_sort"])
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
    command: str = "harness report",
) -> str:
    """The full LEADERBOARD.md text: header, one table per (task, preset), failed runs.

    Args:
        records: run records.
        sources: the files they came from (named in the header).
        problems: malformed-line messages, listed at the end.
        select: a ``harness.components.selection.Rule``; None: every variant has a row.
        command: the command writing it, named in the header.
    """
    picked = None
    failed = failed_records(records)  # before selection: superseded records count too
    empty: list[tuple[str, str]] = []
    if select is not None:
        kept, picked = select_records(records, select)
        records, empty = kept, empty_tables(records, kept)
    parts = [header(records, sources, "Leaderboard", command)]
    parts.append(
        f"- Rows: {select.describe() if select else 'every variant (no --select rule)'}.\n" + NOTES
    )
    tables = leaderboard_rows(records, picked)
    for task, preset in sorted({*tables, *empty}):
        parts.append(f"## {task} ({preset} preset)\n")
        df = tables.get((task, preset))
        if df is not None:
            parts.append(df.to_markdown(index=False, disable_numparse=True) + "\n")
        if (task, preset) in empty:
            parts.append(f"{no_row_line(select)}\n")
        missing = [k for k in picked or {} if k.startswith(f"{task}/{preset}/")]
        parts += [f"- {k.split('/')[-1]}: no row ({picked[k]})." for k in missing]
        store = str(sources[0]) if sources else "results"
        parts += [f"- {n}" for n in record_notes(records, task, preset, store)] + [""]
    if failed:
        parts.append("## Failed runs\n")
        parts.append(f"{failed_summary(failed)}; every failed record, superseded ones included:\n")
        parts += [f"- {f.line()}" for f in failed] + [""]
    if problems:
        parts.append("## Records skipped as malformed\n")
        parts += [f"- {p}" for p in problems] + [""]
    return "\n".join(parts)


def leaderboard_tex(
    records: Sequence[dict[str, Any]], select: Any = None, command: str = "harness report"
) -> str:
    """The leaderboard as LaTeX tables (booktabs, graphicx), one per (task, preset)."""
    picked = None
    parts = [f"% Generated by {command}. Needs \\usepackage{{booktabs,graphicx}}.\n"]
    if select is not None:
        kept, picked = select_records(records, select)
        for task, preset in empty_tables(records, kept):
            parts.append(f"% {task} ({preset} preset): {no_row_line(select)}")
        records = kept
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
    picked = None
    if select is not None:
        records, picked = select_records(records, select)
    runs = runs_frame(records)
    if runs.empty:
        return pd.DataFrame()
    frames = []
    for (task, preset), g in runs.groupby(["task", "preset"]):
        keys = list(dict.fromkeys([g["primary"].iloc[0], *KEYS]))
        frames.append(tidy(aggregate(g, keys), task, preset, picked))
    return pd.concat(frames, ignore_index=True)
