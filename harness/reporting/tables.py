"""The paper-style main table: its columns, cells, bold marks and significance tests.

The layout is that of the seed paper that reports this kind of task (``layout``); every column's
title, direction, unit and form come from the metric registry (``harness.components.metrics``).
Bold, the reference row, the tests and Holm's correction, the marks and the reference predictors'
rows: docs/reports.md (Numbers, Significance, Reference predictors).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.components.metrics import METRICS, get_metric
from harness.components.selection import split_mean
from harness.references import role
from harness.reporting.references import WORSE, method_cell, worse
from harness.reporting.references import row as judge
from harness.reporting.render import Cell, Table, plain
from harness.reporting.text import (
    arrow,
    ci_title,
    column_scale,
    fmt_cell,
    fmt_ci,
    fmt_p,
    grey,
    scaled,
    seeds_cell,
    value_text,
)

if TYPE_CHECKING:
    import pandas as pd


FULL, WIDE, TERSE = 0, 1, 2  # a column's place in a terminal: none (a file only), wide, always


@dataclass(frozen=True)
class Column:
    """A column of every table: title, measure key ("": a label), direction, unit, form, place.

    ``higher``: the direction (None: no bold); ``scale``: the 10^scale unit of its cells; ``form``:
    the registry's (``num``, ``int``, ``yes-no``); ``place``: where a terminal shows it.
    """

    title: str
    key: str = ""
    higher: bool | None = None
    scale: int = 0
    form: str = "num"
    place: int = FULL


def column(key: str, values: Sequence[float] = (), higher: bool | None = None) -> Column:
    """The column of measure ``key`` as the metric registry describes it.

    ``values`` set its power of ten (none for a percentage or a whole number); ``higher`` overrides
    the registry's direction.
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
        return _p(ttest_ind(a, b, equal_var=False).pvalue)


def _p(p: Any) -> float | None:
    p = float(p)
    return None if math.isnan(p) else p


APPROX = "≈"  # a Wilcoxon p-value from the normal approximation (``paired_p``)
WILCOXON = (
    "Wilcoxon's signed-rank test (two-sided; exact: the test's own null distribution, or every "
    "sign flip of the differences where some are 0 or tied and there are at most 13; else the "
    f"normal approximation, marked {APPROX})"
)


def paired_p(a: Sequence[float], b: Sequence[float]) -> tuple[float | None, float | None, bool]:
    """Two-sided p-values of paired samples: paired t, Wilcoxon, and whether Wilcoxon is exact.

    Wilcoxon (scipy's, zero differences dropped, ties at their mean rank) is exact where no
    difference is 0 or tied (to 10 significant digits) and n <= 50, by every sign flip where n <=
    13, else the normal approximation. None where a test has no answer. Cached by value: ``harness
    docs`` prints the same pairs in several blocks, and the sign flips cost.
    """
    return _paired_p(tuple(a), tuple(b))


@functools.cache
def _paired_p(
    a: tuple[float, ...], b: tuple[float, ...]
) -> tuple[float | None, float | None, bool]:
    if len(a) != len(b) or len(a) < 2:
        return None, None, True
    import warnings

    from scipy.stats import PermutationMethod, ttest_rel, wilcoxon

    diffs = [float(f"{x - y:.10g}") for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    plain = 0 not in diffs and len({abs(d) for d in diffs}) == n <= 50  # no zero, no tie
    how = "exact" if plain else PermutationMethod() if n <= 13 else "asymptotic"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t = _p(ttest_rel(a, b).pvalue)
        try:
            w = _p(wilcoxon(diffs, method=how).pvalue) if any(d != 0 for d in diffs) else None
        except ValueError:  # too few non-zero differences
            w = None
    return t, w, how != "asymptotic"


@dataclass(frozen=True)
class Comparison:
    """One row's per-seed primary metric against the reference row's."""

    test: str  # ``paired t`` (shared seeds), ``Welch`` (not), or "" (fewer than 2 values a side)
    p: float | None  # the t-test's p-value, before correction
    wilcoxon: float | None = None  # Wilcoxon's signed-rank p-value, paired rows only
    exact: bool = True  # whether that p-value is exact (else the normal approximation's)

    def w_text(self, p: float | None) -> str:
        """``p`` (Holm-adjusted Wilcoxon) as printed, ``≈`` if approximate."""
        return ("" if self.exact or p is None else APPROX) + fmt_p(p)


def finite_by_seed(by_seed: dict[Any, float]) -> dict[Any, float]:
    """``by_seed`` (seed -> value) without the seeds that recorded no finite value."""
    return {s: v for s, v in by_seed.items() if v is not None and not math.isnan(v)}


def compare_seeds(a: dict[Any, float], b: dict[Any, float]) -> Comparison:
    """``a`` against ``b`` (seed -> finite value): paired where they share the seeds, else Welch."""
    fa, fb = finite_by_seed(a), finite_by_seed(b)
    if fa.keys() == fb.keys() and len(fa) >= 2:
        seeds = sorted(fa)
        return Comparison("paired t", *paired_p([fa[s] for s in seeds], [fb[s] for s in seeds]))
    p = welch_p(list(fa.values()), list(fb.values()))
    return Comparison("Welch" if p is not None else "", p)


def holm(ps: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None: no test, left as is)."""
    order = sorted((p, i) for i, p in enumerate(ps) if p is not None)
    out: list[float | None] = [None] * len(ps)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p))
        out[i] = running
    return out


def reference(agg: pd.DataFrame, primary: str, higher: bool) -> tuple[int, str]:
    """The row every other row is tested against, and how it was chosen (``-1``: none).

    Among the rows with the most seeds, the best mean validation ``primary`` (ties: variant id);
    where none recorded one, the best test mean, labelled display only.
    """
    if not len(agg) or not agg[primary].notna().any():
        return -1, ""
    top = int(agg["seeds"].max())
    rows = [(i, r) for i, (_, r) in enumerate(agg.iterrows()) if r["seeds"] == top]
    sign = -1.0 if higher else 1.0
    val = [(sign * split_mean(r["records"], primary, "val"), r["variant_id"], i) for i, r in rows]
    val = [v for v in val if not math.isnan(v[0])]
    if val:
        return min(val)[2], "best val"
    test = [(sign * r[primary], r["variant_id"], i) for i, r in rows if not math.isnan(r[primary])]
    return (min(test)[2], "best on test, display only") if test else (-1, "")


def layout(agg: pd.DataFrame, primary: str, higher: bool) -> list[Column]:
    """The seed paper's columns for this kind of task.

    A percentage primary takes S-SA Tables 1-3 (the other percentage scores, Skip %, the metric,
    FLOPs), a yes / no outcome the rows hold S-SA Table 4 (outcome, metric, Skip %, FLOPs), any
    other task S-EI Table 1 (D_h, # params, metric).
    """
    held = [k for k in agg.columns if k in METRICS and agg[k].notna().any()]
    scores = [METRICS.get(k) for k in agg.columns if k in METRICS and k != primary]
    main = column(primary, list(agg[primary]), higher)
    flops = column("flops", list(agg["flops"]))
    skip = [column(k) for k in ("skip_pct", "read_skip_pct") if k == "skip_pct" or k in held]
    if get_metric(primary).percent:  # the other percentage scores (√(Acc×Skip)), held or not
        others = [column(m.name) for m in scores if m.group == "score" and m.percent]
        return [*others, *skip, main, flops]
    if outcome := [column(m.name) for m in scores if m.form == "yes-no" and m.name in held]:
        return [*outcome, main, *skip, flops]
    return [column("hidden_size"), column("params"), main]


def solved_skip(row: Any) -> tuple[tuple[float, float, int], tuple[float, float, int]] | None:
    """``row``'s Skip % over its solved and unsolved seeds; None without ``solved``."""
    ok, not_ok = row.get("skip_pct_solved"), row.get("skip_pct_unsolved")
    return (ok, not_ok) if isinstance(ok, tuple) and isinstance(not_ok, tuple) else None


def comparable(row: Any, key: str) -> float:
    """``row``'s mean of ``key`` as compared (bold, Ours − paper): Skip % of the solved seeds."""
    split = solved_skip(row) if key == "skip_pct" else None
    return split[0][0] if split is not None else row[key]


SOLVED_NOTE = (
    "Skip % on a task with a solved line: the mean over the runs that solved it, (n=k) where "
    "only k of the row's seeds did; the Skip % of the runs that did not follows, greyed, as "
    "(unsolved u/n: value). A run that never learnt the task can skip anything, so the greyed "
    "values are out of the comparison: never bold, no Ours − paper."
)


def solved_notes(rows: Sequence[Any]) -> list[str]:
    """``SOLVED_NOTE`` when a row of ``rows`` has an unsolved run."""
    return [SOLVED_NOTE] if any((x := solved_skip(r)) and x[1][2] for r in rows) else []


def cell(row: Any, col: Column) -> str:
    """The text of ``row``'s cell in column ``col`` (``row``: an ``aggregate`` row).

    Skip % on a task with ``solved`` (S-SA Table 4): the mean over the solved seeds, the unsolved
    seeds' after it, greyed: a run that did not learn the task can skip anything.
    """
    mean = row[col.key]
    split = solved_skip(row) if col.key == "skip_pct" else None
    if split is not None:
        (m, sd, n), (um, usd, un) = split
        text = fmt_cell(m, sd, n, col.scale) + (f" (n={n})" if un else "") if n else ""
        if un:
            text += (" " if text else "") + grey(
                f"(unsolved {un}/{n + un}: {fmt_cell(um, usd, un, col.scale)})"
            )
        return text or "–"
    if col.form == "int":
        if mean is None or math.isnan(mean):
            return "–"
        return fmt_cell(mean, scale=col.scale) if col.scale else f"{mean:.0f}"
    if col.form == "yes-no":  # Yes / No when the seeds agree, else the count solved
        vals = row[f"{col.key}_vals"]
        k = int(sum(v > 0 for v in vals))
        return {0: "No", len(vals): "Yes"}.get(k, f"{k}/{len(vals)}") if vals else "–"
    std = row[f"{col.key}_std"] if len(row[f"{col.key}_vals"]) > 1 else None  # one value: no std
    return fmt_cell(mean, std, row["seeds"], col.scale)


def _bold(means: Sequence[float], higher: bool | None) -> list[bool]:
    """True at the best finite mean (ties included); all False if every row ties."""
    finite = [m for m in means if m is not None and not math.isnan(m)]
    if higher is None or not finite or max(finite) == min(finite):
        return [False] * len(means)
    best = max(finite) if higher else min(finite)
    return [m is not None and not math.isnan(m) and math.isclose(m, best) for m in means]


EVENT_MARK = "‡"  # a row whose runs had a training event (``harness.training.events``)


def build_main_table(
    agg: pd.DataFrame,
    primary: str,
    higher: bool,
    picked: dict[str, str] | None = None,
    every: pd.DataFrame | None = None,
) -> Table:
    """The S-SA / S-EI style table of ``agg`` (``aggregate``'s rows) and its notes, no caption.

    ``picked``: variant id -> why the selection rule picked it (a "Picked by" column); ``every``:
    the variants the rows were picked from, for ``grid_notes`` (None: ``agg``).
    """
    cols = layout(agg, primary, higher)
    # reference predictors (harness.references): never bold, not the reference, not tested
    predictors = [role(m) != "method" for m in agg["method"]]
    tests, ref, how = _tests(agg, primary, higher, predictors)
    p_adj, w_adj = holm([c.p for c in tests]), holm([c.wilcoxon for c in tests])
    with_p = any(p is not None for p in p_adj)  # an all-n/a p column is left out
    with_w = any(p is not None for p in w_adj)
    shown = {c.key for c in cols}  # D_h as a column is not repeated in the variant label
    labels = [", ".join(t for k, t in p.items() if k not in shown) for p in agg["parts"]]
    pcol = next(c for c in cols if c.key == primary)
    ptitle = get_metric(primary).title
    titles = ["Method"] + (["Variant"] if any(labels) else []) + ["Seeds"]
    titles += [c.title for c in cols] + [ci_title(ptitle, pcol.scale)]
    titles += [f"p vs reference ({ptitle}, Holm)"] if with_p else []
    titles += ["Wilcoxon p (Holm)"] if with_w else []
    titles += ["Commit"] + (["Picked by"] if picked is not None else [])
    rs = [r for _, r in agg.iterrows()]
    bolds = [
        _bold(
            [math.nan if predictors[i] else comparable(r, c.key) for i, r in enumerate(rs)],
            c.higher,
        )
        for c in cols
    ]
    marked = worse([judge(r["method"], r["label"], r[f"{primary}_vals"]) for r in rs], higher)
    rows = []
    for i, r in enumerate(rs):
        mark = f" {EVENT_MARK}" if r["events"] else ""
        cells = lead_cells(r, labels[i] if "Variant" in titles else None, mark)
        low = f" {WORSE}" * marked[i]  # on the primary's cell: worse than a reference predictor
        cells += [(cell(r, c) + low * (c is pcol), bolds[j][i]) for j, c in enumerate(cols)]
        cells.append((fmt_ci(r[primary], r[f"{primary}_vals"], pcol.scale, primary), False))
        if with_p:
            text = f"{fmt_p(p_adj[i])} ({tests[i].test})" if p_adj[i] is not None else "n/a"
            text = "–" if predictors[i] else text
            cells.append((f"{how} (reference)" if i == ref else text, False))
        if with_w:
            cells.append(("–" if i == ref or predictors[i] else tests[i].w_text(w_adj[i]), False))
        cells.append((r["commit"], False))
        cells += [(picked.get(r["variant_id"], "–"), False)] if picked is not None else []
        rows.append(cells)
    notes = _p_notes(agg.iloc[ref], how, ptitle, p_adj, w_adj) if with_p else []
    notes += seed_count_notes(agg)
    leads = [[c.title for j, c in enumerate(cols) if bolds[j][i]] for i in range(len(agg))]
    notes += grid_notes(agg if every is None else every, agg, leads) if picked is not None else []
    notes += events_notes(agg)
    if any(c.key == "skip_pct" for c in cols):
        notes += solved_notes(rs)
    return Table("", "", titles, rows, notes)


def lead_cells(r: Any, label: str | None, mark: str = "") -> list[Cell]:
    """A row's first cells: Method, its Variant (None: no such column), Seeds (and ``mark``)."""
    variant = [] if label is None else [label]
    return plain(method_cell(r["method"]), *variant, seeds_cell(r["seeds"]) + mark)


def _tests(
    agg: pd.DataFrame, primary: str, higher: bool, predictors: list[bool]
) -> tuple[list[Comparison], int, str]:
    """Each row's test against the reference row (among the methods' rows), its index and why."""
    among = [i for i, p in enumerate(predictors) if not p]
    ref, how = reference(agg.iloc[among], primary, higher)
    ref = among[ref] if ref >= 0 else -1
    tests = [
        compare_seeds(r[f"{primary}_by_seed"], agg.iloc[ref][f"{primary}_by_seed"])
        if ref >= 0 and i != ref and not predictors[i]
        else Comparison("", None)
        for i, (_, r) in enumerate(agg.iterrows())
    ]
    return tests, ref, how


def _p_notes(
    ref: Any, how: str, ptitle: str, p_adj: list[float | None], w_adj: list[float | None]
) -> list[str]:
    n_t, n_w = sum(p is not None for p in p_adj), sum(p is not None for p in w_adj)
    wil = f" and, apart, over its {n_w} Wilcoxon tests" if n_w else ""
    name = row_name(ref["method"], ref["label"])
    return [
        f"p: the per-seed {ptitle} of each row against the reference row's ({name}: {how}, "
        "chosen among the rows with the table's seed count). A run seed fixes what the task "
        "draws from it (split, balancing sample) and the batch order, the same for every "
        "method, so rows with the same seeds as the reference are paired samples: paired "
        f"t-test, and {WILCOXON} beside it; rows whose seeds differ: Welch's t-test "
        f"(scipy.stats). Holm's step-down correction over the table's {n_t} t-tests{wil}. Bold "
        "marks the best test mean of a column, for display only: nothing is chosen by it."
    ]


def row_name(method: str, label: str) -> str:
    """``method (label)``, or the method alone for a variant without a label."""
    return f"{method} ({label})" if label else method


def grids(every: pd.DataFrame) -> dict[str, dict[str, list[Any]]]:
    """Each method's grid: per knob some method varies in ``every``, the values it was run at."""
    knobs = {k for p in every["parts"] for k in p}
    out: dict[str, dict[str, list[Any]]] = {m: {} for m in every["method"] if role(m) == "method"}
    for m, cfg in zip(every["method"], every["config"], strict=True):
        for k in sorted(knobs & cfg.keys()) if role(m) == "method" else ():
            if cfg[k] not in (vals := out.setdefault(m, {}).setdefault(k, [])):
                vals.append(cfg[k])

    def order(v: Any) -> tuple[bool, float, str]:
        return isinstance(v, str), v if isinstance(v, (int, float)) else 0.0, str(v)

    return {m: {k: sorted(v, key=order) for k, v in g.items()} for m, g in out.items()}


def grid_notes(every: pd.DataFrame, agg: pd.DataFrame, leads: list[list[str]]) -> list[str]:
    """The grids, where a picked row leads a column at a knob value another method lacks.

    A row leads the columns it is bold in (``leads``). S-SA's λ grid refined for SA-RNN alone is
    such a case: the note lists each method's grid and the suites its records name.
    """
    grid = grids(every)
    found = []
    for (_, r), cols in zip(agg.iterrows(), leads, strict=True):
        for k in r["parts"] if cols else ():
            v = r["config"].get(k)
            lack = [m for m, g in grid.items() if m != r["method"] and v not in g.get(k, [v])]
            if lack:
                found.append(
                    f"{row_name(r['method'], r['label'])} leads {', '.join(cols)} at "
                    f"{k}={value_text(v)}, a value {', '.join(lack)} "
                    f"{'was' if len(lack) == 1 else 'were'} not run at"
                )
    if not found:
        return []
    suites = sorted(
        {s for rs in every["records"] for r in rs if (s := (r.get("sweep") or {}).get("suite"))}
    )
    each = {
        m: [f"{k} {' / '.join(map(value_text, vs))}" for k, vs in g.items()]
        for m, g in grid.items()
    }
    text = "; ".join(f"{m}: {', '.join(g) or 'one variant'}" for m, g in each.items())
    where = f"; suite{'s' if len(suites) > 1 else ''} {', '.join(suites)}" if suites else ""
    return [
        f"Grids: {'; '.join(found)} (a lead at a grid point not every method was given). The "
        "rows were picked from these grids (per method, the values its variants here were run "
        f"at of each knob some method varies{where}): {text}."
    ]


def seed_count_notes(agg: pd.DataFrame, rows: str = "any row") -> list[str]:
    """The table's seed count (the most seeds of any of its ``rows``) and the rows with fewer."""
    if not len(agg):
        return []
    top = int(agg["seeds"].max())
    fewer = [
        f"{row_name(r['method'], r['label'])}: {r['seeds']}"
        for _, r in agg.iterrows()
        if r["seeds"] < top
    ]
    text = f"Seed count of this table: {top} (the most seeds of {rows})"
    return [text + (f"; rows with fewer: {'; '.join(fewer)}." if fewer else ".")]


def events_notes(agg: pd.DataFrame) -> list[str]:
    """The note under a table whose rows had training events (``EVENT_MARK``)."""
    marked = [r for _, r in agg.iterrows() if r["events"]]
    if not marked:
        return []
    n_runs = sum(r["event_runs"] for r in marked)
    rows = "; ".join(f"{row_name(r['method'], r['label'])}: {r['events']}" for r in marked)
    return [
        f"{EVENT_MARK} {len(marked)} row{'s' if len(marked) > 1 else ''} ({n_runs} "
        f"run{'s' if n_runs > 1 else ''}) had training events: {EVENTS_MEANING} {rows}."
    ]


# What the events are (``harness.training.events``), said once in each note that lists some.
EVENTS_MEANING = (
    "a gradient norm that overflowed float32 and was clipped in float64 "
    "(grad_overflow_clipped), an epoch's training loss above 10x its best so far (loss_spike; "
    "for a record made before events were recorded, found in its history), a non-finite loss. "
    "The test metrics are those of the best validation epoch, which may precede the event."
)
