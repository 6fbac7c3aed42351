"""``harness compare``: the drift gate, current records against reference records."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.common import add_command, check_writable, console, examples, write_report


def add_parser(subparsers: Any) -> None:
    """Add ``compare`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "compare",
        "drift gate: current records vs a reference",
        epilog=examples(
            "harness compare results/reference/smoke.jsonl results/runs.jsonl --markdown drift.md",
            "harness compare results/reference/smoke.jsonl rerun.jsonl --only-present",
            note="exit codes: 0 no drift, 1 drift, missing runs or nothing compared (unless "
            "--allow-empty),\n2 bad input (a tolerance that is negative, not finite or names no "
            "measure, a record\nline that cannot be read)",
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
    s.add_argument(
        "--only-present",
        action="store_true",
        help="compare only the runs in both (a partial rerun); say how many were left out; "
        "fails when no run is in both",
    )
    s.add_argument(
        "--allow-empty",
        action="store_true",
        help="pass when nothing was compared (a reference with no record, or no run in both); "
        "by default that fails, so an emptied reference cannot pass the gate",
    )
    s.add_argument(
        "--skip-malformed",
        action="store_true",
        help="skip record lines that cannot be read (a torn last line, an unknown schema), "
        "naming each, instead of refusing the store",
    )
    s.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    """Print the drifted, missing and new runs; 0 if none drifted or went missing, else 1."""
    from rich.markup import escape
    from rich.table import Table

    from harness.outputs import refuse_overwrite
    from harness.reporting.compare import (
        compare,
        load_records,
        load_strict,
        markdown,
        parse_tolerances,
    )

    tolerances = parse_tolerances(args.tol or [])
    if args.markdown:
        inputs = [("the reference (REFERENCE)", args.reference), ("CURRENT", args.current)]
        refuse_overwrite(args.markdown, "--markdown", inputs)
        check_writable(Path(args.markdown))
    out = console()
    if args.skip_malformed:
        (reference, skipped), (current, more) = map(load_records, (args.reference, args.current))
        for line in skipped + more:
            out.print(f"[yellow]{escape(line)}[/]", highlight=False)  # FILE:N: ... skipped (why)
    else:
        reference, current = load_strict(args.reference), load_strict(args.current)
    res = compare(
        reference,
        current,
        tolerances,
        only_present=args.only_present,
        allow_empty=args.allow_empty,
    )
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
    if args.only_present:
        none = "; no run is in both, so nothing was compared" if not res.matched else ""
        out.print(
            f"left out (not in both): {res.left_out[0]} reference run(s), "
            f"{res.left_out[1]} current run(s){none}"
        )
    if res.empty:
        allowed = "accepted (--allow-empty)" if args.allow_empty else "pass --allow-empty to accept"
        out.print(f"{'[yellow]' if res.ok else '[red]'}nothing compared: {res.empty}; {allowed}[/]")
    verdict = "[green]PASS[/]" if res.ok else "[red]FAIL[/]"
    out.print(
        f"{verdict}: {res.matched} matched, {len(res.drifted)} drifted, "
        f"{len(res.missing)} missing, {len(res.new)} new"
    )
    if args.markdown:
        write_report(Path(args.markdown), markdown(res, args.reference, args.current))
    return 0 if res.ok else 1
