"""The executor protocol, its options, the registry and ``run_one`` (see ``harness.executors``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from harness import config, records
from harness.registry import Registry, needs
from harness.resume import method_code
from harness.tracking import TensorBoardLogger

# The most worker processes and torch threads per run a sweep may ask for: beyond any machine
# here, and below the counts at which thread pools fail to allocate (--threads 1000000 ended in
# a segmentation fault inside the first run).
MAX_WORKERS = 1024
MAX_THREADS = 1024


@dataclass(frozen=True)
class RunOptions:
    """What every run of a sweep gets, whichever executor runs it.

    Attributes:
        data_dir: the dataset root (None: ``$HARNESS_DATA_DIR``, else the user cache).
        device: ``cpu``, ``cuda`` or ``auto`` (``harness.env.resolve_device``).
        threads: torch CPU threads per run (0: torch's default).
        log_dir: TensorBoard event files per run under this folder (None: none).
        checkpoint_dir: each run keeps a checkpoint of its training here and goes on from one
            it finds (``harness.checkpoint``; None: no checkpoints).
        checkpoint_every_s: the least seconds between two checkpoints of a run.
    """

    data_dir: str | None = None
    device: str = "cpu"
    threads: int = 1
    log_dir: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every_s: float = 600.0


@dataclass(frozen=True)
class ExecutorOptions:
    """The executors' own settings (each reads the ones it has).

    Attributes:
        workers: ``pool``: worker processes.
        ray_address: ``ray``: the cluster's address (None: a new local Ray instance, on
            127.0.0.1 only).
        slurm_partition: ``submitit``: the Slurm partition (None: the cluster's default).
        slurm_time: ``submitit``: each job's time limit in minutes (None: a day).
        slurm_cpus: ``submitit``: CPUs per job (None: ``RunOptions.threads``, at least 1).
        slurm_gpus: ``submitit``: GPUs per job (None: 1 with device ``cuda``, else 0).
        slurm_mem: ``submitit``: memory per job in GB (None: the partition's default).
        slurm_array_parallelism: ``submitit``: jobs in flight (None: 256 on Slurm, else as many
            as this machine's CPUs hold).
        slurm_folder: ``submitit``: the jobs' pickles and logs (None: the user cache).
        submitit_cluster: ``submitit``: ``slurm``, ``local`` or ``debug`` (None: Slurm where
            ``srun`` is found, else local processes).
    """

    workers: int = 1
    ray_address: str | None = None
    slurm_partition: str | None = None
    slurm_time: int | None = None
    slurm_cpus: int | None = None
    slurm_gpus: int | None = None
    slurm_mem: int | None = None
    slurm_array_parallelism: int | None = None
    slurm_folder: str | None = None
    submitit_cluster: str | None = None


EpochCallback = Callable[[int, dict[str, Any]], None]


class Executor(Protocol):
    """What ``harness.api.run_sweep`` drives.

    Attributes:
        name: the registry key.
        in_process: runs train in this process (so ``submit``'s ``on_epoch`` is called).
    """

    name: ClassVar[str]
    in_process: ClassVar[bool]

    def slots(self) -> int:
        """How many runs may be in flight at once."""

    def submit(self, cfg: Any, on_epoch: EpochCallback | None = None) -> Hashable:
        """Start (or queue) one run; returns its handle."""

    def wait_any(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """Block until at least one run in flight finished; each finished ``(handle, record)``."""

    def cancel(self) -> None:
        """Stop every run in flight now (they are dropped, not recorded)."""

    def close(self) -> None:
        """Release what the executor holds (worker processes) once nothing is in flight."""


EXECUTORS = Registry(
    "executor",
    needs(
        "",
        *(m for m in (*Executor.__annotations__, *vars(Executor)) if m[0] != "_" and m != "name"),
    ),
    "harness.executors.Executor",
    light=True,
)
register_executor = EXECUTORS.register


def run_one(
    cfg_dict: dict[str, Any], run: RunOptions, callbacks: tuple[EpochCallback, ...] = ()
) -> dict[str, Any]:
    """Run one config (as a plain dict: configs travel so) and return its record.

    With ``run.log_dir``, the run also writes TensorBoard events (``harness.tracking``).
    ``callbacks`` (in-process runs only) go to ``harness.train.run``, called after every epoch.
    Anything raised around the run (setting the threads, opening the event log) is the run's
    failed record too; only an interrupt propagates.
    """
    from harness.train import failed_record

    try:
        return _run_config(cfg_dict, run, callbacks)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        return failed_record(cfg_dict, e)


def _run_config(
    cfg_dict: dict[str, Any], run: RunOptions, callbacks: tuple[EpochCallback, ...]
) -> dict[str, Any]:
    import torch

    from harness.train import run as train_run

    if run.threads:
        torch.set_num_threads(run.threads)
    cfg = config.from_dict(cfg_dict)
    saving = {"checkpoint_dir": run.checkpoint_dir, "checkpoint_every_s": run.checkpoint_every_s}
    if not run.log_dir:
        return train_run(cfg, run.data_dir, run.device, list(callbacks), **saving)

    logger = TensorBoardLogger(run.log_dir, cfg)
    try:
        rec = train_run(cfg, run.data_dir, run.device, [logger, *callbacks], **saving)
        logger.finish(rec)
    finally:
        logger.close()
    return rec


def lost_record(cfg_dict: dict[str, Any], why: str) -> dict[str, Any]:
    """The failed record of a run whose worker never sent its record back (``why``)."""
    try:
        code = method_code(cfg_dict["method"])
    except Exception:
        code = None
    return records.failed_record(cfg_dict, why, code)


def make_executor(name: str, run: RunOptions, options: ExecutorOptions) -> Executor:
    """The executor registered as ``name``, set up for a sweep.

    Raises:
        HarnessError: an unknown name (with suggestions), or an executor that cannot start
            (Ray not installed or not reachable).
    """
    return EXECUTORS.get(name)(run, options)
