"""``harness run``: train and test methods on tasks; append the records; write the leaderboard."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from typing import Any

from harness import api
from harness.cli.common import (
    DATA_DIR_HELP,
    INCLUDE,
    METHODS_HELP,
    SELECT_HELP,
    SET_HELP,
    TASKS_HELP,
    add_command,
    add_options,
    console,
    examples,
    float_at_least,
    int_at_least,
)
from harness.cli.progress import (
    FORMATS,
    SweepProgress,
    estimate_line,
    print_board,
    print_dry_run,
    print_match_skip,
    say_finish,
    say_resume,
    stopped_line,
)
from harness.errors import HarnessError

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
        {
            "--tasks TASK[,TASK...]": TASKS_HELP.format("%(default)s"),
            "--methods METHOD[,METHOD...]": METHODS_HELP + "; reference predictors: "
            "'ref:*' or ref:NAME, beside them too ('all,ref:*'; see 'harness list references')",
            "--preset": "sizes and training budget of every run (default: %(default)s)",
            "--set KEY=VALUE": SET_HELP,
            "--data-dir DIR": DATA_DIR_HELP,
            "--device": "where the runs train and test (default: %(default)s)",
            "--threads N": "torch CPU threads per run (default: %(default)s; 0: torch's default)",
            **INCLUDE,
            "--seeds SEEDS": "e.g. 0-4 or 0,1,2 (default: %(default)s)",
            "--grid KEY=V1,V2,...": "sweep a config field over values (repeatable: cartesian "
            "product); a key applies to the methods and tasks that have it",
            "--match-skip TARGET": "after the sweep, show per method the variant with TEST Skip "
            "%% nearest TARGET (test-based; to choose on validation: harness report --select "
            "val-skip-band:T:W)",
            "--select RULE": "the leaderboard written after the sweep keeps " + SELECT_HELP,
            "--out PATH": "records directory (its runs.jsonl) or .jsonl file (default: "
            "%(default)s)",
            "--store-mode": "lock: the driver appends each record under flock on the store "
            "(local disks, NFS with working locks); files: each run writes its record to its own "
            "file in STORE.parts/, merged into the store in order under a lock file, for NFS "
            "without locks and Lustre without its flock option (default: the store's own mode, "
            "lock for a new one; see docs/clusters.md)",
            "--report FILE": "leaderboard to write from all the records of --out (default: next "
            "to them: DIR/LEADERBOARD.md for --out DIR, X.md for --out X.jsonl)",
            "--no-report": "neither write nor print the leaderboard",
            "--format": "what is printed at the end: table, the leaderboard's main columns fitted "
            "to the terminal (to 100 columns through a pipe or into a file), then the file of the "
            "full table; md, the leaderboard's Markdown as written (default: %(default)s)",
            "--force": "rerun runs already recorded (appended)",
            "--retry-failed": "rerun the runs recorded as failed (appended; the latest record of "
            "a run counts)",
            "--keep-stale": "count records made by other code of their method as done (default: "
            "rerun them)",
            "--allow-unverified-data": "run on data that differ from the published checksums "
            "(recorded as unverified, under their own digest)",
            "--executor": "local: in this process, or with --workers N > 1 the pool of N "
            "processes; pool: worker processes; ray: Ray tasks; submitit: Slurm jobs, --slurm-* "
            "(default: %(default)s; 'harness list executors')",
        },
        {
            "--device": {"default": "cpu"},
            "--seeds": {"default": "0"},
            "--grid": {"action": "append"},
            "--match-skip": {"type": float_at_least(0.0)},
            "--out": {"default": "results"},
            "--store-mode": {"choices": api.STORE_MODES},
            "--format": {"choices": FORMATS, "default": "table"},
            "--executor": {"default": "local", "choices": api.EXECUTORS.names()},
        },
        epilog=EPILOG,
    )
    executor_options(s)
    add_options(
        s,
        {
            "--checkpoint-every MINUTES": "each run keeps a checkpoint of its training in "
            "OUT.checkpoints/ at the end of an epoch, at most every MINUTES (0: every epoch), and "
            "a run started again goes on from its checkpoint; removed once the run is recorded "
            "(default: 10)",
            "--no-checkpoint": "keep no checkpoints: a run stopped in the middle starts again "
            "from its first epoch",
            "--log-dir DIR": "also write TensorBoard event files per run under DIR (needs the "
            "tensorboard extra)",
            "--config FILE": "a sweep file (TOML; YAML with PyYAML) holding these options; flags "
            "given beside it override it",
            "--suite NAME": "a shipped sweep file, one per seed-paper table ('--suite list' lists "
            "them)",
            "--dry-run": "print the resolved runs (recorded or to run) and write nothing",
            "-v --verbose": "print every epoch's losses (runs in this process only: not with "
            "--workers or Ray); with --executor ray, Ray's own log lines too",
        },
        {"--checkpoint-every": {"type": float_at_least(0.0), "default": 10.0}},
    )
    s.set_defaults(func=cmd_run, parser=s)


def executor_options(s: argparse.ArgumentParser) -> None:
    """A flag for each option the registered executors declare, in a group per executor."""
    seen: set[str] = set()
    for name, cls in api.EXECUTORS.items():
        fresh = [o for o in api.declared(cls).values() if o.name not in seen]
        seen |= {o.name for o in fresh}
        group = s.add_argument_group(f"--executor {name}") if fresh else s
        for o in fresh:
            kind = {"type": int_at_least(*o.bounds) if o.bounds else o.type}
            if o.type is list:  # repeatable: each flag adds a string
                kind = {"action": "append"}
            how = {"action": "store_true"} if o.type is bool else kind | {"metavar": o.metavar}
            group.add_argument(o.flag, default=o.default, help=o.help, **how)  # type: ignore


def cmd_run(args: argparse.Namespace) -> int:
    """Plan the sweep, run what is not recorded, write the leaderboard: 0, or 1 if a run failed."""
    out = console()
    if args.suite == "list":  # the shipped suites with their descriptions
        for name, description in api.suites():
            print(f"{name:14s} {description}")
        return 0
    job = api.prepare_run(request(args))
    for note in job.sweep.notes:
        out.print(f"[yellow]{note}[/]")
    if job.request.dry_run:
        return dry_run(job, out)
    result = run_with_progress(job, out, ["harness", *getattr(args, "argv", [])])
    say_finish(result, out)
    _say_skipped(job.sweep, out)
    if result.write_error:  # stopped: no leaderboard of a sweep half done
        raise HarnessError(stopped_line(result))
    if job.board is not None:
        for p in job.write_board():
            print(f"wrote {p}")
        records, rule = api.board_records(job.store.path, job.request.select)
        print_board(records, rule, job.store.path, job.board, args.format)
    if job.request.match_skip is not None:
        print_match_skip(job.match_skip(), job.request.match_skip, job.spec.swept(), out)
    if result.failed:
        out.print(f"[red]{result.failed} run(s) failed; see the records in {job.store.path}[/]")
    return result.exit_code


def request(args: argparse.Namespace) -> api.RunRequest:
    """The ``api.RunRequest`` of ``run``'s parsed flags (those given on its command line too)."""
    given = given_options(args.parser, getattr(args, "argv", None))
    fields = (f.name for f in dataclasses.fields(api.RunRequest))
    values = {f: getattr(args, f) for f in fields if hasattr(args, f)}
    values |= {"set": tuple(args.set or ()), "grid": tuple(args.grid or ())}
    options = {k: getattr(args, k) for k in api.declared() if hasattr(args, k)}
    return api.RunRequest(**values, executor_options=options, given=frozenset(given))


def dry_run(job: api.RunJob, out: Any) -> int:
    """Print the resolved runs, recorded or to run, and an estimate; nothing runs."""
    resume, recorded = job.plan()
    _say_plan(job, resume, out)
    print_dry_run(job.sweep.configs, {c.run_id for c in resume.todo}, job.sweep.labels)
    if resume.todo:
        workers = job.request.executor_options.get("workers") or 1
        out.print(estimate_line(resume.todo, recorded, workers), highlight=False)
    _say_skipped(job.sweep, out)
    out.print("dry run: nothing was run or written")
    return 0


def run_with_progress(job: api.RunJob, out: Any, argv: list[str]) -> api.SweepResult:
    """Run the sweep, showing its progress (every epoch's losses with ``-v``)."""
    in_process = api.EXECUTORS.get(job.executor[0]).in_process
    with contextlib.ExitStack() as stack:
        shown: list[SweepProgress] = []

        def on_event(event: api.SweepEvent) -> None:
            if event.kind == "planned":
                _say_plan(job, event.resume, out)
                if event.todo:
                    args = (out, event.todo, job.sweep.labels, in_process, job.request.verbose)
                    shown.append(SweepProgress(*args))
                    stack.enter_context(shown[0].progress)
            elif shown:
                shown[0].on_event(event)

        return job.run(on_event, argv)


def _say_plan(job: api.RunJob, resume: Any, out: Any) -> None:
    say_resume(resume, out)
    n, todo, failed = len(job.sweep.configs), len(resume.todo), len(resume.kept_failed)
    kept = f", {failed} failed earlier (kept; --retry-failed reruns them)" * bool(failed)
    done = n - todo - failed
    out.print(f"{n} runs: {done} already recorded in {job.store.path}{kept}, {todo} to run")


def _say_skipped(sweep: Any, out: Any) -> None:
    tasks = [f"skipped task '{t}': {reason}" for t, reason in sweep.skipped_tasks]
    for line in [*tasks, *sweep.skipped_references]:
        out.print(f"[yellow]{line}[/]", highlight=False)


def given_options(parser: argparse.ArgumentParser | None, argv: list[str] | None) -> set[str]:
    """The ``run`` options (argparse dests) given in ``argv`` (``["run", ...]``; None: none).

    ``argv`` is parsed again by ``run``'s own ``parser`` with every default suppressed, so an
    option set to its default value counts as given, and an abbreviated flag (``--work 2``) too.
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
