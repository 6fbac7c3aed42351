"""``harness list`` (``listing``: a ``list`` module would shadow the builtin in the package)."""

from __future__ import annotations

import argparse
from typing import Any

from harness.api import COMPONENTS as KINDS
from harness.api import component_lines
from harness.cli.common import INCLUDE, add_command


def add_parser(subparsers: Any) -> None:
    """Add ``list`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "list",
        "registered methods, tasks, reference predictors, metrics and executors",
        {**INCLUDE, "what": "what to list (default: %(default)s: all but the metrics)"},
        {"what": {"nargs": "?", "choices": [*KINDS, "all"], "default": "all"}},
        epilog="the names are what --methods, --tasks (globs such as 'PREFIX-*' too) and "
        "'run --executor' take; references run with --methods 'ref:*' (or beside the methods: "
        "'all,ref:*'); each not built in says where it comes from",
    )
    s.set_defaults(func=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    """Print the components of a kind (or of all), one per line with what each is."""
    for kind in KINDS:
        if args.what == kind or (args.what == "all" and kind != "metrics"):
            head = " (not methods: non-recurrent baselines, first rows of every table)"
            print(f"{kind}{head if kind == 'references' else ''}:")
            for line in component_lines(kind):
                print(line)
    return 0
