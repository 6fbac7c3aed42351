"""``harness list``: the registered methods, tasks and executors.

(Named ``listing`` because a submodule called ``list`` would shadow the builtin inside the
package's ``__init__``.)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.api import EXECUTORS
from harness.cli.common import add_command, include_option
from harness.components.registry import METHODS, TASKS, source_of
from harness.references import REFERENCES, describe


def add_parser(subparsers: Any) -> None:
    """Add ``list`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "list",
        "registered methods, tasks, reference predictors and executors",
        parents=[include_option()],
        epilog="the names are what --methods, --tasks (globs such as 'PREFIX-*' too) and "
        "'run --executor' take; references run with --methods 'ref:*' (or beside the methods: "
        "'all,ref:*')",
    )
    s.add_argument(
        "what",
        nargs="?",
        choices=["methods", "tasks", "references", "executors", "all"],
        default="all",
        help="what to list (default: %(default)s)",
    )
    s.set_defaults(func=cmd_list)


def _first_line(obj: Any) -> str:
    """The first paragraph of the module's (else the class's) docstring, on one line.

    A paragraph, not the first source line: a docstring wrapped mid-sentence is not cut there.
    """
    doc = (sys.modules[obj.__module__].__doc__ or obj.__doc__ or "").strip()
    return " ".join(doc.split("\n\n", 1)[0].split())


def _plugin(cls: Any) -> str:
    """``(plugin: PACKAGE VERSION) `` or ``(--include FILE) `` for what is not built in."""
    src = source_of(cls)
    where = {
        "entry-point": f"plugin: {src.get('package')} {src.get('version')}",
        "include": f"--include {src.get('path')}",
        "module": f"module {src.get('module')}",
    }
    return f"({where[src['kind']]}) " if src["kind"] in where else ""


def print_references() -> None:
    """The reference predictors: name, the task kinds they serve, what each is.

    Under each, what a task says of it on that task (``Task.reference_notes``).
    """
    print("references (not methods: non-recurrent baselines, first rows of every table):")
    for name, cls in REFERENCES.items():
        kinds = "/".join(str(k) for k in cls.kinds)
        what = "a bound, " if cls.bound else ""
        print(f"  {name:16s} {_plugin(cls)}[{what}{kinds}] {describe(name)}")
        for task, tcls in TASKS.items():
            if name in tcls.reference_notes:
                print(f"  {'':16s}   on {task}: {tcls.reference_notes[name]}")


def cmd_list(args: argparse.Namespace) -> int:
    """Print the methods, tasks and/or executors, one per line with its docstring's first line."""
    if args.what in ("methods", "all"):
        print("methods:")
        for name, cls in METHODS.items():
            print(f"  {name:16s} {_plugin(cls)}{_first_line(cls)}")
    if args.what in ("tasks", "all"):
        print("tasks:")
        for name, cls in TASKS.items():
            arrow = "higher" if cls.higher_is_better else "lower"
            what = f"[{cls.kind}, {cls.primary} ({arrow} is better)]"
            print(f"  {name:16s} {_plugin(cls)}{what} {_first_line(cls)}")
    if args.what in ("references", "all"):
        print_references()
    if args.what in ("executors", "all"):
        print("executors:")
        for name, cls in EXECUTORS.items():
            print(f"  {name:16s} {_first_line(cls)}")
    return 0
