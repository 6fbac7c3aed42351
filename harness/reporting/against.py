"""Paired comparisons against named methods (``harness report --paper --against M1,M2``).

For each method row and named method M, row − M of the primary metric and, where M skips updates, of
√(Acc × Skip), with paired or Welch tests, Holm-corrected per column (docs/reports.md, Paired
comparisons with named methods).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.components.metrics import get_metric
from harness.references import role
from harness.reporting.render import Cell, plain
from harness.reporting.tables import (
    WILCOXON,
    compare_seeds,
    finite_by_seed,
    holm,
    lead_cells,
    reference,
    row_name,
)
from harness.reporting.text import fmt_cell, fmt_p

if TYPE_CHECKING:
    import pandas as pd

SQRT = "geo_mean"  # √(Acc × Skip)


def difference(a: dict[Any, float], b: dict[Any, float]) -> tuple[float, float | None, int]:
    """``a − b`` (seed -> value each), std and count: paired where the seeds match, else means."""
    fa, fb = finite_by_seed(a), finite_by_seed(b)
    if not fa or not fb:
        return math.nan, None, 0
    if fa.keys() == fb.keys():
        diffs = [fa[s] - fb[s] for s in sorted(fa)]
        std = statistics.stdev(diffs) if len(diffs) > 1 else None
        return statistics.fmean(diffs), std, len(diffs)
    apart = statistics.fmean(fa.values()) - statistics.fmean(fb.values())
    return apart, None, min(len(fa), len(fb))


def _best_note(methods: list[Any], target: Any, key: str, title: str, p: list[float | None]) -> str:
    """Whether the named method has the best mean ``key`` of the method rows, or who does."""
    name = row_name(target["method"], target["label"])
    means = [(r[key], k) for k, r in enumerate(methods) if not math.isnan(r[key])]
    if not means:
        return f"{title}: no row has a value."
    order = sorted(means, key=lambda m: -m[0])
    vid = target["variant_id"]
    rank = next(i for i, (_, k) in enumerate(order) if methods[k]["variant_id"] == vid)
    best, k = order[0]
    if rank == 0:
        if len(order) == 1:
            return f"{title}: {name} has the only value ({best:.3g})."
        second, j = order[1]
        other = row_name(methods[j]["method"], methods[j]["label"])
        return (
            f"{title}: {name} has the best mean of the method rows ({best:.3g}); the next, "
            f"{other}, is {best - second:.3g} below it (p {fmt_p(p[j])}, the cell above)."
        )
    top = row_name(methods[k]["method"], methods[k]["label"])
    return (
        f"{title}: {name} ranks {rank + 1} of {len(order)} method rows ({target[key]:.3g}); the "
        f"best is {top} ({best:.3g}, {best - target[key]:.3g} above; p {fmt_p(p[k])}, the cell "
        "above)."
    )


def against_table(
    agg: pd.DataFrame, primary: str, higher: bool, names: Sequence[str]
) -> tuple[list[str], list[list[Cell]], list[str]] | None:
    """The comparison table of ``agg``'s method rows against each method of ``names``.

    Returns ``(titles, rows, notes)``, or None when ``names`` is empty. A named method with no row
    gets a note; with several rows, the one ``harness.reporting.tables.reference`` picks.
    """
    if not names:
        return None
    methods = [r for _, r in agg.iterrows() if role(r["method"]) == "method"]
    notes: list[str] = []
    targets: list[tuple[str, Any]] = []  # (name, its row)
    for name in names:
        mine = agg[agg["method"] == name]
        if mine.empty:
            notes.append(f"{name}: no row in this table, so no comparison with it.")
            continue
        j, how = reference(mine.reset_index(drop=True), primary, higher)
        row = mine.iloc[max(j, 0)]
        if len(mine) > 1:
            notes.append(
                f"{name} has {len(mine)} rows here; compared with {row_name(name, row['label'])} "
                f"({how})."
            )
        targets.append((name, row))
    if not targets:
        return [], [], notes
    ptitle = get_metric(primary).title
    sqrt_title = get_metric(SQRT).title
    cols: list[tuple[str, str, Any]] = []  # (title, key, target row)
    for name, row in targets:
        cols.append((f"− {name}: {ptitle}", primary, row))
        if SQRT in agg and (row.get("skip_pct") or 0) > 0:  # a method that skips
            cols.append((f"− {name}: {sqrt_title}", SQRT, row))
    variant = any(r["label"] for r in methods)
    titles = ["Method", *["Variant"] * variant, "Seeds", *(t for t, _, _ in cols)]
    columns = []
    for _title, key, target in cols:
        column, p_t = _column(methods, key, target)
        columns.append(column)
        if key == SQRT:
            notes.append(_best_note(methods, target, key, sqrt_title, p_t))
    rows = [
        lead_cells(r, r["label"] if variant else None) + plain(*cells)
        for r, cells in zip(methods, zip(*columns, strict=True), strict=True)
    ]
    notes.insert(
        0,
        "Each cell: row − the named method, mean ± sample std of the per-seed differences over "
        "their shared seeds (a run seed fixes the split, the balancing sample and the batch "
        "order, the same for every method: paired samples), then p: paired t-test and, after "
        f"W, {WILCOXON}; rows whose seeds differ: the "
        "difference of the means, marked (means), and Welch's t-test. Holm's step-down "
        "correction over each column's tests. "
        f"{sqrt_title} is compared only against a method that skips updates. – : the named "
        "method's own row.",
    )
    return titles, rows, notes


def _column(methods: list[Any], key: str, target: Any) -> tuple[list[str], list[float | None]]:
    """Each method row's cell against ``target``'s (Holm-corrected), and the t p-values."""
    tests, diffs = [], []
    for r in methods:  # None: the named method's own row
        own = r["variant_id"] == target["variant_id"]
        mine, theirs = r[f"{key}_by_seed"], target[f"{key}_by_seed"]
        tests.append(None if own else compare_seeds(mine, theirs))
        diffs.append(None if own else difference(mine, theirs))
    p_t = holm([c.p if c else None for c in tests])
    p_w = holm([c.wilcoxon if c else None for c in tests])
    cells = []
    for k, (c, d) in enumerate(zip(tests, diffs, strict=True)):
        if c is None or d is None:
            cells.append("–")
            continue
        mean, std, n = d
        text = fmt_cell(mean, std, n)
        text = text if text.startswith(("-", "–")) or text == "0" else f"+{text}"
        if std is None and not math.isnan(mean):
            text += " (means)"
        if p_t[k] is not None:
            text += f"; p {fmt_p(p_t[k])} ({c.test}"
            text += f", W {c.w_text(p_w[k])})" if p_w[k] is not None else ")"
        cells.append(text)
    return cells, p_t
