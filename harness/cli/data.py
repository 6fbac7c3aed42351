"""``harness data``: where the datasets are, whether they are intact; fetch the public ones."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness import api
from harness.cli.common import DATA_DIR_HELP, INCLUDE, TASKS_HELP, add_command, console, examples
from harness.errors import DataError


def add_parser(subparsers: Any) -> None:
    """Add ``data`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "data",
        "dataset status, checksums and downloads",
        {
            "--tasks TASK[,TASK...]": TASKS_HELP.format("all tasks")
            + "; a dataset missing for a task named here is an error, otherwise only a corrupt one "
            "is",
            "--data-dir DIR": DATA_DIR_HELP,
            **INCLUDE,
            "action": "list: where each dataset is and whether it is there; verify: also check it "
            "against the published checksums; fetch: download, verify and unpack the public ones",
            "names TASK": "tasks (besides --tasks); optional",
            "--mirror URL": "fetch: base URL that stands in for the official addresses",
        },
        {
            "--tasks": {"default": None},
            "action": {"choices": ["list", "verify", "fetch"]},
            # a default keeps argparse from naming the optional TASK among the required arguments
            "names": {"nargs": "*", "default": []},
        },
        epilog=examples(
            "harness data list",
            "harness data verify --tasks TASK",
            "harness data fetch",
            "harness data fetch TASK [TASK ...] --data-dir DIR",
            note="fetch downloads from the official addresses; --mirror URL (or "
            "$HARNESS_DATA_MIRROR) fetches URL/<dataset folder>/<file name> instead",
        ),
    )
    s.set_defaults(func=cmd_data)


def cmd_data(args: argparse.Namespace) -> int:
    """Print (or fetch) the datasets; 2 if one asked for is missing or any is corrupt, else 0."""
    spec = ",".join([*([args.tasks] if args.tasks else []), *args.names])
    tasks = api.TASKS.resolve(spec) if spec else None
    if args.action == "fetch":
        return fetch(tasks, spec, args.data_dir, args.mirror)
    from rich.console import Console
    from rich.table import Table

    verify = args.action == "verify"
    rows = api.status_rows(args.data_dir, verify=verify, tasks=tasks, fresh=verify)
    table = Table(title=f"datasets under {api.data_root(args.data_dir)}")
    for col in ("task", "dataset", "status", "path", "checksums" if verify else "source"):
        table.add_column(col, overflow="fold")
    for r in rows:  # verify: the checksum result per dataset instead of the source
        color = "green" if r["status"] == "found" else "red"
        if verify:
            result = r.get("check") or r.get("detail") or ""
            if r["status"] == "found" and not r.get("verified"):
                color = "yellow"
        else:
            result = r.get("source", "")
        table.add_row(r["task"], r["dataset"], f"[{color}]{r['status']}[/]", str(r["path"]), result)
    screen = Console()  # on stdout; piped: a table as wide as its longest path or description
    (screen if screen.is_terminal else Console(width=100_000)).print(table)
    bad = [r for r in rows if r["status"] != "found" and (tasks or r["status"] != "missing")]
    for r in bad:
        sys.stderr.write(f"error: {r['task']}: {r.get('detail') or r['status']}\n")
    return 2 if bad else 0


def fetch(tasks: list[str] | None, spec: str, data_dir: str | None, mirror: str | None) -> int:
    """Download and verify the public datasets of ``tasks`` (default: all); 2 if one fails.

    A task whose data cannot be downloaded (a licence) fails only when named; else it is reported.
    """
    out = console()
    root = api.data_root(data_dir)
    fetcher = api.Fetcher(root, mirror, say=lambda line: out.print(line, highlight=False))
    named = {p.strip() for p in spec.split(",")} - {"all", ""}
    failed = []
    for name in tasks if tasks is not None else api.TASKS.names():
        try:
            line = api.TASKS.get(name)(None, data_dir).fetch(fetcher)
        except DataError as e:
            if name in named or not isinstance(e, api.NotFetchableError):
                failed.append(f"{name}: {e}")
            else:
                out.print(f"[yellow]{name}: {e}[/]", highlight=False)
            continue
        if line is None:
            if name in named:
                out.print(f"{name}: generated data, nothing to fetch", highlight=False)
            continue
        out.print(f"[green]{name}[/]: {line}", highlight=False)
    for line in failed:
        sys.stderr.write(f"error: {line}\n")
    return 2 if failed else 0
