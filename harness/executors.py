"""Executors: turn a list of run configs into records.

Every executor runs the same ``harness.train.run`` on the same configs with one torch thread per
run (unless told otherwise), so the records, and therefore the store and resume, are the same
whichever executor produced them; only timings and the order in which runs finish differ.

- ``LocalExecutor(workers=1)``: serial in this process; ``workers > 1`` a process pool (spawned
  processes, one torch thread each) whose workers end when the parent process does, however it
  ends (``kill -9`` included), and are stopped at once when the sweep is interrupted.
- ``RayExecutor``: the same configs as Ray tasks on a cluster (``address``) or a local Ray
  instance started on demand; needs the ``ray`` extra.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from harness.config import RunConfig
from harness.errors import HarnessError

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# The most worker processes and torch threads per run a sweep may ask for: beyond any machine
# here, and below the counts at which thread pools fail to allocate (--threads 1000000 ends in an
# OpenBLAS allocation error inside the first run).
MAX_WORKERS = 1024
MAX_THREADS = 1024


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


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the worker processes now (an interrupted sweep)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(Exception):
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(max(deadline - time.monotonic(), 0.1))
            if p.is_alive():
                p.kill()
                p.join(1.0)


def _run_one(
    cfg_dict: dict[str, Any],
    data_dir: str | None,
    device: str,
    threads: int,
    log_dir: str | None = None,
    callbacks: Sequence[Any] = (),
):
    """Run one config in a worker (configs travel as plain dicts).

    With ``log_dir``, the run also writes TensorBoard events there (``harness.tracking``).
    ``callbacks`` (in-process runs only) go to ``harness.train.run``, called after every epoch.
    """
    from harness.train import failed_record

    try:
        return _run_config(cfg_dict, data_dir, device, threads, log_dir, callbacks)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # set-up around the run (threads, logger): still the run's record
        return failed_record(cfg_dict, e)


def _run_config(
    cfg_dict: dict[str, Any],
    data_dir: str | None,
    device: str,
    threads: int,
    log_dir: str | None,
    callbacks: Sequence[Any],
) -> dict[str, Any]:
    import torch

    from harness import config
    from harness.train import run

    if threads:
        torch.set_num_threads(threads)
    cfg = config.from_dict(cfg_dict)
    if not log_dir:
        return run(cfg, data_dir, device, list(callbacks))
    from harness.tracking import TensorBoardLogger

    logger = TensorBoardLogger(log_dir, cfg)
    try:
        rec = run(cfg, data_dir, device, [logger, *callbacks])
        logger.finish(rec)
    finally:
        logger.close()
    return rec


class LocalExecutor:
    """Serial (``workers=1``) or a process pool of ``workers`` processes.

    Args:
        data_dir: passed to every run.
        device: ``cpu``, ``cuda`` or ``auto``.
        workers: processes; 1 runs in this process.
        threads: torch threads per run (0 leaves torch's default).
        log_dir: TensorBoard events per run under this directory (None: none).
    """

    def __init__(
        self,
        data_dir: str | None = None,
        device: str = "cpu",
        workers: int = 1,
        threads: int = 1,
        log_dir: str | None = None,
    ) -> None:
        if workers < 1:
            raise HarnessError(f"--workers must be >= 1 (got {workers})")
        self.data_dir, self.device, self.workers, self.threads = data_dir, device, workers, threads
        self.log_dir = log_dir

    def map(
        self, configs: Iterable[RunConfig], callbacks: Sequence[Any] = ()
    ) -> Iterator[tuple[RunConfig, dict[str, Any]]]:
        """Yield ``(config, record)`` as each run finishes.

        ``callbacks`` are called after every epoch (``harness.train.train_model``) of runs in
        this process (``workers=1``); runs in worker processes do not call them. Configs are
        taken from ``configs`` only when a worker is free for them, so a lazy iterable (one that
        claims each run, ``harness.results.Claims``) is read just in time. The worker processes
        end with this process, and at once on an exception here (an interrupt): the runs in
        flight are then lost, not recorded.
        """
        if self.workers == 1:
            for cfg in configs:
                d = cfg.to_dict()
                yield (
                    cfg,
                    _run_one(d, self.data_dir, self.device, self.threads, self.log_dir, callbacks),
                )
            return
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # torch and fork do not mix
        pool = ProcessPoolExecutor(
            self.workers, mp_context=ctx, initializer=_exit_with_parent, initargs=(os.getpid(),)
        )
        todo = iter(configs)
        pending: dict[Any, RunConfig] = {}

        def fill() -> None:  # a config is read (and claimed) only when a worker is free for it
            while len(pending) < self.workers:
                cfg = next(todo, None)
                if cfg is None:
                    return
                args = (cfg.to_dict(), self.data_dir, self.device, self.threads, self.log_dir)
                pending[pool.submit(_run_one, *args)] = cfg

        try:
            fill()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                finished = [(pending.pop(fut), fut) for fut in done]
                fill()  # the free workers start their next runs before the records are handled
                for cfg, fut in finished:
                    try:
                        rec = fut.result()
                    except BrokenProcessPool:
                        raise HarnessError(
                            "a worker process died (out of memory, or killed); the finished "
                            "runs are recorded: run the same command again to resume"
                        ) from None
                    yield cfg, rec
        except BaseException:  # an interrupt, or the consumer stopped: no run is left running
            _stop_pool(pool)
            raise
        pool.shutdown(wait=True)


class RayExecutor:
    """Runs configs as Ray tasks (one CPU each) and yields records as they finish.

    Args:
        address: a Ray cluster address; None starts (or joins) a local Ray instance.
        data_dir: the dataset root as seen by the workers.
        device: ``cpu``, ``cuda`` or ``auto`` (``cuda`` asks Ray for one GPU per run).
        threads: torch threads per run.
        log_dir: TensorBoard events per run under this directory, as the workers see it.
    """

    def __init__(
        self,
        address: str | None = None,
        data_dir: str | None = None,
        device: str = "cpu",
        threads: int = 1,
        log_dir: str | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise HarnessError(
                "--executor ray needs Ray: pip install 'condrnn-harness[ray]'"
            ) from None
        self.ray = ray
        self.data_dir, self.device, self.threads = data_dir, device, threads
        self.log_dir = log_dir
        if not ray.is_initialized():
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, ValueError, RuntimeError) as e:
                raise HarnessError(f"cannot connect to Ray at {address or 'local'}: {e}") from None

    def map(self, configs: Iterable[RunConfig]) -> Iterator[tuple[RunConfig, dict[str, Any]]]:
        """Yield ``(config, record)`` as each Ray task finishes.

        At most as many tasks as the cluster has CPUs for are in flight, so configs are read
        from ``configs`` just in time (as in ``LocalExecutor.map``); an exception here cancels
        the tasks in flight.
        """
        ray = self.ray
        gpus = 1 if self.device == "cuda" else 0
        cpus = max(self.threads, 1)
        remote = ray.remote(num_cpus=cpus, num_gpus=gpus)(_run_one)
        slots = max(int(ray.cluster_resources().get("CPU", 1) // cpus), 1)
        todo = iter(configs)
        pending: dict[Any, RunConfig] = {}

        def fill() -> None:
            while len(pending) < slots:
                cfg = next(todo, None)
                if cfg is None:
                    return
                args = (cfg.to_dict(), self.data_dir, self.device, self.threads, self.log_dir)
                pending[remote.remote(*args)] = cfg

        try:
            fill()
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                finished = [(pending.pop(ref), ref) for ref in done]
                fill()
                for cfg, ref in finished:
                    yield cfg, ray.get(ref)
        except BaseException:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise

    def shutdown(self) -> None:
        """Disconnect from Ray (``ray.shutdown()``), stopping the processes ``ray.init`` started."""
        self.ray.shutdown()
