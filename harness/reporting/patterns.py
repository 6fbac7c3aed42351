"""The update-pattern figures: which units each method updated, and how deep it ran.

What they show: docs/reports.md, Figures. matplotlib is imported inside the functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.components.config import from_dict
from harness.components.metrics import get_metric
from harness.components.registry import TASKS, UnknownNameError
from harness.components.selection import nearest_skip, split_mean
from harness.persistence.trace import unpack_depth, unpack_mask
from harness.reporting.figstyle import (
    MARK_COLOR,
    ONE_COLUMN,
    TWO_COLUMNS,
    figure,
    method_order,
    method_style,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def mask_image(record: dict[str, Any]) -> np.ndarray:
    """The recorded first test sequence's update mask as ``[units, T]`` (layers stacked)."""
    trace = record.get("trace") or {}
    layers = [
        np.asarray(unpack_mask(rows, units), dtype=np.uint8).reshape(len(rows), units).T
        for rows, units in zip(trace.get("first_mask", []), trace.get("units", []), strict=True)
    ]
    return np.concatenate(layers, axis=0) if layers else np.zeros((0, 0), dtype=np.uint8)


def depth_image(record: dict[str, Any]) -> np.ndarray:
    """The first test sequence's micro-steps per unit ``n_t,i``, ``[units, T]`` (empty: none)."""
    layers = [unpack_depth(rows).T for rows in (record.get("trace") or {}).get("first_depth", [])]
    return np.concatenate(layers, axis=0) if layers else np.zeros((0, 0), dtype=np.int64)


def reads_image(record: dict[str, Any]) -> tuple[np.ndarray, list[int]]:
    """The first test sequence's column reads as ``[columns, T]`` (1 = read), layers stacked.

    Each layer's rows are its V input columns, then its D state columns (docs/methods.md 1.1); V is
    the task's input size for the first layer, the previous layer's D after it. Returns the image,
    and the rows where its blocks begin, then its height (``[0, V, V + D]``).
    """
    trace = record.get("trace") or {}
    units = trace.get("units", [])
    try:
        v = TASKS.get(record["task"])(from_dict(record["config"]).task_cfg).input_size
    except Exception:  # a record whose task or config cannot be rebuilt: from the packed width
        v = None
    layers, edges = [], [0]
    for rows, d in zip(trace.get("first_reads") or [], units, strict=False):
        if rows:
            v = 4 * len(rows[0]) - d if v is None else v  # packed width: up to 3 columns more
            layers.append(np.asarray(unpack_mask(rows, v + d), dtype=np.uint8).T)
            edges += [edges[-1] + v, edges[-1] + v + d]
        v = d
    return (np.concatenate(layers) if layers else np.zeros((0, 0), np.uint8)), edges


def mask_panels(
    runs: dict[str, dict[str, Any]], skip: dict[str, float] | None = None
) -> tuple[list[tuple], list[str]]:
    """The panels ``mask_figure`` draws, ``(method, record, image, kind, edges)``, and the dense.

    ``kind``: ``depth``, ``reads`` (every unit updated, some columns not read) or ``mask``. A method
    is dense (named, no panel) only where its Skip % (``skip``: the table's mean; else its record's)
    is 0 and its sequence updated every unit, read every column, at one depth.
    """
    panels, dense = [], []
    for method, rec in runs.items():
        depth, mask, (reads, edges) = depth_image(rec), mask_image(rec), reads_image(rec)
        pct = (skip or {}).get(method, (rec.get("metrics") or {}).get("skip_pct", math.nan))
        skips = not pct == 0  # NaN: not known to be 0
        if depth.size and (skips or not mask.all() or depth.min() != depth.max()):
            panels.append((method, rec, depth, "depth", []))
        elif depth.size:
            dense.append(f"{method} (fixed depth {int(depth.max())})")
        elif mask.size and mask.all() and reads.size and not reads.all():
            panels.append((method, rec, reads, "reads", edges))
        elif mask.size and mask.all() and not skips:
            dense.append(method)
        elif mask.size:
            panels.append((method, rec, mask, "mask", []))
    return panels, dense


def _panel_title(rec: dict[str, Any], img: np.ndarray, kind: str, skip: float | None) -> str:
    metrics = rec.get("metrics") or {}
    pct = metrics.get("skip_pct", math.nan) if skip is None else skip
    title = f"Skip {pct:.2g} %" if 0 < pct < 0.05 else f"Skip {pct:.1f} %"  # never "0.0" above 0
    if kind == "depth" and "depth_skip_pct" in metrics:
        title += f", depth-skip {metrics['depth_skip_pct']:.1f} %"
    if kind == "reads":
        title = f"activity sparsity {metrics.get('read_skip_pct', math.nan):.1f} %"
    if kind == "mask" and img.all():
        title += "; this sequence: no update skipped"
    return title


def mask_figure(
    runs: dict[str, dict[str, Any]],
    labels: dict[str, str] | None = None,
    skip: dict[str, float] | None = None,
) -> Figure:
    """One panel per method (``mask_panels``), titled with ``labels`` and ``skip`` (the table's)."""
    import textwrap

    panels, dense = mask_panels(runs, skip)
    cols = 1 if len(panels) <= 5 else 2
    rows = max(math.ceil(len(panels) / cols), 1)
    kw = {"squeeze": False, "sharex": True}
    with figure(TWO_COLUMNS, 0.5 + 1.05 * rows, rows, cols, **kw) as (fig, grid):
        axes = list(grid.flat)
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
        for ax, (method, rec, img, kind, edges) in zip(axes, panels, strict=False):
            title = _panel_title(rec, img, kind, (skip or {}).get(method))
            if kind == "depth":
                top = max(int(img.max()), max((rec.get("trace") or {}).get("max_depth", [1])))
                im = ax.imshow(img, cmap="viridis", vmin=0, vmax=top, aspect="auto")
                fig.colorbar(im, ax=ax, label="n_t,i", pad=0.01)  # micro-steps (caption)
            else:
                ax.imshow(img, cmap="Greys", vmin=0, vmax=1, aspect="auto")
            ax.set_yticks([])
            if kind == "reads":  # each layer's input columns above its state columns
                for y in edges[1:-1]:
                    ax.axhline(y - 0.5, color=MARK_COLOR, lw=0.6)
                centres = [(a + b - 1) / 2 for a, b in zip(edges, edges[1:], strict=False)]
                ax.set_yticks(centres, ["in", "state"] * (len(centres) // 2))
            for t in (rec.get("trace") or {}).get("first_marks", []):
                ax.axvline(t, color=MARK_COLOR, linestyle="--", lw=0.8)
            label = f" ({labels[method]})" if labels and labels.get(method) else ""
            width = (110 if cols == 1 else 52) - 10 * (kind == "depth")  # characters at 8 pt
            ax.set_title(textwrap.fill(f"{method}: {title}{label}", width), loc="left")
            ax.set_ylabel("column" if kind == "reads" else "unit")
            ax.grid(False)
        _mask_axes(fig, grid, cols, panels, dense)
    return fig


def _mask_axes(fig: Figure, grid: Any, cols: int, panels: list[tuple], dense: list[str]) -> None:
    import textwrap

    from matplotlib.ticker import MaxNLocator

    marked = any((r.get("trace") or {}).get("first_marks") for _, r, _, _, _ in panels)
    read = " or column read" if any(p[3] == "reads" for p in panels) else ""
    tall = any(p[2].shape[0] > 100 for p in panels if p[3] != "depth")
    xlabel = (
        f"time step t (black = unit updated{read}"
        + ("; grey: a pixel of several units, the share updated" if tall else "")
        + ("; dashed: marked steps)" if marked else ")")
    )
    for c in range(cols):  # the lowest drawn panel of each column
        drawn = [ax for ax in grid[:, c] if ax.get_visible()]
        bottom = drawn[-1] if drawn else grid[-1, c]
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
        bottom.set_xlabel(textwrap.fill(xlabel, 110 if cols == 1 else 52))
        bottom.xaxis.set_tick_params(labelbottom=True)
    if dense:
        note = "Dense, Skip 0 % (every unit updated, every column read, at every step; not drawn): "
        fig.suptitle(textwrap.fill(note + ", ".join(dense), 110), x=0.01, ha="left")


def depth_figure(hists: dict[str, dict[str, int]]) -> Figure:
    """Share of steps executed at each depth R_t, per depth method."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    methods = method_order(list(hists))
    depths = sorted({int(r) for h in hists.values() for r in h})
    with figure(ONE_COLUMN, 2.4) as (fig, ax):
        width = 0.8 / max(len(methods), 1)
        handles = []
        for k, method in enumerate(methods):
            hist = {int(r): c for r, c in hists[method].items()}
            total = sum(hist.values()) or 1
            xs = np.arange(len(depths)) + (k - (len(methods) - 1) / 2) * width
            share = [hist.get(d, 0) / total for d in depths]
            st = method_style(method)
            ax.bar(xs, share, width, color=st["color"], label=method)
            edge = {"markeredgecolor": "black", "markeredgewidth": 0.5}  # visible on the bar
            ax.plot(
                xs, share, ls="none", marker=st["marker"], color=st["color"], gid=method, **edge
            )
            mark = Line2D([], [], ls="none", marker=st["marker"], color=st["color"], **edge)
            handles.append((Patch(color=st["color"]), mark))
        ax.set_xticks(np.arange(len(depths)), [str(d) for d in depths])
        ax.set_xlabel("executed depth R_t = max_i n_t,i")
        ax.set_ylabel("share of test steps")
        fig.legend(handles, methods, loc="outside lower center", ncols=min(len(methods), 3))
    return fig


def majority_share(record: dict[str, Any]) -> float | None:
    """The chance level (%) of a classification record: the majority class's share of the data.

    From the class counts the record's ``data`` gives where the task did not balance its splits,
    else 100 / the task's number of classes. None for a task that is not a classification with a
    percentage metric, or is not registered.
    """
    try:
        cls = TASKS.get(record.get("task", ""))
        if cls.kind != "classification" or not get_metric(record["primary"]).percent:
            return None
    except (UnknownNameError, KeyError):
        return None
    info = record.get("data") or {}
    counts: list[float] = []
    if "per_class" not in info:
        raw = info.get("class_counts")
        if isinstance(raw, (dict, list)):
            counts = [float(v) for v in (raw.values() if isinstance(raw, dict) else raw)]
        elif "n_positive" in info and "n_negative" in info:
            counts = [float(info["n_positive"]), float(info["n_negative"])]
        elif "positive_pct" in info:
            counts = [float(info["positive_pct"]), 100.0 - float(info["positive_pct"])]
    if counts and sum(counts) > 0:
        return 100.0 * max(counts) / sum(counts)
    try:
        return 100.0 / cls().output_size
    except Exception:  # a task that cannot say without its data
        return None


CHANCE_MARGIN = 1.0  # points of accuracy above the majority-class share still called chance


def at_chance(records: list[dict[str, Any]]) -> bool:
    """Whether a variant's mean validation metric is at most chance + ``CHANCE_MARGIN``."""
    chance = majority_share(records[0]) if records else None
    if chance is None:
        return False
    val = split_mean(records, records[0]["primary"], "val")
    return not math.isnan(val) and val <= chance + CHANCE_MARGIN


@dataclass
class MaskChoice:
    """Which variant's update pattern each method shows, and why (``mask_choice``)."""

    target: float  # the test Skip % the methods without a table pick are matched at
    picks: dict[str, tuple[str, str]]  # {method: (variant_id, "table" | "nearest")}
    records: dict[str, dict[str, Any]]  # {method: the drawn run}: the lowest seed not at chance
    table_at_chance: list[str]  # methods whose table pick is at chance: matched on Skip % instead
    at_chance: list[str]  # methods every variant of which is at chance: no panel
    chance: float | None = None  # the chance level (``majority_share``, %), if any
    skip: dict[str, float] = field(default_factory=dict)  # {method: mean test Skip %} of a pick


def mask_choice(
    runs: pd.DataFrame, target: float | None = None, selected: dict[str, str] | None = None
) -> MaskChoice:
    """Per method, the variant whose update pattern is drawn.

    The table's pick (``selected``) unless it is at chance on validation; otherwise the variant
    whose mean test Skip % is nearest ``target`` (``matched_budget``) among those not at chance.
    """
    groups = {
        vid: sorted(g["record"], key=lambda r: r["seed"])
        for vid, g in runs.groupby("variant_id", sort=False)
    }
    chance = {vid for vid, recs in groups.items() if at_chance(recs)}
    ok = runs[~runs["variant_id"].isin(chance)]
    target, near = matched_budget(ok, target) if len(ok) else (target or 0.0, {})
    picks: dict[str, tuple[str, str]] = {}
    table_at_chance, none = [], []
    for method in method_order(runs["method"]):
        pick = (selected or {}).get(method)
        if pick in groups and pick not in chance:
            picks[method] = (pick, "table")
            continue
        if method in near:
            picks[method] = (near[method], "nearest")
            if pick in chance:
                table_at_chance.append(method)
        elif (runs["method"] == method).any() and not (ok["method"] == method).any():
            none.append(method)
    records = {}
    for method, (vid, _) in picks.items():
        recs = groups[vid]
        records[method] = next((r for r in recs if not at_chance([r])), recs[0])
    first = next(iter(groups.values()), [{}])[0]
    skip = {
        m: float(runs.loc[runs["variant_id"] == v, "skip_pct"].mean())
        for m, (v, _) in picks.items()
        if "skip_pct" in runs
    }
    return MaskChoice(target, picks, records, table_at_chance, none, majority_share(first), skip)


def matched_budget(runs: pd.DataFrame, target: float | None = None) -> tuple[float, dict[str, str]]:
    """Per method, the variant whose mean test Skip % is nearest ``target`` (ties: lower id).

    ``target`` None: the median over the variants that skip (mean Skip % above 1 %). Returns
    ``(target, {method: variant_id})``.
    """
    if target is None:
        means = runs.groupby("variant_id", sort=False)["skip_pct"].mean()
        skipping = means[means > 1]
        target = float(skipping.median()) if len(skipping) else 0.0
    near = nearest_skip(list(runs["record"]), target, "test", by=("method",))
    return target, {method: vid for (method,), (vid, _) in near.items()}
