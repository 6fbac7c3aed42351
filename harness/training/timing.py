"""Wall-clock timing on CPU and CUDA: warm-up rounds, then synchronised per-round times.

CUDA kernels run asynchronously: ``time_fn`` synchronises around every round, ``synced`` makes a
function wait for the device (for pytest-benchmark's timer). ``CompileClock`` reads what
``torch.compile`` spent on a run. Timing is advisory, never a pass/fail gate.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def synchronize(device: str | torch.device) -> None:
    """Wait for every queued kernel on ``device`` (a no-op on CPU)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def synced(fn: Callable[[], Any], device: str | torch.device) -> Callable[[], Any]:
    """``fn`` followed by a device synchronisation, so a timer around a call sees all its work."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return fn

    def run() -> Any:
        out = fn()
        torch.cuda.synchronize(dev)
        return out

    return run


def time_fn(
    fn: Callable[[], Any], device: str | torch.device, warmup: int = 1, rounds: int = 5
) -> list[float]:
    """Seconds per call of ``fn`` over ``rounds`` synchronised rounds, after ``warmup`` calls."""
    if warmup < 0 or rounds < 1:
        raise ValueError(f"need warmup >= 0 and rounds >= 1 (got {warmup}, {rounds})")
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(rounds):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return times


def quartiles(times: list[float]) -> tuple[float, float]:
    """First and third quartiles as pytest-benchmark computes them (Wikipedia's methods 2, 3)."""
    data, n = sorted(times), len(times)
    if n == 1:
        return data[0], data[0]
    if n % 2 == 0:
        return statistics.median(data[: n // 2]), statistics.median(data[n // 2 :])
    k, r = divmod(n, 4)
    if r == 1:
        return 0.25 * data[k - 1] + 0.75 * data[k], 0.75 * data[3 * k] + 0.25 * data[3 * k + 1]
    return 0.75 * data[k] + 0.25 * data[k + 1], 0.25 * data[3 * k + 1] + 0.75 * data[3 * k + 2]


def summarize(times: list[float]) -> dict[str, float]:
    """Median, mean, sample std, min, max, interquartile range and count of per-round seconds."""
    if not times:
        raise ValueError("no timings to summarize")
    q1, q3 = quartiles(times)
    return {
        "median": statistics.median(times),
        "mean": statistics.fmean(times),
        "stddev": statistics.stdev(times) if len(times) > 1 else 0.0,
        "min": min(times),
        "max": max(times),
        "iqr": q3 - q1,
        "rounds": len(times),
    }


# torch.compile's timers of a frame's compilation and of a backward graph's (at its first backward)
_COMPILE_TIMERS = ("_compile.compile_inner", "backward._backward_impl")


class CompileClock:
    """What ``torch.compile`` spent on a run (torch's own timers and counters): seconds, graphs."""

    def __init__(self, on: bool) -> None:
        """``on``: take the counts the run's are measured from (off: ``stop`` gives nothing)."""
        self._at = self._read() if on else None

    @staticmethod
    def _read() -> tuple[float, int, int]:
        from torch._dynamo.utils import compilation_time_metrics, counters

        seconds = sum(sum(compilation_time_metrics.get(k, ())) for k in _COMPILE_TIMERS)
        inductor = counters["inductor"]
        return seconds, inductor["fxgraph_cache_hit"], inductor["fxgraph_cache_miss"]

    def stop(self) -> dict[str, float]:
        """``compile_s`` (for the record's ``time``), ``compile_cache_hits`` and ``_misses``."""
        if self._at is None:
            return {}
        s, hits, misses = (b - a for a, b in zip(self._at, self._read(), strict=True))
        return {"compile_s": s, "compile_cache_hits": hits, "compile_cache_misses": misses}
