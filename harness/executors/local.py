"""``local``: the runs of a sweep in this process, one after the other."""

from __future__ import annotations

import gc
from collections.abc import Hashable
from typing import Any, ClassVar

from harness.executors.base import (
    WORKERS,
    EpochCallback,
    ExecutorOptions,
    RunOptions,
    build_kernels,
    register_executor,
    require_cuda,
    run_one,
    warm_up,
)


@register_executor("local")
class LocalExecutor:
    """One run at a time, in this process: ``wait_any`` trains the run ``submit`` queued."""

    in_process: ClassVar[bool] = True
    options = (WORKERS,)
    preflight = staticmethod(require_cuda)

    def __init__(self, run: RunOptions, options: ExecutorOptions | None = None) -> None:
        self.run = run
        self._queued: tuple[int, dict[str, Any], EpochCallback | None] | None = None
        self._next = 0
        self._frozen = False

    def prepare(self, cfgs: list[Any]) -> None:
        """Import (``warm_up``: frozen until ``close``), then build the kernels the runs use."""
        warm_up()
        self._frozen = True
        build_kernels(cfgs, self.run)

    def slots(self) -> int:
        """One."""
        return 1

    def submit(self, cfg: Any, on_epoch: EpochCallback | None = None) -> Hashable:
        """Queue the run; it trains in the next ``wait_any``."""
        if self._queued is not None:
            raise RuntimeError("the local executor runs one run at a time")
        self._next += 1
        self._queued = (self._next, cfg.to_dict(), on_epoch)
        return self._next

    def wait_any(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """Train the queued run here; its record."""
        if self._queued is None:
            return []
        handle, cfg_dict, on_epoch = self._queued
        self._queued = None
        callbacks = (on_epoch,) if on_epoch else ()
        return [(handle, run_one(cfg_dict, self.run, callbacks))]

    def cancel(self) -> None:
        """Drop the queued run (a run in progress here is stopped by the interrupt itself)."""
        self._queued = None

    def close(self) -> None:
        """End the freeze ``prepare`` made: what it froze is collectable again."""
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
