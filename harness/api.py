"""The harness as a library: plan and run a sweep, report records, compare against a reference.

``SweepSpec`` -> ``plan_sweep`` -> ``run_sweep`` (``SweepEvent`` s) -> ``report`` / ``compare``;
``prepare_run`` plans a ``harness run`` from a ``RunRequest`` (docs/architecture.md, with a
notebook's example). The command line's only door (``tests/test_cli_shape.py``): what the commands
name, list and check is re-exported here; what loads torch is imported when called.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from harness import __version__ as __version__
from harness.authoring import scaffold
from harness.authoring.conformance import CHECKS as CHECKS
from harness.authoring.conformance import iter_checks as iter_checks
from harness.authoring.conformance import training_task as training_task
from harness.bench.excerpts import SPEEDUP_PARTS as SPEEDUP_PARTS
from harness.bench.excerpts import TIMING_PARTS as TIMING_PARTS
from harness.bench.excerpts import print_speedup as print_speedup
from harness.bench.excerpts import print_timing as print_timing
from harness.bench.excerpts import speedup_rows as speedup_rows
from harness.components import plugins
from harness.components.code import method_code as method_code
from harness.components.config import DEVICES as DEVICES
from harness.components.config import PRESETS as PRESETS
from harness.components.config import legacy_values, parse_set
from harness.components.metrics import METRICS
from harness.components.metrics import UNIT_NOTE as UNIT_NOTE
from harness.components.plugins import describe_source
from harness.components.plugins import isolated as isolated
from harness.components.registry import METHODS, TASKS
from harness.components.selection import BUDGETS as BUDGETS
from harness.components.selection import parse_rule
from harness.components.selection import select as select
from harness.data import Fetcher as Fetcher
from harness.data import NotFetchableError as NotFetchableError
from harness.data import data_root as data_root
from harness.data import status_rows as status_rows
from harness.env import resolve_device, run_conditions, torch_threads
from harness.errors import (
    DISK_FULL_NOTE,
    ConfigError,
    HarnessError,
    RecordError,
    WriteFailed,
    out_of_memory,
)
from harness.executors import EXECUTORS, Executor, ExecutorOptions, RunOptions, make_executor
from harness.executors import MAX_THREADS as MAX_THREADS
from harness.executors.base import PART, declared, options_for
from harness.persistence.claims import SweepStore, lease_s
from harness.persistence.outputs import beside_records as beside_records
from harness.persistence.outputs import (
    check_writable,
    leaderboard_path,
    refuse_overwrite,
    write_text,
)
from harness.persistence.records import RunRecord
from harness.persistence.records import label as label
from harness.persistence.store import STORE_MODES as STORE_MODES
from harness.persistence.store import Store, load, output_store_path, store_path
from harness.planning.resume import plan_resume
from harness.planning.spec import Block, Sweep, SweepSpec, parse_seeds, plan_sweep
from harness.planning.spec import resolve_configs as resolve_configs
from harness.planning.spec import usable_tasks as usable_tasks
from harness.planning.suites import load as load_sweep_file
from harness.planning.suites import plan, suite_names, suite_path
from harness.planning.sweep import estimate_runs as estimate_runs
from harness.planning.sweep import fresh_costs as fresh_costs
from harness.planning.sweep import match_skip, parse_grid
from harness.planning.sweep import wall_seconds as wall_seconds
from harness.references import REFERENCES, named_outright
from harness.references import describe as describe_reference
from harness.reporting.compare import parse_tolerances as parse_tolerances
from harness.reporting.docs import fill as fill
from harness.reporting.latex import WIDTHS as WIDTHS
from harness.reporting.leaderboard import TERSE as TERSE
from harness.reporting.leaderboard import WIDE as WIDE
from harness.reporting.leaderboard import boards as boards
from harness.reporting.leaderboard import terminal as terminal
from harness.reporting.references import record_notes as record_notes
from harness.reporting.reports import PARTS as PARTS
from harness.reporting.reports import compare as compare
from harness.reporting.reports import export_tensorboard as export_tensorboard
from harness.reporting.reports import paper_report as paper_report
from harness.reporting.reports import print_parts as print_parts
from harness.reporting.reports import report
from harness.training.tracking import check_log_dir

# --- running a sweep ---------------------------------------------------------------------------


def executor(name: str = "local", run: RunOptions | None = None, **options: Any) -> Executor:
    """An executor from the registry (``harness list executors``), checked (``check_executor``).

    ``run``: what every run gets; ``options``: its declared ones (``workers``, ...; None: default).
    """
    run = run or RunOptions()
    name, checked = check_executor(name, run, options)
    return make_executor(name, run, checked)


def check_executor(name: str, run: RunOptions, options: dict[str, Any]) -> tuple[str, Any]:
    """The executor ``name`` resolves to (``local`` with workers: ``pool``), its options checked."""
    if name == "local" and (options.get("workers") or 1) > 1:
        name = "pool"
    checked = options_for(name, options)
    getattr(EXECUTORS.get(name), "preflight", lambda run, options: None)(run, checked)
    return name, checked


@dataclass
class SweepEvent:
    """What ``run_sweep`` tells its caller as the sweep goes.

    ``kind``: ``planned`` (``todo``, ``resume``), ``epoch`` (``cfg``, ``epoch``, ``row``;
    in-process executors only), ``finished`` (``cfg``, ``record``), ``unwritten`` (``record``,
    ``fallback``, ``error``: kept aside; the sweep stops), ``note`` (``error``: a line to show).
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
    """What a sweep did: its ``records`` as they finished (``unwritten``: kept in ``fallback``).

    ``taken``: ``(config, holder)`` of runs another sweep held or recorded; ``write_error``: why
    it stopped early (a write that failed), or ""; ``notes``: what the executor said at its close.
    """

    store: Path
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

    With ``create`` it is created, its lock checked and what a crash left unmerged merged;
    ``mode``: ``--store-mode``. RecordError: a path that cannot be a store, or the wrong mode.
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


def plan_runs(sweep: Sweep, store: Store, **resume: bool) -> tuple[Any, list[RunRecord]]:
    """The runs of ``sweep`` the store lacks (``plan_resume``'s ``resume`` flags), its records."""
    recorded = store.read()[0]
    return plan_resume(sweep.configs, recorded, **resume), recorded


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

    Recorded runs are skipped unless ``force`` (``retry_failed``: failed ones rerun;
    ``keep_stale``: records of other code of their method kept). Each run is claimed just before
    it starts, so sweeps sharing a store split the work. A write that fails (the record, a claim,
    a submission, a checkpoint on a full disk) stops the sweep: the runs in flight finish, each
    finished run appended or kept in a fallback file. On an interrupt the runs in flight are
    stopped, and a sweep stopped before its first record leaves no store where there was none.
    ``argv`` (the command line) is stored in each record with the sweep.
    """
    path = store.path if isinstance(store, Store) else output_store_path(store)
    new = [p for p in (path, *path.parents) if not p.exists()]  # what opening it creates
    store = open_store(store)
    emit = on_event or (lambda event: None)
    ex = executor or make_executor("local", RunOptions(), ExecutorOptions())
    say = lambda line: emit(SweepEvent("note", error=line))  # noqa: E731
    swept = SweepStore(store, say)  # before reading: records from now on are seen
    plan, _ = plan_runs(sweep, store, force=force, retry_failed=retry_failed, keep_stale=keep_stale)
    result = SweepResult(store.path, plan.todo, plan)
    emit(SweepEvent("planned", todo=plan.todo, resume=plan))
    try:
        if plan.todo and hasattr(ex, "prepare"):  # workers started, the kernels built
            try:
                ex.prepare(plan.todo)
            except BaseException:
                ex.cancel()
                raise
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


# An executor makes no progress when its ``wait_any`` returns no record again and again without
# waiting (less than MIN_WAIT_S a call on average) for STALL_S while runs are in flight: the sweep
# stops with an error naming it. A ``wait_any`` that waits (blocks, or polls with a pause) may
# return nothing for as long as the runs take.
STALL_S = 60.0
MIN_WAIT_S = 0.1


def _pull(ex: Executor, todo: Iterable[Any], emit: Callable[[SweepEvent], None]) -> Any:
    """The one loop every executor is driven by: keep its slots filled, yield what finishes.

    A config is read from ``todo`` (and so claimed) only when a slot is free and the records
    finished before are handled. A ``WriteFailed`` starts no run any more: the runs in flight
    are yielded, then it is raised. On any other exception the runs in flight are cancelled.
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
            if empty and STALL_S <= (seconds := time.monotonic() - since) < empty * MIN_WAIT_S:
                raise HarnessError(
                    f"executor '{getattr(type(ex), 'name', type(ex).__name__)}' "
                    f"({describe_source(type(ex))}) makes no progress: its wait_any() returned "
                    f"no record {empty} times in {seconds:.0f} s without waiting, with "
                    f"{len(pending)} run(s) in flight; the sweep stopped, its runs in flight "
                    "cancelled and their claims released (wait_any must wait until a run finishes)"
                )
            yield from [(pending.pop(h), rec) for h, rec in done]
            fill()  # after the records are handled: a store that took none starts no run
    except BaseException:
        ex.cancel()
        raise
    if failed is not None:
        raise failed


def _on_epoch(cfg: Any, emit: Callable[[SweepEvent], None]) -> Callable[[int, dict], None]:
    return lambda epoch, row: emit(SweepEvent("epoch", cfg, epoch=epoch, row=row))


# --- the ``harness run`` command -----------------------------------------------------------------


@dataclass(frozen=True)
class RunRequest:
    """A ``harness run``, typed: its flags' values (executor options by their declared names).

    ``config`` or ``suite`` (a sweep file) fills the fields not in ``given`` (``resolved``).
    """

    tasks: str = "all"
    methods: str = "all"
    preset: str = "smoke"
    seeds: str = "0"
    set: Sequence[str] = ()
    grid: Sequence[str] = ()
    select: str | None = None
    match_skip: float | None = None
    data_dir: str | None = None
    device: str = "cpu"
    threads: int = 1
    out: str = "results"
    store_mode: str | None = None
    report: str | None = None
    no_report: bool = False
    force: bool = False
    retry_failed: bool = False
    keep_stale: bool = False
    allow_unverified_data: bool = False
    executor: str = "local"
    executor_options: Mapping[str, Any] = field(default_factory=dict)
    checkpoint_every: float = 10.0
    no_checkpoint: bool = False
    log_dir: str | None = None
    config: str | None = None
    suite: str | None = None
    dry_run: bool = False
    verbose: bool = False
    given: frozenset[str] = frozenset()  # the fields (and executor options) given as flags

    def resolved(self) -> tuple[RunRequest, Any]:
        """This request with its sweep file's options where none was given, and the file."""
        if self.config and self.suite:
            raise ConfigError("give --config FILE or --suite NAME, not both")
        if not (self.config or self.suite):
            return self, None
        file = load_sweep_file(self.config or suite_path(self.suite))
        taken = {k: v for k, v in file.options.items() if k not in self.given | {"set", "grid"}}
        own = {f.name for f in fields(self)} & taken.keys()
        options = {**self.executor_options, **{k: taken[k] for k in taken.keys() & declared()}}
        return replace(self, **{k: taken[k] for k in own}, executor_options=options), file


@dataclass
class RunJob:
    """A ``harness run`` checked and planned (``prepare_run``); ``board`` None: no leaderboard."""

    request: RunRequest
    spec: SweepSpec
    sweep: Sweep
    store: Store
    board: Path | None
    executor: tuple[str, Any, RunOptions]

    def plan(self) -> tuple[Any, list[RunRecord]]:
        """What a dry run shows: the runs the store lacks (``plan_runs``), and its records."""
        return plan_runs(self.sweep, self.store, **self.resume)

    def run(self, on_event: Callable[[SweepEvent], None], argv: Sequence[str]) -> SweepResult:
        """Run the sweep (``run_sweep``); in ``files`` mode each run writes its own record."""
        run = self.executor[2]
        if self.store.mode == "files":
            parts = str(self.store.parts_path)
            run = replace(run, parts_dir=parts, provenance=provenance(self.sweep, argv))
        ex = make_executor(self.executor[0], run, self.executor[1])
        return run_sweep(self.sweep, self.store, ex, on_event, argv=argv, **self.resume)

    @property
    def resume(self) -> dict[str, bool]:
        """``force``, ``retry_failed``, ``keep_stale``: the runs rerun."""
        return {k: getattr(self.request, k) for k in ("force", "retry_failed", "keep_stale")}

    def write_board(self) -> list[Path]:
        """Write the store's leaderboard to ``board``: the files (HarnessError: a failed write)."""
        try:
            paths, _ = report(
                [self.store.path], self.board, figures=False, select=self.request.select,
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
        return match_skip(records, self.request.match_skip, self.spec.swept())


def board_records(store: str | Path, select: str | None) -> tuple[list[RunRecord], Any]:
    """The records of ``store`` (migrated), and the ``select`` rule parsed."""
    return load([store], legacy_values)[0], parse_rule(select) if select else None


def include(paths: Sequence[str]) -> None:
    """Import ``--include``'s (or ``$HARNESS_INCLUDE``'s) files and the registry, now."""
    if paths or os.environ.get(plugins.INCLUDE_ENV):
        plugins.include(paths)
        plugins.load_plugins()


def suites() -> list[tuple[str, str]]:
    """The shipped suites, each ``(name, description)`` (``harness run --suite list``)."""
    return [(n, load_sweep_file(suite_path(n)).description) for n in suite_names()]


def prepare_run(request: RunRequest) -> RunJob:
    """Check and plan a ``harness run``; nothing is run or written (bad input creates nothing).

    A sweep file fills the options not ``given``; ``set`` and ``grid`` merge with its key by key.
    """
    req, file = request.resolved()
    run = RunOptions(req.data_dir, req.device, req.threads, req.log_dir, verbose=req.verbose)
    lease_s()  # a bad $HARNESS_CLAIM_LEASE_S is refused before anything is written
    options = {k: req.executor_options.get(k) for k in declared()}
    name, checked = check_executor(req.executor, run, options)
    # its start-up (the pool's fork server importing the training code) overlaps the planning
    start = getattr(EXECUTORS.get(name), "start_early", None)
    stop = start(run, checked) if start and not req.dry_run else None
    try:
        if req.select:  # a bad rule is refused before anything runs
            parse_rule(req.select)
        spec = _spec(req, file)
        if req.log_dir and not req.dry_run:
            check_log_dir(req.log_dir)
        sweep = plan_sweep(spec, req.data_dir, req.allow_unverified_data)
        # after every check: bad input creates nothing
        store = open_store(req.out, create=False, mode=req.store_mode)
        board = None
        if not req.no_report and not req.dry_run:  # never over the store; writable first
            board = leaderboard_path(req.out, req.report)
            option = "--report" if req.report else "the leaderboard"
            refuse_overwrite(board, option, [("the records store (--out)", store.path)])
            check_writable(board)
    except BaseException:
        if stop is not None:
            stop()
        raise
    keep = None if req.no_checkpoint else str(store.checkpoints_path)
    run = replace(run, checkpoint_dir=keep, checkpoint_every_s=60.0 * req.checkpoint_every)
    return RunJob(req, spec, sweep, store, board, (name, checked, run))


def _spec(req: RunRequest, file: Any) -> SweepSpec:
    """The ``SweepSpec`` of the request and its sweep file's parts."""
    parts = file.parts if file is not None else []
    named = ",".join(p.tasks or req.tasks for p in parts) if parts else req.tasks
    named_m = ",".join([*(p.methods or req.methods for p in parts), req.methods])
    sets, grid = parse_set(list(req.set)), parse_grid(list(req.grid))
    blocks = plan(file, req.methods, req.tasks, sets, grid, set(req.given))
    return SweepSpec(
        blocks=[Block(*b) for b in blocks],
        seeds=parse_seeds(req.seeds),
        preset=req.preset,
        named_tasks={p.strip() for p in named.split(",")} - {"all"},
        named_methods=named_outright(named_m),
        config=file.path if file else None,
        suite=req.suite,
        select=req.select,
        match_skip=req.match_skip,
    )


# --- the registered components (``harness list``) --------------------------------------------

# what ``harness list KIND`` lists (``all``: every kind but the metrics)
COMPONENTS = {
    "methods": METHODS,
    "tasks": TASKS,
    "references": REFERENCES,
    "metrics": METRICS,
    "executors": EXECUTORS,
}


def component_lines(kind: str) -> list[str]:
    """What ``harness list KIND`` says: per component its name, origin unless built in, what."""
    plugins.load_plugins()
    return [_component_line(kind, name, obj) for name, obj in COMPONENTS[kind].items()]


def _first_line(obj: Any) -> str:
    """The first paragraph (not line) of the module's (else the class's) docstring, one line."""
    doc = (sys.modules[obj.__module__].__doc__ or obj.__doc__ or "").strip()
    return " ".join(doc.split("\n\n", 1)[0].split())


def _component_line(kind: str, name: str, obj: Any) -> str:
    where = "" if plugins.source_of(obj)["kind"] == "builtin" else f"({describe_source(obj)}) "
    if kind == "tasks":
        arrow = "higher" if obj.higher_is_better else "lower"
        what = f"[{obj.kind}, {obj.primary} ({arrow} is better)] {_first_line(obj)}"
    elif kind == "references":
        bound = "a bound, " if obj.bound else ""
        what = f"[{bound}{'/'.join(map(str, obj.kinds))}] {describe_reference(name)}"
        what += "".join(
            f"\n  {'':16s}   on {task}: {tcls.reference_notes[name]}"
            for task, tcls in TASKS.items()
            if name in tcls.reference_notes
        )
    elif kind == "metrics":
        arrow = {True: "higher is better", False: "lower is better", None: ""}[obj.higher]
        what = f"{obj.title} [{', '.join(p for p in (obj.unit, arrow, obj.group) if p)}]"
    else:
        what = _first_line(obj)
    return f"  {name:16s} {where}{what}"


def new_method(name: str, kind: str, out: str | Path) -> tuple[list[Path], str]:
    """Write a new method's template and its test: the paths written, and its registry key."""
    return scaffold.new_method(name, kind, out), scaffold.names(name)[0]


METHOD_TEMPLATES = scaffold.KINDS  # ``harness new method --kind``: kind -> what it makes

# --- benchmarks: the timing suite and the speedups load torch when called --------------------


def _timing_suite(name: str) -> Callable[..., Any]:
    """``harness.bench.suite``'s function ``name``, imported when called (it loads torch)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        from harness.bench import suite

        return getattr(suite, name)(*args, **kwargs)

    return call


run_bench = _timing_suite("run_bench")  # the timing suite: the files it wrote
render_timing = _timing_suite("render_timing")  # stores' timing report: text, rows, problems
timing_records = _timing_suite("timing_records")  # stores' timing records, unreadable lines


def bench_speedup(
    out: Path,
    data: Path,
    command: str,
    device: str | None,
    *,
    methods: str,
    skips: Sequence[float],
    hidden: Sequence[int],
    batches: Sequence[int],
    seq_len: int,
    budget: float,
    threads: int,
) -> None:
    """Measure the fast paths' speedups (``device`` None: the CPU); write ``out`` and ``data``."""
    from harness.bench.speedup import measure_speedups, speedup_jsonl
    from harness.bench.speedup_report import speedup_markdown

    device = resolve_device(device or "cpu").type
    run_conditions()  # as in training runs and the timing report
    sizes = f"--hidden {csv(hidden)}, --batches {csv(batches)}, --seq-len {seq_len}"
    oom = out_of_memory(f"the speedup measurement ({sizes}) does not fit in memory")
    with torch_threads(threads or 0), oom:
        rows = measure_speedups(
            methods=None if methods == "all" else methods, skips=skips, hidden=hidden,
            batches=batches, seq_len=seq_len, device=device, budget_s=budget,
        )  # fmt: skip
        text = speedup_markdown(rows, command, device, data_file=data.name)
    write_text(data, speedup_jsonl(rows))
    write_text(out, text)


def csv(values: Sequence[Any]) -> str:
    """``values`` as a flag takes them: ``1,2,3``."""
    return ",".join(str(v) for v in values)
