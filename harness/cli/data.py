"""``harness data``: where the real-data tasks' datasets are, and whether they are intact."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.cli.common import add_command, data_dir_option, examples, tasks_option


def add_parser(subparsers: Any) -> None:
    """Add ``data`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "data",
        "dataset status and checksums",
        parents=[
            tasks_option(
                default=None,
                note="; a dataset missing for a task named here is an error, "
                "otherwise only a corrupt one is",
            ),
            data_dir_option(),
        ],
        epilog=examples("harness data list", "harness data verify --tasks TASK"),
    )
    s.add_argument(
        "action",
        choices=["list", "verify"],
        help="list: where each dataset is and whether it is there; verify: also its checksums",
    )
    s.set_defaults(func=cmd_data)


def cmd_data(args: argparse.Namespace) -> int:
    """Print the datasets' status; 2 if one asked for is missing or any is corrupt, else 0."""
    from rich.console import Console
    from rich.table import Table

    from harness import data

    tasks = None
    if args.tasks:
        from harness.registry import TASKS

        tasks = TASKS.resolve(args.tasks)
    rows = data.status_rows(args.data_dir, verify=args.action == "verify", tasks=tasks)
    table = Table(title=f"datasets under {data.data_root(args.data_dir)}")
    for col in ("task", "dataset", "status", "path", "source"):
        table.add_column(col)
    for r in rows:
        color = "green" if r["status"] == "found" else "red"
        table.add_row(
            r["task"],
            r["dataset"],
            f"[{color}]{r['status']}[/]",
            str(r["path"]),
            r.get("source", ""),
        )
    Console().print(table)
    bad = [r for r in rows if r["status"] != "found" and (tasks or r["status"] != "missing")]
    for r in bad:
        sys.stderr.write(f"error: {r['task']}: {r.get('detail') or r['status']}\n")
    return 2 if bad else 0
