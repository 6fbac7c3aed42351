"""Figures of the paper-style reports (trade-off, budget knobs), drawn from run records.

Which figures a report gets, and what each shows: docs/reports.md, Figures. The update patterns are
``harness.reporting.patterns``'s, the learning curves ``harness.reporting.curves``'s; the look is
``harness.reporting.figstyle``'s. matplotlib and pandas are imported inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.components.metrics import get_metric
from harness.components.registry import METHODS, UnknownNameError
from harness.components.selection import Rule, budget_measure, parse_rule, select
from harness.references import role
from harness.reporting.curves import curves_figure, write_curves
from harness.reporting.figstyle import (
    OFF_AXIS,
    OFF_AXIS_COLOR,
    TWO_COLUMNS,
    band,
    error_bars,
    figure,
    method_order,
    method_style,
    readable_log,
    save,
    spans_decades,
)
from harness.reporting.patterns import (
    CHANCE_MARGIN,
    MaskChoice,
    depth_figure,
    mask_choice,
    mask_figure,
    mask_panels,
)
from harness.reporting.references import REFERENCE_COLOR, draw_bands, reference_bands
from harness.reporting.text import arrow, ci95, num_first, value_text

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["report_figures", "write_curves"]  # write_curves: importable from here, as before


def pareto_front(
    xs: Sequence[float], ys: Sequence[float], x_higher: bool, y_higher: bool
) -> list[int]:
    """Indices of the non-dominated points (no NaN), sorted by x; better per ``x/y_higher``."""
    sx, sy = (1 if x_higher else -1), (1 if y_higher else -1)
    pts = [(sx * x, sy * y, i) for i, (x, y) in enumerate(zip(xs, ys, strict=True))]
    pts = [p for p in pts if not (math.isnan(p[0]) or math.isnan(p[1]))]
    front = [
        i
        for x, y, i in pts
        if not any(x2 >= x and y2 >= y and (x2 > x or y2 > y) for x2, y2, _ in pts)
    ]
    return sorted(front, key=lambda i: xs[i])


def variant_points(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per (method, variant): per key the mean over seeds, ``k_std`` and ``k_ci`` (95 % CI)."""
    import pandas as pd

    rows = []
    for (method, vid), g in runs.groupby(["method", "variant_id"], sort=False):
        row: dict[str, Any] = {"method": method, "variant_id": vid, "seeds": g["seed"].nunique()}
        for k in keys:
            v = pd.to_numeric(g[k], errors="coerce") if k in g else pd.Series([math.nan])
            row[k], row[f"{k}_std"] = float(v.mean()), float(v.std())
            row[f"{k}_ci"] = ci95(list(v.dropna())) or math.nan
        rows.append(row)
    return pd.DataFrame(rows)


MATCHED_BUDGETS = (50.0, 76.0, 90.0)  # Skip %: the budgets of S-SA's matched tables (docs)
PICKS = "large, black-edged: the picked variants, 95 % CI bars; faint: every variant"
UNSOLVED = "; hollow: a seed did not solve the task"


def tradeoff_panels(
    points: pd.DataFrame, activity: Collection[str] = ()
) -> list[tuple[str, list[str], str]]:
    """The trade-off figure's x axes, ``(key, methods drawn, label)``: those whose values vary."""
    skip, act, flops = (get_metric(k) for k in ("skip_pct", "read_skip_pct", "flops"))
    methods = method_order(points["method"])
    plain = [m for m in methods if m not in activity]
    out = []
    for key, ms, label in [
        ("skip_pct", plain, f"{skip.title}{arrow(skip.higher)} (methods that skip)"),
        ("read_skip_pct", [m for m in methods if m in activity],
         f"{act.title}{arrow(act.higher)} (activity-sparse methods)"),
        ("flops", methods, f"{flops.title} per sequence{arrow(flops.higher)}"),
    ]:  # fmt: skip
        xs = points.loc[points["method"].isin(ms), key] if key in points else points.iloc[:0, 0]
        xs = xs.to_numpy(float)
        xs = xs[np.isfinite(xs)]
        if xs.size and xs.min() != xs.max():
            out.append((key, ms, label))
    return out


def _variants(ax: Axes, points: pd.DataFrame, x: str, primary: str, higher: bool) -> None:
    solved = points["solved"] >= 1 if "solved" in points else points[primary].notna()
    for method, g in points.groupby("method", sort=False):
        st, ok = method_style(method), solved[g.index]
        kw = {"marker": st["marker"], "s": 14, "alpha": 0.35, "gid": method}
        if ok.any():
            ax.scatter(g.loc[ok, x], g.loc[ok, primary], color=st["color"], lw=0, **kw)
        if (~ok).any():
            ax.scatter(g.loc[~ok, x], g.loc[~ok, primary], facecolors="none",
                       edgecolors=st["color"], lw=0.8, **kw)  # fmt: skip
        good = g[ok]  # an unsolved run can skip anything: the front is of the solved
        better = bool(get_metric(x).higher)  # more of x is better (the registry's direction)
        front = good.iloc[pareto_front(list(good[x]), list(good[primary]), better, higher)]
        ax.plot(front[x], front[primary], color=st["color"], ls=st["linestyle"], lw=1, gid=method)


def _picks(ax: Axes, picks: pd.DataFrame, x: str, primary: str) -> None:
    for i in picks.index:
        g, st = picks.loc[[i]], method_style(picks.at[i, "method"])
        hollow = "solved" in picks and picks.at[i, "solved"] < 1
        ax.errorbar(
            g[x].to_numpy(float),
            g[primary].to_numpy(float),
            xerr=error_bars(g[x], g[f"{x}_ci"], x),
            yerr=error_bars(g[primary], g[f"{primary}_ci"], primary),
            fmt=st["marker"], color=st["color"], ms=5.5, mew=0.7, elinewidth=0.7, zorder=3,
            mec=st["color"] if hollow else "black", mfc="none" if hollow else st["color"],
            label=picks.at[i, "method"],
        )  # fmt: skip


def _fit_y(ax: Axes, points: pd.DataFrame, picks: pd.DataFrame, primary: str) -> bool:
    """Fit the y axis to the points and the picks' CIs (up to the points' span beyond).

    Logarithmic where the points span decades. Returns whether some CI runs past the axis.
    """
    ys = points[primary].to_numpy(float)
    ys = ys[np.isfinite(ys)]
    if not ys.size:
        return False
    log = spans_decades(ys)
    f = np.log10 if log else (lambda v: np.asarray(v, float))
    lo_ci, hi_ci = band(picks[primary].to_numpy(float), picks[f"{primary}_ci"], primary)
    ends = np.concatenate([lo_ci, hi_ci])
    ends = ends[np.isfinite(ends) & ((ends > 0) if log else True)]
    lo, hi = f(ys).min(), f(ys).max()
    span = hi - lo or 0.05 * (abs(hi) or 1.0)
    if ends.size:
        lo, hi = max(min(lo, f(ends).min()), lo - span), min(max(hi, f(ends).max()), hi + span)
    pad = 0.06 * (hi - lo) or 0.05 * (abs(hi) or 1.0)
    lo, hi = lo - pad, hi + pad
    if log:
        ax.set_yscale("log", nonpositive="clip")
    ax.set_ylim(*((10**lo, 10**hi) if log else (lo, hi)))
    if log:
        readable_log(ax.yaxis)
    y0, y1 = ax.get_ylim()
    return bool(
        np.any(np.nan_to_num(lo_ci, nan=y0) < y0) or np.any(np.nan_to_num(hi_ci, nan=y1) > y1)
    )


def _off_axis(ax: Axes, picks: pd.DataFrame, x: str, primary: str) -> None:
    y0, y1 = ax.get_ylim()
    lo, hi = band(picks[primary].to_numpy(float), picks[f"{primary}_ci"], primary)
    for i, down, up in zip(picks.index, lo < y0, hi > y1, strict=True):
        for edge, head in [(y0, "down")] * bool(down) + [(y1, "up")] * bool(up):
            ax.plot(picks.at[i, x], edge, marker=OFF_AXIS[head], ms=8, color=OFF_AXIS_COLOR,
                    clip_on=False, zorder=4)  # fmt: skip


def _guides(ax: Axes, targets: Sequence[float], panels: int) -> None:
    """The matched budgets: dotted guides labelled above the axis, a crowded label a line higher."""
    x0, x1 = ax.get_xlim()
    prev, up = -math.inf, False
    for t in sorted(targets):
        up = (t - prev) < 0.1 * panels * (x1 - x0) and not up
        prev = t
        ax.axvline(t, color="0.35", linestyle=":", lw=0.8, zorder=1)
        ax.annotate(f"{t:g} %", (t, 1), xycoords=ax.get_xaxis_transform(),
                    xytext=(0, 3.5 + 8 * up), textcoords="offset points", ha="center",
                    va="bottom", fontsize=7, color="0.35")  # fmt: skip


def tradeoff_figure(
    points: pd.DataFrame,
    primary: str,
    higher: bool,
    metric_title: str,
    bands: Sequence[tuple[str, float, float]] = (),
    marked: Collection[tuple[str, str]] = (),
    targets: Sequence[float] = (),
    activity: Sequence[str] = (),
) -> Figure | None:
    """Metric vs Skip %, vs activity sparsity % and vs effective FLOPs; None when none varies.

    ``points``: ``variant_points``; ``bands``: ``reference_bands``; ``marked``: the ``(method,
    variant_id)`` pairs drawn large with 95 % CI bars; ``targets``: Skip % guides; ``activity``: the
    activity-sparse methods, drawn at their activity sparsity %.
    """
    import textwrap

    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import EngFormatter, NullFormatter

    panels = tradeoff_panels(points, activity)
    if not panels:
        return None
    pairs = list(zip(points["method"], points["variant_id"], strict=True))
    picks = points[[p in set(marked) for p in pairs]]
    with figure(TWO_COLUMNS, 3.7, 1, len(panels), sharey=True, squeeze=False) as (fig, axes):
        axes = list(axes[0])
        past = _fit_y(axes[0], points, picks, primary)
        for ax, (x, methods, label) in zip(axes, panels, strict=True):
            part = points[points["method"].isin(methods)]
            _variants(ax, part, x, primary, higher)
            _picks(ax, picks[picks["method"].isin(methods)], x, primary)
            _off_axis(ax, picks[picks["method"].isin(methods)], x, primary)
            ax.set_xlabel(textwrap.fill(label, 26 if len(panels) > 2 else 60))
            if x == "flops" and spans_decades(part[x]):
                ax.set_xscale("log", nonpositive="clip")
                ax.xaxis.set_minor_formatter(NullFormatter())
                readable_log(ax.xaxis)
            elif x == "flops":  # 200k, 1.5M: no offset text ("1e6") beside the axis label
                ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            else:
                _guides(ax, targets, len(panels))
            draw_bands(ax, bands, primary, text=ax is axes[-1])
        axes[0].set_ylabel(metric_title + arrow(higher))
        hollow = "solved" in points and bool((points["solved"] < 1).any())
        y0, y1 = axes[0].get_ylim()
        marks = {  # the legend's kinds of mark: (handle, whether drawn)
            "front: a method's solved variants": (Line2D([], [], color="0.3", lw=1), True),
            "reference: mean ± 95 % CI": (Patch(color=REFERENCE_COLOR, alpha=0.3, lw=0),
                                          any(y0 <= b[1] <= y1 for b in bands)),
            "matched budget": (Line2D([], [], color="0.35", ls=":", lw=0.8),
                               bool(targets) and any(p[0] != "flops" for p in panels)),
            "CI past the axis": (Line2D([], [], ls="none", marker=OFF_AXIS["up"], ms=8,
                                        color=OFF_AXIS_COLOR), past),
        }  # fmt: skip
        methods = method_order(points["method"])
        handles = [Line2D([], [], **method_style(m)) for m in methods]
        handles += [h for h, drawn in marks.values() if drawn]
        labels = methods + [k for k, (_, drawn) in marks.items() if drawn]
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4),
                   title=PICKS + (UNSOLVED if hollow else ""))  # fmt: skip
    return fig


def budget_knobs(method: str) -> tuple[str, ...]:
    """The budget knobs ``method`` declares; none if not registered."""
    try:
        return tuple(METHODS.get(method).budget_knobs)
    except UnknownNameError:
        return ()


def variant_values(runs: pd.DataFrame, exclude: str = "") -> dict[str, dict[str, str]]:
    """Per variant id, the config values varying among its method's variants (text), knobs first."""
    out = {}
    for method, m_runs in runs.groupby("method", sort=False):
        cfgs = {vid: g["config"].iloc[0] for vid, g in m_runs.groupby("variant_id", sort=False)}
        first = next(iter(cfgs.values()))
        varying = {k for k in first if len({repr(c.get(k)) for c in cfgs.values()}) > 1}
        knobs = [k for k in budget_knobs(method) if k in varying]
        keys = [k for k in [*knobs, *sorted(varying - set(knobs))] if k != exclude]
        for vid, cfg in cfgs.items():
            out[vid] = {k: value_text(cfg.get(k)) for k in keys}
    return out


def variant_labels(runs: pd.DataFrame, exclude: str = "") -> dict[str, str]:
    """Per variant id, its ``variant_values`` as ``k=v, ...``."""
    return {
        vid: ", ".join(f"{k}={v}" for k, v in values.items())
        for vid, values in variant_values(runs, exclude).items()
    }


def budget_sweeps(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per budget knob, the runs of the methods that declare it and ran at several values of it.

    Each frame adds the knob's value (a column named by it), ``others`` (the method's other varying
    values, less those set with the knob) and ``line`` (the method and those values).
    """
    import pandas as pd

    found: dict[str, list[pd.DataFrame]] = {}
    for method, m_runs in runs.groupby("method", sort=False):
        for knob in budget_knobs(method):
            values = pd.to_numeric(m_runs["config"].map(lambda c, k=knob: c.get(k)), "coerce")
            if values.nunique() < 2:  # NaN (not set) is not a value
                continue
            part = m_runs.assign(**{knob: values})[values.notna()]
            others = variant_values(m_runs, exclude=knob)
            part["others"] = [others[v] for v in part["variant_id"]]
            by_value = part.groupby(knob)["others"]
            tied = [  # set with the knob (one value per knob value): no setting of its own
                k for k in {k for o in part["others"] for k in o}
                if by_value.agg(lambda os, k=k: len({o.get(k) for o in os})).max() == 1
            ]  # fmt: skip
            part["others"] = [{k: v for k, v in o.items() if k not in tied} for o in part["others"]]
            part["line"] = [_line(method, o) for o in part["others"]]
            found.setdefault(knob, []).append(part)
    return {knob: pd.concat(parts) for knob, parts in found.items()}


def _line(method: str, values: dict[str, str], leave: Collection[str] = ()) -> str:
    return ", ".join([method, *(f"{k}={v}" for k, v in values.items() if k not in leave)])


def log_knob(values: Sequence[float]) -> bool:
    """Whether a knob's axis is logarithmic: its values above 0 span a decade."""
    return spans_decades([v for v in values if v > 0])


def _knob_axis(ax: Axes, values: Sequence[float]) -> float:
    """Make ``ax``'s x a log axis over the values > 0, 0 at a tick past a break; returns 0's x."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    positive = sorted({v for v in values if v > 0}) or [1.0]
    low, top = positive[0], positive[-1]
    zero_x = low / 10
    zero = any(v == 0 for v in values)
    decades = range(math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(top) + 1e-9) + 1)
    few = len(positive) <= 6
    ticks = sorted({*(positive if few else [low]), *(10.0**d for d in decades)})
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator([zero_x] * zero + ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    step = 1 if few else math.ceil(len(decades) / 5)  # at most 5 decades labelled

    span = math.log10(top / (zero_x if zero else low)) + 0.8  # decades in view
    shown, prev = set(), math.inf  # from the top, a label at least 12 % of the axis apart
    for t in sorted(ticks, reverse=True):
        if prev - math.log10(t) >= 0.12 * span:
            shown.add(t)
            prev = math.log10(t)

    def label(v: float, _: Any) -> str:
        if v == zero_x:
            return "0"
        e = math.log10(v)
        if few:
            return f"{v:g}" if v in shown else ""
        if abs(e - round(e)) >= 1e-9:  # the lowest value: unless a decade stands beside it
            return f"{v:g}" if step == 1 and all(abs(e - d) > 0.5 for d in decades) else ""
        return f"$10^{{{round(e)}}}$" if (decades[-1] - round(e)) % step == 0 else ""

    ax.xaxis.set_major_formatter(FuncFormatter(label))
    ax.set_xlim((zero_x if zero else low) / 10**0.4, top * 10**0.4)
    if zero:
        brk = math.sqrt(zero_x * low)  # the break between 0 and the log scale
        ax.text(brk, 0, "//", transform=ax.get_xaxis_transform(), ha="center", va="center")
    return zero_x


MAX_LINES = 6  # lines in one panel of a budget figure
LINE_LOOKS = (  # a method's lines told apart: its colour, a dark shade, half-filled markers
    {"shade": 1.0, "fillstyle": "full", "linestyle": "-"},
    {"shade": 0.3, "fillstyle": "full", "linestyle": "--"},
    {"shade": 1.0, "fillstyle": "bottom", "linestyle": ":"},
)


def facet_keys(runs: pd.DataFrame) -> list[str]:
    """The settings a budget figure's panels split on: the learning rate, then the least crowded."""
    lines = {(m, tuple(o.items())) for m, o in zip(runs["method"], runs["others"], strict=True)}
    cand = sorted({k for _, o in lines for k, _ in o}, key=lambda k: (k != "train.lr", k))

    def crowd(keys: list[str]) -> tuple[int, int]:
        per_method: dict[str, set] = {}
        panels: dict[tuple, set] = {}
        for m, o in lines:
            rest = tuple(kv for kv in o if kv[0] not in keys)
            per_method.setdefault(m, set()).add(rest)
            panels.setdefault(tuple(v for k, v in o if k in keys), set()).add((m, rest))
        worst = max(len(v) for v in per_method.values())
        return max(worst - len(LINE_LOOKS), 0) + max(
            max(map(len, panels.values())) - MAX_LINES, 0
        ), worst

    keys = cand[:1] if cand[:1] == ["train.lr"] else []
    while crowd(keys)[0] and len(keys) < len(cand):
        keys.append(min((k for k in cand if k not in keys), key=lambda k: crowd([*keys, k])))
    return keys


def swept_lines(runs: pd.DataFrame, knob: str) -> pd.DataFrame:
    """The runs a budget figure draws: knob >= 0, of settings run at two values of it or more."""
    runs = runs[runs[knob] >= 0]
    if "others" not in runs:  # one setting per method beside the knob
        runs = runs.assign(others=[{}] * len(runs))
    setting = [repr((m, o)) for m, o in zip(runs["method"], runs["others"], strict=True)]
    return runs[runs.groupby(setting)[knob].transform("nunique").to_numpy() > 1]


def panel_grid(panels: Sequence[tuple]) -> tuple[dict[tuple, tuple[int, int]], int]:
    """Where each panel of a budget figure goes: ``({panel: (row, col)}, columns)``."""
    uniq = sorted(set(panels), key=lambda p: [num_first(v) for v in (*p[1:], *p[:1])])
    firsts = sorted({p[0] for p in uniq if p}, key=num_first)
    if 1 < len(firsts) <= 4:
        rests = list(dict.fromkeys(p[1:] for p in uniq))
        return {p: (rests.index(p[1:]), firsts.index(p[0])) for p in uniq}, len(firsts)
    ncol = max(min(len(uniq), 3 if len(uniq) <= 9 else 4), 1)
    return {p: divmod(k, ncol) for k, p in enumerate(uniq)}, ncol


def budget_rows(runs: pd.DataFrame, knob: str, primary: str) -> list[tuple[str, list[str]]]:
    """The measures a budget figure draws, ``(key, methods)``: those that vary."""
    methods = method_order(runs["method"])
    activity = [
        m for m in methods if "record" in runs
        and budget_measure(list(runs.loc[runs["method"] == m, "record"]), "test") != "skip_pct"
    ]  # fmt: skip
    rows = []
    for key, ms in [(primary, methods), ("skip_pct", [m for m in methods if m not in activity]),
                    ("read_skip_pct", activity)]:  # fmt: skip
        part = runs[runs["method"].isin(ms)]
        v = (  # the means drawn: per line and knob value
            part.groupby(["line", knob])[key].mean().to_numpy(float) if key in part else []
        )
        v = np.asarray(v, float)[np.isfinite(np.asarray(v, float))]
        if ms and v.size and v.min() != v.max():
            rows.append((key, ms))
    return rows


def _line_looks(runs: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Each line's style: its method's; a second darker, dashed; a third half-filled, dotted."""
    from matplotlib.colors import to_hex, to_rgb

    out: dict[str, dict[str, Any]] = {}
    for method in method_order(runs["method"]):
        st = method_style(method)
        for j, line in enumerate(dict.fromkeys(runs.loc[runs["method"] == method, "line"])):
            look = LINE_LOOKS[j % len(LINE_LOOKS)]
            colour = to_hex(np.asarray(to_rgb(st["color"])) * look["shade"])
            out[line] = {**st, "color": colour, "linestyle": look["linestyle"],
                         "fillstyle": look["fillstyle"]}  # fmt: skip
    return out


def _budget_line(
    ax: Axes, g: pd.DataFrame, knob: str, y: str, st: dict, zero_x: float | None
) -> None:
    s = g.groupby(knob)[y].agg(["mean", "std"]).sort_index()
    x, m = s.index.to_numpy(float), s["mean"].to_numpy(float)
    lo, hi = band(m, s["std"].to_numpy(float), y)
    drawn = x > 0 if zero_x is not None else np.ones_like(x, dtype=bool)
    ax.plot(x[drawn], m[drawn], gid=g["method"].iloc[0], **st)
    ax.fill_between(x[drawn], lo[drawn], hi[drawn], color=st["color"], alpha=0.15, lw=0)
    if not drawn.all():  # 0 on a log axis
        z = ~drawn
        ax.errorbar([zero_x], m[z], yerr=[m[z] - lo[z], hi[z] - m[z]], fmt=st["marker"],
                    color=st["color"], fillstyle=st["fillstyle"],
                    label=g["method"].iloc[0])  # fmt: skip
        if drawn.any():
            ax.plot([zero_x, x[drawn][0]], [m[z][0], m[drawn][0]], color=st["color"],
                    linestyle=":", lw=0.8)  # fmt: skip


def budget_figure(
    runs: pd.DataFrame, knob: str, primary: str, metric_title: str, higher: bool | None = None
) -> Figure | None:
    """Metric and sparsity vs a budget knob (``runs``: ``budget_sweeps``'s), small multiples.

    None when nothing varies; ``higher``: the metric's direction (an arrow in the label), if known.
    """
    import textwrap

    from matplotlib.lines import Line2D

    runs = swept_lines(runs, knob)
    rows = budget_rows(runs, knob, primary)
    if not rows:
        return None
    facets = facet_keys(runs)
    runs = runs.assign(
        panel=[tuple(o.get(k, "") for k in facets) for o in runs["others"]],
        line=[_line(m, o, facets) for m, o in zip(runs["method"], runs["others"], strict=True)],
    )
    looks = _line_looks(runs)
    cells, ncol = panel_grid(list(runs["panel"]))
    nrow = (max(r for r, _ in cells.values()) + 1) * len(rows)
    log = log_knob(list(runs[knob]))
    per_row = 1.9 if nrow * ncol <= 2 else 1.15 if nrow <= 6 else 0.95
    height = 0.5 + per_row * nrow + 0.2 * math.ceil(len(looks) / 2)
    kw = {"squeeze": False, "sharex": True, "sharey": "row"}
    with figure(TWO_COLUMNS, height, nrow, ncol, **kw) as (fig, grid):
        for ax in grid.flat:
            ax.set_visible(False)
        for panel, (row, col) in cells.items():
            left = col == min(c for r, c in cells.values() if r == row)
            for r, (y, methods) in enumerate(rows):
                ax = grid[row * len(rows) + r, col]
                ax.set_visible(True)
                zero_x = _knob_axis(ax, list(runs[knob])) if log else None
                part = runs[(runs["panel"] == panel) & runs["method"].isin(methods)]
                for line, g in part.groupby("line", sort=False):
                    zero = zero_x if (g[knob] == 0).any() else None
                    _budget_line(ax, g, knob, y, looks[line], zero)
                metric = get_metric(y)
                label = metric_title + arrow(higher) if y == primary else None
                label = label or metric.title + arrow(metric.higher)
                ax.set_ylabel(textwrap.fill(label, 24) if left else "")
                if not metric.percent and spans_decades(runs[y]):
                    ax.set_yscale("log", nonpositive="clip")
                    ax.set_ylim(*ax.get_ylim())
                    readable_log(ax.yaxis)
                ax.set_xlabel(knob if r == len(rows) - 1 else "")
                ax.xaxis.set_tick_params(labelbottom=r == len(rows) - 1)
                if r == 0 and panel:
                    title = ", ".join(f"{k}={v}" for k, v in zip(facets, panel, strict=True))
                    ax.set_title(textwrap.fill(title, 34 if ncol < 4 else 26), loc="left")
        handles = [Line2D([], [], **st) for st in looks.values()]
        ncols = max(min(len(looks), 110 // (max(map(len, looks)) + 8)), 1)  # within 7 in
        fig.legend(handles, list(looks), loc="outside lower center", ncols=ncols)
    return fig


def mask_caption(choice: MaskChoice, primary: str, rule: str = "") -> str:
    """The update patterns' caption: which rule picked each panel's variant, who is left out."""
    at = choice.table_at_chance
    late = f" (the table's pick is at chance for {', '.join(at)})" if at else ""
    heads = {
        "table": f"the variant the table's rule{f' ({rule})' if rule else ''} picked: ",
        "nearest": f"the variant with test Skip % nearest {choice.target:.1f} %: ",
    }
    parts = [
        heads[how] + names + (late if how == "nearest" else "")
        for how in heads
        if (names := ", ".join(m for m, (_, h) in choice.picks.items() if h == how))
    ]
    if choice.at_chance:
        parts.append(
            f"not drawn, every variant at chance on validation: {', '.join(choice.at_chance)}"
        )
    chance = ""
    if choice.chance is not None:
        chance = (
            f" A variant whose mean validation {primary} is at most "
            f"{choice.chance + CHANCE_MARGIN:.1f} % (the majority class's share, "
            f"{choice.chance:.1f} %, + {CHANCE_MARGIN:g} point) is at chance and never drawn, "
            "nor is a seed at chance."
        )
    return (
        "Update pattern of the first test sequence, per method "
        + "; ".join(parts)
        + f".{chance} Units × time, black = update (grey: a pixel of several units, their share "
        "updated); depth-adaptive methods: micro-steps n_t,i per unit (colour); activity-sparse "
        "methods (every unit updated): the columns each step read, input columns (in) above "
        "state columns (state). Each title gives the variant's test Skip % (its table row's "
        "mean over seeds); a method that skips is drawn even where this sequence skipped "
        "nothing (its title says so). Named above the panels, not drawn: the methods at 0 % "
        "Skip whose sequence updated every unit, read every column (and ran every unit at one "
        "depth)."
    )


def tradeoff(
    runs: pd.DataFrame,
    primary: str,
    higher: bool,
    title: str,
    bands: Sequence[tuple[str, float, float]],
    labels: dict[str, str],
    selected: dict[str, str] | None,
    rule: str,
) -> tuple[str, Figure | None]:
    """The trade-off figure of ``report_figures`` and its caption (``("", None)``: no figure).

    The budget targets are the rule's own and those of ``MATCHED_BUDGETS`` at least 5 points from
    it, up to 5 points past the highest sparsity; marked: the table's picks and, per target, the
    variant ``val-skip-nearest`` picks (``best-val``'s where there is no target).
    """
    keys = [primary, "skip_pct", "read_skip_pct", "flops", "solved"]
    points = variant_points(runs, [k for k in keys if k in runs])
    activity = [
        m
        for m in method_order(runs["method"])
        if budget_measure(list(runs.loc[runs["method"] == m, "record"]), "test") != "skip_pct"
    ]
    at = points["method"].isin(activity)
    sparsity = points["skip_pct"].where(~at, points.get("read_skip_pct", points["skip_pct"]))
    own = [t for t in [parse_rule(rule).target if rule else None] if t is not None]
    # the other matched budgets only in a matched-budget report (a rule with a target)
    targets = own + [t for t in MATCHED_BUDGETS if own and all(abs(t - u) >= 5 for u in own)]
    targets = sorted(t for t in targets if t <= sparsity.max() + 5)  # where some skip
    marked = set((selected or {}).items())
    for r in [Rule("val-skip-nearest", t) for t in targets] or [Rule("best-val")]:
        marked |= {(rec["method"], rec["variant_id"]) for rec in select(list(runs["record"]), r)[0]}
    fig = tradeoff_figure(points, primary, higher, title, bands, marked, targets, activity)
    if fig is None:
        return "", None
    unsolved = points[points["solved"] < 1] if "solved" in points else points.iloc[:0]
    named = [f"{m} ({labels[v] or v})" for m, v in unsolved[["method", "variant_id"]].to_numpy()]
    budgets = ", ".join(f"{t:g}" for t in targets)
    picks = "the variant best-val picks"
    if targets:
        picks = f"the variant val-skip-nearest picks at each matched budget ({budgets} %, dotted)"
    names = {"skip_pct": "Skip %", "read_skip_pct": "activity sparsity %",
             "flops": "effective FLOPs per sequence"}  # fmt: skip
    drawn = [names[k] for k, _, _ in tradeoff_panels(points, activity)]
    caption = (
        f"{title} vs {' and vs '.join(drawn)}, one panel each, one point per variant (mean "
        f"over seeds; faint: every variant). Lines: each method's Pareto front of its solved "
        f"variants. Large, black-edged, with 95 % CI error bars (Student's t; a grey arrow "
        f"where one runs past the axis): {picks}"
        + (f" and the table's pick ({rule})" if selected else "")
        + (f". Activity-sparse methods ({', '.join(activity)}) update every unit (Skip 0 %): "
           "they stand at their activity sparsity % (the share of weight columns not read), "
           "a measure of their own, in its own panel" if activity else "")
        + ". A panel whose x values are all one value is not drawn"
        + (f". Hollow: variants with a run that did not solve the task: {'; '.join(named)}"
           if named else "")
        + (f". Grey: the reference predictors ({', '.join(b[0] for b in bands)}), mean ± 95 % "
           "CI, a band within the y range, an arrow at its edge outside it" if bands else "")
        + ". The legend under the panels says what each kind of mark means."
    )  # fmt: skip
    return caption, fig


def budget_caption(swept: pd.DataFrame, knob: str, primary: str, title: str) -> str:
    """The caption of ``budget_figure(swept, knob, ...)``."""
    swept = swept_lines(swept, knob)
    drawn = budget_rows(swept, knob, primary)
    rows = [title if k == primary else get_metric(k).title for k, _ in drawn]
    facets = facet_keys(swept)
    zero = "; 0 left of the break" if log_knob(swept[knob]) and (swept[knob] == 0).any() else ""
    activity = [m for k, ms in drawn if k == "read_skip_pct" for m in ms]
    return (
        f"{' and '.join(rows)} vs {knob}, the budget knob of "
        f"{', '.join(method_order(swept['method']))} (mean ± std over seeds{zero})"
        + (f", one panel per {' and '.join(facets)}" if facets else "")
        + (f"; {', '.join(activity)}: every unit updated (Skip 0 %), their activity sparsity "
           "drawn" if activity else "")
        + ". A method's lines are in its colour; its second a dark shade (dashed), its third "
        "with half-filled markers (dotted). Settings run at one value of the knob alone are "
        "not drawn (the trade-off figure shows them)."
    )  # fmt: skip


def depth_hists(runs: pd.DataFrame, choice: MaskChoice) -> dict[str, dict[str, int]]:
    """Per depth method, its depths' counts over the seeds of the variant its masks show."""
    hists: dict[str, dict[str, int]] = {}
    for method, (vid, _) in choice.picks.items():
        for rec in runs.loc[runs["variant_id"] == vid, "record"]:
            for r, c in ((rec.get("trace") or {}).get("depth_hist") or {}).items():
                h = hists.setdefault(method, {})
                h[r] = h.get(r, 0) + c
    return hists


def report_figures(
    runs: pd.DataFrame,
    primary: str,
    higher: bool,
    title: str,
    stem: Path,
    selected: dict[str, str] | None = None,
    rule: str = "",
) -> list[tuple[str, list[Path]]]:
    """Draw and save the figures of one (task, preset); ``(caption, [png, pdf])`` per figure.

    ``runs``: ``runs_frame``'s rows; ``stem``: the path prefix, ``<stem>_<kind>.png`` / ``.pdf``;
    ``selected``: ``{method: variant_id}`` that ``rule`` picked (marked, shown in the masks).
    """
    out = []

    def keep(caption: str, fig: Figure | None, kind: str) -> None:
        if fig is not None:
            out.append((caption, save(fig, stem.with_name(f"{stem.name}_{kind}"))))

    labels = variant_labels(runs)
    bands = reference_bands(runs, primary, labels)
    runs = runs[[role(m) == "method" for m in runs["method"]]]
    if runs.empty:  # reference predictors alone: no method to draw
        return out
    keep(*tradeoff(runs, primary, higher, title, bands, labels, selected, rule), "tradeoff")
    choice = mask_choice(runs, None, selected)
    if mask_panels(choice.records, choice.skip)[0]:  # a note on dense methods alone is no figure
        picked = {m: labels[v] for m, (v, _) in choice.picks.items()}
        fig = mask_figure(choice.records, picked, choice.skip)
        keep(mask_caption(choice, title, rule), fig, "masks")
    for knob, swept in budget_sweeps(runs).items():
        if (fig := budget_figure(swept, knob, primary, title, higher)) is not None:
            caption = budget_caption(swept, knob, primary, title)
            keep(caption, fig, f"budget-{knob.replace('_', '-')}")
    records = list(runs["record"])
    if any(r.get("history") for r in records):
        keep(
            f"Learning curves: training loss and validation {title} per epoch (mean ± std over "
            "seeds; on a log axis the geometric mean times / over the geometric std), per method "
            "the variant with the best mean validation value. A linear axis is fitted to the "
            "epochs past the first fifth: an earlier value may run past it.",
            curves_figure(records),
            "curves",
        )
    hists = depth_hists(runs, choice)
    if len({r for h in hists.values() for r, c in h.items() if c}) > 1:  # one depth: no figure
        keep(
            "Share of the test steps executed at each depth R_t, over the seeds of the variant "
            "each depth method's update pattern shows (as in the masks figure).",
            depth_figure(hists),
            "depth",
        )
    return out
