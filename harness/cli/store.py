"""``harness store``: check a records store, or repair one (move its unusable lines aside)."""

from __future__ import annotations

import argparse
from typing import Any

from harness import api
from harness.cli.common import add_command, examples


def add_parser(subparsers: Any) -> None:
    """Add ``store`` (``check``, ``repair``) to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "store",
        "check a records store, or repair it (unusable lines moved to a side file)",
        {},
        epilog=examples(
            "harness store check results/runs.jsonl",
            "harness store repair results/runs.jsonl",
            note="check exits 1 when some line is unusable (a torn last line, a record with wrong "
            "types\nor an unknown schema); repair moves those lines, byte for byte, to "
            "STORE.rejected-TIME\nand keeps the rest (written under the store's lock); a store in "
            "files mode: check\nnames its records not merged yet (STORE.parts/), repair merges "
            "them first",
        ),
    )
    sub = s.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=type(s))
    for name, help in (
        ("check", "list every unusable line with its number; exit 1 if there is one"),
        (
            "repair",
            "merge the records of STORE.parts/, move the unusable lines to STORE.rejected-TIME, "
            "keeping every byte",
        ),
    ):
        a = sub.add_parser(name, help=help, description=help)
        a.add_argument("path", metavar="STORE", help="a records file (.jsonl) or --out directory")
        a.set_defaults(func=cmd_store)


def cmd_store(args: argparse.Namespace) -> int:
    """``check``: 0 if every line is usable, else 1; ``repair``: 0 once repaired."""
    store, fix = api.existing_store(args.path), f"harness store repair {args.path}"
    if args.action == "check":
        lines = store.lines()
        bad = [line for line in lines if line.problem]
        for line in bad:
            print(f"{store.path}:{line.number}: {line.problem}")
        unmerged, bad_parts = store.unmerged()
        for part, why in bad_parts:
            print(f"{part}: {why}")
        good = sum(line.record is not None for line in lines)
        verdict = f"{len(bad)} unusable line(s): run '{fix}'" if bad else "no unusable line"
        print(f"{store.path}: {good} record(s), {verdict}")
        if bad_parts:
            print(f"{len(bad_parts)} unusable record file(s): run '{fix}'")
        if unmerged:
            where = f"{store.parts_path}/ (the next run or '{fix}' merges them)"
            print(f"{len(unmerged)} record(s) not merged yet in {where}")
        return 1 if bad or bad_parts else 0
    if merged := store.merge():
        print(f"merged {merged} record(s) from {store.parts_path}/")
    for part, aside, why in store.reject_parts():
        print(f"moved {part} to {aside}: {why}")
    res = store.repair()
    if not res.moved:
        print(f"{store.path}: {res.kept} record(s), nothing to repair")
        return 0
    for number, problem in res.moved:
        print(f"moved line {number}: {problem}")
    print(f"{store.path}: {res.kept} record(s) kept; {len(res.moved)} line(s) moved to {res.side}")
    return 0
