"""``pool``: the runs of a sweep in worker processes on this machine.

Workers are forked from a fork server that imported the training code and ran no torch op (torch
and a plain fork of the driver do not mix); ``harness run`` starts it early (``start_early``),
while it plans, so a worker starts in milliseconds. A worker holds the run it trains and the next
(``DEPTH``), going on at once while the driver appends its record. One that dies gives the run it
trained a failed record naming how; its next run goes to another worker. Workers end with the
driver however it ends (``_exit_with_driver``). Without a fork server (Windows) they are spawned.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.connection import wait
from typing import Any, ClassVar

from harness.components.plugins import PLUGIN_PACKAGES
from harness.errors import HarnessError
from harness.executors.base import (
    WARM,
    WORKERS,
    EpochCallback,
    ExecutorOptions,
    RunOptions,
    build_kernels,
    lost_record,
    register_executor,
    require_cuda,
    run_one,
    warm_up,
)

DEPTH = 2  # the runs a worker holds: the one it trains and the next
SERVER_GC = "harness.executors.server_gc"  # the server's first import: it makes no collection


def context() -> Any:
    """The workers' ``multiprocessing`` context: a fork server importing ``WARM``, no plugin."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([SERVER_GC, *WARM, *PLUGIN_PACKAGES.values(), __name__])
    return ctx


def _exit_with_driver(alive: Any) -> None:
    """Make this worker process end when the driver does (even by ``kill -9``); ignore SIGINT.

    ``alive`` is the read end of a pipe whose write end only the driver holds: it is ready once
    the driver is gone, and a daemon thread waiting on it ends this process.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        wait([alive])
        os._exit(1)

    threading.Thread(target=watch, name="driver-watchdog", daemon=True).start()


def _worker(conn: Any, run: RunOptions, alive: Any, env: dict[str, str], serve: Any = None) -> None:
    """A worker's life: warm up, then take a config and send back its record, until the pipe closes.

    ``env``: the driver's environment now (a fork server's is older). ``serve(cfg_dict, run)``
    makes the record (default ``run_one``; the sweep profile's times it).
    """
    _exit_with_driver(alive)
    os.environ.clear()
    os.environ.update(env)
    warm_up()  # what the server imported (with no collection: SERVER_GC) is frozen here
    gc.enable()
    serve = serve or run_one
    while True:
        try:
            cfg_dict = conn.recv()
        except (EOFError, OSError):
            return
        if cfg_dict is None:
            return
        conn.send(serve(cfg_dict, run))


def _stop_server() -> None:
    """End the fork server at once, even while it imports (``_stop`` waits for its imports).

    ``multiprocessing`` has no public way to end it early: this reaches into its ``_forkserver``.
    """
    server = forkserver._forkserver
    if server._forkserver_pid is not None:
        with contextlib.suppress(OSError):
            os.kill(server._forkserver_pid, signal.SIGKILL)
        server._stop()


def died(exitcode: int | None) -> str:
    """Why a run has no record: how its worker process ended, in words."""
    if exitcode is None:
        how = "it stopped answering"
    elif exitcode < 0:
        sig = signal.Signals(-exitcode).name
        hint = " (the kernel's out-of-memory killer, or kill -9)" if sig == "SIGKILL" else ""
        how = f"killed by {sig}{hint}"
    else:
        how = f"exit code {exitcode}"
    return f"the worker process running it died ({how}) before sending its record"


@dataclass
class _Slot:
    """One worker process, its end of the pipe, and the runs it holds, in order (none: idle)."""

    process: Any
    conn: Any
    jobs: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


@register_executor("pool")
class PoolExecutor:
    """``options.workers`` processes, one run each at a time."""

    in_process: ClassVar[bool] = False
    options = (WORKERS,)
    preflight = staticmethod(require_cuda)
    worker = staticmethod(_worker)  # a worker process's life (its target)

    def __init__(self, run: RunOptions, options: ExecutorOptions) -> None:
        self.run, self.size = run, options.workers
        self._ctx = context()
        self._alive = self._ctx.Pipe(duplex=False)  # (read, write): only this process writes
        self._slots: list[_Slot] = []
        self._backlog: list[tuple[int, dict[str, Any]]] = []  # submitted, held by no worker
        self._next = 0

    @staticmethod
    def start_early(run: RunOptions, options: ExecutorOptions) -> Callable[[], None] | None:
        """Start the fork server now: it imports the workers' code while the sweep is planned.

        Ended at once at this process's exit (else it would hold the command's output open).
        Returns what ends it at once (bad input found while planning), when this call started it.
        """
        if context().get_start_method() != "forkserver" or forkserver._forkserver._forkserver_pid:
            return None
        forkserver.ensure_running()
        atexit.register(_stop_server)
        return _stop_server

    def slots(self) -> int:
        """The runs the pool takes at once: ``DEPTH`` per worker process."""
        return self.size * DEPTH

    def prepare(self, cfgs: list[Any]) -> None:
        """Build the runs' kernels here (the workers load them), then start the workers needed."""
        build_kernels(cfgs, self.run)
        while len(self._slots) < min(self.size, len(cfgs)):
            self._spawn()

    def _spawn(self) -> _Slot:
        mine, theirs = self._ctx.Pipe()
        args = (theirs, self.run, self._alive[0], dict(os.environ))
        proc = self._ctx.Process(target=self.worker, args=args, name="harness-worker")
        proc.start()
        theirs.close()
        slot = _Slot(proc, mine)
        self._slots.append(slot)
        return slot

    def _room(self) -> _Slot | None:
        """An idle worker, a new one, else the live one holding fewest runs; None: all full."""
        for s in list(self._slots):
            if not s.jobs and not s.process.is_alive():  # died between runs
                self._drop(s)
        idle = next((s for s in self._slots if not s.jobs), None)
        if idle is not None or len(self._slots) < self.size:
            return idle or self._spawn()
        room = [s for s in self._slots if len(s.jobs) < DEPTH and s.process.is_alive()]
        return min(room, key=lambda s: len(s.jobs), default=None)

    def _dispatch(self) -> None:
        """Send the backlog's runs to workers with room, in order."""
        failures = 0
        while self._backlog and (slot := self._room()) is not None:
            try:
                slot.conn.send(self._backlog[0][1])
            except OSError:  # it died: an idle one is replaced, a busy one's runs are wait_any's
                failures += 1
                if failures > len(self._slots) + 1:
                    raise HarnessError("cannot start a worker process for the sweep") from None
                if not slot.jobs:
                    self._drop(slot)
                else:  # not alive: _room passes it over, wait_any collects its runs
                    slot.process.kill()
                    slot.process.join(1.0)
                continue
            slot.jobs.append(self._backlog.pop(0))

    def _drop(self, slot: _Slot) -> None:
        with contextlib.suppress(OSError):
            slot.conn.close()
        slot.process.join(5.0)
        if slot.process.is_alive():
            slot.process.kill()
            slot.process.join(1.0)
        self._slots.remove(slot)

    def submit(self, cfg: Any, on_epoch: EpochCallback | None = None) -> Hashable:
        """Send the run to a worker with room (``_room``); its handle."""
        self._next += 1
        self._backlog.append((self._next, cfg.to_dict()))
        self._dispatch()
        return self._next

    def wait_any(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """Block until a worker sends a record or dies; each finished ``(handle, record)``."""
        out: list[tuple[Hashable, dict[str, Any]]] = []
        while not out:
            self._dispatch()
            busy = [s for s in self._slots if s.jobs]
            if not busy:
                return out
            ready = set(wait([s.conn for s in busy] + [s.process.sentinel for s in busy]))
            for s in busy:
                if s.conn in ready or s.process.sentinel in ready:
                    out += self._collect(s)
        self._dispatch()
        return out

    def _collect(self, s: _Slot) -> list[tuple[Hashable, dict[str, Any]]]:
        """The records worker ``s`` sent; if it died, the failed record of the run it trained."""
        out: list[tuple[Hashable, dict[str, Any]]] = []
        closed = False
        try:
            while s.jobs and s.conn.poll():
                rec = s.conn.recv()
                out.append((s.jobs.pop(0)[0], rec))
        except (EOFError, OSError):
            closed = True
        if s.jobs and (closed or not s.process.is_alive()):  # it died with the run it trained
            s.process.join(5.0)
            handle, cfg_dict = s.jobs.pop(0)
            out.append((handle, lost_record(cfg_dict, died(s.process.exitcode))))
            self._backlog[:0], s.jobs = s.jobs, []  # they never started: another worker's
            self._drop(s)
        return out

    def cancel(self) -> None:
        """End every worker now (an interrupt): the runs in flight are dropped."""
        self._backlog.clear()
        for s in self._slots:
            with contextlib.suppress(Exception):
                s.process.terminate()
        deadline = time.monotonic() + 5.0
        for s in list(self._slots):
            s.process.join(max(deadline - time.monotonic(), 0.1))
            self._drop(s)

    def close(self) -> None:
        """Ask every worker to end and wait for it (killed if it does not within 5 s)."""
        for s in self._slots:
            with contextlib.suppress(OSError):
                s.conn.send(None)
        for s in list(self._slots):
            self._drop(s)
