"""Figures of the paper-style reports, drawn from run records and saved as PNG and PDF.

What they show follows the seed papers' figures:

- ``tradeoff_figure``: the primary metric vs Skip % and vs effective FLOPs, every method variant
  a faint point (mean over seeds), each method's Pareto front a line, the variant picked at each
  matched budget (``MATCHED_BUDGETS``, vertical guides) marked with its 95 % CI as error bars,
  unsolved variants hollow; the y axis fitted to the methods' points, each reference predictor
  (``ref:NAME``, which has neither Skip % nor FLOPs) a labelled band within it, its mean ± 95 %
  CI over seeds (``reference_bands``), or an arrow at its edge. The other figures leave the
  references out.
- ``budget_figure``: metric and Skip % vs a budget knob (S-SA Fig. 4 for λ), mean ± std over
  seeds. A method names its budget knobs (``harness.components.method.Method.budget_knobs``: a
  penalty's weight such as ``lam``, a skip probability, a threshold); a knob gets a figure when a
  method that declares it was run at several values of it. Where its values span decades the axis is
  logarithmic, and 0 has its own tick left of a break.
- the update patterns and the depth histogram (``harness.reporting.patterns``) and the learning
  curves (``harness.reporting.curves``).

Which figures a report gets follows from its records and the methods' declared knobs alone: masks
where a method's trace holds them, a budget figure where a method was run at several values of a
knob it declares, curves where records hold a history, the depth histogram where traces hold one;
no method or task is singled out by name. Sizes, palette and per-method styles:
``harness.reporting.figstyle``; titles, directions and percentages: the metric registry
(``harness.components.metrics``).

matplotlib and pandas are imported inside the functions (``import harness`` stays light).
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
    LINESTYLES,
    TWO_COLUMNS,
    band,
    error_bars,
    figure,
    legend,
    legend_height,
    method_order,
    method_style,
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
from harness.reporting.references import draw_bands, reference_bands
from harness.reporting.text import arrow, ci95, value_text

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["report_figures", "write_curves"]  # write_curves: importable from here, as before


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


def variant_points(runs: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One row per (method, variant) of ``runs``: per key the mean over seeds, its std and CI.

    Args:
        runs: one row per run with ``method``, ``variant_id``, ``seed`` and the ``keys``.
        keys: the measures to aggregate.

    Returns:
        Columns ``method``, ``variant_id``, ``seeds`` and per key ``k``, ``k_std`` (sample std,
        NaN for one seed) and ``k_ci`` (95 % CI half-width, Student's t; NaN for one seed).
    """
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
DASHES = {"-": "", "--": (4, 1.5), ":": (1, 1.5), "-.": (4, 1.5, 1, 1.5)}  # seaborn's dashes


def tradeoff_figure(
    points: pd.DataFrame,
    primary: str,
    higher: bool,
    metric_title: str,
    bands: Sequence[tuple[str, float, float]] = (),
    marked: Collection[tuple[str, str]] = (),
    targets: Sequence[float] = (),
    activity: Sequence[str] = (),
) -> Figure:
    """Metric vs Skip % (left) and vs effective FLOPs (right): per method its front of variants.

    Every variant is a faint point; each method's Pareto front (``pareto_front``, over its
    solved variants) is a line in its style, and the ``marked`` variants (those picked at a
    matched budget, or by the table's rule) are drawn large, black-edged, with 95 % CI error
    bars. A variant some of whose seeds did not solve the task (mean ``solved`` below 1, where
    recorded) is hollow. The y axis spans the methods' points; reference predictors are bands
    within it, arrows at its edge outside it (``draw_bands``), named right of the FLOPs panel.
    ``targets`` are vertical guides on the Skip % panel. One legend, under the panels. Colours,
    markers and dashes: ``method_style``, through seaborn's hue and style semantics.

    Args:
        points: one row per variant (``variant_points``) with ``method``, ``variant_id``,
            ``primary``, ``skip_pct``, ``flops`` and their ``_ci`` columns (``solved``: optional).
        primary: the primary metric's key (its column in ``points``).
        higher: whether higher values of the metric are better (sets the Pareto fronts).
        metric_title: axis label of the metric.
        bands: the reference predictors (``reference_bands``).
        marked: ``(method, variant_id)`` pairs drawn large with error bars.
        targets: Skip % budgets drawn as labelled vertical guides.
        activity: methods whose ``skip_pct`` column holds their activity sparsity % (named in
            the x label).
    """
    import pandas as pd
    import seaborn as sns
    from matplotlib.ticker import EngFormatter, NullFormatter

    skip, flops = get_metric("skip_pct"), get_metric("flops")
    also = f" (activity sparsity %: {', '.join(activity)})" if len(activity) else ""
    xs = [
        ("skip_pct", skip.higher, skip.title + also + arrow(skip.higher)),
        ("flops", flops.higher, f"{flops.title} per sequence{arrow(flops.higher)}"),
    ]
    methods = method_order(points["method"])
    styles = {m: method_style(m) for m in methods}
    semantics = {
        "hue": "method",
        "hue_order": methods,
        "palette": {m: s["color"] for m, s in styles.items()},
        "style": "method",
        "style_order": methods,
        "legend": False,
    }
    solved = points["solved"] if "solved" in points else pd.Series(1.0, index=points.index)
    hollow = solved < 1
    is_marked = pd.Series(
        list(zip(points["method"], points["variant_id"], strict=True)), index=points.index
    ).isin(set(marked))
    with figure(TWO_COLUMNS, 3.4, 1, 2, sharey=True) as (fig, axes):
        for ax, (x, x_higher, xlabel) in zip(axes, xs, strict=True):
            markers = {m: s["marker"] for m, s in styles.items()}
            for part in (points[~hollow], points[hollow]):
                if len(part):
                    kw = {"alpha": 0.35, "s": 14, "linewidth": 0}
                    sns.scatterplot(part, x=x, y=primary, markers=markers, ax=ax, **kw, **semantics)
            if hollow.any():  # the last collection: the unsolved variants, hollow
                dots = ax.collections[-1]
                dots.set_edgecolors(dots.get_facecolors())
                dots.set_facecolors("none")
                dots.set_linewidth(0.8)
            fronts = [  # of the solved variants: an unsolved run can skip anything
                g.iloc[pareto_front(list(g[x]), list(g[primary]), x_higher, higher)]
                for _, g in points[~hollow].groupby("method", sort=False)
            ]
            dashes = {m: DASHES[s["linestyle"]] for m, s in styles.items()}
            if fronts:
                kw = {"dashes": dashes, "estimator": None, "sort": True, "lw": 1}
                sns.lineplot(pd.concat(fronts), x=x, y=primary, ax=ax, **kw, **semantics)
            for i in points.index[is_marked]:  # the picks: large, black-edged, CI error bars
                g, st = points.loc[[i]], styles[points.at[i, "method"]]
                ax.errorbar(
                    g[x].to_numpy(float),
                    g[primary].to_numpy(float),
                    xerr=error_bars(g[x], g[f"{x}_ci"], x),
                    yerr=error_bars(g[primary], g[f"{primary}_ci"], primary),
                    fmt=st["marker"],
                    color=st["color"],
                    ms=5.5,
                    mew=0.7,
                    elinewidth=0.7,
                    zorder=3,
                    mec=st["color"] if hollow[i] else "black",
                    mfc="none" if hollow[i] else st["color"],
                    label=points.at[i, "method"],
                )
            ax.set_xlabel(xlabel)
            if x == "flops" and spans_decades(points[x]):
                ax.set_xscale("log", nonpositive="clip")
                ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: never crowded
            elif x == "flops":  # 200k, 1.5M: no offset text ("1e6") beside the axis label
                ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        axes[0].set_ylabel(metric_title + arrow(higher))
        axes[1].set_ylabel("")
        ys = points[primary].to_numpy(float)
        ys = ys[np.isfinite(ys)]
        log = spans_decades(ys)
        if log:
            axes[0].set_yscale("log", nonpositive="clip")
        if ys.size:
            lo, hi = (np.log10(ys) if log else ys).min(), (np.log10(ys) if log else ys).max()
            pad = 0.06 * (hi - lo) or 0.05 * (abs(hi) or 1.0)
            lo, hi = lo - pad, hi + pad
            axes[0].set_ylim(*((10**lo, 10**hi) if log else (lo, hi)))
        y0, y1 = axes[0].get_ylim()
        picks = points[is_marked]
        lo_ci, hi_ci = band(picks[primary], picks[f"{primary}_ci"], primary)
        for i, down, up in zip(picks.index, lo_ci < y0, hi_ci > y1, strict=True):
            colour = styles[picks.at[i, "method"]]["color"]  # a CI past the axis: an arrowhead
            edges = [(y0, "v")] * bool(down) + [(y1, "^")] * bool(up)  # where it leaves it
            for ax, (x, _, _) in zip(axes, xs, strict=True):
                for edge, head in edges:
                    ax.plot(picks.at[i, x], edge, head, ms=4, color=colour, clip_on=False)
        for t in targets:
            axes[0].axvline(t, color="0.35", linestyle=":", lw=0.8, zorder=1)
            axes[0].annotate(  # above the arrowheads of CIs that leave the axis at its top
                f"{t:g} %",
                (t, 1),
                xycoords=axes[0].get_xaxis_transform(),
                xytext=(0, 3.5),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                color="0.35",
            )
        for ax in axes:
            draw_bands(ax, bands, primary, text=ax is axes[1])
        legend(fig, methods, below=True)
    return fig


def budget_knobs(method: str) -> tuple[str, ...]:
    """The budget knobs ``method`` declares (``Method.budget_knobs``); none if not registered."""
    try:
        return tuple(METHODS.get(method).budget_knobs)
    except UnknownNameError:
        return ()


def variant_labels(runs: pd.DataFrame, exclude: str = "") -> dict[str, str]:
    """Per variant id, the config values that vary among its method's variants (``k=v, ...``).

    The method's budget knobs come first, in their declared order, the other values after them
    by name; ``exclude`` (the knob a budget figure plots along x) is left out.
    """
    out = {}
    for method, m_runs in runs.groupby("method", sort=False):
        cfgs = {vid: g["config"].iloc[0] for vid, g in m_runs.groupby("variant_id", sort=False)}
        first = next(iter(cfgs.values()))
        varying = {k for k in first if len({repr(c.get(k)) for c in cfgs.values()}) > 1}
        knobs = [k for k in budget_knobs(method) if k in varying]
        keys = [k for k in [*knobs, *sorted(varying - set(knobs))] if k != exclude]
        for vid, cfg in cfgs.items():
            out[vid] = ", ".join(f"{k}={value_text(cfg.get(k))}" for k in keys)
    return out


def budget_sweeps(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per budget knob, the runs of the methods that declare it and ran at several values of it.

    Args:
        runs: one row per run (``harness.reporting.runs.runs_frame``) with ``config``.

    Returns:
        ``{knob: runs}`` in the order the knobs first appear; each frame adds a column named by
        the knob (its value as a float) and ``line`` (the method and its other varying values).
    """
    import pandas as pd

    found: dict[str, list[pd.DataFrame]] = {}
    for method, m_runs in runs.groupby("method", sort=False):
        for knob in budget_knobs(method):
            values = pd.to_numeric(m_runs["config"].map(lambda c, k=knob: c.get(k)), "coerce")
            if values.nunique() < 2:  # NaN (not set) is not a value
                continue
            part = m_runs.assign(**{knob: values})[values.notna()]
            labels = variant_labels(m_runs, exclude=knob)
            part["line"] = [
                ", ".join(p for p in (method, labels[v]) if p) for v in part["variant_id"]
            ]
            found.setdefault(knob, []).append(part)
    return {knob: pd.concat(parts) for knob, parts in found.items()}


def log_knob(values: Sequence[float]) -> bool:
    """Whether a knob's axis is logarithmic: its values above 0 span a factor of 10 or more."""
    return spans_decades([v for v in values if v > 0])


def _knob_axis(ax: Axes, values: Sequence[float]) -> float:
    """Make ``ax``'s x axis a log axis over the values > 0, 0 at its own tick past a break.

    Every decade has a tick; over more than five decades only every second (third, ...) one,
    counted from the top, is labelled.

    Returns:
        The x position where 0 is drawn (a decade below the smallest value > 0).
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    positive = [v for v in values if v > 0] or [1.0]
    low, top = min(positive), max(positive)
    zero_x = low / 10
    decades = range(math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(top) + 1e-9) + 1)
    ticks = [zero_x, *sorted({low, *(10.0**d for d in decades)})]
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())

    step = math.ceil(len(decades) / 5)  # at most 5 decades labelled: labels never overlap

    def label(v: float, _: Any) -> str:
        if v == zero_x:
            return "0"
        e = math.log10(v)
        if abs(e - round(e)) >= 1e-9:  # the lowest value: unless a decade stands beside it
            return f"{v:g}" if step == 1 and all(abs(e - d) > 0.5 for d in decades) else ""
        return f"$10^{{{round(e)}}}$" if (decades[-1] - round(e)) % step == 0 else ""

    ax.xaxis.set_major_formatter(FuncFormatter(label))
    ax.set_xlim(zero_x / 10**0.4, top * 10**0.4)
    brk = math.sqrt(zero_x * low)  # the break between 0 and the log scale
    ax.text(brk, 0, "//", transform=ax.get_xaxis_transform(), ha="center", va="center")
    return zero_x


def _line_styles(runs: pd.DataFrame) -> dict[str, dict[str, str]]:
    """A style per ``line`` of ``runs``: its method's; further lines of a method, other dashes."""
    out: dict[str, dict[str, str]] = {}
    for method in method_order(runs["method"]):
        st = method_style(method)
        lines = list(dict.fromkeys(runs.loc[runs["method"] == method, "line"]))
        for k, line in enumerate(lines):
            ls = LINESTYLES[(LINESTYLES.index(st["linestyle"]) + k) % len(LINESTYLES)]
            out[line] = {**st, "linestyle": ls}
    return out


def budget_figure(
    runs: pd.DataFrame, knob: str, primary: str, metric_title: str, higher: bool | None = None
) -> Figure:
    """Metric and Skip % vs a budget knob, mean ± std over seeds, one line per setting.

    Where the knob's values above 0 span decades (``log_knob``) the axis is logarithmic over
    them and 0 is drawn at its own tick ("0") a decade to the left, past a break mark, joined to
    the rest by a dotted segment; otherwise it is linear. Negative values are left out.

    Args:
        runs: one row per run with ``method``, ``line`` (method and the other varying values),
            the knob's value in the column named ``knob``, ``primary`` and ``skip_pct``.
        knob: the budget knob (the x axis is labelled with its name).
        primary: the primary metric's key (its column in ``runs``).
        metric_title: axis label of the metric.
        higher: the metric's direction (an arrow in the label), if known.
    """
    runs = runs[runs[knob] >= 0]
    styles = _line_styles(runs)
    log = log_knob(list(runs[knob]))
    skip = get_metric("skip_pct")
    with figure(TWO_COLUMNS, max(2.6, legend_height(len(styles))), 1, 2) as (fig, axes):
        panels = [(primary, metric_title + arrow(higher)), ("skip_pct", skip.title + arrow(True))]
        for ax, (y, title) in zip(axes, panels, strict=True):
            zero_x = _knob_axis(ax, list(runs[knob])) if log else None
            for line, st in styles.items():
                s = runs[runs["line"] == line].groupby(knob)[y].agg(["mean", "std"]).sort_index()
                x = s.index.to_numpy(float)
                m = s["mean"].to_numpy(float)
                lo, hi = band(m, s["std"].to_numpy(float), y)
                drawn = x > 0 if log else np.ones_like(x, dtype=bool)
                ax.plot(x[drawn], m[drawn], label=line, **st)
                ax.fill_between(x[drawn], lo[drawn], hi[drawn], color=st["color"], alpha=0.2, lw=0)
                if not drawn.all():  # 0 on a log axis
                    z = ~drawn
                    ax.errorbar(
                        [zero_x],
                        m[z],
                        yerr=[m[z] - lo[z], hi[z] - m[z]],
                        fmt=st["marker"],
                        color=st["color"],
                    )
                    if drawn.any():
                        ax.plot(
                            [zero_x, x[drawn][0]],
                            [m[z][0], m[drawn][0]],
                            color=st["color"],
                            linestyle=":",
                            lw=0.8,
                        )
            ax.set_xlabel(knob)
            ax.set_ylabel(title)
            if not get_metric(y).percent and spans_decades(runs[y]):
                ax.set_yscale("log", nonpositive="clip")
        handles = [h for h in axes[0].get_lines() if h.get_label() in styles]
        fig.legend(handles, [h.get_label() for h in handles], loc="outside right upper")
    return fig


def mask_caption(choice: MaskChoice, primary: str, rule: str = "") -> str:
    """The update patterns' caption: which rule picked each panel's variant, who is left out."""

    def names(how: str) -> str:
        return ", ".join(m for m, (_, h) in choice.picks.items() if h == how)

    parts = []
    if names("table"):
        parts.append(
            f"the variant the table's rule{f' ({rule})' if rule else ''} picked: {names('table')}"
        )
    if names("nearest"):
        parts.append(
            f"the variant with test Skip % nearest {choice.target:.1f} %: {names('nearest')}"
            + (
                f" (the table's pick is at chance for {', '.join(choice.table_at_chance)})"
                if choice.table_at_chance
                else ""
            )
        )
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
        + f".{chance} Units × time, black = update; depth-adaptive methods: micro-steps n_t,i "
        "per unit (colour); activity-sparse methods (every unit updated): the columns each step "
        "read, input columns (in) above state columns (state)."
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
) -> tuple[str, Figure]:
    """The trade-off figure of ``report_figures`` and its caption.

    Activity-sparse methods (``budget_measure``) stand at their activity sparsity % on the Skip
    % axis; in a matched-budget report (a rule with a Skip % target) the budget targets are the
    rule's own and those of ``MATCHED_BUDGETS`` at least 5 points from it, up to 5 points past
    the highest Skip %; marked: the table's picks and, per
    target, the variant ``val-skip-nearest`` picks (``best-val``'s where no target is left).
    """
    keys = [primary, "skip_pct", "read_skip_pct", "flops", "solved"]
    points = variant_points(runs, [k for k in keys if k in runs])
    activity = [
        m
        for m in method_order(runs["method"])
        if budget_measure(list(runs.loc[runs["method"] == m, "record"]), "test") != "skip_pct"
    ]
    at = points["method"].isin(activity)
    for c in ("skip_pct", "skip_pct_ci") if activity else ():  # at their activity sparsity
        points.loc[at, c] = points.loc[at, "read_" + c]
    own = [t for t in [parse_rule(rule).target if rule else None] if t is not None]
    # the other matched budgets only in a matched-budget report (a rule with a target)
    targets = own + [t for t in MATCHED_BUDGETS if own and all(abs(t - u) >= 5 for u in own)]
    targets = sorted(t for t in targets if t <= points["skip_pct"].max() + 5)  # where some skip
    marked = set((selected or {}).items())
    for r in [Rule("val-skip-nearest", t) for t in targets] or [Rule("best-val")]:
        marked |= {(rec["method"], rec["variant_id"]) for rec in select(list(runs["record"]), r)[0]}
    unsolved = points[points["solved"] < 1] if "solved" in points else points.iloc[:0]
    named = [f"{m} ({labels[v] or v})" for m, v in unsolved[["method", "variant_id"]].to_numpy()]
    budgets = ", ".join(f"{t:g}" for t in targets)
    picks = "the variant best-val picks"
    if targets:
        picks = (
            f"the variant val-skip-nearest picks at each matched budget ({budgets} % Skip, dotted)"
        )
    caption = (
        f"{title} vs Skip % and vs effective FLOPs per sequence, one point per variant (mean over "
        f"seeds; faint: every variant). Lines: each method's Pareto front of its solved variants. "
        f"Large, black-edged, with 95 % CI error bars (Student's t; an arrowhead where one runs "
        f"past the axis): {picks}"
        + (f" and the table's pick ({rule})" if selected else "")
        + (f"; {', '.join(activity)} at their activity sparsity %" if activity else "")
        + (f". Hollow: variants with a run that did not solve the task: {'; '.join(named)}"
           if named else "")
        + (f". Grey: the reference predictors ({', '.join(b[0] for b in bands)}), mean ± 95 % "
           "CI, a band within the y range, an arrow at its edge outside it" if bands else "")
        + "."
    )  # fmt: skip
    return (
        caption,
        tradeoff_figure(points, primary, higher, title, bands, marked, targets, activity),
    )


def report_figures(
    runs: pd.DataFrame,
    primary: str,
    higher: bool,
    title: str,
    stem: Path,
    selected: dict[str, str] | None = None,
    rule: str = "",
) -> list[tuple[str, list[Path]]]:
    """Draw and save the figures that apply to one (task, preset) of ``harness.reporting.paper``.

    Args:
        runs: one row per run (``harness.reporting.runs.runs_frame``: ``method``,
            ``variant_id``, ``seed``, ``record``, ``config``, ``flops`` and metrics).
        primary: the primary metric's key.
        higher: whether higher values of the primary metric are better.
        title: the primary metric's title, for axes and captions.
        stem: path prefix; each figure goes to ``<stem>_<kind>.png`` / ``.pdf``.
        selected: ``{method: variant_id}``, the variant the table shows per method where a
            selection rule picked one: marked in the trade-off figure; the update patterns show
            it (unless it is at chance).
        rule: the selection rule that picked ``selected`` (e.g. ``val-skip-nearest:76``), named
            in the captions; its Skip % target joins ``MATCHED_BUDGETS`` in the trade-off.

    Returns:
        ``(caption, [png, pdf])`` per figure drawn.
    """
    out = []

    def keep(caption: str, fig: Figure, kind: str) -> None:
        out.append((caption, save(fig, stem.with_name(f"{stem.name}_{kind}"))))

    labels = variant_labels(runs)
    bands = reference_bands(runs, primary, labels)
    runs = runs[[role(m) == "method" for m in runs["method"]]]
    if runs.empty:  # reference predictors alone: no method to draw
        return out
    keep(*tradeoff(runs, primary, higher, title, bands, labels, selected, rule), "tradeoff")
    choice = mask_choice(runs, None, selected)
    if mask_panels(choice.records)[0]:  # a note on dense methods alone is no figure
        keep(
            mask_caption(choice, title, rule),
            mask_figure(choice.records, {m: labels[v] for m, (v, _) in choice.picks.items()}),
            "masks",
        )
    for knob, swept in budget_sweeps(runs).items():
        zero = "; 0 left of the break" if log_knob(swept[knob]) and (swept[knob] == 0).any() else ""
        keep(
            f"{title} and Skip % vs {knob}, the budget knob of "
            f"{', '.join(method_order(swept['method']))} (mean ± std over seeds{zero}).",
            budget_figure(swept, knob, primary, title, higher),
            f"budget-{knob.replace('_', '-')}",
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
