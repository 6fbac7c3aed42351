"""The harness as a library: plan and run a sweep, report records, compare against a reference.

The command line (``harness.cli``) only parses, calls these and prints; a notebook, a test or
another front end (a cluster launcher, a web page) calls the same functions::

    from harness import api

    sweep = api.plan_sweep(api.SweepSpec.of("METHOD,PREFIX-*", "TASK", seeds=[0, 1]))
    result = api.run_sweep(sweep, "results/runs.jsonl", api.executor("pool", workers=2))
    api.report(["results/runs.jsonl"], "results/LEADERBOARD.md")

Data flows one way: ``SweepSpec`` (what to run, as flags or a sweep file say it) ->
``plan_sweep`` (every run's ``RunConfig``, checked before anything runs: names, values and
their bounds, data and their checksums, each model built once) -> ``run_sweep`` (resume from the
store, claim each run just in time, the executor trains it, append its record; a write that
fails stops it without losing a finished run) -> ``report`` /
``compare`` (read records, write tables) / ``export_tensorboard`` (TensorBoard HParams).
Progress reaches the caller as ``SweepEvent`` s.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.components import registry
from harness.components.config import legacy_values, parse_set
from harness.components.selection import parse_rule
from harness.errors import DISK_FULL_NOTE, ConfigError, HarnessError, RecordError, WriteFailed
from harness.executors import (
    EXECUTORS,
    MAX_THREADS,
    Executor,
    ExecutorOptions,
    RunOptions,
    make_executor,
)
from harness.executors.base import PART, declared, options_for
from harness.persistence.claims import SweepStore, lease_s
from harness.persistence.outputs import check_writable, leaderboard_path, refuse_overwrite
from harness.persistence.records import RunRecord
from harness.persistence.store import STORE_MODES, Store, load, output_store_path, store_path
from harness.planning.resume import plan_resume
from harness.planning.spec import Block, Sweep, SweepSpec, plan_sweep, resolve_configs
from harness.planning.suites import load as load_sweep_file
from harness.planning.suites import plan, suite_names, suite_path
from harness.planning.sweep import match_skip, parse_grid
from harness.references import named_outright
from harness.reporting.reports import (
    compare,
    export_tensorboard,
    paper_report,
    print_parts,
    report,
)
from harness.training.tracking import check_log_dir

__all__ = [
    "EXECUTORS",
    "MAX_THREADS",
    "STORE_MODES",
    "Block",
    "RunJob",
    "SweepEvent",
    "SweepResult",
    "SweepSpec",
    "compare",
    "board_records",
    "declared",
    "executor",
    "existing_store",
    "export_tensorboard",
    "include",
    "paper_report",
    "parse_seeds",
    "plan_sweep",
    "prepare_run",
    "print_parts",
    "report",
    "resolve_configs",
    "run_sweep",
    "suites",
]

# --- running a sweep ---------------------------------------------------------------------------


def executor(name: str = "local", run: RunOptions | None = None, **options: Any) -> Executor:
    """An executor from the registry (``harness list executors``), checked (``check_executor``).

    Args:
        name: ``local``, ``pool``, ``ray``, ``submitit``, or one a plugin registered.
        run: what every run gets (data root, device, threads, ...; default ``RunOptions()``).
        **options: the executor's declared options (``workers`` for ``pool``, ``ray_address``
            for ``ray``, ``slurm_partition``, ... for ``submitit``); None: its default.
    """
    run = run or RunOptions()
    name, checked = check_executor(name, run, options)
    return make_executor(name, run, checked)


def check_executor(name: str, run: RunOptions, options: dict[str, Any]) -> tuple[str, Any]:
    """The executor ``name`` resolves to (``local`` with workers is ``pool``), and its options.

    The options are checked against its declarations (``options_for``), then its ``preflight``
    checks this machine (its package installed, CUDA present): a HarnessError, one line.
    """
    if name == "local" and (options.get("workers") or 1) > 1:
        name = "pool"
    checked = options_for(name, options)
    getattr(EXECUTORS.get(name), "preflight", lambda run, options: None)(run, checked)
    return name, checked


@dataclass
class SweepEvent:
    """What ``run_sweep`` tells its caller as the sweep goes.

    ``kind`` is one of: ``planned`` (``todo`` and ``resume`` set: what will run), ``epoch``
    (``cfg``, ``epoch``, ``row``: an epoch of the run in progress, in-process executors only),
    ``finished`` (``cfg``, ``record``), ``unwritten`` (``record``, ``fallback``, ``error``:
    the store could not take it; it went to the fallback file, and the sweep stops), ``note``
    (``error``: a line to show, such as a claim of another host taken over).
    """

    kind: str
    cfg: Any = None
    record: RunRecord | None = None
    epoch: int | None = None
    row: dict[str, Any] | None = None
    todo: list[Any] | None = None
    resume: Any = None
    fallback: Path | None = None
    error: str = ""


@dataclass
class SweepResult:
    """What a sweep did.

    Attributes:
        store: the store's path.
        planned: the runs of the sweep.
        todo: the runs it had to run (not recorded, or rerun).
        resume: the resume plan (``harness.planning.resume.ResumePlan``).
        records: the records this sweep appended (or kept aside), in the order they finished.
        taken: ``(config, holder)`` of runs another sweep on the store held or recorded.
        unwritten: records the store could not take (in ``fallback``).
        fallback: the fallback file, if a record went there.
        write_error: why the sweep stopped before its end, in one line: a write that failed
            (a full disk: the filesystem, the error and the path); empty when it did not.
        notes: lines the executor had to say at its close (the logs submitit kept).
    """

    store: Path
    planned: int
    todo: list[Any]
    resume: Any
    records: list[RunRecord] = field(default_factory=list)
    taken: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    unwritten: list[RunRecord] = field(default_factory=list)
    fallback: Path | None = None
    write_error: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """How many of this sweep's runs failed."""
        return sum(r["status"] != "ok" for r in self.records)

    @property
    def exit_code(self) -> int:
        """0 all ok, 1 a run failed (now, or earlier and kept), 2 a write stopped the sweep."""
        if self.write_error or self.unwritten:
            return 2
        return 1 if self.failed or self.resume.kept_failed else 0


def open_store(out: str | Path | Store, create: bool = True, mode: str | None = None) -> Store:
    """The store a sweep appends to: ``out`` a folder (its ``runs.jsonl``) or a ``.jsonl`` file.

    With ``create``, the store's lock is checked (``Store.check_lock``) and the records a crash
    left unmerged (``files`` mode) are merged.

    Args:
        out: the store or its path.
        create: create the store (and its folder); without it nothing is written.
        mode: ``--store-mode`` (None: the store's own, ``lock`` for a new one).

    Raises:
        RecordError: a path that cannot be a store (a device, below a file, not writable), an
            existing file that holds something other than records, ``lock`` mode asked of a
            store in ``files`` mode, or a filesystem without locks in ``lock`` mode.
    """
    store = out if isinstance(out, Store) else Store(output_store_path(out), legacy_values, mode)
    if mode == "lock" and store.parts_path.is_dir():
        raise RecordError(
            f"--store-mode lock: {store.path} is in files mode (it has {store.parts_path}/); "
            "drop --store-mode, or merge it (harness store repair) and remove that empty folder"
        )
    store.check_writable(create=create)
    store.check_target()
    if create:
        store.check_lock()
        with contextlib.suppress(OSError):  # left for the next merge; reading sees them
            store.merge()
    return store


def existing_store(path: str | Path) -> Store:
    """The records store at ``path`` (a ``.jsonl`` file or a folder's); RecordError: none."""
    store = Store(store_path(path), legacy_values)
    if not store.path.is_file():
        raise RecordError(f"no records file at {store.path}")
    return store


def plan_runs(
    sweep: Sweep,
    store: Store,
    *,
    force: bool = False,
    retry_failed: bool = False,
    keep_stale: bool = False,
) -> tuple[Any, list[RunRecord]]:
    """The runs of ``sweep`` the store lacks (``harness.planning.resume``), and its records."""
    recorded = store.read()[0]
    plan = plan_resume(
        sweep.configs, recorded, force=force, retry_failed=retry_failed, keep_stale=keep_stale
    )
    return plan, recorded


def run_sweep(
    sweep: Sweep,
    store: str | Path | Store,
    executor: Executor | None = None,
    on_event: Callable[[SweepEvent], None] | None = None,
    *,
    force: bool = False,
    retry_failed: bool = False,
    keep_stale: bool = False,
    argv: Sequence[str] = (),
) -> SweepResult:
    """Run what the store does not hold yet; append each record as its run finishes.

    Runs recorded already are skipped (resume) unless ``force``; ``retry_failed`` reruns failed
    ones; a record made by other code of its method is rerun unless ``keep_stale``. Each run is
    claimed just before it starts, so sweeps sharing a store split the work. A write that fails
    on the way stops the sweep (``SweepResult.write_error``): no run starts any more, the runs
    in flight finish, and every finished run is appended or, when the store cannot take it (a
    full disk), kept in a fallback file (``SweepResult.fallback``). The writes that fail so are
    the record, the claim, a submission (submitit's folder), and a run's checkpoint or
    TensorBoard events on a full disk (optional: the run goes on without them and is
    recorded). Before the first run the executor prepares (``prepare``: the compiled kernels the
    runs train with are built on this machine, once; the pool's workers start). The executor is
    closed at the end; on an interrupt its runs in flight are stopped (not recorded) and the
    interrupt propagates. A sweep that stops so (or on an error: a submission the scheduler
    refuses) before its first record leaves no store where there was none.

    Args:
        sweep: the planned sweep (``plan_sweep``).
        store: the store, or its path (a folder or a ``.jsonl`` file).
        executor: where the runs train (default: ``local``, in this process).
        on_event: called with each ``SweepEvent``.
        force: rerun every run.
        retry_failed: rerun runs recorded as failed.
        keep_stale: keep records made by other code of their method.
        argv: the command line, stored in each record (``argv``) with the sweep (``sweep``).

    Returns:
        What the sweep did (``SweepResult.exit_code``: 0, 1 or 2).
    """
    path = store.path if isinstance(store, Store) else output_store_path(store)
    new = [p for p in (path, *path.parents) if not p.exists()]  # what opening it creates
    store = open_store(store)
    emit = on_event or (lambda event: None)
    ex = executor or make_executor("local", RunOptions(), ExecutorOptions())
    say = lambda line: emit(SweepEvent("note", error=line))  # noqa: E731
    swept = SweepStore(store, say)  # before reading: records from now on are seen
    plan, _ = plan_runs(sweep, store, force=force, retry_failed=retry_failed, keep_stale=keep_stale)
    result = SweepResult(store.path, len(sweep.configs), plan.todo, plan)
    emit(SweepEvent("planned", todo=plan.todo, resume=plan))
    try:
        _prepare(ex, plan.todo)
        with swept:
            try:
                for cfg, rec in _pull(ex, swept.claimed(plan.todo), emit):
                    full = rec.pop(DISK_FULL_NOTE, None)  # a checkpoint or event log's write
                    written = rec.pop(PART, None) is not None  # by its job, files mode
                    rec.update(provenance(sweep, argv))
                    result.records.append(rec)
                    if not swept.append(rec, written):
                        why = swept.stopped
                        emit(SweepEvent("unwritten", cfg, rec, fallback=swept.fallback, error=why))
                    if full:
                        swept.stop(full)
                    emit(SweepEvent("finished", cfg, rec))
            except WriteFailed as e:  # claiming or submitting a run; the finished are recorded
                swept.stop(str(e))
    except BaseException:
        if new and not result.records:
            _drop_empty(store, new[1:])
        raise
    finally:
        result.notes = list(ex.close() or ())
    result.taken, result.unwritten = swept.taken, swept.unwritten
    result.fallback, result.write_error = swept.fallback, swept.stopped
    return result


def _drop_empty(store: Store, folders: list[Path]) -> None:
    """Remove ``store`` if it holds nothing, then ``folders`` (made for it) where empty."""
    with contextlib.suppress(OSError):
        with store.locked() as fd:  # no other sweep appends to it meanwhile
            if os.fstat(fd).st_size or store.parts_path.exists():
                return
            store.path.unlink()
        for folder in folders:
            folder.rmdir()


def provenance(sweep: Sweep, argv: Sequence[str]) -> dict[str, Any]:
    """What the driver adds to each record of ``sweep``: the command line and the sweep."""
    return {"argv": list(argv), "sweep": sweep.provenance}


def _prepare(ex: Executor, todo: list[Any]) -> None:
    """The executor's ``prepare(todo)``, if it has one, before the first run.

    Its workers started, the compiled kernels built (``harness.executors.base.build_kernels``);
    on an interrupt it is cancelled.
    """
    if not todo or not hasattr(ex, "prepare"):
        return
    try:
        ex.prepare(todo)
    except BaseException:
        ex.cancel()
        raise


# An executor makes no progress when its ``wait_any`` returns no record again and again without
# waiting (less than MIN_WAIT_S a call on average) for STALL_S while runs are in flight: the sweep
# stops with an error naming it. A ``wait_any`` that waits (blocks, or polls with a pause) may
# return nothing for as long as the runs take.
STALL_S = 60.0
MIN_WAIT_S = 0.1


def _pull(ex: Executor, todo: Iterable[Any], emit: Callable[[SweepEvent], None]) -> Any:
    """The one loop every executor is driven by: keep its slots filled, yield what finishes.

    A config is read from ``todo`` (and so claimed) only when a slot is free for it and the
    records of the runs finished before are handled (appended, or kept aside). A write
    that fails while a run is claimed or submitted (``WriteFailed``) starts no run any more: the
    runs in flight finish and are yielded, then it is raised. An executor that makes no progress
    (``STALL_S``) is a HarnessError naming it. On any other exception (that one, an interrupt,
    or the consumer stopping) the runs in flight are cancelled.
    """
    it = iter(todo)
    pending: dict[Any, Any] = {}
    failed: WriteFailed | None = None
    empty, since = 0, 0.0  # wait_any's empty returns in a row, and when the first was called

    def fill() -> None:
        nonlocal failed
        try:
            while failed is None and len(pending) < ex.slots():
                cfg = next(it, None)
                if cfg is None:
                    return
                pending[ex.submit(cfg, _on_epoch(cfg, emit) if ex.in_process else None)] = cfg
        except WriteFailed as e:
            failed = e

    try:
        fill()
        while pending:
            called = time.monotonic()
            try:
                done = ex.wait_any()
            except WriteFailed as e:  # a submission: its runs never started
                failed = failed or e
                for h in e.dropped:
                    pending.pop(h, None)
                continue
            empty, since = (empty + 1, since or called) if not done else (0, 0.0)
            if empty and STALL_S <= time.monotonic() - since < empty * MIN_WAIT_S:
                raise HarnessError(_stalled(ex, empty, time.monotonic() - since, len(pending)))
            yield from [(pending.pop(h), rec) for h, rec in done]
            fill()  # after the records are handled: a store that took none starts no run
    except BaseException:
        ex.cancel()
        raise
    if failed is not None:
        raise failed


def _stalled(ex: Executor, empty: int, seconds: float, in_flight: int) -> str:
    """The line saying that ``ex`` makes no progress (``STALL_S``)."""
    cls = type(ex)
    return (
        f"executor '{getattr(cls, 'name', cls.__name__)}' ({registry.describe_source(cls)}) "
        f"makes no progress: its wait_any() returned no record {empty} times in {seconds:.0f} s "
        f"without waiting, with {in_flight} run(s) in flight; the sweep stopped, its runs in "
        "flight cancelled and their claims released (wait_any must wait until a run finishes)"
    )


def _on_epoch(cfg: Any, emit: Callable[[SweepEvent], None]) -> Callable[[int, dict], None]:
    return lambda epoch, row: emit(SweepEvent("epoch", cfg, epoch=epoch, row=row))


# --- the ``harness run`` command -----------------------------------------------------------------

MAX_SEEDS = 10_000


def parse_seeds(spec: str, limit: int = MAX_SEEDS) -> list[int]:
    """Seeds from ``"0-4"``, ``"0,2,5"`` or ``"3"`` (repeats dropped, order kept).

    The count is checked against ``limit`` before a range is expanded, so ``0-9999999`` fails
    at once; anything else, a negative seed, an empty or descending range is a ConfigError.
    """
    usage = f"--seeds expects e.g. 0-4 or 0,1,2 (seeds >= 0); got '{spec}'"
    ranges: list[tuple[int, int]] = []
    try:
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            lo, sep, hi = part.partition("-")
            ranges.append((int(lo), int(hi) if sep else int(lo)))
    except ValueError:  # also a negative seed: "-1" has no number before its "-"
        raise ConfigError(usage) from None
    if not ranges or any(hi < lo for lo, hi in ranges):
        raise ConfigError(usage)
    count = sum(hi - lo + 1 for lo, hi in ranges)
    if count > limit:
        raise ConfigError(f"--seeds '{spec}' gives {count:,} seeds; at most {limit:,} are allowed")
    return list(dict.fromkeys(s for lo, hi in ranges for s in range(lo, hi + 1)))


@dataclass
class RunJob:
    """A ``harness run`` checked and planned (``prepare_run``); nothing run or written yet.

    ``opts``: its options, a sweep file's where no flag was given; ``board``: the leaderboard to
    write after the sweep (None: none); ``executor``: its name, its options and ``RunOptions``.
    """

    opts: dict[str, Any]
    spec: SweepSpec
    sweep: Sweep
    store: Store
    board: Path | None
    executor: tuple[str, Any, RunOptions]

    def plan(self) -> tuple[Any, list[RunRecord]]:
        """What a dry run shows: the runs the store lacks (``plan_runs``), and its records."""
        return plan_runs(self.sweep, self.store, **self._resume)

    def run(self, on_event: Callable[[SweepEvent], None], argv: Sequence[str]) -> SweepResult:
        """Run the sweep on the executor chosen (``run_sweep``).

        In ``files`` mode each run writes its own record to the store's parts folder
        (``RunOptions.parts_dir``), where the driver merges it from.
        """
        run = self.executor[2]
        if self.store.mode == "files":
            parts = str(self.store.parts_path)
            run = replace(run, parts_dir=parts, provenance=provenance(self.sweep, argv))
        ex = make_executor(self.executor[0], run, self.executor[1])
        return run_sweep(self.sweep, self.store, ex, on_event, argv=argv, **self._resume)

    @property
    def _resume(self) -> dict[str, bool]:
        return {k: bool(self.opts.get(k)) for k in ("force", "retry_failed", "keep_stale")}

    def write_board(self) -> list[Path]:
        """Write the store's leaderboard to ``board``: the files (HarnessError: a failed write)."""
        try:
            paths, _ = report(
                [self.store.path], self.board, figures=False, select=self.opts.get("select"),
                command="harness run",
            )  # fmt: skip
        except WriteFailed as e:
            raise HarnessError(
                f"{e}; the leaderboard was not written, the sweep's records are in "
                f"{self.store.path} (once there is room: harness report {self.store.path} "
                f"--out {self.board})"
            ) from None
        return paths

    def match_skip(self) -> list[dict[str, Any]]:
        """Per method, the swept variant with Skip % nearest ``match_skip`` (this sweep's runs)."""
        ids = {c.run_id for c in self.sweep.configs}
        records = [r for r in self.store.read()[0] if r["run_id"] in ids]
        return match_skip(records, self.opts["match_skip"], self.spec.swept())


def board_records(store: str | Path, select: str | None) -> tuple[list[RunRecord], Any, str]:
    """The records of ``store`` (migrated), the ``select`` rule parsed, the line for no table."""
    records, _ = load([store], legacy_values)
    rule = parse_rule(select) if select else None
    none = "no run finished ok: no table"
    if rule and any(r.get("status") == "ok" for r in records):
        none = f"--select {rule} keeps no row: no table"
    return records, rule, none


def include(paths: Sequence[str]) -> None:
    """Import the ``.py`` files or folders ``paths`` (``--include``) and the registry, now.

    So too with no ``paths`` when ``$HARNESS_INCLUDE`` names some: an executor included either
    way has its options as flags of ``harness run``.
    """
    if paths or os.environ.get(registry.INCLUDE_ENV):
        registry.include(paths)
        registry.load_plugins()


def suites() -> list[tuple[str, str]]:
    """The shipped suites, each ``(name, description)`` (``harness run --suite list``)."""
    return [(n, load_sweep_file(suite_path(n)).description) for n in suite_names()]


def prepare_run(opts: dict[str, Any], given: Iterable[str] = ()) -> RunJob:
    """Check and plan a ``harness run`` from its options (argparse dests), given as flags or not.

    ``config`` or ``suite`` (a sweep file) fills the options not ``given``; ``set`` and ``grid``
    merge with the file's key by key (``harness.planning.suites.plan``). Every check comes before
    the store is opened: bad input (a HarnessError, one line) creates nothing.
    """
    opts, given = dict(opts), set(given)
    if opts.get("config") and opts.get("suite"):
        raise ConfigError("give --config FILE or --suite NAME, not both")
    file = None
    if opts.get("config") or opts.get("suite"):
        file = load_sweep_file(opts["config"] or suite_path(opts["suite"]))
        opts |= {k: v for k, v in file.options.items() if k not in given | {"set", "grid"}}
    run = RunOptions(
        opts["data_dir"],
        opts["device"],
        opts["threads"],
        opts["log_dir"],
        verbose=bool(opts.get("verbose")),
    )
    lease_s()  # a bad $HARNESS_CLAIM_LEASE_S is refused before anything is written
    options = {k: opts.get(k) for k in declared()}
    executor = (*check_executor(opts["executor"], run, options), run)
    with _started_early(*executor[:2], run, opts["dry_run"]):
        if opts.get("select"):  # a bad rule is refused before anything runs
            parse_rule(opts["select"])
        spec = _spec(opts, file, given)
        if opts["log_dir"] and not opts["dry_run"]:
            check_log_dir(opts["log_dir"])
        sweep = plan_sweep(spec, opts["data_dir"], opts["allow_unverified_data"])
        # after every check: bad input creates nothing
        store = open_store(opts["out"], create=False, mode=opts.get("store_mode"))
        board = None
        if not opts["no_report"] and not opts["dry_run"]:  # never over the store; writable first
            board = leaderboard_path(opts["out"], opts["report"])
            option = "--report" if opts["report"] else "the leaderboard"
            refuse_overwrite(board, option, [("the records store (--out)", store.path)])
            check_writable(board)

        keep = None if opts.get("no_checkpoint") else str(store.checkpoints_path)
        every = 60.0 * opts.get("checkpoint_every", 10.0)
        executor = (*executor[:2], replace(run, checkpoint_dir=keep, checkpoint_every_s=every))
        return RunJob(opts, spec, sweep, store, board, executor)


@contextlib.contextmanager
def _started_early(name: str, options: Any, run: RunOptions, dry_run: bool) -> Any:
    """The executor's ``start_early`` (not for a dry run), undone if what follows raises.

    Its start-up (the pool's fork server importing the training code) overlaps the planning;
    bad input found there ends it at once.
    """
    start = getattr(EXECUTORS.get(name), "start_early", None)
    stop = start(run, options) if start and not dry_run else None
    try:
        yield
    except BaseException:
        if stop is not None:
            stop()
        raise


def _spec(opts: dict[str, Any], file: Any, given: set[str]) -> SweepSpec:
    """The ``SweepSpec`` of the options and the sweep file's parts."""
    parts = file.parts if file is not None else []
    named = ",".join(p.tasks or opts["tasks"] for p in parts) if parts else opts["tasks"]
    named_m = ",".join([*(p.methods or opts["methods"] for p in parts), opts["methods"]])
    sets, grid = parse_set(opts.get("set") or []), parse_grid(opts.get("grid") or [])
    return SweepSpec(
        blocks=[Block(*b) for b in plan(file, opts["methods"], opts["tasks"], sets, grid, given)],
        seeds=parse_seeds(opts["seeds"]),
        preset=opts["preset"],
        named_tasks={p.strip() for p in named.split(",")} - {"all"},
        named_methods=named_outright(named_m),
        config=file.path if file else None,
        suite=opts.get("suite"),
        select=opts.get("select"),
        match_skip=opts.get("match_skip"),
    )
