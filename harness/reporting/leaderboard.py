"""The leaderboard: one table model (``Board``) per (task, preset), rendered four ways.

``boards`` builds the model from records and the metric registry (``harness.components.metrics``):
rows are method variants (runs that differ only by seed, aggregated over seeds, ``1*``: one seed),
the reference rows first (``harness.references.role``), then by the primary metric; the columns are
the primary metric (and its 95 % CI), then every registered measure the table's records hold, scores
first, yes / no outcomes, then the compute measures in registry order (a ``detail`` measure gets
none). Each measure's title, direction, unit and cell form are the registry's; cells use the one
number format of the reports (``harness.reporting.text.fmt_cell``). With a selection rule
(``harness.components.selection``) each method has one row, the variant the rule picked on
validation data. The renderings: the terminal (``terminal``: the measures with a direction,
``Column.terse``), Markdown (``leaderboard_markdown``, the file beside the records), LaTeX
(``leaderboard_tex``) and csv / parquet numbers (``leaderboard_frame``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.components.metrics import get_metric, higher_is_better
from harness.components.selection import empty_tables, no_row_line
from harness.components.selection import select as select_records
from harness.persistence.records import latest
from harness.references import role
from harness.reporting.latex import tex_key
from harness.reporting.references import WORSE, method_cell, record_notes, worse
from harness.reporting.references import row as judged
from harness.reporting.render import render_tex
from harness.reporting.runs import (
    failed_records,
    failed_summary,
    measure,
    measures,
    variant_label,
)
from harness.reporting.tables import column as table_column
from harness.reporting.text import (
    NOTES,
    ci95,
    ci_title,
    commit_label,
    fmt_cell,
    fmt_ci,
    header,
    seeds_cell,
)

if TYPE_CHECKING:
    import pandas as pd

FULL, WIDE, TERSE = 0, 1, 2  # a column's place: the file only, a wide enough terminal, always


@dataclass(frozen=True)
class Column:
    """A leaderboard column: its title, the measure it shows ("": a label), its terminal place."""

    title: str
    key: str = ""
    terse: int = FULL


@dataclass
class Row:
    """One method variant: who (csv's keys), its text per column title, its values by seed."""

    who: dict[str, Any]  # method, variant, variant_id, seeds, commit, picked_by
    cells: dict[str, str]
    values: dict[str, dict[int, float]]


@dataclass
class Board:
    """One (task, preset) table: its columns (in order) and its rows (in order)."""

    task: str
    preset: str
    columns: list[Column]
    rows: list[Row]

    @property
    def title(self) -> str:
        """``task (preset preset)``."""
        return f"{self.task} ({self.preset} preset)"


def _measures(in_table: list[dict[str, Any]], primary: str) -> list[str]:
    """The measures with a column: the primary, then each registered one a record holds."""
    held = [k for k in measures(in_table) if any(measure(r, k) is not None for r in in_table)]

    def place(k: str) -> int:
        m = get_metric(k)
        return [m.group == "score" and m.form == "num", m.form == "yes-no", True].index(True)

    return [primary, *sorted((k for k in held if k != primary), key=place)]


def _text(key: str, vals: list[float], n: int, scale: int) -> str | None:
    """A cell's text in the registry's form (None: no value, the column may go)."""
    if not vals:
        return None
    form = get_metric(key).form
    if form == "yes-no":
        k = sum(x > 0 for x in vals)
        return {0: "No", len(vals): "Yes"}.get(k, f"{k}/{len(vals)}")
    mean = statistics.fmean(vals)
    if form == "int":
        return f"{mean:.0f}"
    return fmt_cell(mean, statistics.stdev(vals) if len(vals) > 1 else None, n, scale)


def boards(records: Sequence[dict[str, Any]], picked: dict[str, str] | None = None) -> list[Board]:
    """The leaderboard's tables of ``records`` (ok runs, the latest record of each run).

    Args:
        records: run records (already selected, if a rule picks the rows).
        picked: variant id -> why a selection rule picked it (adds a "Picked by" column).
    """
    recs = [r for r in latest(records) if r.get("status") == "ok"]
    places = sorted({(r["task"], r["preset"]) for r in recs})
    return [
        _board(t, p, [r for r in recs if (r["task"], r["preset"]) == (t, p)], picked)
        for t, p in places
    ]


def _board(task: str, preset: str, in_table: list[dict[str, Any]], picked: Any) -> Board:
    primary = in_table[0].get("primary", "")
    higher = higher_is_better(in_table[0])  # the registry's direction of the primary
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in in_table:
        groups.setdefault(r["variant_id"], []).append(r)
    keys = _measures(in_table, primary)
    seeded = [
        {k: {r["seed"]: float(v) for r in g if _finite(v := measure(r, k))} for k in keys}
        for g in groups.values()
    ]
    columns = [Column("Method", terse=TERSE), Column("Variant"), Column("Seeds", terse=TERSE)]
    scales = {}
    for k in keys:  # titles and units as the paper tables have them
        means = [statistics.fmean(s[k].values()) for s in seeded if s[k]]
        col = table_column(k, means, higher if k == primary else None)
        scales[k] = col.scale
        columns.append(Column(col.title, k))
        if k == primary:
            columns.append(Column(ci := ci_title(get_metric(k).title, col.scale)))
    columns += [Column("Train s"), Column("Commit")] + [Column("Picked by")] * bool(picked)
    pairs = zip(groups.values(), seeded, strict=True)  # marked: worse than the best reference
    marked = worse([judged(g[0]["method"], "", s[primary].values()) for g, s in pairs], higher)
    rows = []
    for (vid, group), vals, mark in zip(groups.items(), seeded, marked, strict=True):
        method = group[0]["method"]
        v = list(vals[primary].values())
        t = [x for r in group if _finite(x := (r.get("time") or {}).get("train_s"))]
        cells = {
            "Method": method_cell(method),
            "Variant": variant_label(group, [r for r in in_table if r["method"] == method]),
            "Seeds": seeds_cell(len({r["seed"] for r in group})),
            ci: fmt_ci(statistics.fmean(v), v, scales[primary], primary),
            "Train s": fmt_cell(statistics.fmean(t)) if t else "–",
            "Commit": commit_label(group),
            "Picked by": (picked or {}).get(vid, "–"),
        }
        for c in columns[3:]:
            if c.key:
                cells[c.title] = _text(c.key, list(vals[c.key].values()), len(group), scales[c.key])
        if mark:  # on the primary's cell
            cells[columns[3].title] += f" {WORSE}"
        sort = statistics.fmean(v) * (-1 if higher else 1) if v else math.inf
        who = {"method": method, "variant": cells["Variant"], "variant_id": vid}
        who.update(seeds=len(group), commit=cells["Commit"], picked_by=(picked or {}).get(vid, ""))
        rows.append(((role(method) == "method", sort), Row(who, cells, vals)))
    rows.sort(key=lambda x: x[0])
    body = [r for _, r in rows]
    methods = [r for (m, _), r in rows if m] or body
    kept = [
        Column(c.title, c.key, _place(c, primary, methods))
        for c in columns
        if any(r.cells.get(c.title) for r in body)
    ]
    for r in body:
        r.cells = {c.title: "–" if r.cells.get(c.title) is None else r.cells[c.title] for c in kept}
    return Board(task, preset, kept, body)


def _place(c: Column, primary: str, methods: list[Row]) -> int:
    """A column's place in the terminal (``TERSE``, ``WIDE`` or ``FULL``: the file only).

    The primary and each measure with a direction that every method row holds: the compute ones
    always, the other scores where the width allows.
    """
    if not c.key or c.key == primary:
        return TERSE if c.key else c.terse
    m = get_metric(c.key)
    if m.form != "num" or m.higher is None or not all(r.values[c.key] for r in methods):
        return FULL
    return WIDE if m.group == "score" else TERSE


def _finite(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def terminal(board: Board, place: int = WIDE) -> tuple[list[str], list[list[str]]]:
    """The columns and rows a terminal shows: those at ``place`` or above, the variant in Method.

    The file's measures, fewer of them: the primary metric and the compute measures with a
    direction always (effective FLOPs among them), the task's other scores where the width allows.
    """
    cols = [c.title for c in board.columns if c.terse >= place]
    rows = []
    for r in board.rows:
        cells = dict(r.cells, Method=f"{r.cells['Method']} {r.who['variant']}".strip())
        rows.append([cells[t] for t in cols])
    return cols, rows


def leaderboard_rows(
    records: Sequence[dict[str, Any]], picked: dict[str, str] | None = None
) -> dict[tuple[str, str], pd.DataFrame]:
    """``{(task, preset): DataFrame}`` of the Markdown and LaTeX cells (``boards``)."""
    import pandas as pd

    out = {}
    for b in boards(records, picked):
        cols = [c.title for c in b.columns]
        out[(b.task, b.preset)] = pd.DataFrame(
            [[r.cells[t] for t in cols] for r in b.rows], columns=cols
        )
    return out


def _select(records: Sequence[dict[str, Any]], select: Any) -> tuple[list, Any, list]:
    """(kept records, picked, tables the rule left empty) of a selection rule (None: all)."""
    if select is None:
        return list(records), None, []
    kept, picked = select_records(records, select)
    return kept, picked, empty_tables(records, kept)


def leaderboard_markdown(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    problems: Sequence[str] = (),
    select: Any = None,
    command: str = "harness report",
) -> str:
    """The full LEADERBOARD.md text: header, one table per (task, preset), failed runs.

    Args:
        records: run records.
        sources: the files they came from (named in the header).
        problems: malformed-line messages, listed at the end.
        select: a ``harness.components.selection.Rule``; None: every variant has a row.
        command: the command writing it, named in the header.
    """
    failed = failed_records(records)  # before selection: superseded records count too
    records, picked, empty = _select(records, select)
    parts = [header(records, sources, "Leaderboard", command)]
    parts.append(
        f"- Rows: {select.describe() if select else 'every variant (no --select rule)'}.\n" + NOTES
    )
    tables = leaderboard_rows(records, picked)
    for task, preset in sorted({*tables, *empty}):
        parts.append(f"## {task} ({preset} preset)\n")
        df = tables.get((task, preset))
        if df is not None:
            parts.append(df.to_markdown(index=False, disable_numparse=True) + "\n")
        if (task, preset) in empty:
            parts.append(f"{no_row_line(select)}\n")
        missing = [k for k in picked or {} if k.startswith(f"{task}/{preset}/")]
        parts += [f"- {k.split('/')[-1]}: no row ({picked[k]})." for k in missing]
        store = str(sources[0]) if sources else "results"
        parts += [f"- {n}" for n in record_notes(records, task, preset, store)] + [""]
    if failed:
        parts.append("## Failed runs\n")
        parts.append(f"{failed_summary(failed)}; every failed record, superseded ones included:\n")
        parts += [f"- {f.line()}" for f in failed] + [""]
    if problems:
        parts.append("## Records skipped as malformed\n")
        parts += [f"- {p}" for p in problems] + [""]
    return "\n".join(parts)


def leaderboard_tex(
    records: Sequence[dict[str, Any]],
    select: Any = None,
    command: str = "harness report",
    sources: Sequence[str] = (),
    width: str = "text",
) -> str:
    """The leaderboard as LaTeX tables (booktabs, graphicx), one per (task, preset).

    Labelled ``tab:<key>.leaderboard``, the key ``harness.reporting.latex.tex_key`` of the task,
    preset, ``sources`` and ``select``; ``width``: ``text`` or ``column`` (set in one column of a
    two-column paper, ``harness.reporting.latex.render_tex``).
    """
    records, picked, empty = _select(records, select)
    parts = [f"% Generated by {command}. Needs \\usepackage{{booktabs,graphicx}}.\n"]
    parts += [f"% {t} ({p} preset): {no_row_line(select)}" for t, p in empty]
    for b in boards(records, picked):
        cols = [c.title for c in b.columns]
        rows = [[(r.cells[t], False) for t in cols] for r in b.rows]
        label = f"tab:{tex_key(b.task, b.preset, sources, select)}.leaderboard"
        parts.append(render_tex(cols, rows, b.title, label, width=width))
    return "\n".join(parts)


def leaderboard_frame(records: Sequence[dict[str, Any]], select: Any = None) -> pd.DataFrame:
    """The leaderboard's numbers (not text) for csv / parquet: one row per variant.

    Columns: task, preset, method, variant, variant_id, seeds, commit, picked_by, and per measure
    its mean, ``_std`` (NaN for one seed) and ``_ci95`` (half-width), in the measure's own unit,
    then its per-seed values ``_seed<s>`` (NaN where the variant has no run of that seed).
    """
    import pandas as pd

    records, picked, _ = _select(records, select)
    rows = []
    for b in boards(records, picked):
        keys = [c.key for c in b.columns if c.key]
        seeds = sorted({s for r in b.rows for v in r.values.values() for s in v})
        for r in b.rows:
            row = {"task": b.task, "preset": b.preset, **r.who}
            for k in keys:
                v = list(r.values[k].values())
                row[k] = statistics.fmean(v) if v else math.nan
                row[f"{k}_std"] = statistics.stdev(v) if len(v) > 1 else math.nan
                row[f"{k}_ci95"] = ci95(v) or math.nan
            for k in keys:
                row.update({f"{k}_seed{s}": r.values[k].get(s, math.nan) for s in seeds})
            rows.append(row)
    return pd.DataFrame(rows)
