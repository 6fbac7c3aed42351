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
    task_option,
    write_report,
)
from harness.errors import HarnessError

FORMATS = ("md", "tex")
DEFAULT_RECORDS = "results/runs.jsonl"


def add_parser(subparsers: Any) -> None:
    """Add ``report`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "report",
        "leaderboard from records (or, with --paper, paper tables and figures)",
        parents=[
            task_option("--paper: only this task (default: every task in the records)"),
            preset_option(
                default=None,
                help="--paper: only this preset (default: every preset in the records)",
            ),
        ],
        epilog=examples(
            "harness report results/runs.jsonl",
            "harness report results/runs.jsonl --paper --task TASK --preset quick",
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
        default="reports/LEADERBOARD.md",
        metavar="FILE",
        help="the leaderboard to write (default: %(default)s)",
    )
    s.add_argument(
        "--paper",
        action="store_true",
        help="paper tables (md/tex), figures, paper-vs-harness and significance, instead",
    )
    s.add_argument(
        "--out-dir",
        default="reports/paper",
        metavar="DIR",
        help="--paper: output directory (default: %(default)s)",
    )
    s.add_argument(
        "--formats",
        type=comma_list(one_of(FORMATS)),
        default=",".join(FORMATS),
        metavar="FORMAT[,FORMAT...]",
        help=f"--paper: table formats, any of {', '.join(FORMATS)} (default: %(default)s)",
    )
    s.add_argument("--no-figures", action="store_true", help="--paper: tables only")
    s.set_defaults(func=cmd_report)


def write_leaderboard(sources: list[str], out: Path, con: Any, warn: bool = True) -> list[str]:
    """Write the leaderboard of the records in ``sources`` to ``out`` and print its path.

    Args:
        sources: records files or directories.
        out: the Markdown file.
        con: the rich console the warnings go to.
        warn: print each malformed line as a warning.

    Returns:
        The malformed-line messages (the report lists them too).
    """
    from harness.reporting.leaderboard import leaderboard_markdown
    from harness.results import load

    records, problems = load(sources)
    for p in problems if warn else ():
        con.print(f"[yellow]warning: {p}[/]")
    write_report(out, leaderboard_markdown(records, sources, problems))
    print(f"wrote {out}")
    return problems


def _malformed(problems: list[str]) -> HarnessError:
    more = f" (and {len(problems) - 1} more, listed in the report)" if len(problems) > 1 else ""
    return HarnessError(f"{problems[0]}{more}")


def cmd_report(args: argparse.Namespace) -> int:
    """Write the report; malformed records are an error once it is written."""
    sources = args.records or [DEFAULT_RECORDS]
    if not args.paper:
        problems = write_leaderboard(sources, Path(args.out), console(), warn=False)
        if problems:  # the report is written without them; the input is still bad
            raise _malformed(problems)
        return 0
    from harness.reporting.paper import write_paper_report
    from harness.results import load

    records, problems = load(sources)
    paths = write_paper_report(
        records,
        sources,
        args.out_dir,
        tasks=[args.task] if args.task else None,
        presets=[args.preset] if args.preset else None,
        formats=tuple(args.formats),
        figures=not args.no_figures,
    )
    for p in paths:
        print(p)
    if problems:
        raise _malformed(problems)
    return 0
