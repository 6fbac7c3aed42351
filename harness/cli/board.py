"""What ``harness run`` prints when it ends: the leaderboard, as a terminal can show it.

One ``rich`` table per (task, preset) fitted to the terminal's width (``PIPE_WIDTH`` through a
pipe), with its notes, then the file that holds the full table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.api import TERSE, WIDE, boards, record_notes, terminal
from harness.api import select as select_records

FORMATS = ("table", "md")
NONE = "no run finished ok: no table"
PIPE_WIDTH = 100  # the columns of a table printed to a pipe or a file (no terminal width)


def print_board(
    records: Sequence[dict], rule: Any, none: str, store: Path, board: Path, given: str | None
) -> None:
    """Print the leaderboard of ``records`` (``api.board_records``) on stdout.

    ``given`` (``--format``) ``md`` prints the Markdown written to ``board``, else the tables.
    """
    from rich.console import Console

    if given == "md":
        print(board.read_text())
        return
    stdout = Console(highlight=False)
    if not stdout.is_terminal:
        stdout.width = PIPE_WIDTH
    print_tables(records, rule, str(store), stdout, board, none)


def print_tables(
    records: Sequence[dict], rule: Any, store: str, console: Any, board: Path, none: str = NONE
) -> None:
    """Print the leaderboard of ``records`` on ``console``, and where its Markdown ``board`` is.

    ``rule`` picks the rows; ``none`` is said for no table. A table too wide even with the
    method's cell and the titles wrapped keeps only its ``TERSE`` columns; numbers never wrap.
    """
    from rich.measure import Measurement

    picked, wide = None, console.options.update_width(10_000)  # the narrowest it can be
    if rule is not None:
        records, picked = select_records(records, rule)
    tables = boards(records, picked)
    for b in tables:
        for place, tight in ((WIDE, False), (WIDE, True), (TERSE, True)):
            table = _table(b.title, *terminal(b, place), tight)
            if Measurement.get(console, wide, table).minimum <= console.width:
                break
        console.print(table)
        for note in record_notes(records, b.task, b.preset, store, brief=True):
            console.print(f"  {note}", highlight=False, markup=False)
    if not tables:
        console.print(none, highlight=False)
    console.print(
        f"the full leaderboard (CIs, dense cost, parameters, time, commits, failures): {board}",
        highlight=False,
    )


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], tight: bool) -> Any:
    """A ``rich`` table: the method's cell wraps; a number never, a title (``tight``) by words."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False
    )
    widest = max((len(row[0].split(" ")[0]) for row in rows), default=6)
    table.add_column(columns[0], overflow="fold", min_width=max(widest, 6))
    for j, col in enumerate(columns[1:], 1):
        title_width = max(map(len, col.split())) if tight else len(col)
        whole = max((len(row[j]) for row in rows), default=1)
        table.add_column(col, justify="right", width=max(whole, title_width))
    for row in rows:
        table.add_row(*row)
    return table
