"""``harness run``: train and test methods on tasks; append the records; write the leaderboard."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.common import (
    EXECUTORS,
    add_command,
    console,
    data_dir_option,
    device_option,
    examples,
    int_at_least,
    methods_option,
    parse_seeds,
    preset_option,
    set_option,
    tasks_option,
    threads_option,
)

EPILOG = examples(
    "harness run --tasks all --preset smoke",
    "harness run --tasks TASK --methods 'METHOD,PREFIX-*' --seeds 0-4 --preset quick",
    "harness run --tasks TASK --methods METHOD --set train.lr=0.005 --set hidden_size=64",
    "harness run --tasks TASK --methods METHOD[,METHOD...] --grid lam=0,1e-4,1e-3,1e-2 \\",
    "    --seeds 0-2 --match-skip 76",
    "harness run --tasks all --seeds 0-4 --workers 8",
    "harness run --tasks all --preset paper --executor ray --ray-address ray://head:10001",
    note="method and task names: see 'harness list'\n"
    "runs already in the records are skipped (resume) unless --force",
)


def add_parser(subparsers: Any) -> None:
    """Add ``run`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "run",
        "train and test methods on tasks; write records + leaderboard",
        parents=[
            tasks_option(),
            methods_option(),
            preset_option(),
            set_option(),
            data_dir_option(),
            device_option("cpu", "where the runs train and test (default: %(default)s)"),
            threads_option("torch CPU threads per run (default: %(default)s; 0: torch's default)"),
        ],
        epilog=EPILOG,
    )
    s.add_argument(
        "--seeds", default="0", metavar="SEEDS", help="e.g. 0-4 or 0,1,2 (default: %(default)s)"
    )
    s.add_argument(
        "--grid",
        action="append",
        metavar="KEY=V1,V2,...",
        help="sweep a config field over values (repeatable: cartesian product); a key applies "
        "to the methods and tasks that have it",
    )
    s.add_argument(
        "--match-skip",
        type=float,
        default=None,
        metavar="TARGET",
        help="after the sweep, show per method the variant with Skip %% nearest TARGET",
    )
    s.add_argument(
        "--out",
        default="results",
        metavar="PATH",
        help="records directory (its runs.jsonl) or .jsonl file (default: %(default)s)",
    )
    s.add_argument(
        "--report",
        default="reports/LEADERBOARD.md",
        metavar="FILE",
        help="leaderboard to write from all the records (default: %(default)s)",
    )
    s.add_argument("--no-report", action="store_true", help="do not write the leaderboard")
    s.add_argument("--force", action="store_true", help="rerun runs already recorded (appended)")
    s.add_argument(
        "--executor",
        default="local",
        choices=EXECUTORS,
        help="local: in this process or --workers processes; ray: Ray tasks (default: %(default)s)",
    )
    s.add_argument(
        "--workers",
        type=int_at_least(1),
        default=1,
        metavar="N",
        help="local executor: runs in parallel processes (default: %(default)s: in this process)",
    )
    s.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="ray executor: cluster address (default: a local Ray instance)",
    )
    s.set_defaults(func=cmd_run)


def make_executor(
    executor: str,
    data_dir: str | None,
    device: str,
    workers: int = 1,
    threads: int = 1,
    ray_address: str | None = None,
) -> Any:
    """The executor ``--executor`` names, set up with the run options.

    Args:
        executor: ``local`` or ``ray``.
        data_dir: dataset root, passed to every run.
        device: ``cpu``, ``cuda`` or ``auto``.
        workers: local executor: processes.
        threads: torch threads per run.
        ray_address: ray executor: the cluster (None: a local Ray instance).

    Returns:
        A ``LocalExecutor`` or a ``RayExecutor``.

    Raises:
        ConfigError: an unknown executor.
    """
    from harness.errors import ConfigError
    from harness.executors import LocalExecutor, RayExecutor

    if executor == "ray":
        return RayExecutor(ray_address, data_dir, device, threads)
    if executor != "local":
        raise ConfigError(f"Unknown executor '{executor}'. Use {' or '.join(EXECUTORS)}")
    return LocalExecutor(data_dir, device, workers, threads)


def cmd_run(args: argparse.Namespace) -> int:
    """Run what is not recorded yet; 0 if every run succeeded, 1 if any failed."""
    from harness import config
    from harness.cli.report import write_leaderboard
    from harness.registry import METHODS, TASKS
    from harness.results import Store, store_path
    from harness.sweep import build_configs, parse_grid, validate

    out = console()
    tasks = TASKS.resolve(args.tasks)
    methods = METHODS.resolve(args.methods)
    seeds = parse_seeds(args.seeds)
    overrides = config.parse_set(args.set or [])
    grid = parse_grid(args.grid or [])
    store = Store(store_path(args.out))
    store.check_writable()

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
    out.print(
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

        executor = make_executor(
            args.executor, args.data_dir, args.device, args.workers, args.threads, args.ray_address
        )
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=out,
            transient=False,
        ) as progress:
            bar = progress.add_task("running", total=len(todo))
            for cfg, rec in executor.map(todo):
                store.append(rec)
                progress.advance(bar)
                progress.console.print(_summary(cfg, rec))
                failed += rec["status"] != "ok"
    for t, st in no_data:
        out.print(f"[yellow]skipped task '{t}': {st.get('detail') or st.get('status')}[/]")
    if not args.no_report:
        write_leaderboard([str(store.path)], Path(args.report), out)
    if args.match_skip is not None:
        _print_match_skip(store, cfgs, args.match_skip, list(grid), out)
    if failed:
        out.print(f"[red]{failed} run(s) failed; see the records in {store.path}[/]")
    return 1 if failed else 0


def _summary(cfg: Any, rec: dict[str, Any]) -> str:
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


# a match_skip row holds its primary metric under the metric's own name, beside these keys
_MATCH_SKIP_KEYS = ("task", "preset", "method", "variant_id", "skip_pct", "seeds", "candidates")


def _print_match_skip(
    store: Any, cfgs: list[Any], target: float, swept: list[str], out: Any
) -> None:
    """Per method, the swept variant with Skip % nearest ``target`` (among this sweep's runs)."""
    from rich.table import Table

    from harness.sweep import match_skip

    ids = {c.run_id for c in cfgs}
    records = [r for r in store.read()[0] if r["run_id"] in ids]
    table = Table(title=f"variants nearest Skip {target:g} %")
    for col in ("task", "method", *swept, "Skip %", "metric", "seeds", "candidates"):
        table.add_column(col)
    for row in match_skip(records, target, swept):
        primary = next(k for k in row if k not in (*_MATCH_SKIP_KEYS, "values"))
        table.add_row(
            row["task"],
            row["method"],
            *[str(row["values"][k]) for k in swept],
            f"{row['skip_pct']:.1f}",
            f"{primary} {row[primary]:.4g}",
            str(row["seeds"]),
            str(row["candidates"]),
        )
    out.print(table)
