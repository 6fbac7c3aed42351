"""``harness run``: train and test methods on tasks; append the records; write the leaderboard."""

from __future__ import annotations

import argparse
from typing import Any

from harness import api
from harness.cli.board import FORMATS, print_board
from harness.cli.common import (
    add_command,
    check_writable,
    checkpoint_options,
    checkpoint_settings,
    console,
    data_dir_option,
    device_option,
    examples,
    float_at_least,
    include_option,
    int_at_least,
    methods_option,
    parse_seeds,
    preset_option,
    set_option,
    tasks_option,
    threads_option,
)
from harness.cli.progress import (
    SweepProgress,
    estimate_line,
    print_dry_run,
    print_match_skip,
    say_finish,
    say_resume,
    stopped_line,
)
from harness.components import config
from harness.components.selection import parse_rule
from harness.errors import ConfigError, HarnessError, WriteFailed
from harness.executors import EXECUTORS, MAX_WORKERS
from harness.executors.submitit import INSTALL as SUBMITIT_INSTALL
from harness.executors.submitit import LIMITS as SLURM_LIMITS
from harness.persistence.outputs import leaderboard_path, refuse_overwrite
from harness.pipeline import suites
from harness.pipeline.suites import plan
from harness.pipeline.sweep import parse_grid
from harness.pipeline.tracking import check_log_dir
from harness.references import named_outright

# --executor submitit: (dest, metavar, help); the numbers' bounds are SLURM_LIMITS
SLURM_FLAGS = (
    ("slurm_partition", "NAME", "the jobs' Slurm partition (default: the cluster's)"),
    ("slurm_time", "MINUTES", "each job's time limit (default: 1440, a day; at most 43200)"),
    ("slurm_cpus", "N", "CPUs per job (default: --threads)"),
    ("slurm_gpus", "N", "GPUs per job (default: 1 with --device cuda, else 0)"),
    ("slurm_mem", "GB", "memory per job (default: the partition's)"),
    (
        "slurm_array_parallelism",
        "N",
        "jobs queued or running at once, submitted as job arrays (default: 256 on Slurm; "
        "without Slurm, as many as this machine's CPUs hold at --slurm-cpus each)",
    ),
    (
        "slurm_folder",
        "DIR",
        "the jobs' pickles and logs, on a filesystem the nodes share (default: "
        "$XDG_CACHE_HOME/condrnn-harness/submitit, else ~/.cache/condrnn-harness/submitit: "
        "outside the checkout, in the home directory that clusters share)",
    ),
)

EPILOG = examples(
    "harness run --tasks all --preset smoke",
    "harness run --tasks TASK --methods 'METHOD,PREFIX-*' --seeds 0-4 --preset quick",
    "harness run --tasks TASK --methods METHOD --set train.lr=0.005 --set hidden_size=64",
    "harness run --tasks TASK --methods METHOD[,METHOD...] --grid lam=0,1e-4,1e-3,1e-2 \\",
    "    --seeds 0-2 --match-skip 76",
    "harness run --tasks all --seeds 0-4 --workers 8",
    "harness run --tasks TASK --methods 'all,ref:*' --seeds 0-4",
    "harness run --tasks all --preset paper --executor ray --ray-address ray://head:10001",
    "harness run --suite ssa-table4 --executor submitit --slurm-partition gpu --slurm-time 240",
    "harness run --suite ssa-table4 --dry-run",
    "harness run --config sweep.toml --seeds 0-2 --out results/mine",
    note="method and task names: see 'harness list'; suites: 'harness run --suite list'\n"
    "runs already in the records are skipped (resume) unless --force\n"
    "exit codes: 0 every run succeeded, 1 some run failed, 2 bad input (checked before any run)\n"
    "or a write that failed (a full disk): the sweep stops, its finished runs recorded or kept\n"
    "aside, one line says where",
)


def add_parser(subparsers: Any) -> None:
    """Add ``run`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "run",
        "train and test methods on tasks; write records + leaderboard",
        parents=[
            tasks_option(),
            methods_option(
                "; reference predictors: 'ref:*' or ref:NAME, beside them too ('all,ref:*'; "
                "see 'harness list references')"
            ),
            preset_option(),
            set_option(),
            data_dir_option(),
            device_option("cpu", "where the runs train and test (default: %(default)s)"),
            threads_option("torch CPU threads per run (default: %(default)s; 0: torch's default)"),
            include_option(),
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
    s.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="what is printed at the end: table, the leaderboard's main columns fitted to the "
        "terminal; md, the leaderboard's Markdown as written (default: table in a terminal, md "
        "when stdout is a pipe or a file)",
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
        choices=EXECUTORS.names(),
        help="local: in this process, or with --workers N > 1 the pool of N processes; pool: "
        "worker processes; ray: Ray tasks; submitit: Slurm jobs, --slurm-* (default: "
        "%(default)s; 'harness list executors')",
    )
    s.add_argument(
        "--workers",
        type=int_at_least(1, MAX_WORKERS),
        default=1,
        metavar="N",
        help="local executor: runs in parallel processes (default: %(default)s: in this process; "
        f"at most {MAX_WORKERS}); with --dry-run, the estimate on N parallel workers too",
    )
    s.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="ray executor: cluster address; auto: the one ray start left (default: a new Ray "
        "instance on this machine, listening on 127.0.0.1 only)",
    )
    slurm = s.add_argument_group(
        "--executor submitit (Slurm jobs where srun is on PATH, else local processes)"
    )
    for dest, metavar, text in SLURM_FLAGS:
        kind = int_at_least(*SLURM_LIMITS[dest]) if dest in SLURM_LIMITS else str
        flag = "--" + dest.replace("_", "-")
        slurm.add_argument(flag, type=kind, default=None, metavar=metavar, help=text)
    slurm.add_argument(
        "--slurm-local",
        action="store_true",
        help="run the jobs as processes on this machine even where Slurm is installed (default: "
        "submitted with sbatch wherever srun is on PATH)",
    )
    checkpoint_options(s)
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
    s.set_defaults(func=cmd_run, parser=s)


def cmd_run(args: argparse.Namespace) -> int:
    """Plan the sweep, run what is not recorded yet, write the leaderboard.

    Returns:
        0 every run succeeded, 1 some run failed (bad input, or a write that failed and stopped
        the sweep, raises a HarnessError: one line, exit 2).
    """
    out = console()
    if args.suite == "list":
        return list_suites()
    sweep_file, given = apply_sweep_file(args)
    check_options(args)
    if args.select:  # a bad rule is refused before anything runs
        parse_rule(args.select)
    parts = sweep_file.parts if sweep_file is not None else []
    named = ",".join(p.tasks or args.tasks for p in parts) if parts else args.tasks
    named_m = ",".join([*(p.methods or args.methods for p in parts), args.methods])
    spec = api.SweepSpec(
        blocks=[
            api.Block(m, t, s, g)
            for m, t, s, g in plan(
                sweep_file,
                args.methods,
                args.tasks,
                config.parse_set(args.set or []),
                parse_grid(args.grid or []),
                given,
            )
        ],
        seeds=parse_seeds(args.seeds),
        preset=args.preset,
        named_tasks={p.strip() for p in named.split(",")} - {"all"},
        named_methods=named_outright(named_m),
        config=sweep_file.path if sweep_file else None,
        suite=args.suite,
        select=args.select,
        match_skip=args.match_skip,
    )
    if args.log_dir and not args.dry_run:
        check_log_dir(args.log_dir)
    sweep = api.plan_sweep(spec, args.data_dir, args.allow_unverified_data)
    for note in sweep.notes:
        out.print(f"[yellow]{note}[/]")
    store = api.open_store(args.out, create=False)  # after every check: bad input creates nothing
    board = None
    if not args.no_report and not args.dry_run:  # never over the store; writable before training
        board = leaderboard_path(args.out, args.report)
        option = "--report" if args.report else "the leaderboard"
        refuse_overwrite(board, option, [("the records store (--out)", store.path)])
        check_writable(board)
    if args.dry_run:
        resume, recorded = api.plan_runs(
            sweep, store, force=args.force, retry_failed=args.retry_failed,
            keep_stale=args.keep_stale,
        )  # fmt: skip
        say_resume(resume, out)
        todo = resume.todo
        out.print(
            f"{len(sweep.configs)} runs: {len(sweep.configs) - len(todo)} already recorded in "
            f"{store.path}, {len(todo)} to run"
        )
        print_dry_run(sweep.configs, {c.run_id for c in todo}, sweep.labels)
        if todo:
            out.print(estimate_line(todo, recorded, args.workers), highlight=False)
        _say_skipped(sweep, out)
        out.print("dry run: nothing was run or written")
        return 0
    executor = api.executor(
        "pool" if args.executor == "local" and args.workers > 1 else args.executor,
        workers=args.workers,
        ray_address=args.ray_address,
        data_dir=args.data_dir,
        device=args.device,
        threads=args.threads,
        log_dir=args.log_dir,
        **checkpoint_settings(args, store.path),
        **{dest: getattr(args, dest) for dest, _, _ in SLURM_FLAGS},
        submitit_cluster="local" if args.slurm_local else None,
    )
    progress: SweepProgress | None = None

    def on_event(event: api.SweepEvent) -> None:
        nonlocal progress
        if event.kind == "planned":
            say_resume(event.resume, out)
            n = len(sweep.configs)
            out.print(
                f"{n} runs: {n - len(event.todo)} already recorded in {store.path}, "
                f"{len(event.todo)} to run"
            )
            if event.todo:
                progress = SweepProgress(
                    out, event.todo, sweep.labels, executor.in_process, args.verbose
                ).__enter__()
        elif progress is not None:
            progress.on_event(event)

    try:
        result = api.run_sweep(
            sweep,
            store,
            executor,
            on_event,
            force=args.force,
            retry_failed=args.retry_failed,
            keep_stale=args.keep_stale,
            argv=["harness", *getattr(args, "argv", [])],
        )
    finally:
        if progress is not None:
            progress.__exit__(None, None, None)
    say_finish(result, out)
    _say_skipped(sweep, out)
    if result.write_error:  # stopped: no leaderboard of a sweep half done
        raise HarnessError(stopped_line(result))
    if board is not None:
        try:
            paths, _ = api.report(
                [store.path], board, figures=False, select=args.select, command="harness run"
            )
        except WriteFailed as e:
            raise HarnessError(
                f"{e}; the leaderboard was not written, the sweep's records are in {store.path} "
                f"(once there is room: harness report {store.path} --out {board})"
            ) from None
        for p in paths:
            print(f"wrote {p}")
        print_board(store.path, board, args.select, args.format)
    if args.match_skip is not None:
        print_match_skip(store, sweep.configs, args.match_skip, spec.swept(), out)
    if result.failed:
        out.print(f"[red]{result.failed} run(s) failed; see the records in {store.path}[/]")
    return result.exit_code


def _say_skipped(sweep: Any, out: Any) -> None:
    for t, reason in sweep.skipped_tasks:
        out.print(f"[yellow]skipped task '{t}': {reason}[/]", highlight=False)
    for line in sweep.skipped_references:
        out.print(f"[yellow]{line}[/]", highlight=False)


# --- sweep files and option checks ------------------------------------------------------------


def given_options(parser: argparse.ArgumentParser | None, argv: list[str] | None) -> set[str]:
    """The ``harness run`` options (argparse dests) given on the command line ``argv``.

    The command line is parsed again by ``run``'s own parser with every default suppressed, so
    an option set to its default value counts as given, and an abbreviated flag (``--work 2``)
    too.

    Args:
        parser: the ``run`` subcommand's parser (``args.parser``).
        argv: the arguments after the program name (``["run", ...]``); None: none given.

    Returns:
        The dests of the options present.
    """
    if not argv or parser is None:
        return set()
    saved = [(a, a.default) for a in parser._actions]
    try:
        for action in parser._actions:
            action.default = argparse.SUPPRESS
        given, _ = parser.parse_known_args(argv[1:])
    finally:
        for action, default in saved:
            action.default = default
    return set(vars(given)) - {"func", "parser"}


def apply_sweep_file(args: argparse.Namespace) -> tuple[Any, set[str]]:
    """Fill ``args`` from ``--config`` / ``--suite``, leaving the options given as flags alone.

    ``--set`` and ``--grid`` are merged with the file's key by key later
    (``harness.pipeline.suites.plan``) and stay as the flags gave them here.

    Args:
        args: the parsed ``harness run`` arguments (with ``argv``, the command line).

    Returns:
        The sweep file (None without one) and the options given as flags.

    Raises:
        ConfigError: both ``--config`` and ``--suite``, an unknown suite, or a bad file.
    """
    given = given_options(getattr(args, "parser", None), getattr(args, "argv", None))
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
        ConfigError: an unknown executor, ``--executor ray`` or ``submitit`` without its
            package, ``--ray-address``, ``--slurm-*`` or ``--workers`` with the wrong executor,
            ``--workers`` below 1, ``--device cuda`` on a machine without CUDA (local executor)
            or with ``--slurm-gpus 0``.
    """
    import importlib.util

    if args.executor not in EXECUTORS.names():
        EXECUTORS.get(args.executor)  # one line: unknown, with suggestions
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1 (got {args.workers})")
    if args.ray_address and args.executor != "ray":
        raise ConfigError("--ray-address is only used with --executor ray")
    slurm = [dest for dest, _, _ in SLURM_FLAGS if getattr(args, dest, None) is not None]
    slurm += ["slurm_local"] if getattr(args, "slurm_local", False) else []
    if slurm and args.executor != "submitit":
        raise ConfigError(f"--{slurm[0].replace('_', '-')} is only used with --executor submitit")
    if args.executor in ("ray", "submitit"):
        ray = args.executor == "ray"
        if args.workers != 1:
            how = "Ray runs as many runs as its CPUs allow" if ray else "see --slurm-*"
            raise ConfigError(f"--workers is for the local executor; {how}")
        try:
            found = importlib.util.find_spec(args.executor) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ConfigError(
                "--executor ray needs Ray: pip install 'condrnn-harness[ray]'"
                if ray
                else SUBMITIT_INSTALL
            )
        if args.device == "cuda" and getattr(args, "slurm_gpus", None) == 0:
            raise ConfigError("--device cuda with --slurm-gpus 0: the jobs would have no GPU")
    elif args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda requested but no CUDA device is available")


def list_suites() -> int:
    """Print the shipped suites with their descriptions (``harness run --suite list``)."""
    for name in suites.suite_names():
        sweep = suites.load(suites.suite_path(name))
        print(f"{name:14s} {sweep.description}")
    return 0
