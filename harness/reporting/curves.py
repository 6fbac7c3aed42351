"""Learning curves: training loss and validation primary metric per epoch, from the records.

What they show: docs/reports.md, Figures. matplotlib is imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.components.metrics import get_metric, higher_is_better
from harness.persistence.records import latest
from harness.reporting.figstyle import (
    ONE_COLUMN,
    TWO_COLUMNS,
    band,
    figure,
    legend,
    legend_height,
    method_order,
    method_style,
    readable_log,
    save,
    spans_decades,
)
from harness.reporting.text import arrow

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _per_epoch(records: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std over records of ``history[epoch][key]`` (runs that stopped early: NaN)."""
    hists = [[h.get(key, math.nan) for h in r.get("history") or []] for r in records]
    n = max((len(h) for h in hists), default=0)
    a = np.full((len(hists), n), np.nan)
    for i, h in enumerate(hists):
        a[i, : len(h)] = [math.nan if v is None else v for v in h]
    count = (~np.isnan(a)).sum(0)
    total = np.nansum(a, 0)
    mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    sq = np.nansum((a - mean) ** 2, 0)
    std = np.where(count > 1, np.sqrt(sq / np.maximum(count - 1, 1)), np.nan)
    return mean, std


def curve_choice(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, list]]:
    """The runs whose curves are drawn: ``{(task, preset): {method: records}}``.

    Ok runs with a history; per method, the variant with the best mean validation primary metric, so
    the choice never looks at the test split.
    """
    groups: dict[tuple[str, str], dict[str, dict[str, list]]] = {}
    for r in latest(records):
        if r.get("status") == "ok" and r.get("history"):
            by_method = groups.setdefault((r["task"], r["preset"]), {})
            by_method.setdefault(r["method"], {}).setdefault(r["variant_id"], []).append(r)
    out: dict[tuple[str, str], dict[str, list]] = {}
    for key, by_method in sorted(groups.items()):
        chosen = {}
        for method in method_order(list(by_method)):
            variants = list(by_method[method].values())
            primary, higher = variants[0][0]["primary"], higher_is_better(variants[0][0])

            def score(rs: list, primary: str = primary, higher: bool = higher) -> float:
                vals = [(r.get("val_metrics") or {}).get(primary) for r in rs]
                vals = [v for v in vals if v is not None and not math.isnan(v)]
                s = float(np.mean(vals)) if vals else math.nan
                return -math.inf if math.isnan(s) else (s if higher else -s)

            chosen[method] = max(variants, key=score)
        out[key] = chosen
    return out


NARROW_METHODS = 6  # the most lines a one-column (3.3 in) figure draws; more: 7 in wide
SETTLING = 0.2  # the first fifth of the epochs does not set a linear y axis's limits


def _series(
    records: Sequence[dict[str, Any]], key: str, metric: str, log: bool
) -> tuple[np.ndarray, ...]:
    """Per epoch the line and its band's ends: mean ± std, or on a log axis geometric.

    On a log axis the mean and std are those of log10 of the values, so that a band never reaches 0;
    a value <= 0 there counts as missing.
    """
    if not log:
        mean, std = _per_epoch(records, key)
        return (mean, *band(mean, std, metric))
    logged = [
        {**r, "history": [{key: math.log10(v) if v and v > 0 else math.nan} for v in vals]}
        for r in records
        for vals in [[h.get(key) for h in r.get("history") or []]]
    ]
    mean, std = _per_epoch(logged, key)
    std = np.nan_to_num(std)
    return 10**mean, 10 ** (mean - std), 10 ** (mean + std)


def _panel(ax: Any, by_method: dict[str, list], key: str, metric: str, alpha: float) -> None:
    """One panel: each method's line and band; log where the means span decades, else fitted."""
    means = {m: _per_epoch(rs, key)[0] for m, rs in by_method.items()}
    log = spans_decades(np.concatenate([*means.values(), [np.nan]]))
    settled = []
    for method, rs in by_method.items():
        mean, lo, hi = _series(rs, key, metric, log)
        epochs = np.arange(1, len(mean) + 1)
        st = method_style(method)
        ax.plot(epochs, mean, markevery=max(len(mean) // 8, 1), label=method, **st)
        ax.fill_between(epochs, lo, hi, color=st["color"], alpha=alpha, lw=0)
        settled.append(mean[int(SETTLING * len(mean)) :])
    if log:
        ax.set_yscale("log", nonpositive="clip")
        ax.set_ylim(*ax.get_ylim())
        readable_log(ax.yaxis)
        return
    ys = np.concatenate([*settled, [np.nan]])
    if np.isfinite(ys).any():
        low, high = np.nanmin(ys), np.nanmax(ys)
        pad = 0.08 * (high - low) or 0.05 * (abs(high) or 1.0)
        ax.set_ylim(low - pad, high + pad)


def curves_figure(records: Sequence[dict[str, Any]]) -> Figure:
    """Learning curves: training loss and validation primary metric per epoch.

    One (task, preset) with at most ``NARROW_METHODS`` methods fits one column, the loss above the
    metric; anything more is two columns wide, one row per (task, preset).
    """
    chosen = curve_choice(records)
    n_methods = len({m for by_method in chosen.values() for m in by_method})
    narrow = len(chosen) <= 1 and n_methods <= NARROW_METHODS
    alpha = 0.2 if n_methods <= NARROW_METHODS else 0.1  # many bands: lighter
    tall = max(2.2 * max(len(chosen), 1) + 0.2, legend_height(n_methods))
    size = (ONE_COLUMN, 3.6, 2, 1) if narrow else (TWO_COLUMNS, tall, max(len(chosen), 1), 2)
    with figure(*size, squeeze=False) as (fig, grid):
        grid = grid.T if narrow else grid  # narrow: one row, [loss, val]
        methods: list[str] = []
        for (top, bottom), ((task, preset), by_method) in zip(grid, chosen.items(), strict=False):
            first = next(iter(by_method.values()))[0]
            primary, higher = first["primary"], higher_is_better(first)
            for ax, key, metric, label in [
                (top, "train_loss", "train_loss", get_metric("train_loss").title),
                (bottom, f"val_{primary}", primary, f"val. {get_metric(primary).title}"),
            ]:
                _panel(ax, by_method, key, metric, alpha)
                ax.set_ylabel(label + (arrow(higher) if ax is bottom else ""))
                ax.xaxis.get_major_locator().set_params(integer=True)
                ax.set_xlabel("epoch")
            methods += list(by_method)
            top.set_title(f"{task} ({preset})", loc="left")
            if narrow:
                top.set_xlabel("")
        legend(fig, method_order(methods))
    return fig


def write_curves(records: Sequence[dict[str, Any]], stem: Path) -> list[Path]:
    """Save ``curves_figure(records)`` as ``stem.png`` / ``.pdf``; nothing without a history."""
    if not curve_choice(records):
        return []
    return save(curves_figure(records), stem)
