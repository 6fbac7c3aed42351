"""The leaderboard: one table (``Board``) per (task, preset), rendered four ways.

Built on the paper tables' model (``harness.reporting.runs.aggregate``,
``harness.reporting.tables.Column``): rows are method variants, the reference rows first, then by
the primary metric; the columns the primary metric and its 95 % CI, then every registered measure
the records hold. Rendered to the terminal (``terminal``), Markdown, LaTeX and csv / parquet
numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from harness.components.metrics import get_metric
from harness.components.selection import empty_tables, no_row_line
from harness.components.selection import select as select_records
from harness.references import role
from harness.reporting.latex import tex_key
from harness.reporting.references import WORSE, method_cell, record_notes, worse
from harness.reporting.references import row as judged
from harness.reporting.render import Cell, render_md, render_tex
from harness.reporting.runs import (
    aggregate,
    failed_records,
    failed_summary,
    measures,
    runs_frame,
    tidy,
)
from harness.reporting.tables import FULL, TERSE, WIDE, Column, cell, column
from harness.reporting.text import NOTES, ci_title, fmt_cell, fmt_ci, header, seeds_cell

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Board:
    """One (task, preset) table: its columns, its rows' cells by column title, their aggregate."""

    task: str
    preset: str
    columns: list[Column]
    rows: list[dict[str, str]]  # one per method variant, in order
    agg: pd.DataFrame  # ``harness.reporting.runs.aggregate``'s rows, in the rows' order

    @property
    def title(self) -> str:
        """``task (preset preset)``."""
        return f"{self.task} ({self.preset} preset)"


def _measures(runs: pd.DataFrame, primary: str) -> list[str]:
    """The measures with a column: the primary, then scores, yes / no outcomes, the rest."""
    held = [k for k in measures(list(runs["record"])) if k in runs and runs[k].notna().any()]

    def place(k: str) -> int:
        m = get_metric(k)
        return [m.group == "score" and m.form == "num", m.form == "yes-no", True].index(True)

    return [primary, *sorted((k for k in held if k != primary), key=place)]


def boards(records: Sequence[dict[str, Any]], picked: dict[str, str] | None = None) -> list[Board]:
    """The leaderboard's tables of ``records``; ``picked``: variant id -> why a rule picked it."""
    runs = runs_frame(records)
    places = sorted(set(zip(runs["task"], runs["preset"], strict=True))) if len(runs) else []
    return [
        _board(t, p, runs[(runs["task"] == t) & (runs["preset"] == p)], picked) for t, p in places
    ]


def _board(task: str, preset: str, runs: pd.DataFrame, picked: Any) -> Board:
    primary, higher = runs["primary"].iloc[0], bool(runs["higher"].iloc[0])  # the registry's
    keys = _measures(runs, primary)
    agg = aggregate(runs, [*keys, "train_s"]).drop(
        columns=["skip_pct_solved", "skip_pct_unsolved"], errors="ignore"
    )
    first = {v: i for i, v in reversed(list(enumerate(runs["variant_id"])))}
    sign = -1 if higher else 1
    order = [  # reference rows first, then by the primary's mean, ties in the records' order
        (role(m) == "method", math.inf if math.isnan(x) else x * sign, first[v])
        for m, x, v in zip(agg["method"], agg[primary], agg["variant_id"], strict=True)
    ]
    agg = agg.iloc[sorted(range(len(agg)), key=order.__getitem__)].reset_index(drop=True)
    parts = zip(agg["parts"], agg["config"], strict=True)  # values as str: gamma=1.0, not %g's 1
    agg["label"] = [", ".join(f"{k}={cfg.get(k)}" for k in p) for p, cfg in parts]
    columns = [Column("Method", place=TERSE), Column("Variant"), Column("Seeds", place=TERSE)]
    for k in keys:  # titles and units as the paper tables have them
        columns.append(col := column(k, list(agg[k]), higher if k == primary else None))
        if k == primary:
            pcol, ci = col, Column(ci_title(get_metric(k).title, col.scale))
            columns.append(ci)
    columns += [Column("Train s"), Column("Commit")] + [Column("Picked by")] * bool(picked)
    v = agg[f"{primary}_vals"]  # marked: worse than the best reference
    marked = worse([judged(m, "", x) for m, x in zip(agg["method"], v, strict=True)], higher)
    rows = [
        _row(r, columns, pcol, ci, picked, mark)
        for (_, r), mark in zip(agg.iterrows(), marked, strict=True)
    ]
    methods = agg[[role(m) == "method" for m in agg["method"]]]
    kept = [
        replace(c, place=_place(c, primary, agg if methods.empty else methods))
        for c in columns
        if any(r.get(c.title) for r in rows)
    ]
    rows = [{c.title: "–" if r.get(c.title) is None else r[c.title] for c in kept} for r in rows]
    return Board(task, preset, kept, rows, agg)


def _row(
    r: Any, columns: list[Column], pcol: Column, ci: Column, picked: Any, mark: bool
) -> dict[str, str | None]:
    """The cells of aggregate row ``r`` (None: no value, the column may go)."""
    cells = {
        "Method": method_cell(r["method"]),
        "Variant": r["label"],
        "Seeds": seeds_cell(r["seeds"]),
        ci.title: fmt_ci(r[pcol.key], r[f"{pcol.key}_vals"], pcol.scale, pcol.key),
        "Train s": fmt_cell(r["train_s"]),
        "Commit": r["commit"],
        "Picked by": (picked or {}).get(r["variant_id"], "–"),
    }
    cells |= {c.title: cell(r, c) if r[f"{c.key}_vals"] else None for c in columns if c.key}
    if mark:  # on the primary's cell
        cells[pcol.title] += f" {WORSE}"
    return cells


def _place(c: Column, primary: str, methods: pd.DataFrame) -> int:
    """A column's place in the terminal: the primary and every directed measure all methods hold."""
    if not c.key or c.key == primary:
        return TERSE if c.key else c.place
    m = get_metric(c.key)
    if m.form != "num" or m.higher is None or not all(len(v) for v in methods[f"{c.key}_vals"]):
        return FULL
    return WIDE if m.group == "score" else TERSE


def terminal(board: Board, place: int = WIDE) -> tuple[list[str], list[list[str]]]:
    """The columns and rows a terminal shows: those at ``place`` or above, the variant in Method."""
    cols = [c.title for c in board.columns if c.place >= place]
    rows = []
    for r, variant in zip(board.rows, board.agg["label"], strict=True):
        cells = dict(r, Method=f"{r['Method']} {variant}".strip())
        rows.append([cells[t] for t in cols])
    return cols, rows


def _cells(b: Board) -> list[list[Cell]]:
    """The rows of ``b`` as Markdown and LaTeX render them (nothing bold)."""
    return [[(r[c.title], False) for c in b.columns] for r in b.rows]


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

    ``problems``: malformed-line messages, listed at the end; ``select``: a
    ``harness.components.selection.Rule`` (None: every variant has a row).
    """
    failed = failed_records(records)  # before selection: superseded records count too
    records, picked, empty = _select(records, select)
    parts = [header(records, sources, "Leaderboard", command)]
    parts.append(
        f"- Rows: {select.describe() if select else 'every variant (no --select rule)'}.\n" + NOTES
    )
    tables = {(b.task, b.preset): b for b in boards(records, picked)}
    for task, preset in sorted({*tables, *empty}):
        parts.append(f"## {task} ({preset} preset)\n")
        if b := tables.get((task, preset)):
            parts.append(render_md([c.title for c in b.columns], _cells(b)) + "\n")
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
    """The leaderboard as LaTeX tables, one per (task, preset): ``tab:<key>.leaderboard``."""
    records, picked, empty = _select(records, select)
    parts = [f"% Generated by {command}. Needs \\usepackage{{booktabs,graphicx}}.\n"]
    parts += [f"% {t} ({p} preset): {no_row_line(select)}" for t, p in empty]
    for b in boards(records, picked):
        label = f"tab:{tex_key(b.task, b.preset, sources, select)}.leaderboard"
        parts.append(
            render_tex([c.title for c in b.columns], _cells(b), b.title, label, width=width)
        )
    return "\n".join(parts)


def leaderboard_numbers(records: Sequence[dict[str, Any]], select: Any = None) -> list[dict]:
    """The leaderboard's numbers for csv / parquet (``tidy`` of each table's measures)."""
    records, picked, _ = _select(records, select)
    return [
        row
        for b in boards(records, picked)
        for row in tidy(b.agg, b.task, b.preset, picked, [c.key for c in b.columns if c.key])
    ]
