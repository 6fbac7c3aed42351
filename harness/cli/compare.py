"""``harness compare``: the drift gate, current records against reference records."""

from __future__ import annotations

import argparse
from typing import Any

from harness import api
from harness.cli.common import add_command, console, examples


def add_parser(subparsers: Any) -> None:
    """Add ``compare`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "compare",
        "drift gate: current records vs a reference",
        {
            "reference": "the reference records (.jsonl)",
            "current": "the records to check against it (.jsonl)",
            "--tol MEASURE=ABS[:REL]": "tolerance for a measure or a prefix of measures "
            "(metrics.mse=1e-3, macs=0:1e-2); repeatable",
            "--markdown FILE": "also write the comparison as Markdown",
            "--only-present": "compare only the runs in both (a partial rerun); say how many were "
            "left out; fails when no run is in both",
            "--allow-empty": "pass when nothing was compared (a reference with no record, or no "
            "run in both); by default that fails, so an emptied reference cannot pass the gate",
            "--skip-malformed": "skip record lines that cannot be read (a torn last line, an "
            "unknown schema), naming each, instead of refusing the store",
        },
        {"--tol": {"action": "append"}},
        epilog=examples(
            "harness compare results/reference/smoke.jsonl results/runs.jsonl --markdown drift.md",
            "harness compare results/reference/smoke.jsonl rerun.jsonl --only-present",
            note="exit codes: 0 no drift, 1 drift, missing runs or nothing compared (unless "
            "--allow-empty),\n2 bad input (a tolerance that is negative, not finite or names no "
            "measure, a record\nline that cannot be read)",
        ),
    )
    s.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    """Print the drifted, missing and new runs; 0 when nothing drifted or went missing, else 1."""
    from rich.markup import escape
    from rich.table import Table

    tolerances = api.parse_tolerances(args.tol or [])
    flags = ("only_present", "allow_empty", "skip_malformed", "markdown")
    res, skipped = api.compare(
        args.reference, args.current, tolerances, **{k: getattr(args, k) for k in flags}
    )
    out = console()
    for line in skipped:
        out.print(f"[yellow]{escape(line)}[/]", highlight=False)  # FILE:N: ... skipped (why)
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
        ref, cur = res.left_out
        out.print(f"left out (not in both): {ref} reference run(s), {cur} current run(s){none}")
    if res.empty:
        allowed = "accepted (--allow-empty)" if args.allow_empty else "pass --allow-empty to accept"
        out.print(f"{'[yellow]' if res.ok else '[red]'}nothing compared: {res.empty}; {allowed}[/]")
    verdict = "[green]PASS[/]" if res.ok else "[red]FAIL[/]"
    counts = f"{len(res.drifted)} drifted, {len(res.missing)} missing, {len(res.new)} new"
    out.print(f"{verdict}: {res.matched} matched, {counts}")
    return 0 if res.ok else 1
