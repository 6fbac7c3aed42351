"""``harness bench``: the timing suite, or with ``--speedup`` the fast paths' realised speedups.

Each report names the command line ``main`` parsed (``args.argv``, not the host's ``sys.argv``)
and has its data beside it (``data_path``); ``--print`` prints parts of such data.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from harness import api
from harness.api import SPEEDUP_PARTS, TIMING_PARTS, check_writable, refuse_overwrite
from harness.cli.common import (
    DATA_DIR_HELP,
    INCLUDE,
    METHODS_HELP,
    SET_HELP,
    add_command,
    comma_list,
    examples,
    float_at_least,
    int_at_least,
    require_task,
)
from harness.errors import ConfigError

# Without --report the reports go next to the timings, never into the checkout's reports/:
# TIMING.md in the --out folder of the timing records, SPEEDUP.md (+ .jsonl) in the default one.
TIMING_REPORT = "TIMING.md"
SPEEDUP_REPORT = ".benchmarks/SPEEDUP.md"

# Options that only one mode reads, with their defaults: a value other than the default in the
# other mode would be silently ignored, so it is an error instead.
TIMING_ONLY = {
    "task": None,
    "preset": "smoke",
    "set": None,
    "out": ".benchmarks",
    "rounds": 10,
    "warmup": 2,
    "data_dir": None,
    "sources": None,  # --from
}
# Options of --print cost alone (none of them measures anything).
COST_ONLY = {"suite": None, "seeds": None, "epoch_batches": None}
SPEEDUP_ONLY = {
    "skips": [0.5, 0.75, 0.9],
    "hidden": [256, 1024],
    "batches": [1, 32],
    "seq_len": 50,
    "budget": 3.0,
}


def add_parser(subparsers: Any) -> None:
    """Add ``bench`` to the ``harness`` subcommands."""
    suite, speedup = "timing suite: ", "--speedup: "
    s = add_command(
        subparsers,
        "bench",
        "timing suite -> timing records + report; or --speedup: fast paths' speedups",
        {
            "--methods METHOD[,METHOD...]": METHODS_HELP
            + "; with --speedup, 'all' is every method with a fast path",
            "--task TASK": "timing suite: the tasks whose preset sizes are timed, comma-separated "
            "names or globs, or 'all'; tasks without usable data are skipped (required)",
            "--preset": "timing suite: the preset (default: %(default)s)",
            "--set KEY=VALUE": suite + SET_HELP,
            "--data-dir DIR": suite + DATA_DIR_HELP,
            "--device": "timing suite: the devices timed, auto (the default) being the CPU plus "
            "CUDA when present; --speedup: the one device measured on, cpu by default, auto being "
            "CUDA when available",
            "--threads N": "torch CPU threads while measuring (default: %(default)s; 0: torch's "
            "default)",
            **INCLUDE,
            "--report FILE": f"the Markdown to write (default: --out's {TIMING_REPORT}, or "
            f"{SPEEDUP_REPORT} with --speedup, whose raw timings go beside it, with .jsonl for "
            ".md)",
            "--from STORE[,STORE...]": "timing suite: time nothing; render the report (--report, "
            "required; its timings go beside it, with .jsonl for .md) from the timing records in "
            "these stores (files or --out folders), e.g. of runs made in parallel; with --print, "
            "print parts of them (with --speedup: of these speedup rows, a report's .jsonl)",
            "--print PART[,PART...]": "time nothing and write nothing: print Markdown from the "
            "records --from names (for the docs' generated blocks, 'harness docs'): "
            f"{', '.join(TIMING_PARTS)} of the timing records, or with --speedup "
            f'{", ".join(SPEEDUP_PARTS)} of the speedup rows (docs/reports.md, "Numbers in the '
            'docs")',
            "--where KEY=VALUE[,VALUE...]": "--print: only the records (rows) whose field KEY "
            "(dotted for a nested one: sizes.D) is one of the values (names or globs; numbers as "
            "numbers); repeatable",
            "--suite NAME": "--print cost: the shipped suite ('harness run --suite list') whose "
            "runs are costed",
            "--seeds SEEDS": "--print cost: the suite's seeds, as 'harness run --seeds' takes "
            "them (default: the suite's own)",
            "--epoch-batches N": "--print cost: the training batches of an epoch of the suite's "
            "task",
            "--out DIR": suite + "the timing records go to DIR/timing.jsonl (default: %(default)s)",
            "--rounds N": suite + "timed rounds per method, phase and device (default: "
            "%(default)s)",
            "--warmup N": suite + "untimed rounds before them (default: %(default)s)",
            "--speedup": "measure the fast paths' realised speedups instead of the timing suite",
            "--skips S[,S...]": speedup + "target skips, fractions in [0, 1) (default: "
            "%(default)s)",
            "--hidden D[,D...]": speedup + "hidden sizes (default: %(default)s)",
            "--batches B[,B...]": speedup + "batch sizes (default: %(default)s)",
            "--seq-len T": speedup + "sequence length (default: %(default)s)",
            "--budget SECONDS": speedup + "seconds of timing per row; at least 3 rounds are timed "
            "regardless (default: %(default)s)",
        },
        {
            "--from": {"dest": "sources", "type": comma_list(str)},
            "--print": {"dest": "parts", "type": comma_list(str)},
            "--epoch-batches": {"type": int_at_least(1)},
            "--out": {"default": TIMING_ONLY["out"]},
            "--rounds": {"type": int_at_least(1), "default": TIMING_ONLY["rounds"]},
            "--warmup": {"type": int_at_least(0), "default": TIMING_ONLY["warmup"]},
            "--skips": {"type": comma_list(float_at_least(0.0, below=1.0))},
            "--hidden": {"type": comma_list(int_at_least(1))},
            "--batches": {"type": comma_list(int_at_least(1))},
            "--seq-len": {"type": int_at_least(1)},
            "--budget": {"type": float_at_least(0.0)},
        },
        description="Timing suite: times training steps and inference of each method against\n"
        "torch's fused cells (and an eager step-loop GRU) at each task's preset sizes;\n"
        f"appends timing records to --out and writes {TIMING_REPORT} beside them, one table per\n"
        "task and device.\n"
        "With --speedup: measures the realised speedup of the fast inference paths of the\n"
        "methods that have one, on untrained models at target skips, against their own dense\n"
        "loop, the same path without skipping and torch's fused cell; writes\n"
        f"{SPEEDUP_REPORT} and the raw timings\n"
        "beside it (the report's name with .jsonl).",
        epilog=examples(
            "harness bench --methods all --task TASK --preset smoke",
            "harness bench --task all --preset paper --device cpu --rounds 3 --warmup 1",
            "harness bench --speedup   # realised speedup of the fast inference paths",
            "harness bench --speedup --methods METHOD --hidden 256 --batches 1 --budget 1",
            "harness bench --from reports/TIMING.jsonl --print times --where method=METHOD",
            note="timings are advisory, never a pass/fail gate",
        ),
    )
    # the defaults of --speedup's options as flags give them (a list comma-separated)
    s.set_defaults(**{k: api.csv(v) if isinstance(v, list) else v for k, v in SPEEDUP_ONLY.items()})
    s.set_defaults(func=cmd_bench)


def _only_for(args: argparse.Namespace, options: dict[str, Any], mode: str) -> None:
    if given := [k for k, default in options.items() if getattr(args, k) != default]:
        flags = ", ".join("--from" if k == "sources" else "--" + k.replace("_", "-") for k in given)
        raise ConfigError(f"{flags}: only used {mode}")


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the timing suite or, with ``--speedup``, the speedup measurement; print the paths."""
    command = shlex.join(["harness", *getattr(args, "argv", ["bench"])])
    if args.parts:
        return _print(args)
    _only_for(args, {"where": None, **COST_ONLY}, "with --print")
    if args.speedup:
        _only_for(args, TIMING_ONLY, "by the timing suite (without --speedup)")
        return _bench_speedup(args, command)
    _only_for(args, SPEEDUP_ONLY, "with --speedup")
    if args.sources:
        return _render_timing(args, command)
    task = require_task(args.task, "bench (without --speedup)", many=True)

    report = Path(args.report or Path(args.out) / TIMING_REPORT)
    store = ("the timing records (--out)", Path(args.out) / "timing.jsonl")
    refuse_overwrite(report, "--report" if args.report else "the timing report", [store])
    check_writable(Path(args.out), directory=True)  # before minutes of timing, not after
    check_writable(report)

    device = args.device or "auto"  # every device to time on (harness.env.bench_devices)
    kw = {k: getattr(args, k) for k in ("rounds", "warmup", "threads", "data_dir")}
    kw |= {"overrides": api.parse_set(args.set or []), "command": command}
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    paths = api.run_bench(
        args.methods, task, args.preset, device, args.out, report=str(report), progress=say, **kw
    )
    for p in paths:
        print(p)
    return 0


def _stores(args: argparse.Namespace) -> list[Path]:
    """The timing stores ``--from`` names: files, or ``--out`` folders (their timing.jsonl)."""
    return [Path(p) / "timing.jsonl" if Path(p).is_dir() else Path(p) for p in args.sources]


def _render_timing(args: argparse.Namespace, command: str) -> int:
    if not args.report:
        raise ConfigError("bench --from: name the report to write with --report FILE")
    timing = {k: v for k, v in TIMING_ONLY.items() if k not in ("out", "sources")}
    _only_for(args, timing, "when timing")
    stores = _stores(args)
    report, data = Path(args.report), data_path(Path(args.report))
    inputs = [("--from", p) for p in stores]
    refuse_overwrite(report, "--report", inputs)
    refuse_overwrite(data, "--report's data file", inputs)
    text, timings, problems = api.render_timing(stores, command)
    for line in problems:
        print(line, file=sys.stderr)
    api.write_text(data, "".join(json.dumps(r) + "\n" for r in timings))
    api.write_text(report, text)
    print(report)
    print(data)
    return 2 if problems else 0


def _print(args: argparse.Namespace) -> int:
    """``--print``: parts of a report from its records (``--from``), printed; nothing written."""
    speedup = args.speedup
    parts = SPEEDUP_PARTS if speedup else TIMING_PARTS
    mode = "with --speedup" if speedup else "without --speedup"
    if bad := [p for p in args.parts if p not in parts]:
        raise ConfigError(f"--print {bad[0]}: not a part {mode} (choose from {', '.join(parts)})")
    if not args.sources:
        data = "reports/SPEEDUP.jsonl" if speedup else "reports/TIMING.jsonl"
        raise ConfigError(f"--print: name the records to print from with --from (e.g. {data})")
    measuring = {k: v for k, v in {**TIMING_ONLY, **SPEEDUP_ONLY}.items() if k != "sources"}
    measuring |= {"report": None, "methods": "all", "device": None, "threads": 1}
    _only_for(args, measuring, "when measuring or rendering a report, not with --print")
    if "cost" not in args.parts:
        _only_for(args, COST_ONLY, "with --print cost")
    elif args.suite is None or args.epoch_batches is None:
        raise ConfigError("--print cost: name the suite (--suite) and its epoch (--epoch-batches)")
    if speedup:
        rows = api.speedup_rows([Path(p) for p in args.sources])
        text = api.print_speedup(rows, args.parts, args.sources, args.where or ())
    else:
        timings, problems = api.timing_records(_stores(args))
        for line in problems:
            print(line, file=sys.stderr)
        cost = {k: getattr(args, k) for k in COST_ONLY}  # suite, seeds, epoch_batches
        text = api.print_timing(timings, args.parts, args.sources, args.where or (), **cost)
    sys.stdout.write(text)
    return 0


def _bench_speedup(args: argparse.Namespace, command: str) -> int:
    out = Path(args.report or SPEEDUP_REPORT)
    data = data_path(out)
    option = "--report" if args.report else "the speedup report"
    refuse_overwrite(out, option)
    refuse_overwrite(data, f"{option}'s raw timings")
    check_writable(out)  # before the measurement, not after
    sizes = {k: getattr(args, k) for k in SPEEDUP_ONLY}  # skips, hidden, batches, seq_len, budget
    api.bench_speedup(
        out, data, command, args.device, methods=args.methods, threads=args.threads, **sizes
    )
    print(out)
    print(data)
    return 0


def data_path(report: Path) -> Path:
    """The data file beside a report (its rows, or the timings it shows): ``.jsonl`` for ``.md``."""
    data = report.with_suffix(".jsonl")
    return data if data != report else report.with_name(report.name + ".rounds.jsonl")
