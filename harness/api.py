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
``compare`` (read records, write tables). Progress reaches the caller as ``SweepEvent`` s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.components.config import legacy_values
from harness.errors import DISK_FULL_NOTE, WriteFailed
from harness.executors import Executor, ExecutorOptions, RunOptions, make_executor
from harness.persistence.claims import SweepStore
from harness.persistence.records import RunRecord
from harness.persistence.store import Store, output_store_path
from harness.pipeline.resume import plan_resume
from harness.pipeline.spec import Block, Sweep, SweepSpec, plan_sweep, resolve_configs, usable_tasks
from harness.reporting.reports import compare, load_records, paper_report, report

__all__ = [
    "Block",
    "Sweep",
    "SweepEvent",
    "SweepResult",
    "SweepSpec",
    "compare",
    "executor",
    "load_records",
    "open_store",
    "paper_report",
    "plan_runs",
    "plan_sweep",
    "report",
    "resolve_configs",
    "run_sweep",
    "usable_tasks",
]

# --- running a sweep ---------------------------------------------------------------------------


def executor(
    name: str = "local",
    *,
    workers: int = 1,
    ray_address: str | None = None,
    data_dir: str | None = None,
    device: str = "cpu",
    threads: int = 1,
    log_dir: str | None = None,
    checkpoint_dir: str | None = None,
    checkpoint_every_s: float = 600.0,
    **options: Any,
) -> Executor:
    """An executor from the registry (``harness list executors``).

    ``local``, ``pool``, ``ray`` or ``submitit``, or one a plugin registered.

    Args:
        name: the executor.
        workers: ``pool``: worker processes.
        ray_address: ``ray``: the cluster (None: a local Ray instance).
        data_dir: the dataset root every run reads (as the workers see it).
        device: ``cpu``, ``cuda`` or ``auto``.
        threads: torch threads per run (0: torch's default).
        log_dir: TensorBoard event files per run under this folder.
        checkpoint_dir: each run keeps a checkpoint of its training there and goes on from one
            it finds (``harness.pipeline.checkpoint.folder_for(store)`` is the CLI's choice; None:
            none).
        checkpoint_every_s: the least seconds between two checkpoints of a run.
        **options: the other fields of ``ExecutorOptions`` (``slurm_partition``, ``slurm_time``,
            ... for ``submitit``); None leaves a field at its default.

    Raises:
        TypeError: an option ``ExecutorOptions`` does not have.
    """
    run = RunOptions(data_dir, device, threads, log_dir, checkpoint_dir, checkpoint_every_s)
    given = {k: v for k, v in options.items() if v is not None}
    return make_executor(name, run, ExecutorOptions(workers, ray_address, **given))


@dataclass
class SweepEvent:
    """What ``run_sweep`` tells its caller as the sweep goes.

    ``kind`` is one of: ``planned`` (``todo`` and ``resume`` set: what will run), ``epoch``
    (``cfg``, ``epoch``, ``row``: an epoch of the run in progress, in-process executors only),
    ``finished`` (``cfg``, ``record``), ``unwritten`` (``record``, ``fallback``, ``error``:
    the store could not take it; it went to the fallback file, and the sweep stops).
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
        resume: the resume plan (``harness.pipeline.resume.ResumePlan``).
        records: the records this sweep appended (or kept aside), in the order they finished.
        taken: ``(config, holder)`` of runs another sweep on the store held or recorded.
        unwritten: records the store could not take (in ``fallback``).
        fallback: the fallback file, if a record went there.
        write_error: why the sweep stopped before its end, in one line: a write that failed
            (a full disk: the filesystem, the error and the path); empty when it did not.
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

    @property
    def failed(self) -> int:
        """How many of this sweep's runs failed."""
        return sum(r["status"] != "ok" for r in self.records)

    @property
    def exit_code(self) -> int:
        """0 every run succeeded, 1 some run failed, 2 a write failed and stopped the sweep."""
        return 2 if self.write_error or self.unwritten else 1 if self.failed else 0


def open_store(out: str | Path | Store, create: bool = True) -> Store:
    """The store a sweep appends to: ``out`` a folder (its ``runs.jsonl``) or a ``.jsonl`` file.

    Raises:
        RecordError: a path that cannot be a store (a device, below a file, not writable) or an
            existing file that holds something other than records.
    """
    store = out if isinstance(out, Store) else Store(output_store_path(out), legacy_values)
    store.check_writable(create=create)
    store.check_target()
    return store


def plan_runs(
    sweep: Sweep,
    store: Store,
    *,
    force: bool = False,
    retry_failed: bool = False,
    keep_stale: bool = False,
) -> tuple[Any, list[RunRecord]]:
    """The runs of ``sweep`` the store lacks (``harness.pipeline.resume``), and its records."""
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
    recorded). The executor is closed at the end; on an interrupt its runs in flight are stopped
    (not recorded) and the interrupt propagates.

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
    store = open_store(store)
    emit = on_event or (lambda event: None)
    ex = executor or make_executor("local", RunOptions(), ExecutorOptions())
    swept = SweepStore(store)  # before reading: records from now on are seen
    plan, _ = plan_runs(sweep, store, force=force, retry_failed=retry_failed, keep_stale=keep_stale)
    result = SweepResult(store.path, len(sweep.configs), plan.todo, plan)
    emit(SweepEvent("planned", todo=plan.todo, resume=plan))
    provenance = {"argv": list(argv), "sweep": sweep.provenance}
    try:
        with swept:
            try:
                for cfg, rec in _pull(ex, swept.claimed(plan.todo), emit):
                    full = rec.pop(DISK_FULL_NOTE, None)  # a checkpoint or event log's write
                    rec.update(provenance)
                    result.records.append(rec)
                    if not swept.append(rec):
                        why = swept.stopped
                        emit(SweepEvent("unwritten", cfg, rec, fallback=swept.fallback, error=why))
                    if full:
                        swept.stop(full)
                    emit(SweepEvent("finished", cfg, rec))
            except WriteFailed as e:  # claiming or submitting a run; the finished are recorded
                swept.stop(str(e))
    finally:
        ex.close()
    result.taken, result.unwritten = swept.taken, swept.unwritten
    result.fallback, result.write_error = swept.fallback, swept.stopped
    return result


def _pull(ex: Executor, todo: Iterable[Any], emit: Callable[[SweepEvent], None]) -> Any:
    """The one loop every executor is driven by: keep its slots filled, yield what finishes.

    A config is read from ``todo`` (and so claimed) only when a slot is free for it and the
    records of the runs finished before are handled (appended, or kept aside). A write
    that fails while a run is claimed or submitted (``WriteFailed``) starts no run any more: the
    runs in flight finish and are yielded, then it is raised. On any other exception (an
    interrupt, or the consumer stopping) the runs in flight are cancelled.
    """
    it = iter(todo)
    pending: dict[Any, Any] = {}
    failed: WriteFailed | None = None

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
            try:
                done = ex.wait_any()
            except WriteFailed as e:  # a submission: its runs never started
                failed = failed or e
                for h in e.dropped:
                    pending.pop(h, None)
                continue
            yield from [(pending.pop(h), rec) for h, rec in done]
            fill()  # after the records are handled: a store that took none starts no run
    except BaseException:
        ex.cancel()
        raise
    if failed is not None:
        raise failed


def _on_epoch(cfg: Any, emit: Callable[[SweepEvent], None]) -> Callable[[int, dict], None]:
    return lambda epoch, row: emit(SweepEvent("epoch", cfg, epoch=epoch, row=row))
