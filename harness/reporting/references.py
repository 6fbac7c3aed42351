"""Reference predictors in the reports: first rows, what each is, whether a task separates.

A reference predictor (``ref:NAME``, ``harness.references``) is no method: its rows come first,
never bold, never tested. The notes under each table say what each is, whether the task separates
the methods (``RULE``, docs/reports.md, Reference predictors), mark a method row worse than the best
reference (``WORSE``), or give the command that adds them (``add_command``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.components.config import task_config
from harness.components.metrics import get_metric, higher_is_better
from harness.components.registry import TASKS
from harness.persistence.records import latest
from harness.references import describe, role
from harness.reporting.runs import ranges, variant_label
from harness.reporting.text import ci95, fmt_cell

if TYPE_CHECKING:
    import pandas as pd

POINTS = 2.0  # percentage points: within them, a percentage does not separate the methods
SHARE = 0.10  # of the reference's value: within it, any other metric does not
RULE = (
    "the rule: a task does not separate the methods at a setting when the best method row beats "
    f"the best reference predictor (bounds aside) by at most {POINTS:g} percentage points "
    f"(accuracy), by at most {SHARE:.0%} of the reference's value (MSE, perplexity), or by at "
    "most the 95 % CI half-width of either row (means over seeds, test split)"
)
WORSE = "†"  # marks the primary metric of a method row worse than the best reference predictor
NOTE_HEAD = (
    "Reference predictors (first rows, `(reference)`): non-recurrent baselines run through the "
    "same task interface and splits, not methods: never bold, not tested against, not in the "
    "p-values' family."
)


def method_cell(method: str) -> str:
    """A row's Method cell: ``ref:NAME (reference)`` for a reference, else the method."""
    return f"{method} (reference)" if role(method) != "method" else method


@dataclass(frozen=True)
class Row:
    """One row as the rule reads it: method, label ("": none), finite per-seed primary values."""

    method: str
    label: str
    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        """The mean over seeds (NaN without a value)."""
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def half(self) -> float:
        """The 95 % CI half-width (0 below two seeds)."""
        return ci95(list(self.values)) or 0.0

    @property
    def name(self) -> str:
        """``method (label)`` or the method alone."""
        return f"{self.method} ({self.label})" if self.label else self.method


def row(method: str, label: str, values: Iterable[Any]) -> Row:
    """A ``Row`` from any values (None and NaN dropped)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return Row(method, label, tuple(vals))


def best_reference(rows: Sequence[Row], higher: bool) -> Row | None:
    """The reference predictor row (bounds aside) with the best mean, None without one."""
    refs = [r for r in rows if role(r.method) == "reference" and r.values]
    return max(refs, key=lambda r: r.mean if higher else -r.mean) if refs else None


def worse(rows: Sequence[Row], higher: bool) -> list[bool]:
    """Per row: a method row whose mean is worse than the best reference predictor's (``WORSE``)."""
    ref = best_reference(rows, higher)
    sign = 1.0 if higher else -1.0
    return [
        ref is not None and role(r.method) == "method" and sign * (r.mean - ref.mean) < 0
        for r in rows
    ]  # a row without a value has a NaN mean: never worse


def worse_notes(rows: Sequence[Row], primary: str, higher: bool) -> list[str]:
    """The note naming the rows ``worse`` marks with ``WORSE``, and that reference's mean."""
    names = [
        f"{r.name} ({r.mean:.4g})" for r, w in zip(rows, worse(rows, higher), strict=True) if w
    ]
    ref = best_reference(rows, higher)
    if not names or ref is None:
        return []
    return [
        f"{WORSE} a method row whose mean {get_metric(primary).title} is worse than the best "
        f"reference predictor's, {ref.name} ({ref.mean:.4g}): {'; '.join(names)}."
    ]


def separation(rows: Sequence[Row], primary: str, higher: bool) -> str | None:
    """The sentence "this task does not separate the methods ..." where ``RULE`` says so."""
    sign = 1.0 if higher else -1.0
    ref = best_reference(rows, higher)
    methods = [r for r in rows if role(r.method) == "method" and r.values]
    if ref is None or not methods:
        return None
    best = max(methods, key=lambda r: sign * r.mean)
    gap = sign * (best.mean - ref.mean)  # how much better the best method row is
    percent = get_metric(primary).percent
    margin = POINTS if percent else SHARE * abs(ref.mean)
    ci = max(ref.half, best.half)
    if gap > max(margin, ci):
        return None
    title = get_metric(primary).title
    if gap <= 0:
        why = "at least as good as the best method row"
    elif gap <= margin:
        why = f"within {POINTS:g} points" if percent else f"within {SHARE:.0%}"
        why += " of the best method row"
    else:
        why = "within the 95 % CI of the best method row"
    return (
        f"This task does not separate the methods at this setting: {ref.name}'s mean {title} "
        f"({ref.mean:.4g}) is {why}'s, {best.name} ({best.mean:.4g})."
    )


def task_sets(task: str, preset: str, task_cfgs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The task settings every record of a table shares that the preset does not give."""
    if not task_cfgs:
        return {}
    try:
        preset_cfg = dataclasses.asdict(task_config(task, preset))
    except Exception:  # a task or preset this harness does not know
        preset_cfg = {}
    shared = {k: v for k, v in task_cfgs[0].items() if all(c.get(k) == v for c in task_cfgs)}
    return {k: v for k, v in shared.items() if preset_cfg.get(k, v) != v}


def add_command(
    task: str, preset: str, seeds: Iterable[int], store: str, sets: dict[str, Any] | None = None
) -> str:
    """The ``harness run`` line that adds the reference predictors' runs to a table's store."""
    cmd = f"harness run --tasks {task} --preset {preset} --seeds {ranges(seeds, ',')}"
    cmd += f" --methods 'ref:*' --out {store}"
    return cmd + "".join(f" --set task.{k}={v}" for k, v in (sets or {}).items())


def _describe(method: str, task: str) -> str:
    try:
        text = describe(method)
    except Exception:  # not registered here (a plugin's)
        return "a reference predictor this harness does not know"
    try:
        note = TASKS.get(task).reference_notes.get(method)
    except Exception:
        note = None
    return f"{text}; on this task, {note}" if note else text


def notes(
    task: str,
    preset: str,
    rows: Sequence[Row],
    primary: str,
    higher: bool,
    *,
    store: str,
    records: Sequence[dict[str, Any]],
    brief: bool = False,
) -> list[str]:
    """The notes under a table about its reference predictors.

    What each reference is and ``RULE`` (the verdict where due, ``worse_notes``); with no reference
    row, the command that runs them, with the seeds and shared task settings (``task_sets``) of the
    methods' ``records`` in ``store``. ``brief``: the terminal's short form.
    """
    refs = list(dict.fromkeys(r.method for r in rows if role(r.method) != "method"))
    if not refs:
        methods = [r for r in records if role(r["method"]) == "method"] or list(records)
        cfgs = [r["config"].get("task_cfg") or {} for r in methods]
        seeds = {r["seed"] for r in methods}
        cmd = add_command(task, preset, seeds, store, task_sets(task, preset, cfgs))
        return [f"No reference predictor was run for this table; to add them: `{cmd}`."]
    verdict = [v] if (v := separation(rows, primary, higher)) else []
    verdict += worse_notes(rows, primary, higher)
    if brief:
        head = "ref:* rows: reference predictors, not methods ('harness list references')."
        return [head, *verdict]
    what = "; ".join(f"{m}: {_describe(m, task)}" for m in refs)
    return [f"{NOTE_HEAD} {what}. Separation, {RULE}.", *verdict]


def record_notes(
    records: Sequence[dict[str, Any]], task: str, preset: str, store: str, brief: bool = False
) -> list[str]:
    """``notes`` of the (task, preset) table made of ``records`` (ok runs, latest of each run)."""
    recs = [
        r
        for r in latest(records)
        if r.get("status") == "ok" and (r["task"], r["preset"]) == (task, preset)
    ]
    if not recs:
        return []
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        groups.setdefault(r["variant_id"], []).append(r)
    primary = recs[0]["primary"]
    rows = []
    for g in groups.values():
        same = [r for r in recs if r["method"] == g[0]["method"]]
        values = (r["metrics"].get(primary) for r in g)
        rows.append(row(g[0]["method"], variant_label(g, same), values))
    higher = higher_is_better(recs[0])
    return notes(task, preset, rows, primary, higher, store=store, records=recs, brief=brief)


# --- in the trade-off figures -------------------------------------------------------------------

REFERENCE_COLOR = "#555555"  # the reference predictors' bands: grey, set apart from the methods


def reference_bands(
    runs: pd.DataFrame, primary: str, labels: dict[str, str] | None = None
) -> list[tuple[str, float, float]]:
    """``(label, mean, 95 % CI half-width)`` of each reference predictor variant in ``runs``."""
    out = []
    for (method, vid), g in runs.groupby(["method", "variant_id"], sort=True):
        if role(method) == "method" or primary not in g:
            continue
        r = row(method, (labels or {}).get(vid) or "", g[primary])
        if r.values:
            out.append((r.name, r.mean, r.half))
    return out


def draw_bands(ax: Any, bands: Sequence[tuple[str, float, float]], key: str, text: bool) -> None:
    """Reference predictors on an axis whose y range is set: a band within it, an arrow past it.

    With ``text`` each is named with its mean right of the axis, the names pushed apart.
    """
    import numpy as np

    from harness.reporting.figstyle import LINESTYLES, band

    low, high = sorted(ax.get_ylim())
    to_axes = ax.transAxes.inverted()
    places = []  # (y of its name in axes fraction, the name)
    for k, (label, mean, half) in enumerate(bands):
        name = f"{label} {fmt_cell(mean)}"
        if low <= mean <= high:
            lo, hi = band(np.array([mean]), np.array([half]), key)
            ax.axhspan(float(lo[0]), float(hi[0]), color=REFERENCE_COLOR, alpha=0.18, lw=0)
            ls = LINESTYLES[1 + k % (len(LINESTYLES) - 1)]
            ax.axhline(mean, color=REFERENCE_COLOR, linestyle=ls, lw=0.8)
            places.append((float(to_axes.transform(ax.transData.transform((0, mean)))[1]), name))
        else:  # past the range: an arrow at the edge it lies beyond
            places.append((0.0, f"↓ {name}") if mean < low else (1.0, f"↑ {name}"))
    if not text or not places:
        return
    at = np.array([y for y, _ in places])
    gap, prev = 0.09, -math.inf
    for i in np.lexsort(([b[1] for b in bands], at)):  # each name >= ``gap`` above the one below
        at[i] = prev = max(at[i], prev + gap)
    at -= max(at.max() - 1.0, 0.0)
    for (_, name), y in zip(places, at, strict=True):
        ax.text(1.02, y, name, transform=ax.transAxes, va="center", ha="left", fontsize=7,
                color=REFERENCE_COLOR)  # fmt: skip
