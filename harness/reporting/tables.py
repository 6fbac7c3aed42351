"""The paper-style main table: its columns, cells, bold marks and significance test.

The layout is that of the seed paper that reports this kind of task, chosen from the task's
primary metric: S-SA Tables 1-3 for accuracy (√(Acc×Skip), Skip %, accuracy, effective FLOPs),
S-SA Table 4 for an MSE task that records ``solved`` (solved, MSE, Skip %, FLOPs), S-EI Table 1
otherwise (D_h, # params, metric). Every column's title, direction, unit and cell form come from
the metric registry (``harness.metrics``). The best mean per measured column is bold; a Welch's
t-test column gives each variant's p-value against the best one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.metrics import get_metric
from harness.reporting.render import Cell
from harness.reporting.text import (
    arrow,
    column_scale,
    fmt_cell,
    fmt_ci,
    fmt_p,
    scaled,
    seeds_cell,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Column:
    """A table column: title, the measure key, direction (None: no bold), 10^scale unit, form.

    ``form`` is the registry's (``harness.metrics.Metric.form``): ``num``, ``int`` or ``yes-no``.
    """

    title: str
    key: str
    higher: bool | None = None
    scale: int = 0
    form: str = "num"


def column(key: str, values: Sequence[float] = (), higher: bool | None = None) -> Column:
    """The column of measure ``key`` as the metric registry describes it.

    Args:
        key: the measure.
        values: the column's values; they set its power of ten (none for a percentage or a
            whole-number column).
        higher: the direction, where the caller knows it better than the registry (the
            primary metric of a task whose metric the registry has no direction for).
    """
    m = get_metric(key)
    higher = m.higher if higher is None else higher
    s = 0 if m.percent or m.form != "num" else column_scale(values, large=m.large)
    title = m.title if m.form != "num" else scaled(m.title, s) + arrow(higher)
    return Column(title, key, higher if m.form == "num" else None, s, m.form)


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
    flops = column("flops", list(agg["flops"]))
    skip = [column("skip_pct")]
    if "read_skip_pct" in agg and agg["read_skip_pct"].notna().any():  # activity-sparse rows
        skip.append(column("read_skip_pct"))
    if primary == "accuracy":
        return [column("geo_mean"), *skip, column("accuracy"), flops]
    if primary == "mse" and agg["solved"].notna().any():
        return [column("solved"), column("mse", list(agg["mse"])), *skip, flops]
    return [column("hidden_size"), column("params"), column(primary, list(agg[primary]), higher)]


def cell(row: Any, col: Column) -> str:
    """The text of ``row``'s cell in column ``col`` (``row``: an ``aggregate`` row)."""
    mean = row[col.key]
    if col.form == "int":
        if mean is None or math.isnan(mean):
            return "–"
        return fmt_cell(mean, scale=col.scale) if col.scale else f"{mean:.0f}"
    if col.form == "yes-no":  # Yes / No when the seeds agree, else the count solved
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


def _nan_low(x: float, higher: bool) -> float:
    return (-math.inf if higher else math.inf) if x is None or math.isnan(x) else x


def main_table(
    agg: pd.DataFrame, primary: str, higher: bool, picked: dict[str, str] | None = None
) -> tuple[list[str], list[list[Cell]]]:
    """The S-SA / S-EI style table (see the module docstring).

    Args:
        agg: ``harness.reporting.runs.aggregate``'s rows.
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
    ptitle = get_metric(primary).title
    titles = ["Method"] + (["Variant"] if any(labels) else []) + ["Seeds"]
    titles += [c.title for c in cols] + [scaled(f"95 % CI, {ptitle}", pcol.scale)]
    titles += [f"p vs best ({ptitle}, Welch)"] if with_p else []
    titles += ["Commit"] + (["Picked by"] if picked is not None else [])
    bolds = [_bold(list(agg[c.key]), c.higher) for c in cols]
    rows = []
    for i, (_, r) in enumerate(agg.iterrows()):
        cells: list[Cell] = [(r["method"], False)]
        cells += [(labels[i], False)] if "Variant" in titles else []
        cells.append((seeds_cell(r["seeds"]), False))
        cells += [(cell(r, c), bolds[j][i]) for j, c in enumerate(cols)]
        cells.append((fmt_ci(r[primary], r[f"{primary}_vals"], pcol.scale, primary), False))
        cells += [(pvals[i], False)] if with_p else []
        cells.append((r["commit"], False))
        cells += [(picked.get(r["variant_id"], "–"), False)] if picked is not None else []
        rows.append(cells)
    return titles, rows
