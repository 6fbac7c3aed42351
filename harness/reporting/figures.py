"""Figures of the paper report (``harness.reporting.paper``), saved as PNG and PDF.

They are drawn with seaborn on matplotlib's Agg backend.

- ``tradeoff_figure``: the primary metric vs Skip % and vs effective FLOPs, one point per method
  variant (mean over seeds), each method's Pareto front drawn as a line (S-SA Figs. 4/5 style).
- ``mask_figure``: the update pattern of the first test sequence per method, units x time,
  black = update (S-SA Fig. 3 style), read from the packed masks the trainer records.
- ``lambda_figure``: metric and Skip % vs the budget weight lam for methods swept over lam.
- ``depth_figure``: the histogram of executed depth R_t of depth-adaptive methods.

Which figures a report gets follows from its records alone: masks where a method's trace holds
them, the lam plot where a method was run at several lam, the depth histogram where traces hold
one; no method or task is singled out by name.

matplotlib, seaborn and pandas are imported inside the functions (``import harness`` stays
light). Figures are built as ``matplotlib.figure.Figure`` objects, never through pyplot's global
state, so many reports can be drawn in one process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.reporting.text import arrow

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def pareto_front(
    xs: Sequence[float], ys: Sequence[float], x_higher: bool, y_higher: bool
) -> list[int]:
    """Indices of the non-dominated points, sorted by x.

    A point is dominated when another is at least as good on both axes and better on one
    ("good" per ``x_higher`` / ``y_higher``). Points with a NaN coordinate are never on the front.
    """
    sx, sy = (1 if x_higher else -1), (1 if y_higher else -1)
    pts = [(sx * x, sy * y) for x, y in zip(xs, ys, strict=True)]
    front = []
    for i, (x, y) in enumerate(pts):
        if math.isnan(x) or math.isnan(y):
            continue
        dominated = any(
            (x2 >= x and y2 >= y) and (x2 > x or y2 > y)
            for j, (x2, y2) in enumerate(pts)
            if j != i and not (math.isnan(x2) or math.isnan(y2))
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: xs[i])


def mask_image(record: dict[str, Any]) -> np.ndarray:
    """The recorded first test sequence's update mask as ``[units, T]`` (layers stacked)."""
    from harness.train import unpack_mask

    trace = record.get("trace") or {}
    layers = [
        np.asarray(unpack_mask(rows, units), dtype=np.uint8).reshape(len(rows), units).T
        for rows, units in zip(trace.get("first_mask", []), trace.get("units", []), strict=True)
    ]
    return np.concatenate(layers, axis=0) if layers else np.zeros((0, 0), dtype=np.uint8)


def _setup() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    return sns


def _palette(methods: Sequence[str]) -> dict[str, Any]:
    import seaborn as sns

    names = sorted(set(methods))
    return dict(zip(names, sns.color_palette("tab20", len(names)), strict=True))


def save(fig: Figure, stem: Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.pdf``; returns both paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for p in paths:
        fig.savefig(p, dpi=150, bbox_inches="tight")
    return paths


def tradeoff_figure(agg: pd.DataFrame, primary: str, higher: bool, metric_title: str) -> Figure:
    """Metric vs Skip % (left) and vs effective FLOPs (right), Pareto front per method.

    Args:
        agg: one row per variant with columns ``method``, ``primary``, ``skip_pct``, ``flops``.
        primary: the primary metric's key (its column in ``agg``).
        higher: whether higher values of the metric are better (sets the Pareto fronts).
        metric_title: axis label of the metric.
    """
    sns = _setup()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    palette = _palette(agg["method"])
    for ax, (x, x_higher, xlabel) in zip(
        axes,
        [("skip_pct", True, "Skip %"), ("flops", False, "Effective FLOPs per sequence")],
        strict=True,
    ):
        sns.scatterplot(
            data=agg, x=x, y=primary, hue="method", style="method", palette=palette, ax=ax, s=45
        )
        for method, g in agg.groupby("method"):
            idx = pareto_front(list(g[x]), list(g[primary]), x_higher, higher)
            if len(idx) > 1:
                ax.plot(g[x].iloc[idx], g[primary].iloc[idx], color=palette[method], lw=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(metric_title + arrow(higher))
        if x == "flops" and (agg[x] > 0).all():
            ax.set_xscale("log")
    axes[0].get_legend().remove()
    sns.move_legend(axes[1], "upper left", bbox_to_anchor=(1.02, 1), title="method (front: line)")
    return fig


def mask_figure(runs: dict[str, dict[str, Any]]) -> Figure:
    """One panel per method: the first test sequence's updates (black) over units x time."""
    _setup()
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    images = {m: mask_image(r) for m, r in runs.items()}
    images = {m: img for m, img in images.items() if img.size}
    fig = Figure(figsize=(8, 0.6 + 1.1 * max(len(images), 1)), layout="constrained")
    axes = fig.subplots(max(len(images), 1), 1, squeeze=False, sharex=True)[:, 0]
    for ax, (method, img) in zip(axes, images.items(), strict=False):
        ax.imshow(img, cmap="Greys", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.set_ylabel(method, rotation=0, ha="right", va="center")
        ax.set_yticks([])
        ax.grid(False)
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].set_xlabel("time step t (black = unit updated)")
    return fig


def lambda_figure(runs: pd.DataFrame, primary: str, metric_title: str) -> Figure:
    """Metric and Skip % vs lam (symlog x, mean ± std over seeds), one line per swept method.

    Args:
        runs: one row per run with ``line`` (method and other varying values), ``lam``,
            ``primary`` and ``skip_pct``.
        primary: the primary metric's key (its column in ``runs``).
        metric_title: axis label of the metric.
    """
    sns = _setup()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    positive = runs.loc[runs["lam"] > 0, "lam"]
    for ax, (y, title) in zip(axes, [(primary, metric_title), ("skip_pct", "Skip %")], strict=True):
        sns.lineplot(data=runs, x="lam", y=y, hue="line", marker="o", errorbar="sd", ax=ax)
        if len(positive):
            ax.set_xscale("symlog", linthresh=float(positive.min()))
        ax.set_xlabel("λ (lam)")
        ax.set_ylabel(title)
    axes[0].get_legend().remove()
    sns.move_legend(axes[1], "upper left", bbox_to_anchor=(1.02, 1), title=None)
    return fig


def depth_figure(hists: dict[str, dict[str, int]]) -> Figure:
    """Share of steps executed at each depth R_t, one bar colour per depth method."""
    sns = _setup()
    import pandas as pd
    from matplotlib.figure import Figure

    rows = []
    for method, hist in hists.items():
        total = sum(hist.values()) or 1
        rows += [{"method": method, "R_t": int(r), "share": c / total} for r, c in hist.items()]
    df = pd.DataFrame(rows).sort_values("R_t")
    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.subplots()
    sns.barplot(data=df, x="R_t", y="share", hue="method", ax=ax)
    ax.set_xlabel("executed depth R_t = max_i n_t,i")
    ax.set_ylabel("share of test steps")
    return fig


def report_figures(
    runs: pd.DataFrame, agg: pd.DataFrame, primary: str, higher: bool, title: str, stem: Path
) -> list[tuple[str, list[Path]]]:
    """Draw and save the figures that apply to one (task, preset) of ``harness.reporting.paper``.

    Args:
        runs: one row per run (``harness.reporting.paper.runs_frame``).
        agg: one row per variant (``harness.reporting.paper.aggregate``, with ``records`` and
            ``label``).
        primary: the primary metric's key.
        higher: whether higher values of the primary metric are better.
        title: the primary metric's title, for axes and captions.
        stem: path prefix; each figure goes to ``<stem>_<kind>.png`` / ``.pdf``.

    Returns:
        ``(caption, [png, pdf])`` per figure drawn.
    """
    out = []

    def keep(caption: str, fig: Figure, kind: str) -> None:
        out.append((caption, save(fig, stem.with_name(f"{stem.name}_{kind}"))))

    keep(
        f"{title} vs Skip % and vs effective FLOPs per sequence; lines: each method's Pareto "
        "front (variant means over seeds).",
        tradeoff_figure(agg, primary, higher, title),
        "tradeoff",
    )
    firsts = {m: g["records"].iloc[0][0] for m, g in agg.groupby("method", sort=False)}
    if any(mask_image(r).size for r in firsts.values()):
        keep(
            "Update pattern of the first test sequence (units × time, black = update), first "
            "seed of each method's first variant.",
            mask_figure(firsts),
            "masks",
        )
    # One line per method and setting of the other varying fields, over lam.
    lines = {
        rs[0]["variant_id"]: ", ".join(
            [m] + [p for p in label.split(", ") if p and not p.startswith("lam=")]
        )
        for m, label, rs in zip(agg["method"], agg["label"], agg["records"], strict=True)
    }
    swept = runs[runs["lam"].notna()].copy()
    swept = swept[swept.groupby("method")["lam"].transform("nunique") > 1]
    if not swept.empty:
        swept["line"] = swept["variant_id"].map(lines)
        swept["lam"] = swept["lam"].astype(float)
        keep(
            f"{title} and Skip % vs λ (mean ± std over seeds).",
            lambda_figure(swept, primary, title),
            "lambda",
        )
    hists: dict[str, dict[str, int]] = {}
    for method, rs in zip(agg["method"], agg["records"], strict=True):
        for rec in rs:
            for r, c in ((rec.get("trace") or {}).get("depth_hist") or {}).items():
                hists.setdefault(method, {})[r] = hists.get(method, {}).get(r, 0) + c
    if hists:
        keep(
            "Histogram of the executed depth R_t over all test steps (all runs of each depth "
            "method).",
            depth_figure(hists),
            "depth",
        )
    return out
