"""Where a sweep's time goes: a run's fixed cost by part and, on the pool, the hand-off.

The instrument of the benchmark ``benchmarks/test_sweep_cost.py`` (it lives beside it: nothing
in the harness uses it). ``profile(command)`` calls ``command`` (``harness run ...``, in this
process: the benchmark passes the command line's ``main``) with timers around the
parts of a run and returns where the time went. The parts are exclusive (a part's time leaves
out the parts it calls), in wall seconds summed over the runs:

- ``setup``: a run's set-up (``run_one``: the config rebuilt, threads; a process's first run
  imports the training code here) and ``record``: the record's assembly (``training.train.run``:
  its start, code version, checkpoint bookkeeping, its end);
- ``data``: the task built and its data read, generated and split; ``model``: the model built;
- ``optimiser``: Adam built (the ``torch._dynamo`` it imports is imported before the first run:
  ``harness.executors.base.warm_up``);
- ``epochs``: the training epochs; ``evaluation``: validation after each epoch and the test;
- ``write``: the record appended to the store, ``fsync``: its fsyncs (inside ``write``).

Beside them the process's own parts: ``planning`` (``api.prepare_run``: every config resolved, the
data checked, each model built once), ``sweep`` (``run_sweep``) and ``cli`` (the rest of the
command: the imports it does before planning, torch's among them, parsing, the lines it prints).
With ``--workers`` the runs' parts are measured in the workers, and the hand-off in the driver and
the workers: ``spawn`` (a worker's start until its code runs: the wait for the fork server's imports
to end, if they have not, the fork and this module's imports; a spawned worker's interpreter and
imports), ``warm_up`` (``harness.executors.pool.warm_up``: the plugins, as the fork server imported
the training code; a spawned worker's imports of it), ``submit`` (a run pickled and sent, the first
ones starting their workers), ``wait`` (the driver blocked on the workers), ``bookkeeping`` (the
driver between two waits: appending the record, the progress line, claiming and submitting the next
run), ``return`` (a record pickled, sent and received: the worker's send to the driver's receipt),
``worker_idle`` (a worker waiting for its next run) and ``tail_idle`` (a worker idle from its last
record to the sweep's end: the longest run last).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from harness import api
from harness.executors import base, local, pool
from harness.persistence.claims import SweepStore
from harness.training import train

COST = "_cost"  # the key of a timed worker's record holding its timings (popped by the driver)


class Clock:
    """Exclusive wall time per part: a timed call's time goes to the innermost part running."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self._stack: list[list[Any]] = []  # [part, start, time of the parts inside it]

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with its calls timed as ``part``."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append([part, time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                name, start, inner = self._stack.pop()
                took = time.perf_counter() - start
                self.parts[name] = self.parts.get(name, 0.0) + took - inner
                if self._stack:
                    self._stack[-1][2] += took

        return timed

    def take(self) -> dict[str, float]:
        """The parts so far, emptied."""
        parts, self.parts = self.parts, {}
        return parts


@contextlib.contextmanager
def timing(clock: Clock) -> Iterator[Clock]:
    """The parts of a run timed on ``clock`` in this process (module attributes patched)."""

    def build(*args: Any, **kwargs: Any) -> Any:
        task, model = real["build"](*args, **kwargs)
        task.splits = clock.wrap("data", task.splits)
        return task, model

    targets = [
        (train, "build", "data", build),
        (train, "SeqModel", "model", None),
        (torch.optim, "Adam", "optimiser", None),
        (train, "train_model", "epochs", None),
        (train, "evaluate", "evaluation", None),
        (train, "run", "record", None),
        (base, "_run_config", "setup", None),
        (SweepStore, "append", "write", None),
        (os, "fsync", "fsync", None),
    ]
    real = {name: getattr(owner, name) for owner, name, _, _ in targets}
    try:
        for owner, name, part, fn in targets:
            setattr(owner, name, clock.wrap(part, fn or real[name]))
        base_run_one = base.run_one
        local.run_one = base.run_one = clock.wrap("setup", base_run_one)
        yield clock
    finally:
        local.run_one = base.run_one = base_run_one
        for owner, name, _, _ in targets:
            setattr(owner, name, real[name])


def _timed_worker(*args: Any) -> None:
    """``harness.executors.pool``'s worker with its warm-up, runs and hand-off timed."""
    marks = {"ready": time.time()}
    real_warm_up, clock = pool.warm_up, Clock()

    def warm_up() -> None:
        real_warm_up()
        marks["sent"] = time.time()
        marks["warm_up"] = marks["sent"] - marks["ready"]  # told with the first record only

    def serve(cfg_dict: dict[str, Any], run: Any) -> dict[str, Any]:
        got = time.time()
        rec = base.run_one(cfg_dict, run)  # timing's: the set-up timed
        idle, marks["sent"] = got - marks["sent"], time.time()
        cost = {"parts": clock.take(), "idle": idle, "ready": marks["ready"], "sent": marks["sent"]}
        rec[COST] = cost | {"warm_up": marks.pop("warm_up", 0.0)}
        return rec

    pool.warm_up = warm_up  # this worker process's own module
    with timing(clock):
        pool._worker(*args, serve=serve)


def timed_pool(hand: dict[str, Any]) -> type:
    """A ``PoolExecutor`` whose workers time their runs and the driver its hand-off (``hand``)."""

    class TimedPool(pool.PoolExecutor):
        worker = staticmethod(_timed_worker)

        def _spawn(self) -> pool._Slot:
            hand["started"].append(time.time())
            return super()._spawn()

        def submit(self, cfg: Any, on_epoch: Any = None) -> Any:
            t = time.perf_counter()
            try:
                return super().submit(cfg, on_epoch)
            finally:
                add(hand["parts"], "submit", time.perf_counter() - t)

        def wait_any(self) -> list[tuple[Any, dict[str, Any]]]:
            t = time.perf_counter()
            if hand["left_wait"] is not None:
                add(hand["parts"], "bookkeeping", t - hand["left_wait"])
            out = super().wait_any()
            now = time.time()
            hand["left_wait"] = time.perf_counter()
            add(hand["parts"], "wait", hand["left_wait"] - t)
            for _, rec in out:
                cost = rec.pop(COST, None)
                if cost is None:  # a lost run's record
                    continue
                for k, v in cost["parts"].items():
                    add(hand["runs"], k, v)
                add(hand["parts"], "return", now - cost["sent"])
                add(hand["parts"], "worker_idle", cost["idle"])
                add(hand["parts"], "warm_up", cost["warm_up"])
                hand["workers"][cost["ready"]] = cost["sent"]
            return out

        def close(self) -> None:
            hand["closed"] = time.time()
            super().close()

    return TimedPool


def add(parts: dict[str, float], part: str, seconds: float) -> None:
    """Add ``seconds`` to ``parts[part]``."""
    parts[part] = parts.get(part, 0.0) + seconds


def profile(command: Callable[[], int]) -> dict[str, Any]:
    """Call ``command`` (a ``harness run``) here, timed; the parts, in seconds (see the module).

    Returns:
        ``exit_code`` (``command``'s), ``total_s`` (the call's), and the parts in seconds:
        ``process``, ``runs`` and, when the runs went to the pool, ``hand_off`` and ``workers``.
    """
    clock = Clock()
    hand: dict[str, Any] = {"parts": {}, "runs": {}, "started": [], "workers": {}}
    hand["left_wait"] = hand["closed"] = None
    real_make, real_prepare, real_sweep = api.make_executor, api.prepare_run, api.run_sweep
    pooled: list[bool] = []

    def make_executor(name: str, run: Any, options: Any) -> Any:
        if name != "pool":
            return real_make(name, run, options)
        pooled.append(True)
        return timed_pool(hand)(run, options)

    process: dict[str, float] = {}
    runs: dict[str, float] = {}

    def whole(part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            clock.take()
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                process[part] = time.perf_counter() - t
                if part == "sweep":
                    runs.update(clock.take())

        return timed

    api.make_executor = make_executor
    api.prepare_run, api.run_sweep = whole("planning", real_prepare), whole("sweep", real_sweep)
    start = time.perf_counter()
    try:
        with timing(clock):
            code = command()
    finally:
        api.make_executor, api.prepare_run, api.run_sweep = real_make, real_prepare, real_sweep
    total = time.perf_counter() - start
    process["cli"] = time.perf_counter() - start - process["planning"] - process["sweep"]
    if pooled:  # the runs' parts from the workers, the records' writes from here
        runs = hand["runs"] | {k: v for k, v in runs.items() if k in ("write", "fsync")}
    out: dict[str, Any] = {"exit_code": code, "total_s": total, "process": process, "runs": runs}
    if pooled:
        hand_off = dict(hand["parts"])
        ends = hand["workers"]  # each worker's ready time: its last record's
        started = sorted(hand["started"])
        hand_off["spawn"] = sum(r - s for r, s in zip(sorted(ends), started, strict=False))
        closed = hand["closed"] or time.time()
        hand_off["tail_idle"] = sum(closed - last for last in ends.values())
        out["hand_off"] = hand_off
        out["workers"] = len(ends)
    return out


def report_lines(result: dict[str, Any]) -> list[str]:
    """``profile``'s result in lines: each part's seconds and share."""
    total = result["total_s"]
    lines = [f"total {total:.2f} s (exit code {result['exit_code']})"]
    for title in ("process", "runs", "hand_off"):
        parts = result.get(title)
        if not parts:
            continue
        lines.append(f"{title}:")
        for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {k:12s} {v:8.2f} s  {100 * v / total:5.1f} %")
    return lines
