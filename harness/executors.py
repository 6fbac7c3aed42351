"""Executors: turn a list of run configs into records.

Every executor runs the same ``harness.train.run`` on the same configs with one torch thread per
run (unless told otherwise), so the records, and therefore the store and resume, are the same
whichever executor produced them; only timings and the order in which runs finish differ.

- ``LocalExecutor(workers=1)``: serial in this process; ``workers > 1`` a process pool (spawned
  processes, one torch thread each).
- ``RayExecutor``: the same configs as Ray tasks on a cluster (``address``) or a local Ray
  instance started on demand; needs the ``ray`` extra.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from harness.config import RunConfig
from harness.errors import HarnessError


def _run_one(cfg_dict: dict[str, Any], data_dir: str | None, device: str, threads: int):
    """Run one config in a worker (configs travel as plain dicts)."""
    import torch

    from harness import config
    from harness.train import run

    if threads:
        torch.set_num_threads(threads)
    return run(config.from_dict(cfg_dict), data_dir, device)


class LocalExecutor:
    """Serial (``workers=1``) or a process pool of ``workers`` processes.

    Args:
        data_dir: passed to every run.
        device: ``cpu``, ``cuda`` or ``auto``.
        workers: processes; 1 runs in this process.
        threads: torch threads per run (0 leaves torch's default).
    """

    def __init__(
        self, data_dir: str | None = None, device: str = "cpu", workers: int = 1, threads: int = 1
    ) -> None:
        if workers < 1:
            raise HarnessError(f"--workers must be >= 1 (got {workers})")
        self.data_dir, self.device, self.workers, self.threads = data_dir, device, workers, threads

    def map(self, configs: Sequence[RunConfig]) -> Iterator[tuple[RunConfig, dict[str, Any]]]:
        """Yield ``(config, record)`` as each run finishes."""
        if self.workers == 1:
            for cfg in configs:
                yield cfg, _run_one(cfg.to_dict(), self.data_dir, self.device, self.threads)
            return
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # torch and fork do not mix
        with ProcessPoolExecutor(self.workers, mp_context=ctx) as pool:
            futures = {
                pool.submit(_run_one, c.to_dict(), self.data_dir, self.device, self.threads): c
                for c in configs
            }
            for fut in as_completed(futures):
                yield futures[fut], fut.result()


class RayExecutor:
    """Runs configs as Ray tasks (one CPU each) and yields records as they finish.

    Args:
        address: a Ray cluster address; None starts (or joins) a local Ray instance.
        data_dir: the dataset root as seen by the workers.
        device: ``cpu``, ``cuda`` or ``auto`` (``cuda`` asks Ray for one GPU per run).
        threads: torch threads per run.
    """

    def __init__(
        self,
        address: str | None = None,
        data_dir: str | None = None,
        device: str = "cpu",
        threads: int = 1,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise HarnessError(
                "--executor ray needs Ray: pip install 'condrnn-harness[ray]'"
            ) from None
        self.ray = ray
        self.data_dir, self.device, self.threads = data_dir, device, threads
        if not ray.is_initialized():
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, ValueError, RuntimeError) as e:
                raise HarnessError(f"cannot connect to Ray at {address or 'local'}: {e}") from None

    def map(self, configs: Sequence[RunConfig]) -> Iterator[tuple[RunConfig, dict[str, Any]]]:
        """Yield ``(config, record)`` as each Ray task finishes."""
        ray = self.ray
        gpus = 1 if self.device == "cuda" else 0
        remote = ray.remote(num_cpus=max(self.threads, 1), num_gpus=gpus)(_run_one)
        pending = {
            remote.remote(c.to_dict(), self.data_dir, self.device, self.threads): c for c in configs
        }
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)

    def shutdown(self) -> None:
        """Disconnect from Ray (``ray.shutdown()``), stopping the processes ``ray.init`` started."""
        self.ray.shutdown()
