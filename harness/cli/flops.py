"""``harness flops``: dense and effective MACs, FLOPs and parameters of fresh models on a task."""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness import api
from harness.cli.common import (
    DATA_DIR_HELP,
    INCLUDE,
    METHODS_HELP,
    SET_HELP,
    add_command,
    examples,
    int_at_least,
    require_task,
)


def add_parser(subparsers: Any) -> None:
    """Add ``flops`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "flops",
        "dense/effective MACs and params of fresh models",
        {
            "--methods METHOD[,METHOD...]": METHODS_HELP,
            "--task TASK": "the task whose data and sizes are used (required; see 'harness list')",
            "--preset": "the preset whose sizes are used (default: %(default)s)",
            "--set KEY=VALUE": SET_HELP,
            "--data-dir DIR": DATA_DIR_HELP,
            **INCLUDE,
            "--batch N": "test sequences the effective MACs are averaged over (default: "
            "%(default)s)",
            "--json": "print the rows as JSON (with the unit convention)",
        },
        {"--batch": {"type": int_at_least(1), "default": 16}},
        epilog=examples("harness flops --methods METHOD[,METHOD...] --task TASK --json"),
    )
    s.set_defaults(func=cmd_flops)


def cmd_flops(args: argparse.Namespace) -> int:
    """Print the MAC table (``harness.planning.sweep.fresh_costs``) as a table or as JSON."""
    task = require_task(args.task, "flops")
    overrides = api.parse_set(args.set or [])

    rows = api.fresh_costs(args.methods, task, args.preset, overrides, args.batch, args.data_dir)
    if args.json:
        print(json.dumps({"unit": api.UNIT_NOTE, "rows": rows}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"MACs/FLOPs per sequence, fresh models ({api.UNIT_NOTE})")
    columns = ("method", "T", "params", "dense MACs (fvcore)", "dense MACs", "effective MACs")
    for col in (*columns, "effective FLOPs"):
        table.add_column(col, justify="right")
    counts = ("macs_dense_fvcore", "macs_dense", "macs_effective", "flops_effective")
    for r in rows:  # T, and the mean true length where sequences are shorter (the length charged)
        T, mean = r["seq_len"], r.get("mean_len", r["seq_len"])
        seq = str(T) if mean == T else f"{T} (mean {mean:.1f})"
        table.add_row(r["method"], seq, str(r["params_total"]), *(f"{r[k]:.4g}" for k in counts))
    Console().print(table)
    return 0
