"""The leaderboard in brief: what a terminal shows after ``harness run``.

One table per (task, preset) with the columns a reader scans first: the method (followed by its
variant's settings where a method has several), the seeds, the primary metric, Skip %,
√(Acc×Skip) where the task has it, and the effective MACs per sequence. Rows, order and number
format are the full leaderboard's (``harness.reporting.leaderboard``: the same variants, the
reference predictors first, then sorted by the primary metric, cells by ``fmt_cell``); the other
columns (CIs, dense cost, parameters, time, commit) are in the Markdown file beside the records.
Under each table, short notes on its reference predictors (``harness.reporting.references``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.components.metrics import get_metric, higher_is_better
from harness.components.selection import select as select_records
from harness.persistence.records import is_reference, latest
from harness.reporting.references import method_cell, record_notes
from harness.reporting.runs import variant_label
from harness.reporting.text import arrow, column_scale, fmt_cell, scaled, seeds_cell


@dataclass
class BriefTable:
    """One (task, preset) table: its title, column titles, formatted rows and notes."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def _effective_macs(rec: dict[str, Any]) -> float | None:
    return (rec.get("macs") or {}).get("effective")


def _finite(values: Any) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(v)]


def brief_tables(
    records: Sequence[dict[str, Any]], select: Any = None, store: str = "results"
) -> list[BriefTable]:
    """The brief tables of ``records`` (ok runs, the latest record of each run).

    Args:
        records: run records.
        select: a ``harness.components.selection.Rule``; None: every variant has a row.
        store: the records store, named in the command that adds reference predictors.
    """
    if select is not None:
        records, _ = select_records(records, select)
    recs = [r for r in latest(records) if r.get("status") == "ok"]
    tables = []
    for task, preset in sorted({(r["task"], r["preset"]) for r in recs}):
        in_table = [r for r in recs if r["task"] == task and r["preset"] == preset]
        primary = in_table[0].get("primary", "")
        higher = higher_is_better(in_table[0])
        keys = [primary, "skip_pct"]
        if primary != "geo_mean" and any("geo_mean" in r["metrics"] for r in in_table):
            keys.append("geo_mean")
        getters = [lambda r, k=k: r["metrics"].get(k) for k in keys] + [_effective_macs]
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in in_table:
            groups.setdefault(r["variant_id"], []).append(r)
        values = [[_finite(map(get, g)) for get in getters] for g in groups.values()]
        means = [[statistics.fmean(v) if v else math.nan for v in vals] for vals in values]
        scales = []
        for j, key in enumerate([*keys, "flops"]):
            m = get_metric(key)
            col = [row[j] for row in means]
            scales.append(0 if m.percent else column_scale(col, large=key == "flops" or m.large))
        titles = [
            scaled(get_metric(k).title, s) + arrow(higher if k == primary else get_metric(k).higher)
            for k, s in zip(keys, scales[:-1], strict=True)
        ]
        titles.append(scaled("MACs", scales[-1]) + arrow(get_metric("flops").higher))
        rows = []
        for group, vals, mean in zip(groups.values(), values, means, strict=True):
            method = group[0]["method"]
            label = variant_label(group, [r for r in in_table if r["method"] == method])
            cells = [
                fmt_cell(mu, statistics.stdev(v) if len(v) > 1 else None, len(v), sc) if v else "–"
                for v, mu, sc in zip(vals, mean, scales, strict=True)
            ]
            sort = mean[0] if not math.isnan(mean[0]) else (-math.inf if higher else math.inf)
            sort = -sort if higher else sort
            name = f"{method_cell(method)} {label}" if label else method_cell(method)
            first = 0 if is_reference(method) else 1  # reference rows first
            seeds = seeds_cell(len({r["seed"] for r in group}))
            rows.append(((first, sort), [name, seeds, *cells]))
        rows.sort(key=lambda x: x[0])
        columns = ["Method", "Seeds", *titles]
        body = [row for _, row in rows]
        notes = record_notes(records, task, preset, store, brief=True)
        tables.append(BriefTable(f"{task} ({preset} preset)", columns, body, notes))
    return tables
