"""Figures of the reports, drawn from run records and saved as PNG and PDF.

What they show follows the seed papers' figures:

- ``tradeoff_figure``: the primary metric vs Skip % and vs effective FLOPs, one point per method
  variant (mean over seeds, error bars: std over seeds), each method's Pareto front drawn as a
  step line (the region it attains).
- ``mask_figure``: the update pattern of the first test sequence (S-SA Fig. 3): per method, the
  variant whose Skip % is nearest a common target, units x time, Skip % in each panel's title,
  the steps the task marks (``Task.marked_steps``: e.g. the two inputs a target sums) drawn
  as dashed lines; depth-adaptive methods are drawn as a heatmap of the micro-steps each unit ran;
  methods that update every unit at every step ("dense") get no panel, only a note.
- ``lambda_figure``: metric and Skip % vs the budget weight λ (S-SA Fig. 4), mean ± std over
  seeds; λ = 0 has its own tick left of a break in the log axis.
- ``curves_figure``: learning curves from the per-epoch history of the records (training loss and
  validation primary metric), one column per task, mean ± std over seeds.
- ``depth_figure``: the histogram of executed depth R_t of depth-adaptive methods.

Every figure gives a method the same colour, marker and line style (``method_style``, assigned
from the registry order on a colour-blind-safe palette); axes whose values span a decade or more
are logarithmic; bands and error bars of percentages stay within [0, 100]. Figures are sized for
one column (``ONE_COLUMN`` inches wide) or two (``TWO_COLUMNS``), text is at least 7 pt
(``STYLE``) and PDFs embed TrueType fonts.

Which figures a report gets follows from its records alone: masks where a method's trace holds
them, the λ plot where a method was run at several λ, curves where records hold a history, the
depth histogram where traces hold one; no method or task is singled out by name.

matplotlib and pandas are imported inside the functions (``import harness`` stays light). Figures
are ``matplotlib.figure.Figure`` objects built under ``style()``, never through pyplot's global
state, so many reports can be drawn in one process.
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.reporting.text import TITLES, arrow

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ONE_COLUMN = 3.3  # inches: one column of a two-column paper
TWO_COLUMNS = 7.0  # inches: the full text width
# Paul Tol's "muted" colour-blind-safe qualitative palette (https://personal.sron.nl/~pault/).
PALETTE = (
    "#332288",
    "#CC6677",
    "#117733",
    "#DDCC77",
    "#88CCEE",
    "#882255",
    "#44AA99",
    "#999933",
    "#AA4499",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # 7: coprime with the 9 colours
LINESTYLES = ("-", "--", ":", "-.")
MARK_COLOR = "#EE3377"  # the steps a task marks, on the update patterns
# Measures in percent: their bands and error bars are clipped to [0, 100].
PERCENT = {"skip_pct", "accuracy", "geo_mean", "depth_skip_pct"}
STYLE = {
    "pdf.fonttype": 42,  # TrueType fonts embedded in PDFs (not Type 3)
    "ps.fonttype": 42,
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "figure.titlesize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.2,
    "lines.markersize": 4,
    "errorbar.capsize": 1.5,
    "legend.frameon": False,
    "savefig.dpi": 200,
    "image.interpolation": "nearest",
}


@contextlib.contextmanager
def style() -> Iterator[None]:
    """Apply the report figures' rcParams (``STYLE``), on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context(STYLE):
        yield


def method_style(method: str) -> dict[str, str]:
    """The ``color``, ``marker`` and ``linestyle`` of a method, the same in every figure.

    The i-th registered method (registry order) gets colour ``i mod 9`` of ``PALETTE``, marker
    ``i mod 7`` and, past the first 9, the next line style; a name not registered gets a style
    from a checksum of the name.
    """
    from harness.registry import METHODS

    names = METHODS.names()
    i = names.index(method) if method in names else len(names) + zlib.crc32(method.encode()) % 97
    return {
        "color": PALETTE[i % len(PALETTE)],
        "marker": MARKERS[i % len(MARKERS)],
        "linestyle": LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)],
    }


def _order(methods: Sequence[str]) -> list[str]:
    """Distinct methods in registry order (unregistered ones last, by name)."""
    from harness.registry import METHODS

    names = METHODS.names()
    uniq = list(dict.fromkeys(methods))
    return sorted(uniq, key=lambda m: (names.index(m), "") if m in names else (len(names), m))


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


def depth_image(record: dict[str, Any]) -> np.ndarray:
    """The recorded first test sequence's micro-steps per unit ``n_t,i`` as ``[units, T]``.

    Empty when the record holds no depth trace (the method is not depth-adaptive).
    """
    from harness.train import unpack_depth

    layers = [unpack_depth(rows).T for rows in (record.get("trace") or {}).get("first_depth", [])]
    return np.concatenate(layers, axis=0) if layers else np.zeros((0, 0), dtype=np.int64)


def spans_decades(values: Any) -> bool:
    """Whether positive ``values`` span a factor of 10 or more (then the axis is logarithmic)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return bool(v.size) and bool((v > 0).all()) and v.max() >= 10 * v.min()


def _band(mean: np.ndarray, std: np.ndarray, key: str) -> tuple[np.ndarray, np.ndarray]:
    """``mean ± std`` (std NaN: 0), clipped to [0, 100] for a percentage."""
    std = np.nan_to_num(np.asarray(std, dtype=float))
    lo, hi = mean - std, mean + std
    if key in PERCENT:
        lo, hi = np.clip(lo, 0, 100), np.clip(hi, 0, 100)
    return lo, hi


def _err(mean: Any, std: Any, key: str) -> np.ndarray:
    """Asymmetric error bars ``[[below], [above]]`` of ``_band``."""
    mean = np.asarray(mean, dtype=float)
    lo, hi = _band(mean, std, key)
    return np.vstack([mean - lo, hi - mean])


def _legend(fig: Figure, methods: Sequence[str], labels: dict[str, str] | None = None) -> None:
    """One legend entry per method (its colour, marker and line style), outside the axes."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], **method_style(m)) for m in methods]
    text = [(labels or {}).get(m, m) for m in methods]
    if fig.get_figwidth() > ONE_COLUMN + 0.01:
        fig.legend(handles, text, loc="outside right upper")
    else:
        fig.legend(handles, text, loc="outside lower center", ncols=2)


def save(fig: Figure, stem: Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.pdf`` at the figure's size; returns both paths.

    Each is rendered in memory and written through ``harness.outputs.write_bytes`` (atomically,
    never over a records store).
    """
    import io

    from harness.outputs import write_bytes

    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    with style():
        for p in paths:
            buf = io.BytesIO()
            fig.savefig(buf, format=p.suffix[1:])
            write_bytes(p, buf.getvalue())
    return paths


def variant_points(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One row per (method, variant) of ``runs``: per key the mean over seeds and ``<key>_std``.

    Args:
        runs: one row per run with ``method``, ``variant_id``, ``seed`` and the ``keys``.
        keys: the measures to aggregate.

    Returns:
        Columns ``method``, ``variant_id``, ``seeds`` and per key ``k``, ``k_std`` (sample std,
        NaN for one seed).
    """
    import pandas as pd

    rows = []
    for (method, vid), g in runs.groupby(["method", "variant_id"], sort=False):
        row: dict[str, Any] = {"method": method, "variant_id": vid, "seeds": g["seed"].nunique()}
        for k in keys:
            v = pd.to_numeric(g[k], errors="coerce") if k in g else pd.Series([math.nan])
            row[k], row[f"{k}_std"] = float(v.mean()), float(v.std())
        rows.append(row)
    return pd.DataFrame(rows)


def tradeoff_figure(points: pd.DataFrame, primary: str, higher: bool, metric_title: str) -> Figure:
    """Metric vs Skip % (left) and vs effective FLOPs (right), Pareto front per method.

    Args:
        points: one row per variant (``variant_points``) with ``method``, ``primary``,
            ``skip_pct``, ``flops`` and their ``_std`` columns.
        primary: the primary metric's key (its column in ``points``).
        higher: whether higher values of the metric are better (sets the Pareto fronts).
        metric_title: axis label of the metric.
    """
    from matplotlib.figure import Figure

    methods = _order(points["method"])
    with style():
        fig = Figure(figsize=(TWO_COLUMNS, 2.6), layout="constrained")
        axes = fig.subplots(1, 2, sharey=True)
        for ax, (x, x_higher, xlabel) in zip(
            axes,
            [("skip_pct", True, "Skip % ↑"), ("flops", False, "Effective FLOPs per sequence ↓")],
            strict=True,
        ):
            for method in methods:
                g = points[points["method"] == method]
                st = method_style(method)
                ax.errorbar(
                    g[x],
                    g[primary],
                    xerr=_err(g[x], g[f"{x}_std"], x),
                    yerr=_err(g[primary], g[f"{primary}_std"], primary),
                    fmt=st["marker"],
                    color=st["color"],
                    elinewidth=0.6,
                    label=method,
                )
                idx = pareto_front(list(g[x]), list(g[primary]), x_higher, higher)
                if len(idx) > 1:  # the attained region's edge: a step between front points
                    ax.step(
                        g[x].iloc[idx],
                        g[primary].iloc[idx],
                        where="pre" if x_higher else "post",
                        color=st["color"],
                        linestyle=st["linestyle"],
                        lw=1,
                    )
            ax.set_xlabel(xlabel)
            if x == "flops" and spans_decades(points[x]):
                ax.set_xscale("log", nonpositive="clip")
        axes[0].set_ylabel(metric_title + arrow(higher))
        if spans_decades(points[primary]):
            axes[0].set_yscale("log", nonpositive="clip")
        _legend(fig, methods)
    return fig


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


def _lambda_axis(ax: Axes, lams: Sequence[float]) -> float:
    """Make ``ax``'s x axis a λ axis: log over λ > 0, λ = 0 at its own tick past a break.

    Returns:
        The x position where λ = 0 is drawn (a decade below the smallest λ > 0).
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    positive = [v for v in lams if v > 0] or [1.0]
    low, top = min(positive), max(positive)
    zero_x = low / 10
    decades = range(math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(top) + 1e-9) + 1)
    ticks = [zero_x, *sorted({low, *(10.0**d for d in decades)})]
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())

    def label(v: float, _: Any) -> str:
        if v == zero_x:
            return "0"
        e = math.log10(v)
        return f"$10^{{{round(e)}}}$" if abs(e - round(e)) < 1e-9 else f"{v:g}"

    ax.xaxis.set_major_formatter(FuncFormatter(label))
    ax.set_xlim(zero_x / 10**0.4, top * 10**0.4)
    brk = math.sqrt(zero_x * low)  # the break between λ = 0 and the log scale
    ax.text(brk, 0, "//", transform=ax.get_xaxis_transform(), ha="center", va="center")
    ax.set_xlabel("λ")
    return zero_x


def _line_styles(runs: pd.DataFrame) -> dict[str, dict[str, str]]:
    """A style per ``line`` of ``runs``: its method's; further lines of a method, other dashes."""
    out: dict[str, dict[str, str]] = {}
    for method in _order(runs["method"]):
        st = method_style(method)
        lines = list(dict.fromkeys(runs.loc[runs["method"] == method, "line"]))
        for k, line in enumerate(lines):
            ls = LINESTYLES[(LINESTYLES.index(st["linestyle"]) + k) % len(LINESTYLES)]
            out[line] = {**st, "linestyle": ls}
    return out


def lambda_figure(
    runs: pd.DataFrame, primary: str, metric_title: str, higher: bool | None = None
) -> Figure:
    """Metric and Skip % vs λ (S-SA Fig. 4), mean ± std over seeds, one line per setting.

    The λ axis is logarithmic over λ > 0; λ = 0 is drawn at its own tick ("0") a decade to the
    left, past a break mark, joined to the rest by a dotted segment. Negative λ are left out.

    Args:
        runs: one row per run with ``method``, ``line`` (method and the other varying values),
            ``lam``, ``primary`` and ``skip_pct``.
        primary: the primary metric's key (its column in ``runs``).
        metric_title: axis label of the metric.
        higher: the metric's direction (an arrow in the label), if known.
    """
    from matplotlib.figure import Figure

    runs = runs[runs["lam"] >= 0]
    styles = _line_styles(runs)
    with style():
        fig = Figure(figsize=(TWO_COLUMNS, 2.6), layout="constrained")
        axes = fig.subplots(1, 2)
        for ax, (y, title) in zip(
            axes, [(primary, metric_title + arrow(higher)), ("skip_pct", "Skip % ↑")], strict=True
        ):
            zero_x = _lambda_axis(ax, list(runs["lam"]))
            for line, st in styles.items():
                s = runs[runs["line"] == line].groupby("lam")[y].agg(["mean", "std"]).sort_index()
                lam = s.index.to_numpy(float)
                m = s["mean"].to_numpy(float)
                lo, hi = _band(m, s["std"].to_numpy(float), y)
                pos = lam > 0
                ax.plot(lam[pos], m[pos], label=line, **st)
                ax.fill_between(lam[pos], lo[pos], hi[pos], color=st["color"], alpha=0.2, lw=0)
                if not pos.all():  # λ = 0
                    z = ~pos
                    ax.errorbar(
                        [zero_x],
                        m[z],
                        yerr=[m[z] - lo[z], hi[z] - m[z]],
                        fmt=st["marker"],
                        color=st["color"],
                    )
                    if pos.any():
                        ax.plot(
                            [zero_x, lam[pos][0]],
                            [m[z][0], m[pos][0]],
                            color=st["color"],
                            linestyle=":",
                            lw=0.8,
                        )
            ax.set_ylabel(title)
            if y not in PERCENT and spans_decades(runs[y]):
                ax.set_yscale("log", nonpositive="clip")
        handles = [h for h in axes[0].get_lines() if h.get_label() in styles]
        fig.legend(handles, [h.get_label() for h in handles], loc="outside right upper")
    return fig


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
    """The runs whose learning curves are drawn: ``{(task, preset): {method: records}}``.

    Ok runs with a history; per method, the variant with the best mean validation primary
    metric (its records' ``val_metrics``), so the choice never looks at the test split.
    """
    from harness.results import latest

    groups: dict[tuple[str, str], dict[str, dict[str, list]]] = {}
    for r in latest(records):
        if r.get("status") == "ok" and r.get("history"):
            by_method = groups.setdefault((r["task"], r["preset"]), {})
            by_method.setdefault(r["method"], {}).setdefault(r["variant_id"], []).append(r)
    out: dict[tuple[str, str], dict[str, list]] = {}
    for key, by_method in sorted(groups.items()):
        chosen = {}
        for method in _order(list(by_method)):
            variants = list(by_method[method].values())
            primary, higher = variants[0][0]["primary"], variants[0][0]["higher_is_better"]

            def score(rs: list, primary: str = primary, higher: bool = higher) -> float:
                vals = [(r.get("val_metrics") or {}).get(primary) for r in rs]
                vals = [v for v in vals if v is not None and not math.isnan(v)]
                s = float(np.mean(vals)) if vals else math.nan
                return -math.inf if math.isnan(s) else (s if higher else -s)

            chosen[method] = max(variants, key=score)
        out[key] = chosen
    return out


def curves_figure(records: Sequence[dict[str, Any]]) -> Figure:
    """Learning curves: training loss (top) and validation primary metric (bottom) per epoch.

    One column per (task, preset), wrapped after three; one line per method (the variant of
    ``curve_choice``), mean ± std over its seeds. One column is ``ONE_COLUMN`` wide, more are
    ``TWO_COLUMNS``.

    Args:
        records: run records; those without a history are left out.
    """
    from matplotlib.figure import Figure

    chosen = curve_choice(records)
    cols = min(len(chosen), 3) or 1
    blocks = math.ceil(len(chosen) / cols) or 1
    width = ONE_COLUMN if cols == 1 else TWO_COLUMNS
    with style():
        fig = Figure(figsize=(width, 3.2 * blocks + 0.4), layout="constrained")
        axes = fig.subplots(2 * blocks, cols, squeeze=False)
        for ax in axes.flat[len(chosen) * 2 :]:
            ax.set_visible(False)
        methods: list[str] = []
        for k, ((task, preset), by_method) in enumerate(chosen.items()):
            top, bottom = axes[2 * (k // cols), k % cols], axes[2 * (k // cols) + 1, k % cols]
            first = next(iter(by_method.values()))[0]
            primary, higher = first["primary"], first["higher_is_better"]
            for ax, key, label in [
                (top, "train_loss", "training loss"),
                (bottom, f"val_{primary}", f"val. {TITLES.get(primary, primary)}{arrow(higher)}"),
            ]:
                ys = []
                for method, rs in by_method.items():
                    mean, std = _per_epoch(rs, key)
                    epochs = np.arange(1, len(mean) + 1)
                    lo, hi = _band(mean, std, primary if key != "train_loss" else key)
                    st = method_style(method)
                    ax.plot(epochs, mean, markevery=max(len(mean) // 8, 1), label=method, **st)
                    ax.fill_between(epochs, lo, hi, color=st["color"], alpha=0.2, lw=0)
                    ys.append(mean)
                    methods.append(method)
                if ys and spans_decades(np.concatenate(ys)):
                    ax.set_yscale("log", nonpositive="clip")
                ax.set_ylabel(label)
                ax.xaxis.get_major_locator().set_params(integer=True)
            top.set_title(f"{task} ({preset})")
            bottom.set_xlabel("epoch")
        _legend(fig, _order(methods))
    return fig


def depth_figure(hists: dict[str, dict[str, int]]) -> Figure:
    """Share of steps executed at each depth R_t, one bar colour per depth method."""
    from matplotlib.figure import Figure

    methods = _order(list(hists))
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


def _lines(runs: pd.DataFrame) -> dict[str, str]:
    """Per variant id, its λ line: the method and the other config values that vary."""
    out = {}
    for method, m_runs in runs.groupby("method", sort=False):
        cfgs = {vid: g["config"].iloc[0] for vid, g in m_runs.groupby("variant_id", sort=False)}
        first = next(iter(cfgs.values()))
        varying = sorted(
            k for k in first if k != "lam" and len({repr(c.get(k)) for c in cfgs.values()}) > 1
        )
        for vid, cfg in cfgs.items():
            parts = [
                f"{k}={cfg.get(k):g}" if isinstance(cfg.get(k), float) else f"{k}={cfg.get(k)}"
                for k in varying
            ]
            out[vid] = ", ".join([method, *parts])
    return out


def matched_budget(points: pd.DataFrame, target: float | None = None) -> tuple[float, dict]:
    """Per method, the variant whose mean Skip % is nearest ``target`` (mask figure's choice).

    Args:
        points: ``variant_points`` rows with ``skip_pct``.
        target: the Skip % to match; None: the median of the variants that skip (> 1 %).

    Returns:
        ``(target, {method: variant_id})``.
    """
    skipping = points.loc[points["skip_pct"] > 1, "skip_pct"]
    if target is None:
        target = float(skipping.median()) if len(skipping) else 0.0
    chosen = {}
    for method, g in points.groupby("method", sort=False):
        dist = (g["skip_pct"] - target).abs()
        chosen[method] = g.loc[dist.idxmin(), "variant_id"] if dist.notna().any() else None
    return target, chosen


def report_figures(
    runs: pd.DataFrame,
    agg: pd.DataFrame | None,
    primary: str,
    higher: bool,
    title: str,
    stem: Path,
    skip_target: float | None = None,
) -> list[tuple[str, list[Path]]]:
    """Draw and save the figures that apply to one (task, preset) of ``harness.reporting.paper``.

    Args:
        runs: one row per run (``harness.reporting.paper.runs_frame``: ``method``,
            ``variant_id``, ``seed``, ``record``, ``config``, ``lam``, ``flops`` and metrics).
        agg: the variants' table rows (unused; kept for the caller's convenience).
        primary: the primary metric's key.
        higher: whether higher values of the primary metric are better.
        title: the primary metric's title, for axes and captions.
        stem: path prefix; each figure goes to ``<stem>_<kind>.png`` / ``.pdf``.
        skip_target: the Skip % the update patterns are matched at (None: see
            ``matched_budget``).

    Returns:
        ``(caption, [png, pdf])`` per figure drawn.
    """
    out = []

    def keep(caption: str, fig: Figure, kind: str) -> None:
        out.append((caption, save(fig, stem.with_name(f"{stem.name}_{kind}"))))

    points = variant_points(runs, [primary, "skip_pct", "flops"])
    keep(
        f"{title} vs Skip % and vs effective FLOPs per sequence: variant means, error bars ± std "
        "over seeds; steps: each method's Pareto front.",
        tradeoff_figure(points, primary, higher, title),
        "tradeoff",
    )
    target, chosen = matched_budget(points, skip_target)
    lines = _lines(runs)
    picked, labels = {}, {}
    for method, vid in chosen.items():
        g = runs[runs["variant_id"] == vid].sort_values("seed")
        picked[method] = g["record"].iloc[0]
        labels[method] = lines[vid].partition(", ")[2]
        lam = g["lam"].iloc[0]
        if runs.loc[runs["method"] == method, "lam"].nunique() > 1 and lam is not None:
            labels[method] = ", ".join(p for p in (f"λ={lam:g}", labels[method]) if p)
    if any(mask_image(r).size for r in picked.values()):
        keep(
            f"Update pattern of the first test sequence, each method at the variant with Skip % "
            f"nearest {target:.1f} % (first seed): units × time, black = update; depth-adaptive "
            "methods: micro-steps per unit.",
            mask_figure(picked, labels),
            "masks",
        )
    swept = runs[runs["lam"].notna()].copy()
    swept = swept[swept.groupby("method")["lam"].transform("nunique") > 1]
    if not swept.empty:
        swept["line"] = swept["variant_id"].map(lines)
        swept["lam"] = swept["lam"].astype(float)
        keep(
            f"{title} and Skip % vs λ (mean ± std over seeds; λ = 0 left of the break).",
            lambda_figure(swept, primary, title, higher),
            "lambda",
        )
    records = list(runs["record"])
    if any(r.get("history") for r in records):
        keep(
            f"Learning curves: training loss and validation {title} per epoch (mean ± std over "
            "seeds), per method the variant with the best mean validation value.",
            curves_figure(records),
            "curves",
        )
    hists: dict[str, dict[str, int]] = {}
    for rec in records:
        for r, c in ((rec.get("trace") or {}).get("depth_hist") or {}).items():
            h = hists.setdefault(rec["method"], {})
            h[r] = h.get(r, 0) + c
    if hists:
        keep(
            "Histogram of the executed depth R_t over all test steps (all runs of each depth "
            "method).",
            depth_figure(hists),
            "depth",
        )
    return out


def write_curves(records: Sequence[dict[str, Any]], stem: Path) -> list[Path]:
    """Save ``curves_figure(records)`` as ``stem.png`` / ``.pdf``; nothing without a history.

    Args:
        records: run records.
        stem: path prefix of the two files.

    Returns:
        The paths written (none when no ok record holds a history).
    """
    if not curve_choice(records):
        return []
    return save(curves_figure(records), stem)
