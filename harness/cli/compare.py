"""``harness compare``: the drift gate, current records against reference records."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.common import add_command, console, examples, write_report


def add_parser(subparsers: Any) -> None:
    """Add ``compare`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "compare",
        "drift gate: current records vs a reference",
        epilog=examples(
            "harness compare results/reference/smoke.jsonl results/runs.jsonl --markdown drift.md",
            note="exit codes: 0 no drift, 1 drift or missing runs, 2 bad input",
        ),
    )
    s.add_argument("reference", help="the reference records (.jsonl)")
    s.add_argument("current", help="the records to check against it (.jsonl)")
    s.add_argument(
        "--tol",
        action="append",
        metavar="MEASURE=ABS[:REL]",
        help="tolerance for a measure or a prefix of measures (metrics.mse=1e-3, macs=0:1e-2); "
        "repeatable",
    )
    s.add_argument(
        "--markdown", default=None, metavar="FILE", help="also write the comparison as Markdown"
    )
    s.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    """Print the drifted, missing and new runs; 0 if none drifted or went missing, else 1."""
    from rich.table import Table

    from harness.reporting.compare import compare, load_strict, markdown, parse_tolerances

    res = compare(
        load_strict(args.reference), load_strict(args.current), parse_tolerances(args.tol or [])
    )
    out = console()
    for line in res.environment:  # numbers from another torch or device may drift for that reason
        out.print(f"[yellow]environment differs: {line}[/]")
    if res.drifted:
        table = Table(title="drifted measures")
        for col in ("run", "measure", "reference", "current", "tolerance"):
            table.add_column(col)
        for d in res.drifted:
            table.add_row(d.label, d.measure, str(d.reference), str(d.current), d.tolerance)
        out.print(table)
    for title, rows in (("missing from current", res.missing), ("new in current", res.new)):
        for r in rows:
            out.print(f"{title}: {r['method']}/{r['task']}/{r['preset']}/seed{r['seed']}")
    verdict = "[green]PASS[/]" if res.ok else "[red]FAIL[/]"
    out.print(
        f"{verdict}: {res.matched} matched, {len(res.drifted)} drifted, "
        f"{len(res.missing)} missing, {len(res.new)} new"
    )
    if args.markdown:
        write_report(Path(args.markdown), markdown(res, args.reference, args.current))
    return 0 if res.ok else 1
