"""``harness new method``: write a documented template of a new method and its test file."""

from __future__ import annotations

import argparse
from typing import Any

from harness import api
from harness.cli.common import INCLUDE, add_command, examples


def add_parser(subparsers: Any) -> None:
    """Add ``new`` to the ``harness`` subcommands."""
    kinds = api.METHOD_TEMPLATES
    s = add_command(
        subparsers,
        "new",
        "write a template of a new method (NAME.py, test_NAME.py) that passes 'harness check'",
        {
            **INCLUDE,
            "what": "what to make (a method)",
            "name NAME": "its name, e.g. my-skip (file my_skip.py)",
            "--kind": "the template: " + ", ".join(kinds) + " (see below)",
            "--out DIR": "the folder to write into, made if missing (default: the current folder)",
        },
        {
            "what": {"choices": ["method"]},
            "--kind": {"required": True, "choices": list(kinds)},
            "--out": {"default": "."},
        },
        epilog=examples(
            "harness new method my-skip --kind skip --out my_methods",
            "harness check my-skip --include my_methods",
            note="kinds:\n"
            + "\n".join(f"  {k:9s} {what}" for k, what in kinds.items())
            + "\nan existing file is never overwritten (exit 2, nothing written)",
        ),
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
