"""``harness new method``: write a documented template of a new method and its test file."""

from __future__ import annotations

import argparse
from typing import Any

from harness import api
from harness.cli.common import add_command, examples, include_option


def add_parser(subparsers: Any) -> None:
    """Add ``new`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "new",
        "write a template of a new method (NAME.py, test_NAME.py) that passes 'harness check'",
        parents=[include_option()],
        epilog=examples(
            "harness new method my-skip --kind skip --out my_methods",
            "harness check my-skip --include my_methods",
            note="kinds:\n"
            + "\n".join(f"  {k:9s} {what}" for k, what in api.METHOD_TEMPLATES.items())
            + "\nan existing file is never overwritten (exit 2, nothing written)",
        ),
    )
    s.add_argument("what", choices=["method"], help="what to make (a method)")
    s.add_argument("name", metavar="NAME", help="its name, e.g. my-skip (file my_skip.py)")
    s.add_argument(
        "--kind",
        required=True,
        choices=list(api.METHOD_TEMPLATES),
        help="the template: " + ", ".join(api.METHOD_TEMPLATES) + " (see below)",
    )
    s.add_argument(
        "--out",
        default=".",
        metavar="DIR",
        help="the folder to write into, made if missing (default: the current folder)",
    )
    s.set_defaults(func=cmd_new)


def cmd_new(args: argparse.Namespace) -> int:
    """Write the two files and say what to run next."""
    from pathlib import Path

    paths, key = api.new_method(args.name, args.kind, args.out)
    folder = Path(args.out)
    for p in paths:
        print(f"wrote {p}")
    print("next:")
    print(f"  harness check {key} --include {folder}")
    print(f"  python -m pytest {paths[1]}")
    task = api.training_task()
    print(f"  harness run --tasks {task} --methods {key} --preset smoke --include {folder}")
    return 0
