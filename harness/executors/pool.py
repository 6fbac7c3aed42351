"""``pool``: the runs of a sweep in worker processes on this machine.

Each worker is a spawned process (torch and fork do not mix) that takes one run at a time over a
pipe and sends its record back. The pool knows which worker runs which run, so a worker that dies
in the middle (the kernel's out-of-memory killer, a segmentation fault in a native library) gives
that run a failed record naming how it died, a fresh worker takes its place, and the sweep goes
on. Workers end with the parent process however it ends (``kill -9`` included: the kernel sends
them SIGKILL, and each also watches its parent), and at once when the sweep is interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, ClassVar

from harness.errors import HarnessError
from harness.executors.base import (
    WORKERS,
    EpochCallback,
    ExecutorOptions,
    RunOptions,
    lost_record,
    register_executor,
    require_cuda,
    run_one,
)

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _exit_with_parent(parent: int) -> None:
    """Make this worker process end when ``parent`` does (even by ``kill -9``).

    On Linux the kernel sends SIGKILL at the parent's death (``prctl(PR_SET_PDEATHSIG)``);
    everywhere a daemon thread also checks every second that the parent is still this process's
    parent. The worker ignores SIGINT: the parent stops the pool on an interrupt.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _worker(conn: Any, run: RunOptions, parent: int) -> None:
    """A worker's life: take a config, send its record back, until the pipe closes."""
    _exit_with_parent(parent)
    while True:
        try:
            cfg_dict = conn.recv()
        except (EOFError, OSError):
            return
        if cfg_dict is None:
            return
        conn.send(run_one(cfg_dict, run))


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
    """One worker process, its end of the pipe, and the run it holds (None: idle)."""

    process: Any
    conn: Any
    job: tuple[int, dict[str, Any]] | None = None


@register_executor("pool")
class PoolExecutor:
    """``workers`` processes, one run each at a time.

    Args:
        run: what every run gets (one torch thread per run by default).
        options: ``workers``, the processes (1 to ``MAX_WORKERS``, checked by ``WORKERS``).
    """

    in_process: ClassVar[bool] = False
    options = (WORKERS,)
    preflight = staticmethod(require_cuda)

    def __init__(self, run: RunOptions, options: ExecutorOptions) -> None:
        import multiprocessing as mp

        self.run, self.size = run, options.workers
        self._ctx = mp.get_context("spawn")
        self._slots: list[_Slot] = []
        self._next = 0

    def slots(self) -> int:
        """The number of worker processes."""
        return self.size

    def _spawn(self) -> _Slot:
        mine, theirs = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker, args=(theirs, self.run, os.getpid()), name="harness-worker"
        )
        proc.start()
        theirs.close()
        slot = _Slot(proc, mine)
        self._slots.append(slot)
        return slot

    def _idle(self) -> _Slot:
        for s in list(self._slots):
            if s.job is None and not s.process.is_alive():  # died between runs
                self._drop(s)
        slot = next((s for s in self._slots if s.job is None), None)
        if slot is not None:
            return slot
        if len(self._slots) >= self.size:
            raise RuntimeError("every worker is busy: wait_any first")
        return self._spawn()

    def _drop(self, slot: _Slot) -> None:
        with contextlib.suppress(OSError):
            slot.conn.close()
        slot.process.join(5.0)
        if slot.process.is_alive():
            slot.process.kill()
            slot.process.join(1.0)
        self._slots.remove(slot)

    def submit(self, cfg: Any, on_epoch: EpochCallback | None = None) -> Hashable:
        """Send the run to an idle worker (a new one if none is idle); its handle."""
        self._next += 1
        cfg_dict = cfg.to_dict()
        for _ in range(2):  # a worker that died while idle is replaced once
            slot = self._idle()
            try:
                slot.conn.send(cfg_dict)
                break
            except OSError:
                self._drop(slot)
        else:
            raise HarnessError("cannot start a worker process for the sweep")
        slot.job = (self._next, cfg_dict)
        return self._next

    def wait_any(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """Block until a worker sends a record or dies; each finished ``(handle, record)``."""
        busy = [s for s in self._slots if s.job is not None]
        if not busy:
            return []
        ready = set(wait([s.conn for s in busy] + [s.process.sentinel for s in busy]))
        out: list[tuple[Hashable, dict[str, Any]]] = []
        for s in busy:
            if s.conn not in ready and s.process.sentinel not in ready:
                continue
            handle, cfg_dict = s.job  # type: ignore[misc]
            rec = None
            with contextlib.suppress(EOFError, OSError):
                if s.conn.poll():
                    rec = s.conn.recv()
            s.job = None
            if rec is None:  # the worker died with the run
                s.process.join(5.0)
                rec = lost_record(cfg_dict, died(s.process.exitcode))
                self._drop(s)
            out.append((handle, rec))
        return out

    def cancel(self) -> None:
        """End every worker now (an interrupt): the runs in flight are dropped."""
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
