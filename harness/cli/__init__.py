"""The ``harness`` command line: list, run, report, flops, data.

Bad input (unknown names, bad ``--set`` values, missing data, unwritable output, malformed
records) gives one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError
from harness.sweep import parse_grid

EPILOG_RUN = """examples:
  harness run --tasks all --preset smoke
  harness run --tasks adding --methods 'gru,sa-*' --seeds 0-4 --preset quick
  harness run --tasks synthetic --methods ei-rehn --set method.r_max=5 --set train.lr=0.005
  harness run --tasks seizures --methods sa-rnn,skip-rnn --grid lam=0,1e-4,1e-3,1e-2 \\
      --seeds 0-2 --match-skip 76
  harness run --tasks all --seeds 0-4 --workers 8
  harness run --tasks all --preset paper --executor ray --ray-address ray://head:10001
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        sys.stderr.write(f"error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def parse_seeds(spec: str) -> list[int]:
    """``"0-4"``, ``"0,2,5"`` or ``"3"`` -> list of seeds."""
    seeds: list[int] = []
    try:
        for part in spec.split(","):
            part = part.strip()
            if "-" in part[1:]:
                a, b = part.split("-", 1) if not part.startswith("-") else (part, "")
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                seeds += range(lo, hi + 1)
            elif part:
                seeds.append(int(part))
    except ValueError:
        raise ConfigError(f"--seeds expects e.g. 0-4 or 0,1,2; got '{spec}'") from None
    if not seeds:
        raise ConfigError(f"--seeds expects e.g. 0-4 or 0,1,2; got '{spec}'")
    return list(dict.fromkeys(seeds))


def write_report(path: Path, text: str) -> None:
    """Write a generated file (creating its folder); an OSError becomes one HarnessError line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as e:
        raise HarnessError(f"cannot write {path}: {e.strerror or e}") from None


def _console():
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


# --- list ----------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from harness.registry import METHODS, TASKS

    def first_line(obj: Any) -> str:
        doc = (sys.modules[obj.__module__].__doc__ or obj.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    if args.what in ("methods", "all"):
        print("methods:")
        for name, cls in METHODS.items():
            print(f"  {name:16s} {first_line(cls)}")
    if args.what in ("tasks", "all"):
        print("tasks:")
        for name, cls in TASKS.items():
            arrow = "higher" if cls.higher_is_better else "lower"
            print(f"  {name:16s} [{cls.kind}, {cls.primary} ({arrow} is better)] {first_line(cls)}")
    return 0


# --- run -----------------------------------------------------------------------------------------


def build_configs(
    methods: list[str],
    tasks: list[str],
    seeds: list[int],
    preset: str,
    overrides: dict[str, str],
    grid: dict[str, list[str]] | None = None,
) -> list:
    """Resolve every (task, method, grid point, seed) config. An override or grid key applies to
    the pairs that have it (``lam`` reaches SA-RNN, not GRU); a key no selected pair has is an
    error. Configs that resolve identically (a grid key a method lacks) are run once."""
    from harness import config
    from harness.sweep import expand_grid

    cfgs, used, seen = [], set(), set()
    for t in tasks:
        for m in methods:
            for point in expand_grid(grid or {}):
                ov = {k: v for k, v in {**overrides, **point}.items() if config.accepts(m, t, k)}
                used |= set(ov)
                for s in seeds:
                    cfg = config.resolve(m, t, s, preset, ov)
                    if cfg.run_id not in seen:
                        seen.add(cfg.run_id)
                        cfgs.append(cfg)
    unused = [k for k in [*overrides, *(grid or {})] if k not in used]
    if unused:
        keys = sorted(
            {
                k
                for t in tasks
                for m in methods
                for k in config.valid_keys(config.default_sections(m, t))
            }
        )
        raise ConfigError(
            f"Unknown key '{unused[0]}' for the selected methods and tasks. "
            f"Valid keys: {', '.join(keys)}"
        )
    return cfgs


def cmd_run(args: argparse.Namespace) -> int:
    from harness import config
    from harness.registry import METHODS, TASKS
    from harness.results import Store, store_path

    console = _console()
    tasks = TASKS.resolve(args.tasks)
    methods = METHODS.resolve(args.methods)
    seeds = parse_seeds(args.seeds)
    overrides = config.parse_set(args.set or [])
    grid = parse_grid(args.grid or [])
    store = Store(store_path(args.out))
    store.check_writable()
    if args.threads < 0:
        raise ConfigError(f"--threads must be >= 0 (got {args.threads})")

    runnable, no_data = [], []
    for t in tasks:
        status = TASKS.get(t)(None, args.data_dir).data_status()
        if status and status.get("status") != "found":
            no_data.append((t, status))
        else:
            runnable.append(t)
    cfgs = build_configs(methods, runnable, seeds, args.preset, overrides, grid) if runnable else []
    validate(cfgs, args.data_dir)
    done = set() if args.force else store.recorded_ids()
    todo = [c for c in cfgs if c.run_id not in done]
    console.print(
        f"{len(cfgs)} runs: {len(cfgs) - len(todo)} already recorded in {store.path}, "
        f"{len(todo)} to run"
    )

    failed = 0
    if todo:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        executor = make_executor(args)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            bar = progress.add_task("running", total=len(todo))
            for cfg, rec in executor.map(todo):
                store.append(rec)
                progress.advance(bar)
                progress.console.print(_summary(cfg, rec))
                failed += rec["status"] != "ok"
    for t, st in no_data:
        console.print(f"[yellow]skipped task '{t}': {st.get('detail') or st.get('status')}[/]")
    if not args.no_report:
        _write_leaderboard([str(store.path)], Path(args.report), console)
    if args.match_skip is not None:
        _print_match_skip(store, cfgs, args.match_skip, list(grid), console)
    if failed:
        console.print(f"[red]{failed} run(s) failed; see the records in {store.path}[/]")
    return 1 if failed else 0


def validate(cfgs: list, data_dir: str | None) -> None:
    """Build each distinct model once so a bad combination (e.g. a hidden size a method cannot
    take) is reported before any run starts, not in the middle of a sweep."""
    from harness.train import build

    seen = set()
    for cfg in cfgs:
        if cfg.variant_id not in seen:
            seen.add(cfg.variant_id)
            try:
                build(cfg, data_dir)
            except HarnessError as e:
                raise ConfigError(f"{cfg.method} on {cfg.task} ({cfg.preset}): {e}") from None


def make_executor(args: argparse.Namespace):
    """The executor the run flags ask for."""
    from harness.executors import LocalExecutor, RayExecutor

    if args.executor == "ray":
        return RayExecutor(args.ray_address, args.data_dir, args.device, args.threads)
    if args.executor != "local":
        raise ConfigError(f"Unknown executor '{args.executor}'. Use local or ray")
    return LocalExecutor(args.data_dir, args.device, args.workers, args.threads)


def _summary(cfg, rec: dict[str, Any]) -> str:
    head = f"{cfg.method:>15s} | {cfg.task:<12s} seed {cfg.seed}"
    if rec["status"] != "ok":
        return f"[red]✗ {head}: {rec['error']}[/]"
    m = rec["metrics"]
    primary = rec["primary"]
    extra = f" skip {m['skip_pct']:.1f}%"
    if "mean_depth" in m:
        extra += f" depth {m['mean_depth']:.2f}"
    return (
        f"✓ {head}: {primary} {m.get(primary, float('nan')):.4g}{extra} "
        f"({rec['time']['train_s']:.1f}s)"
    )


def _print_match_skip(store, cfgs, target: float, swept: list[str], console) -> None:
    """Per method, the swept variant with Skip % nearest ``target`` (among this sweep's runs)."""
    from rich.table import Table

    from harness.sweep import match_skip

    ids = {c.run_id for c in cfgs}
    records = [r for r in store.read()[0] if r["run_id"] in ids]
    table = Table(title=f"variants nearest Skip {target:g} %")
    for col in ("task", "method", *swept, "Skip %", "metric", "seeds", "candidates"):
        table.add_column(col)
    for row in match_skip(records, target, swept):
        primary = next(
            k
            for k in row
            if k
            not in (
                "task",
                "preset",
                "method",
                "variant_id",
                "skip_pct",
                "seeds",
                "candidates",
                "values",
            )
        )
        table.add_row(
            row["task"],
            row["method"],
            *[str(row["values"][k]) for k in swept],
            f"{row['skip_pct']:.1f}",
            f"{primary} {row[primary]:.4g}",
            str(row["seeds"]),
            str(row["candidates"]),
        )
    console.print(table)


# --- compare -------------------------------------------------------------------------------------


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.table import Table

    from harness.reporting.compare import compare, load_strict, markdown, parse_tolerances

    res = compare(
        load_strict(args.reference), load_strict(args.current), parse_tolerances(args.tol or [])
    )
    console = _console()
    if res.drifted:
        table = Table(title="drifted measures")
        for col in ("run", "measure", "reference", "current", "tolerance"):
            table.add_column(col)
        for d in res.drifted:
            table.add_row(d.label, d.measure, str(d.reference), str(d.current), d.tolerance)
        console.print(table)
    for title, rows in (("missing from current", res.missing), ("new in current", res.new)):
        for r in rows:
            console.print(f"{title}: {r['method']}/{r['task']}/{r['preset']}/seed{r['seed']}")
    verdict = "[green]PASS[/]" if res.ok else "[red]FAIL[/]"
    console.print(
        f"{verdict}: {res.matched} matched, {len(res.drifted)} drifted, "
        f"{len(res.missing)} missing, {len(res.new)} new"
    )
    if args.markdown:
        write_report(Path(args.markdown), markdown(res, args.reference, args.current))
    return 0 if res.ok else 1


# --- report --------------------------------------------------------------------------------------


def _write_leaderboard(sources: list[str], out: Path, console, warn: bool = True) -> list[str]:
    """Write the leaderboard; return the malformed-line messages (listed in the report too)."""
    from harness.reporting.leaderboard import leaderboard_markdown
    from harness.results import load

    records, problems = load(sources)
    for p in problems if warn else ():
        console.print(f"[yellow]warning: {p}[/]")
    write_report(out, leaderboard_markdown(records, sources, problems))
    print(f"wrote {out}")
    return problems


def _malformed(problems: list[str]) -> HarnessError:
    more = f" (and {len(problems) - 1} more, listed in the report)" if len(problems) > 1 else ""
    return HarnessError(f"{problems[0]}{more}")


def cmd_report(args: argparse.Namespace) -> int:
    sources = args.records or ["results/runs.jsonl"]
    console = _console()
    if not args.paper:
        problems = _write_leaderboard(sources, Path(args.out), console, warn=False)
        if problems:  # the report is written without them; the input is still bad
            raise _malformed(problems)
        return 0
    from harness.reporting.paper import write_paper_report
    from harness.results import load

    records, problems = load(sources)
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    paths = write_paper_report(
        records,
        sources,
        args.out_dir,
        tasks=[args.task] if args.task else None,
        presets=[args.preset] if args.preset else None,
        formats=formats,
        figures=not args.no_figures,
    )
    for p in paths:
        print(p)
    if problems:
        raise _malformed(problems)
    return 0


# --- flops ---------------------------------------------------------------------------------------


def cmd_flops(args: argparse.Namespace) -> int:
    import torch

    from harness import config
    from harness.flops import FLOPS_PER_MAC, UNIT_NOTE, dense_sequence_macs, sequence_macs
    from harness.registry import METHODS
    from harness.train import build

    methods = METHODS.resolve(args.methods)
    overrides = config.parse_set(args.set or [])
    rows = []
    for cfg in build_configs(methods, [args.task], [0], args.preset, overrides):
        task, model = build(cfg, args.data_dir)
        x = task.splits(0).test.x[: args.batch]
        model.eval()
        with torch.no_grad():
            out = model(x)
        T = x.shape[1]
        row = {
            "method": cfg.method,
            "task": cfg.task,
            "preset": cfg.preset,
            "seq_len": T,
            "params_total": sum(p.numel() for p in model.parameters()),
            "params_method": model.method_param_count(),
            "macs_dense_fvcore": 0,
            "macs_dense": 0.0,
            "macs_effective": 0.0,
        }
        for layer, trace in zip(model.methods, out.layers, strict=True):
            row["macs_dense_fvcore"] += dense_sequence_macs(layer, T)
            macs = sequence_macs(layer, trace)
            row["macs_dense"] += float(macs["dense"].mean())
            row["macs_effective"] += float(macs["effective"].mean())
        for k in ("dense_fvcore", "dense", "effective"):
            row[f"flops_{k}"] = FLOPS_PER_MAC * row[f"macs_{k}"]
        rows.append(row)
    if args.json:
        print(json.dumps({"unit": UNIT_NOTE, "rows": rows}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"MACs/FLOPs per sequence, fresh models ({UNIT_NOTE})")
    for col in (
        "method",
        "T",
        "params",
        "dense MACs (fvcore)",
        "dense MACs",
        "effective MACs",
        "effective FLOPs",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["method"],
            str(r["seq_len"]),
            str(r["params_total"]),
            f"{r['macs_dense_fvcore']:.4g}",
            f"{r['macs_dense']:.4g}",
            f"{r['macs_effective']:.4g}",
            f"{r['flops_effective']:.4g}",
        )
    Console().print(table)
    return 0


# --- bench -------------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from harness import config

    command = "harness bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "harness bench"
    if args.speedup:
        return _bench_speedup(args, command)
    from harness.bench.suite import run_bench

    paths = run_bench(
        args.methods,
        args.task,
        args.preset,
        args.device,
        args.out,
        report=args.report,
        overrides=config.parse_set(args.set or []),
        rounds=args.rounds,
        warmup=args.warmup,
        threads=args.threads,
        data_dir=args.data_dir,
        command=command,
    )
    for p in paths:
        print(p)
    return 0


def _bench_speedup(args: argparse.Namespace, command: str) -> int:
    """Realized speedup of the skipping methods' fast inference paths (reports/SPEEDUP.md)."""
    import torch

    from harness.bench.speedup import measure_speedups, speedup_markdown

    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if args.device == "cuda" else "cpu"
    rows = measure_speedups(seq_len=args.seq_len, device=device)
    out = Path(args.report if args.report != "reports/TIMING.md" else "reports/SPEEDUP.md")
    write_report(out, speedup_markdown(rows, command, device))
    print(out)
    return 0


# --- data ----------------------------------------------------------------------------------------


def cmd_data(args: argparse.Namespace) -> int:
    from harness import data

    tasks = None
    if args.tasks:
        from harness.registry import TASKS

        tasks = TASKS.resolve(args.tasks)
    rows = data.status_rows(args.data_dir, verify=args.action == "verify", tasks=tasks)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"datasets under {data.data_root(args.data_dir)}")
    for col in ("task", "dataset", "status", "path", "source"):
        table.add_column(col)
    for r in rows:
        color = "green" if r["status"] == "found" else "red"
        table.add_row(
            r["task"],
            r["dataset"],
            f"[{color}]{r['status']}[/]",
            str(r["path"]),
            r.get("source", ""),
        )
    Console().print(table)
    # Missing data is an error when that dataset was asked for; corrupt data always is.
    bad = [r for r in rows if r["status"] != "found" and (tasks or r["status"] != "missing")]
    for r in bad:
        sys.stderr.write(f"error: {r['task']}: {r.get('detail') or r['status']}\n")
    return 2 if bad else 0


# --- parser --------------------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="harness",
        description="Benchmark harness for conditional-computation RNNs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="run 'harness COMMAND --help' for a command's options and examples",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("list", help="registered methods and tasks")
    s.add_argument("what", nargs="?", choices=["methods", "tasks", "all"], default="all")
    s.set_defaults(func=cmd_list)

    s = sub.add_parser(
        "run",
        help="train and test methods on tasks; write records + leaderboard",
        epilog=EPILOG_RUN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--tasks", default="all", help="comma-separated names or globs, or 'all'")
    s.add_argument("--methods", default="all", help="comma-separated names or globs, or 'all'")
    s.add_argument("--seeds", default="0", help="e.g. 0-4 or 0,1,2 (default 0)")
    s.add_argument("--preset", default="smoke", help="smoke | quick | paper (default smoke)")
    s.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config field (train.lr=0.01, hidden_size=64, lam=1e-3)",
    )
    s.add_argument("--out", default="results", help="records directory or .jsonl file")
    s.add_argument("--report", default="reports/LEADERBOARD.md", help="leaderboard to write")
    s.add_argument("--no-report", action="store_true", help="do not write the leaderboard")
    s.add_argument("--force", action="store_true", help="rerun runs already recorded")
    s.add_argument("--data-dir", default=None, help="dataset root (else $HARNESS_DATA_DIR)")
    s.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    s.add_argument(
        "--grid",
        action="append",
        metavar="KEY=V1,V2,...",
        help="sweep a config field over values (repeatable: cartesian product)",
    )
    s.add_argument(
        "--match-skip",
        type=float,
        default=None,
        metavar="TARGET",
        help="after the sweep, show per method the variant with Skip %% nearest TARGET",
    )
    s.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads per run (default 1; 0 = torch's default)",
    )
    s.add_argument(
        "--workers", type=int, default=1, help="local executor: processes, one torch thread each"
    )
    s.add_argument("--executor", default="local", help="local (default) or ray")
    s.add_argument(
        "--ray-address", default=None, help="Ray cluster address (default: a local Ray instance)"
    )
    s.set_defaults(func=cmd_run)

    s = sub.add_parser(
        "compare",
        help="drift gate: current records vs a reference",
        epilog="example:\n  harness compare results/reference/smoke.jsonl "
        "results/runs.jsonl --markdown drift.md\n"
        "exit codes: 0 no drift, 1 drift or missing runs, 2 bad input",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("reference")
    s.add_argument("current")
    s.add_argument(
        "--tol",
        action="append",
        metavar="MEASURE=ABS[:REL]",
        help="tolerance for a measure or prefix (metrics.mse=1e-3, macs=0:1e-2)",
    )
    s.add_argument("--markdown", default=None, help="also write the comparison as Markdown")
    s.set_defaults(func=cmd_compare)

    s = sub.add_parser(
        "report",
        help="leaderboard from records",
        epilog="examples:\n  harness report results/runs.jsonl\n"
        "  harness report results/runs.jsonl --paper --task adding --preset quick",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("records", nargs="*", help="records files or directories")
    s.add_argument("--out", default="reports/LEADERBOARD.md")
    s.add_argument(
        "--paper",
        action="store_true",
        help="paper tables (md/tex), figures, paper-vs-harness and significance",
    )
    s.add_argument("--out-dir", default="reports/paper", help="--paper: output directory")
    s.add_argument("--task", default=None, help="--paper: only this task")
    s.add_argument("--preset", default=None, help="--paper: only this preset")
    s.add_argument("--formats", default="md,tex", help="--paper: table formats")
    s.add_argument("--no-figures", action="store_true", help="--paper: tables only")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser(
        "flops",
        help="dense/effective MACs and params of fresh models",
        epilog="example:\n  harness flops --methods gru,lstm --task adding --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--methods", default="all")
    s.add_argument("--task", default="adding")
    s.add_argument("--preset", default="smoke")
    s.add_argument("--set", action="append", metavar="KEY=VALUE")
    s.add_argument("--batch", type=int, default=16, help="test sequences for effective MACs")
    s.add_argument("--data-dir", default=None)
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_flops)

    s = sub.add_parser(
        "bench",
        help="timing suite (pytest-benchmark) -> timing records + leaderboard; or --speedup",
        epilog="examples:\n  harness bench --methods all --task adding --preset smoke\n"
        "  harness bench --speedup   # realized speedup of the fast inference paths\n"
        "timings are advisory, never a pass/fail gate",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--methods", default="all")
    s.add_argument("--task", default="adding")
    s.add_argument("--preset", default="smoke")
    s.add_argument("--set", action="append", metavar="KEY=VALUE")
    s.add_argument("--device", default="auto", help="cpu | cuda | auto (CPU, plus CUDA if present)")
    s.add_argument("--out", default=".benchmarks", help="pytest-benchmark JSON + timing records")
    s.add_argument("--report", default="reports/TIMING.md")
    s.add_argument("--rounds", type=int, default=10)
    s.add_argument("--warmup", type=int, default=2)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--data-dir", default=None)
    s.add_argument(
        "--speedup",
        action="store_true",
        help="measure realized speedups instead (writes reports/SPEEDUP.md)",
    )
    s.add_argument("--seq-len", type=int, default=50, help="--speedup: sequence length")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser(
        "data",
        help="dataset status and checksums",
        epilog="examples:\n  harness data list\n  harness data verify --tasks ptb",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("action", choices=["list", "verify"])
    s.add_argument("--tasks", default=None)
    s.add_argument("--data-dir", default=None)
    s.set_defaults(func=cmd_data)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``harness`` console script."""
    args = make_parser().parse_args(argv)
    try:
        return args.func(args)
    except HarnessError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted; finished runs are recorded\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
