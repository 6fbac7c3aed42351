"""``harness report``: the leaderboard, or with ``--paper`` the paper-style report, of records."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.common import (
    add_command,
    comma_list,
    console,
    examples,
    one_of,
    preset_option,
    write_report,
)
from harness.errors import HarnessError
from harness.outputs import refuse_overwrite

FORMATS = ("md", "tex", "csv", "parquet")
DEFAULT_RECORDS = "results/runs.jsonl"
DEFAULT_BOARD = "reports/LEADERBOARD.md"
DEFAULT_PAPER_DIR = "reports/paper"


def _task_option() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--task",
        default=None,
        metavar="TASK[,TASK...]",
        help="--paper: only these tasks, comma-separated names or globs as 'run --tasks' takes "
        "them (default: every task in the records)",
    )
    return parent


def add_parser(subparsers: Any) -> None:
    """Add ``report`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "report",
        "leaderboard from records (or, with --paper, paper tables and figures)",
        parents=[
            _task_option(),
            preset_option(
                default=None,
                help="--paper: only this preset (default: every preset in the records)",
            ),
        ],
        epilog=examples(
            "harness report results/runs.jsonl",
            "harness report results/runs.jsonl --paper --task TASK --preset quick",
            "harness report results/runs.jsonl --paper --task 'TASK,PREFIX-*'",
            note="malformed record lines are skipped and listed in the report, which is still "
            "written;\nthe exit code is then 2",
        ),
    )
    s.add_argument(
        "records",
        nargs="*",
        help=f"records files or directories (default: {DEFAULT_RECORDS})",
    )
    s.add_argument(
        "--out",
        metavar="FILE",
        help=f"the leaderboard to write (default: {DEFAULT_BOARD})",
    )
    s.add_argument(
        "--paper",
        action="store_true",
        help="paper tables (md/tex), figures, paper-vs-harness and significance, instead",
    )
    s.add_argument(
        "--out-dir",
        metavar="DIR",
        help=f"--paper: output directory (default: {DEFAULT_PAPER_DIR})",
    )
    s.add_argument(
        "--format",
        "--formats",
        dest="formats",
        type=comma_list(one_of(FORMATS)),
        default=None,
        metavar="FORMAT[,FORMAT...]",
        help=f"table formats, any of {', '.join(FORMATS)} (parquet needs pyarrow); the "
        "leaderboard's go beside --out with their suffix (default: md; --paper: md,tex)",
    )
    s.add_argument(
        "--select",
        default=None,
        metavar="RULE",
        help="one row per method, the variant RULE picks on the validation split: best-val, "
        "or val-skip-band:TARGET:WIDTH (best validation metric among variants whose validation "
        "Skip %% is within TARGET +- WIDTH), or val-skip-nearest:TARGET (validation Skip %% "
        "nearest TARGET); default: every variant",
    )
    s.add_argument(
        "--no-figures",
        action="store_true",
        help="tables only: no learning curves beside the leaderboard, no --paper figures",
    )
    s.set_defaults(func=cmd_report)


def write_leaderboard(
    sources: list[str],
    out: Path,
    con: Any,
    warn: bool = True,
    formats: tuple[str, ...] = ("md",),
    select: Any = None,
) -> list[str]:
    """Write the leaderboard of the records in ``sources`` to ``out`` and print its path.

    Args:
        sources: records files or directories.
        out: the Markdown file; other formats go beside it (``out`` with suffix ``.tex``,
            ``.csv``, ``.parquet``).
        con: the rich console the warnings go to.
        warn: print each malformed line as a warning.
        formats: any of ``FORMATS``.
        select: a ``harness.selection.Rule`` (None: every variant has a row).

    Returns:
        The malformed-line messages (the report lists them too).
    """
    from harness.reporting import leaderboard as lb
    from harness.reporting.paper import NO_PYARROW, write_frame
    from harness.results import load

    if "parquet" in formats:
        from importlib.util import find_spec

        if find_spec("pyarrow") is None:
            raise HarnessError(NO_PYARROW)
    records, problems = load(sources)
    for p in problems if warn else ():
        con.print(f"[yellow]warning: {p}[/]")
    for fmt in formats:
        path = out if fmt == "md" else out.with_suffix(f".{fmt}")
        if fmt == "md":
            write_report(path, lb.leaderboard_markdown(records, sources, problems, select))
        elif fmt == "tex":
            write_report(path, lb.leaderboard_tex(records, select))
        else:
            write_report(path, "")  # creates the folder; an OSError is one line
            write_frame(lb.leaderboard_frame(records, select), path)
        print(f"wrote {path}")
    return problems


def _malformed(problems: list[str]) -> HarnessError:
    more = f" (and {len(problems) - 1} more, listed in the report)" if len(problems) > 1 else ""
    return HarnessError(f"{problems[0]}{more}")


def _write_curves(sources: list[str], board: Path) -> None:
    """Learning curves of the records beside the leaderboard, ``<board stem>_curves.png/.pdf``."""
    from harness.reporting.figures import write_curves
    from harness.results import load

    for p in write_curves(load(sources)[0], board.with_name(f"{board.stem}_curves")):
        print(f"wrote {p}")


def _inputs(sources: list[str]) -> list[tuple[str, Path]]:
    """The records files a report reads, as ``refuse_overwrite`` takes them."""
    from harness.results import store_path

    return [("an input (records)", store_path(s)) for s in sources]


def leaderboard_paths(board: Path, formats: tuple[str, ...], figures: bool) -> list[Path]:
    """Every file the leaderboard writes: ``board`` per format, and its learning curves."""
    paths = [board if fmt == "md" else board.with_suffix(f".{fmt}") for fmt in formats]
    if figures:
        curves = board.with_name(f"{board.stem}_curves")
        paths += [curves.with_suffix(".png"), curves.with_suffix(".pdf")]
    return paths


def paper_paths(
    records: list[dict[str, Any]],
    out_dir: Path,
    tasks: list[str] | None,
    preset: str | None,
    formats: tuple[str, ...],
) -> list[Path]:
    """The files ``--paper`` may write into ``out_dir``, known before it writes any.

    Its tables, ``paper_<task>_<preset>.<format>`` for each (task, preset) of the records, and
    the figures already in ``figures/`` under that stem (the figures drawn depend on the runs, so
    the existing files are the ones that could be written over).
    """
    groups = {
        (r["task"], r["preset"])
        for r in records
        if (tasks is None or r["task"] in tasks) and (preset is None or r["preset"] == preset)
    }
    paths = []
    for task, pre in sorted(groups):
        stem = f"{task}_{pre}"
        paths += [out_dir / f"paper_{stem}.{fmt}" for fmt in formats]
        paths += sorted((out_dir / "figures").glob(f"{stem}_*"))
    return paths


def cmd_report(args: argparse.Namespace) -> int:
    """Write the report; malformed records are an error once it is written."""
    sources = args.records or [DEFAULT_RECORDS]
    paper_only = (("--task", args.task), ("--preset", args.preset), ("--out-dir", args.out_dir))
    given = [f for f, v in paper_only if v]
    if given and not args.paper:
        raise HarnessError(f"{', '.join(given)}: only used with --paper (the leaderboard: --out)")
    if args.out and args.paper:
        raise HarnessError("--out: the leaderboard's file; --paper writes into --out-dir")
    tasks = None
    if args.task:
        from harness.registry import TASKS

        tasks = TASKS.resolve(args.task)  # names and globs, as 'run --tasks' takes them
    select = None
    if args.select:
        from harness.selection import parse_rule

        select = parse_rule(args.select)
    inputs = _inputs(sources)
    if not args.paper:
        formats = tuple(args.formats or ("md",))
        board = Path(args.out or DEFAULT_BOARD)
        option = "--out" if args.out else "the default leaderboard"
        for path in leaderboard_paths(board, formats, figures=not args.no_figures):
            refuse_overwrite(path, option if path == board else f"{option} ({path.name})", inputs)
        problems = write_leaderboard(
            sources, board, console(), warn=False, formats=formats, select=select
        )
        if not args.no_figures:
            _write_curves(sources, board)
        if problems:  # the report is written without them; the input is still bad
            raise _malformed(problems)
        return 0
    from harness.reporting.paper import write_paper_report
    from harness.results import load

    records, problems = load(sources)
    out_dir = Path(args.out_dir or DEFAULT_PAPER_DIR)
    formats = tuple(args.formats or ("md", "tex"))
    for path in paper_paths(records, out_dir, tasks, args.preset, formats):
        refuse_overwrite(path, f"--out-dir {out_dir}:", inputs)
    paths = write_paper_report(
        records,
        sources,
        out_dir,
        tasks=tasks,
        presets=[args.preset] if args.preset else None,
        formats=formats,
        figures=not args.no_figures,
        select=select,
    )
    for p in paths:
        print(p)
    if problems:
        raise _malformed(problems)
    return 0
