"""Executors: where the runs of a sweep train. One protocol, a registry, small implementations.

Every executor runs ``run_one`` (``harness.training.train.run`` with the sweep's ``RunOptions``:
data root, device, torch threads, event logs) on the configs it is given, so the records, and
therefore the store and resume, are the same whichever executor produced them; only timings and the
order in which runs finish differ.

An executor implements ``Executor``: ``slots()`` (how many runs it takes at once), ``submit``
(start one run, return a handle), ``wait_any`` (block until some run finishes; return each
finished ``(handle, record)``), ``cancel`` (stop everything in flight: an interrupt) and
``close``. The loop that keeps the slots filled, claims each run just in time and appends the
records is written once, in ``harness.api.run_sweep``. Whatever becomes of a run (an exception,
its worker process killed, its Ray task lost) comes back as that run's record: failed, with the
reason.

Registered executors (``harness list executors``): ``local`` (in this process, one run after
the other), ``pool`` (worker processes on this machine, one torch thread each by default),
``ray`` (Ray tasks on a cluster; the ``ray`` extra), ``submitit`` (Slurm jobs, or local processes
where there is no Slurm; the ``slurm`` extra). Adding one: a module (here, imported below, or
an ``--include`` file) with a class decorated ``@register_executor("name")`` taking
``(RunOptions, ExecutorOptions)``; its ``options`` (``Option`` s) are its ``harness run`` flags
and sweep-file keys. The protocol, ``Option`` and ``run_one`` live in ``harness.executors.base``.
"""

from harness.executors import local, pool, ray, submitit  # noqa: F401  (they register)
from harness.executors.base import (
    EXECUTORS,
    MAX_THREADS,
    Executor,
    ExecutorOptions,
    RunOptions,
    make_executor,
    register_executor,
    run_one,
)

__all__ = [
    "EXECUTORS",
    "MAX_THREADS",
    "Executor",
    "ExecutorOptions",
    "RunOptions",
    "make_executor",
    "register_executor",
    "run_one",
]
