"""What ``harness run`` prints when it ends: the leaderboard, as a terminal can show it.

In a terminal, one ``rich`` table per (task, preset) with the brief columns
(``harness.reporting.brief``), fitted to the terminal's width (cells wrap, numbers never);
otherwise (stdout a pipe or a file, or ``--format md``) the leaderboard's Markdown as written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

FORMATS = ("table", "md")


def print_board(tables: Sequence[Any], none: str, board: Path, given: str | None) -> None:
    """Print the leaderboard written to ``board`` on stdout: as ``tables`` in a terminal.

    Args:
        tables: the brief tables (``harness.api.board_tables``).
        none: what to say where there is no table.
        board: the leaderboard's Markdown, written already.
        given: ``--format`` (``table`` or ``md``); None: a table when stdout is a terminal.
    """
    from rich.console import Console

    stdout = Console(highlight=False)
    if (given or ("table" if stdout.is_terminal else "md")) == "md":
        print(board.read_text())
        return
    print_tables(tables, stdout, board, none)


def print_tables(
    tables: Sequence[Any], console: Any, board: Path, none: str = "no run finished ok: no table"
) -> None:
    """Print the brief tables on ``console``, within its width, and where the full one is.

    ``none`` is what it says where there is no table.

    A table too wide for the console even with the method's cell wrapped loses its
    √(Acc×Skip) column (it follows from the two beside it); numbers are never wrapped.
    """
    for brief in tables:
        table = _table(brief.title, brief.columns, brief.rows)
        if _min_width(console, table) > console.width:
            keep = [i for i, c in enumerate(brief.columns) if not c.startswith("√")]
            rows = [[row[i] for i in keep] for row in brief.rows]
            table = _table(brief.title, [brief.columns[i] for i in keep], rows)
        console.print(table)
        for note in getattr(brief, "notes", ()):
            console.print(f"  {note}", highlight=False, markup=False)
    if not tables:
        console.print(none, highlight=False)
    console.print(
        f"the full leaderboard (CIs, dense cost, parameters, time, commits, failures): {board}",
        highlight=False,
    )


def _min_width(console: Any, table: Any) -> int:
    """The narrowest ``table`` can print: its natural width less what its method cells wrap."""
    import io

    from rich.console import Console

    wide = Console(file=io.StringIO(), width=10_000, color_system=None)
    wide.print(table)
    natural = max(map(len, wide.file.getvalue().splitlines()), default=0)
    method = table.columns[0]
    cells = [str(c) for c in method._cells]
    return natural - max(map(len, [method.header, *cells])) + (method.min_width or 0)


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False
    )
    widest = max((len(row[0].split(" ")[0]) for row in rows), default=6)
    for col in columns:  # only the method's cell wraps (its variant's settings)
        method = col == "Method"
        table.add_column(
            col,
            justify="left" if method else "right",
            overflow="fold",
            no_wrap=not method,
            min_width=max(widest, 6) if method else None,
        )
    for row in rows:
        table.add_row(*row)
    return table
