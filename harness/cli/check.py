"""``harness check``: the generic checks of the project's tests, on one registered method."""

from __future__ import annotations

import argparse
from typing import Any

from harness.api import CHECKS, METHODS, TASKS, describe_source, iter_checks, usable_tasks
from harness.cli.common import INCLUDE, add_command, comma_list, examples


def add_parser(subparsers: Any) -> None:
    """Add ``check`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "check",
        "run the generic checks on one method (built-in or plugin)",
        {
            **INCLUDE,
            "method METHOD": "a registered method ('harness list methods')",
            "--only CHECK[,CHECK...]": "run only these checks (default: all)",
            "--task TASK": "the task the training check trains on (default: the first built-in "
            "regression task that generates its data)",
        },
        {"--only": {"type": comma_list(str)}},
        description="Run on one registered method the generic checks the project's tests run on "
        "every method: one line per property, PASS, FAIL with the numbers, or SKIP where it "
        "does not apply.",
        epilog=examples(
            "harness check METHOD",
            "harness check METHOD --include my_methods/",
            "harness check METHOD --only forward,cost",
            note="checks: " + ", ".join(CHECKS) + "\nexit codes: 0 every check passed or was "
            "skipped, 1 some check failed, 2 bad input (an unknown method or check, the data of "
            "--task not found)",
        ),
    )
    s.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    """Print one line per check as it finishes; 1 when any failed."""
    cls = METHODS.get(args.method)  # an unknown name: one line with suggestions, exit 2
    if args.task is not None:
        TASKS.get(args.task)
        if not args.only or "training" in args.only:  # its data missing: one line, as for run
            usable_tasks([args.task], [args.task], None)
    print(f"{args.method} ({describe_source(cls)})", flush=True)
    counts = dict.fromkeys(("pass", "fail", "skip"), 0)
    for result in iter_checks(args.method, args.only, args.task):
        print(result.line(), flush=True)
        counts[result.status] += 1
    print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")
    return 1 if counts["fail"] else 0
