"""``harness run``: train and test methods on tasks; append the records; write the leaderboard."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.common import (
    EXECUTORS,
    add_command,
    check_writable,
    console,
    data_dir_option,
    device_option,
    examples,
    float_at_least,
    int_at_least,
    methods_option,
    parse_seeds,
    preset_option,
    set_option,
    tasks_option,
    threads_option,
)
from harness.executors import MAX_WORKERS

EPILOG = examples(
    "harness run --tasks all --preset smoke",
    "harness run --tasks TASK --methods 'METHOD,PREFIX-*' --seeds 0-4 --preset quick",
    "harness run --tasks TASK --methods METHOD --set train.lr=0.005 --set hidden_size=64",
    "harness run --tasks TASK --methods METHOD[,METHOD...] --grid lam=0,1e-4,1e-3,1e-2 \\",
    "    --seeds 0-2 --match-skip 76",
    "harness run --tasks all --seeds 0-4 --workers 8",
    "harness run --tasks all --preset paper --executor ray --ray-address ray://head:10001",
    "harness run --suite ssa-table4 --dry-run",
    "harness run --config sweep.toml --seeds 0-2 --out results/mine",
    note="method and task names: see 'harness list'; suites: 'harness run --suite list'\n"
    "runs already in the records are skipped (resume) unless --force\n"
    "exit codes: 0 every run succeeded, 1 some run failed, 2 bad input (checked before any run)\n"
    "or a record that could not be written",
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
        type=float_at_least(0.0),
        default=None,
        metavar="TARGET",
        help="after the sweep, show per method the variant with TEST Skip %% nearest TARGET "
        "(test-based; to choose on validation: harness report --select val-skip-band:T:W)",
    )
    s.add_argument(
        "--select",
        default=None,
        metavar="RULE",
        help="the leaderboard written after the sweep keeps one row per method: the variant RULE "
        "picks on the validation split (best-val, or val-skip-band:TARGET:WIDTH: the best "
        "validation metric among variants whose validation Skip %% is within TARGET +- WIDTH; "
        "or val-skip-nearest:TARGET: validation Skip %% nearest TARGET); default: every variant",
    )
    s.add_argument(
        "--out",
        default="results",
        metavar="PATH",
        help="records directory (its runs.jsonl) or .jsonl file (default: %(default)s)",
    )
    s.add_argument(
        "--report",
        default=None,
        metavar="FILE",
        help="leaderboard to write from all the records of --out (default: next to them: "
        "DIR/LEADERBOARD.md for --out DIR, X.md for --out X.jsonl)",
    )
    s.add_argument(
        "--no-report", action="store_true", help="neither write nor print the leaderboard"
    )
    s.add_argument("--force", action="store_true", help="rerun runs already recorded (appended)")
    s.add_argument(
        "--retry-failed",
        action="store_true",
        help="rerun the runs recorded as failed (appended; the latest record of a run counts)",
    )
    s.add_argument(
        "--keep-stale",
        action="store_true",
        help="count records made by other code of their method as done (default: rerun them)",
    )
    s.add_argument(
        "--allow-unverified-data",
        action="store_true",
        help="run on data that differ from the published checksums (recorded as unverified, "
        "under their own digest)",
    )
    s.add_argument(
        "--executor",
        default="local",
        choices=EXECUTORS,
        help="local: in this process or --workers processes; ray: Ray tasks (default: %(default)s)",
    )
    s.add_argument(
        "--workers",
        type=int_at_least(1, MAX_WORKERS),
        default=1,
        metavar="N",
        help="local executor: runs in parallel processes (default: %(default)s: in this process; "
        f"at most {MAX_WORKERS})",
    )
    s.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="ray executor: cluster address (default: a local Ray instance)",
    )
    s.add_argument(
        "--log-dir",
        default=None,
        metavar="DIR",
        help="also write TensorBoard event files per run under DIR (needs the tensorboard extra)",
    )
    s.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="a sweep file (TOML; YAML with PyYAML) holding these options; flags given beside "
        "it override it",
    )
    s.add_argument(
        "--suite",
        default=None,
        metavar="NAME",
        help="a shipped sweep file, one per seed-paper table ('--suite list' lists them)",
    )
    s.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved runs (recorded or to run) and write nothing",
    )
    s.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print every epoch's losses (runs in this process only: not with --workers or Ray)",
    )
    s.set_defaults(func=cmd_run)


def make_executor(
    executor: str,
    data_dir: str | None,
    device: str,
    workers: int = 1,
    threads: int = 1,
    ray_address: str | None = None,
    log_dir: str | None = None,
) -> Any:
    """The executor ``--executor`` names, set up with the run options.

    Args:
        executor: ``local`` or ``ray``.
        data_dir: dataset root, passed to every run.
        device: ``cpu``, ``cuda`` or ``auto``.
        workers: local executor: processes.
        threads: torch threads per run.
        ray_address: ray executor: the cluster (None: a local Ray instance).
        log_dir: TensorBoard events per run under this directory (None: none).

    Returns:
        A ``LocalExecutor`` or a ``RayExecutor``.

    Raises:
        ConfigError: an unknown executor.
    """
    from harness.errors import ConfigError
    from harness.executors import LocalExecutor, RayExecutor

    if executor == "ray":
        return RayExecutor(ray_address, data_dir, device, threads, log_dir)
    if executor != "local":
        raise ConfigError(f"Unknown executor '{executor}'. Use {' or '.join(EXECUTORS)}")
    return LocalExecutor(data_dir, device, workers, threads, log_dir)


def cmd_run(args: argparse.Namespace) -> int:
    """Run what is not recorded yet; 0 if every run succeeded, 1 if any failed."""
    from harness import config
    from harness.cli.report import write_leaderboard
    from harness.cli.store import SweepStore, say_resume
    from harness.data import attach_identity
    from harness.outputs import refuse_overwrite
    from harness.results import Store, output_store_path, plan_resume
    from harness.suites import plan
    from harness.sweep import parse_grid, validate

    out = console()
    if args.suite == "list":
        return list_suites()
    sweep, given = apply_sweep_file(args)
    check_options(args)
    select = None
    if args.select:  # a bad rule is refused before anything runs
        from harness.selection import parse_rule

        select = parse_rule(args.select)
    seeds = parse_seeds(args.seeds)
    blocks = plan(
        sweep,
        args.methods,
        args.tasks,
        config.parse_set(args.set or []),
        parse_grid(args.grid or []),
        given,
    )
    tasks = list(dict.fromkeys(t for _, ts, _, _ in blocks for t in ts))
    swept = list(dict.fromkeys(k for *_, grid in blocks for k in grid))
    if args.log_dir and not args.dry_run:
        from harness.tracking import check_log_dir

        check_log_dir(args.log_dir)
    store = Store(output_store_path(args.out))
    named = (
        args.tasks
        if sweep is None or not sweep.parts
        else ",".join(p.tasks or args.tasks for p in sweep.parts)
    )
    runnable, no_data = usable_tasks(named, tasks, args.data_dir)
    cfgs = sweep_configs(blocks, runnable, seeds, args.preset)
    cfgs, data_notes = attach_identity(cfgs, args.data_dir, args.allow_unverified_data)
    for note in data_notes:
        out.print(f"[yellow]{note}[/]")
    validate(cfgs, args.data_dir)
    if not args.dry_run:  # after every check of the input: bad input creates no folder
        store.check_writable(create=False)
        store.check_target()  # an existing file that is not a records store is refused
        if not args.no_report:  # the leaderboard: never over the store, writable before training
            board = report_path(args.out, args.report)
            option = "--report" if args.report else "the leaderboard"
            refuse_overwrite(board, option, [("the records store (--out)", store.path)])
            check_writable(board)
        store.check_writable()
    swept_store = SweepStore(store, out)  # before reading: records from now on are seen
    recorded = store.read()[0]
    resume = plan_resume(
        cfgs,
        recorded,
        force=args.force,
        retry_failed=args.retry_failed,
        keep_stale=args.keep_stale,
    )
    todo = resume.todo
    say_resume(resume, out)
    out.print(
        f"{len(cfgs)} runs: {len(cfgs) - len(todo)} already recorded in {store.path}, "
        f"{len(todo)} to run"
    )
    labels = variant_labels(cfgs)
    if args.dry_run:
        print_dry_run(cfgs, {c.run_id for c in todo}, labels)
        if todo:
            out.print(estimate_line(todo, recorded), highlight=False)
        for t, reason in no_data:
            out.print(f"[yellow]skipped task '{t}': {reason}[/]", highlight=False)
        out.print("dry run: nothing was run or written")
        return 0
    provenance = {"argv": ["harness", *getattr(args, "argv", [])]}
    provenance["sweep"] = sweep_record(args, sweep, seeds, blocks)

    failed = 0
    if todo:
        executor = make_executor(
            args.executor,
            args.data_dir,
            args.device,
            args.workers,
            args.threads,
            args.ray_address,
            args.log_dir,
        )
        serial = args.executor == "local" and args.workers == 1
        # concurrent sweeps on the store split the runs; a full disk keeps records aside
        with SweepProgress(out, todo, labels, serial, args.verbose) as progress, swept_store:
            claimed = swept_store.claimed(todo)
            runs = executor.map(claimed, [progress.on_epoch]) if serial else executor.map(claimed)
            for cfg, rec in runs:
                rec.update(provenance)
                swept_store.append(rec)
                progress.done(cfg, rec)
                failed += rec["status"] != "ok"
    all_written = swept_store.finish()
    for t, reason in no_data:
        out.print(f"[yellow]skipped task '{t}': {reason}[/]", highlight=False)
    if not args.no_report:
        board = report_path(args.out, args.report)
        write_leaderboard([str(store.path)], board, out, select=select)
        print(board.read_text())
    if args.match_skip is not None:
        _print_match_skip(store, cfgs, args.match_skip, swept, out)
    if failed:
        out.print(f"[red]{failed} run(s) failed; see the records in {store.path}[/]")
    return 2 if not all_written else 1 if failed else 0


def usable_tasks(
    spec: str, tasks: list[str], data_dir: str | None
) -> tuple[list[str], list[tuple[str, str]]]:
    """The tasks whose data can be read, and ``(task, reason)`` for the others.

    Args:
        spec: ``--tasks`` as given: a task it names literally (not through ``all`` or a glob) is
            one the user asked for.
        tasks: the resolved task names.
        data_dir: the data root.

    Raises:
        DataError: a task named literally whose data are missing or corrupt (one line: why, and
            how to get them).
    """
    from harness.data import task_row
    from harness.errors import DataError
    from harness.registry import TASKS

    named = {p.strip() for p in spec.split(",")} - {"all"}
    runnable, skipped = [], []
    for t in tasks:
        row = task_row(t, TASKS.get(t)(None, data_dir))
        if row is None or row["status"] == "found":
            runnable.append(t)
            continue
        reason = f"{(row['detail'] or row['status']).rstrip('.')}; or: harness data fetch {t}"
        if t in named:
            raise DataError(f"task '{t}': {reason}")
        skipped.append((t, reason))
    return runnable, skipped


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
    table = Table(title=f"variants nearest test Skip {target:g} % (test-based)")
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
    out.print("to choose on validation data instead: harness report --select val-skip-band:T:W")


# --- sweep files, option checks, dry runs, progress ---------------------------------------------

# the options a sweep file may hold, as argparse dests (harness.suites.OPTION_KEYS)
_FILE_DESTS = (
    "tasks",
    "methods",
    "seeds",
    "preset",
    "set",
    "grid",
    "match_skip",
    "select",
    "executor",
    "workers",
    "threads",
    "device",
    "data_dir",
    "out",
    "report",
    "no_report",
    "force",
    "ray_address",
)


def given_options(argv: list[str] | None) -> set[str]:
    """The ``harness run`` options (argparse dests) given on the command line ``argv``.

    The command line is parsed again with every default suppressed, so an option set to its
    default value counts as given, and an abbreviated flag (``--work 2``) too.

    Args:
        argv: the arguments after the program name (``["run", ...]``); None: none given.

    Returns:
        The dests of the options present.
    """
    if not argv:
        return set()
    from harness.cli import make_parser

    parser = make_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices["run"]._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"command", "func"}


def apply_sweep_file(args: argparse.Namespace) -> tuple[Any, set[str]]:
    """Fill ``args`` from ``--config`` / ``--suite``, leaving the options given as flags alone.

    ``--set`` and ``--grid`` are merged with the file's key by key later (``harness.suites.plan``)
    and stay as the flags gave them here.

    Args:
        args: the parsed ``harness run`` arguments (with ``argv``, the command line).

    Returns:
        The sweep file (None without one) and the options given as flags.

    Raises:
        ConfigError: both ``--config`` and ``--suite``, an unknown suite, or a bad file.
    """
    from harness import suites
    from harness.errors import ConfigError

    given = given_options(getattr(args, "argv", None))
    if args.config and args.suite:
        raise ConfigError("give --config FILE or --suite NAME, not both")
    if not (args.config or args.suite):
        return None, given
    sweep = suites.load(args.config or suites.suite_path(args.suite))
    for dest, value in sweep.options.items():
        if dest not in given and dest not in ("set", "grid"):
            setattr(args, dest, value)
    return sweep, given


def check_options(args: argparse.Namespace) -> None:
    """Reject option values and combinations that cannot work, before anything starts.

    Raises:
        ConfigError: an unknown executor, ``--executor ray`` without Ray installed,
            ``--ray-address`` or ``--workers`` with the wrong executor, ``--workers`` below 1, or
            ``--device cuda`` on a machine without CUDA (local executor).
    """
    import importlib.util

    from harness.errors import ConfigError

    if args.executor not in EXECUTORS:
        raise ConfigError(f"Unknown executor '{args.executor}'. Use {' or '.join(EXECUTORS)}")
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1 (got {args.workers})")
    if args.ray_address and args.executor != "ray":
        raise ConfigError("--ray-address is only used with --executor ray")
    if args.executor == "ray":
        if args.workers != 1:
            raise ConfigError(
                "--workers is for the local executor; Ray runs as many runs as its CPUs allow"
            )
        try:
            found = importlib.util.find_spec("ray") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ConfigError("--executor ray needs Ray: pip install 'condrnn-harness[ray]'")
    elif args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda requested but no CUDA device is available")


def sweep_configs(
    blocks: list[tuple[list[str], list[str], dict[str, str], dict[str, list[str]]]],
    runnable: list[str],
    seeds: list[int],
    preset: str,
) -> list[Any]:
    """The runs of every block (``harness.suites.plan``) on the runnable tasks, each run once."""
    from harness.sweep import build_configs

    cfgs, seen = [], set()
    for methods, tasks, overrides, grid in blocks:
        ts = [t for t in tasks if t in runnable]
        for cfg in build_configs(methods, ts, seeds, preset, overrides, grid) if ts else []:
            if cfg.run_id not in seen:
                seen.add(cfg.run_id)
                cfgs.append(cfg)
    return cfgs


def variant_labels(cfgs: list[Any]) -> dict[str, str]:
    """Per run id, the config fields (not the seed) that vary among its method's runs on its task.

    Three runs of one method at three lambda values are labelled ``lam=0``, ``lam=0.001``, ...;
    a method run once per seed gets an empty label.
    """
    from harness.results import flat_config

    groups: dict[tuple[str, str], list[Any]] = {}
    for c in cfgs:
        groups.setdefault((c.method, c.task), []).append(c)
    labels = {}
    for group in groups.values():
        flats = {c.run_id: flat_config({"config": c.to_dict()}) for c in group}
        first = next(iter(flats.values()))
        varying = [k for k in first if len({repr(f.get(k)) for f in flats.values()}) > 1]
        for rid, flat in flats.items():
            labels[rid] = " ".join(f"{k}={flat.get(k)}" for k in varying)
    return labels


def fmt_duration(seconds: float) -> str:
    """A duration as a person reads it: ``0.4 s``, ``12 s``, ``3 min 20 s``, ``2 h 05 min``."""
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def estimate_line(todo: list[Any], records: list[dict[str, Any]]) -> str:
    """``--dry-run``'s estimate of the time the runs to run would take, from the store's times."""
    from harness.sweep import estimate_seconds

    seconds, n = estimate_seconds(todo, records)
    known = n["variant"] + n["method"]
    if not known:
        return "estimated time: unknown (no recorded run of these variants or methods in the store)"
    parts = [f"{n['variant']} from recorded seeds of the same variant"]
    if n["method"]:
        parts.append(f"{n['method']} from the same method, task and preset")
    text = f"estimated time: {fmt_duration(seconds)} in one process ({', '.join(parts)}"
    if n["unknown"]:
        text += f"; {n['unknown']} run(s) with no recorded run like them, not counted"
    return text + "; times as recorded, machine load included)"


def print_dry_run(cfgs: list[Any], todo_ids: set[str], labels: dict[str, str]) -> None:
    """The resolved runs, one line each on stdout: status, method, task, seed, run id, variant."""
    rows = [("status", "method", "task", "seed", "run id", "variant")]
    rows += [
        (
            "to run" if c.run_id in todo_ids else "recorded",
            c.method,
            c.task,
            str(c.seed),
            c.run_id,
            labels.get(c.run_id, ""),
        )
        for c in cfgs
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[5])


def list_suites() -> int:
    """Print the shipped suites with their descriptions (``harness run --suite list``)."""
    from harness import suites

    for name in suites.suite_names():
        sweep = suites.load(suites.suite_path(name))
        print(f"{name:14s} {sweep.description}")
    return 0


def report_path(out: str, report: str | None) -> Path:
    """Where ``harness run`` writes its leaderboard: ``--report``, else next to ``--out``.

    ``--out DIR`` (records in ``DIR/runs.jsonl``) gives ``DIR/LEADERBOARD.md``; ``--out X.jsonl``
    gives ``X.md`` beside it.
    """
    from harness.results import store_path

    if report:
        return Path(report)
    store = store_path(out)
    return (
        store.with_suffix(".md")
        if Path(out).suffix == ".jsonl"
        else store.parent / ("LEADERBOARD.md")
    )


def sweep_record(args: argparse.Namespace, sweep: Any, seeds: list[int], blocks: list[Any]) -> dict:
    """The resolved sweep (after the flags' overrides), as stored in each of its records."""
    return {
        "config": sweep.path if sweep else None,
        "suite": args.suite,
        "preset": args.preset,
        "seeds": seeds,
        "match_skip": args.match_skip,
        "select": args.select,
        "blocks": [{"methods": m, "tasks": t, "set": s, "grid": g} for m, t, s, g in blocks],
    }


class SweepProgress:
    """The progress display of a sweep: the run in progress, its epoch, an ETA, per-run lines.

    In this process (one worker) the run in progress and its epoch are shown (``on_epoch``, a
    ``harness.train.train_model`` callback); with ``--workers`` or Ray the runs train in other
    processes, and the display shows how many have finished, the ETA and a line per finished run.

    Args:
        console: the rich console.
        todo: the runs, in the order a serial executor runs them.
        labels: variant labels (``variant_labels``).
        serial: the runs train in this process, one after the other.
        verbose: print every epoch's losses.
    """

    def __init__(
        self, console: Any, todo: list[Any], labels: dict[str, str], serial: bool, verbose: bool
    ) -> None:
        import time

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.todo, self.labels, self.serial, self.verbose = todo, labels, serial, verbose
        self.finished = 0
        self.started = time.monotonic()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[eta]}"),
            console=console,
            transient=False,
        )
        self.bar = self.progress.add_task(self._current(), total=len(todo), eta="")

    def __enter__(self) -> SweepProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def name(self, cfg: Any) -> str:
        """``method | task seed N variant``."""
        label = self.labels.get(cfg.run_id, "")
        return f"{cfg.method} | {cfg.task} seed {cfg.seed}" + (f" {label}" if label else "")

    def _current(self, epoch: str = "") -> str:
        if self.finished >= len(self.todo):
            return "done"
        if not self.serial:
            return "running"
        return f"running {self.name(self.todo[self.finished])}{epoch}"

    def on_epoch(self, epoch: int, row: dict[str, Any]) -> None:
        """After each epoch of the run in progress (serial): show it; with verbose, its losses."""
        cfg = self.todo[min(self.finished, len(self.todo) - 1)]
        self.progress.update(
            self.bar, description=self._current(f" epoch {epoch + 1}/{cfg.train.epochs}")
        )
        if self.verbose:
            values = " ".join(
                f"{k} {v:.4g}" for k, v in row.items() if k != "epoch" and isinstance(v, float)
            )
            self.progress.console.print(
                f"  {self.name(cfg)} epoch {epoch + 1}/{cfg.train.epochs}: {values}",
                highlight=False,
            )

    def done(self, cfg: Any, rec: dict[str, Any]) -> None:
        """A run finished: its line, the bar, the ETA of the rest."""
        import time

        self.finished += 1
        elapsed = time.monotonic() - self.started
        left = len(self.todo) - self.finished
        eta = f"ETA {fmt_duration(elapsed / self.finished * left)}" if left else ""
        self.progress.update(self.bar, advance=1, description=self._current(), eta=eta)
        self.progress.console.print(summary(self.name(cfg), rec), highlight=False)


def summary(name: str, rec: dict[str, Any]) -> str:
    """One finished run as a line: its name and variant, primary metric, Skip %, duration."""
    if rec["status"] != "ok":
        return f"[red]✗ {name}: {rec['error']}[/]"
    m = rec["metrics"]
    primary = rec["primary"]
    extra = f" skip {m['skip_pct']:.1f}%"
    if "mean_depth" in m:
        extra += f" depth {m['mean_depth']:.2f}"
    t = rec.get("time", {})
    took = fmt_duration(t.get("train_s", 0.0) + t.get("eval_s", 0.0))
    return f"✓ {name}: {primary} {m.get(primary, float('nan')):.4g}{extra} ({took})"
