"""Executors: turn a list of run configs into records. Every executor yields the same records
for the same configs, so the store and resume work across them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from harness.config import RunConfig


class LocalExecutor:
    """Runs configs one after another in this process.

    Args:
        data_dir: passed to every run.
        device: ``cpu``, ``cuda`` or ``auto``.
    """

    def __init__(self, data_dir: str | None = None, device: str = "cpu") -> None:
        self.data_dir = data_dir
        self.device = device

    def map(self, configs: Sequence[RunConfig]) -> Iterator[dict[str, Any]]:
        """Yield one record per config, in order, as each run finishes."""
        from harness.train import run

        for cfg in configs:
            yield run(cfg, self.data_dir, self.device)
