"""The update-pattern figures: which units each method updated, and how deep it ran.

- ``mask_figure``: the update pattern of the first test sequence (S-SA Fig. 3): per method, the
  variant whose Skip % is nearest a common target (``matched_budget``), units x time, Skip % in
  each panel's title, the steps the task marks (``Task.marked_steps``: e.g. the two inputs a
  target sums) drawn as dashed lines; depth-adaptive methods are drawn as a heatmap of the
  micro-steps each unit ran; methods that update every unit at every step ("dense") get no panel,
  only a note.
- ``depth_figure``: the histogram of executed depth R_t of depth-adaptive methods.

matplotlib is imported inside the functions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.reporting.figstyle import (
    MARK_COLOR,
    ONE_COLUMN,
    TWO_COLUMNS,
    method_order,
    method_style,
    style,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def mask_image(record: dict[str, Any]) -> np.ndarray:
    """The recorded first test sequence's update mask as ``[units, T]`` (layers stacked)."""
    from harness.trace import unpack_mask

    trace = record.get("trace") or {}
    layers = [
        np.asarray(unpack_mask(rows, units), dtype=np.uint8).reshape(len(rows), units).T
        for rows, units in zip(trace.get("first_mask", []), trace.get("units", []), strict=True)
    ]
    return np.concatenate(layers, axis=0) if layers else np.zeros((0, 0), dtype=np.uint8)


def depth_image(record: dict[str, Any]) -> np.ndarray:
    """The recorded first test sequence's micro-steps per unit ``n_t,i`` as ``[units, T]``.

    Empty when the record holds no depth trace (the method is not depth-adaptive).
    """
    from harness.trace import unpack_depth

    layers = [unpack_depth(rows).T for rows in (record.get("trace") or {}).get("first_depth", [])]
    return np.concatenate(layers, axis=0) if layers else np.zeros((0, 0), dtype=np.int64)


def mask_figure(runs: dict[str, dict[str, Any]], labels: dict[str, str] | None = None) -> Figure:
    """One panel per method: the first test sequence's updates over units x time.

    Args:
        runs: ``{method: record}``; a record whose mask is all ones (a dense method) gets no
            panel but is named in a note; one without a trace is left out.
        labels: ``{method: variant label}`` added to the panel titles.

    A record with a depth trace (``depth_image``) is drawn as a heatmap of micro-steps per unit;
    any other as its update mask (black = updated). Steps the task marked in the trace
    (``first_marks``) are dashed vertical lines.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    panels, dense = [], []
    for method, rec in runs.items():
        depth, mask = depth_image(rec), mask_image(rec)
        if depth.size:
            panels.append((method, rec, depth, True))
        elif mask.size and mask.all():
            dense.append(method)
        elif mask.size:
            panels.append((method, rec, mask, False))
    with style():
        fig = Figure(figsize=(TWO_COLUMNS, 0.5 + 1.0 * max(len(panels), 1)), layout="constrained")
        axes = fig.subplots(max(len(panels), 1), 1, squeeze=False, sharex=True)[:, 0]
        for ax, (method, rec, img, is_depth) in zip(axes, panels, strict=False):
            metrics = rec.get("metrics") or {}
            title = method + (f" ({labels[method]})" if labels and labels.get(method) else "")
            title += f": Skip {metrics.get('skip_pct', math.nan):.1f} %"
            if is_depth:
                top = max(int(img.max()), max((rec.get("trace") or {}).get("max_depth", [1])))
                im = ax.imshow(img, cmap="viridis", vmin=0, vmax=top, aspect="auto")
                fig.colorbar(im, ax=ax, label="micro-steps n_t,i", pad=0.01)
                if "depth_skip_pct" in metrics:
                    title += f", depth-skip {metrics['depth_skip_pct']:.1f} %"
            else:
                ax.imshow(img, cmap="Greys", vmin=0, vmax=1, aspect="auto")
            for t in (rec.get("trace") or {}).get("first_marks", []):
                ax.axvline(t, color=MARK_COLOR, linestyle="--", lw=0.8)
            ax.set_title(title, loc="left")
            ax.set_ylabel("unit")
            ax.set_yticks([])
            ax.grid(False)
        axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
        marked = any((r.get("trace") or {}).get("first_marks") for _, r, _, _ in panels)
        axes[-1].set_xlabel(
            "time step t (black = unit updated" + ("; dashed: marked steps)" if marked else ")")
        )
        if dense:
            fig.suptitle(
                "Dense (every unit updated at every step; not drawn): " + ", ".join(dense),
                x=0.0,
                ha="left",
            )
    return fig


def depth_figure(hists: dict[str, dict[str, int]]) -> Figure:
    """Share of steps executed at each depth R_t, one bar colour per depth method."""
    from matplotlib.figure import Figure

    methods = method_order(list(hists))
    depths = sorted({int(r) for h in hists.values() for r in h})
    with style():
        fig = Figure(figsize=(ONE_COLUMN, 2.4), layout="constrained")
        ax = fig.subplots()
        width = 0.8 / max(len(methods), 1)
        for k, method in enumerate(methods):
            hist = {int(r): c for r, c in hists[method].items()}
            total = sum(hist.values()) or 1
            xs = np.arange(len(depths)) + (k - (len(methods) - 1) / 2) * width
            ax.bar(
                xs,
                [hist.get(d, 0) / total for d in depths],
                width,
                color=method_style(method)["color"],
                label=method,
            )
        ax.set_xticks(np.arange(len(depths)), [str(d) for d in depths])
        ax.set_xlabel("executed depth R_t = max_i n_t,i")
        ax.set_ylabel("share of test steps")
        ax.legend()
    return fig


def matched_budget(runs: pd.DataFrame, target: float | None = None) -> tuple[float, dict[str, str]]:
    """Per method, the variant whose mean test Skip % is nearest ``target`` (the masks' choice).

    The variant is taken by ``harness.selection.nearest_skip`` on the test split, one group per
    method: ties go to the lower variant id.

    Args:
        runs: one row per run (``harness.reporting.runs.runs_frame``: ``method``, ``variant_id``,
            ``record``, ``skip_pct``).
        target: the Skip % to match; None: the median over the variants that skip (mean Skip %
            over their seeds above 1 %).

    Returns:
        ``(target, {method: variant_id})``; a method none of whose variants recorded a Skip %
        is left out.
    """
    from harness.selection import nearest_skip

    if target is None:
        means = runs.groupby("variant_id", sort=False)["skip_pct"].mean()
        skipping = means[means > 1]
        target = float(skipping.median()) if len(skipping) else 0.0
    near = nearest_skip(list(runs["record"]), target, "test", by=("method",))
    return target, {method: vid for (method,), (vid, _) in near.items()}
