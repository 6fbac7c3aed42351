"""``harness list``: the registered components of each kind, with where each comes from.

(Named ``listing`` because a submodule called ``list`` would shadow the builtin inside the
package's ``__init__``.)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.api import EXECUTORS
from harness.cli.common import add_command, include_option
from harness.components.metrics import METRICS
from harness.components.registry import METHODS, TASKS, describe_source, load_plugins, source_of
from harness.references import REFERENCES, describe

# what ``harness list KIND`` lists (``all``: every kind but the metrics, as it always did)
KINDS = {
    "methods": METHODS,
    "tasks": TASKS,
    "references": REFERENCES,
    "metrics": METRICS,
    "executors": EXECUTORS,
}


def add_parser(subparsers: Any) -> None:
    """Add ``list`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "list",
        "registered methods, tasks, reference predictors, metrics and executors",
        parents=[include_option()],
        epilog="the names are what --methods, --tasks (globs such as 'PREFIX-*' too) and "
        "'run --executor' take; references run with --methods 'ref:*' (or beside the methods: "
        "'all,ref:*'); each not built in says where it comes from",
    )
    s.add_argument(
        "what",
        nargs="?",
        choices=[*KINDS, "all"],
        default="all",
        help="what to list (default: %(default)s: all but the metrics)",
    )
    s.set_defaults(func=cmd_list)


def _first_line(obj: Any) -> str:
    """The first paragraph (not line) of the module's (else the class's) docstring, one line."""
    doc = (sys.modules[obj.__module__].__doc__ or obj.__doc__ or "").strip()
    return " ".join(doc.split("\n\n", 1)[0].split())


def _line(kind: str, name: str, obj: Any) -> str:
    """What ``harness list`` says of one component: its origin unless built in, what it is."""
    where = "" if source_of(obj)["kind"] == "builtin" else f"({describe_source(obj)}) "
    if kind == "tasks":
        arrow = "higher" if obj.higher_is_better else "lower"
        what = f"[{obj.kind}, {obj.primary} ({arrow} is better)] {_first_line(obj)}"
    elif kind == "references":
        what = (
            f"[{'a bound, ' if obj.bound else ''}{'/'.join(map(str, obj.kinds))}] {describe(name)}"
        )
        what += "".join(
            f"\n  {'':16s}   on {task}: {tcls.reference_notes[name]}"
            for task, tcls in TASKS.items()
            if name in tcls.reference_notes
        )
    elif kind == "metrics":
        arrow = {True: "higher is better", False: "lower is better", None: ""}[obj.higher]
        what = f"{obj.title} [{', '.join(p for p in (obj.unit, arrow, obj.group) if p)}]"
    else:
        what = _first_line(obj)
    return f"  {name:16s} {where}{what}"


def cmd_list(args: argparse.Namespace) -> int:
    """Print the components of a kind (or of all), one per line with what each is."""
    load_plugins()
    for kind, registry in KINDS.items():
        if args.what == kind or (args.what == "all" and kind != "metrics"):
            head = " (not methods: non-recurrent baselines, first rows of every table)"
            print(f"{kind}{head if kind == 'references' else ''}:")
            for name, obj in registry.items():
                print(_line(kind, name, obj))
    return 0
