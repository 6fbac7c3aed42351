"""Executors: where the runs of a sweep train. One protocol, a registry, small implementations.

Every executor runs ``run_one`` on the configs it is given, so the records are the same whichever
executor produced them; whatever becomes of a run comes back as its record (failed, with the
reason). Adding one: docs/architecture.md ("Adding an executor").
"""

from harness.executors import local, pool, ray, submitit  # noqa: F401  (they register)
from harness.executors.base import (  # noqa: F401  (re-exported)
    EXECUTORS,
    MAX_THREADS,
    Executor,
    ExecutorOptions,
    RunOptions,
    make_executor,
    register_executor,
    run_one,
)
