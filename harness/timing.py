"""Wall-clock timing on CPU and CUDA: warm-up rounds, then synchronised per-round times.

CUDA kernels run asynchronously, so a timed region must end with ``torch.cuda.synchronize()``
or it measures only the kernel launches: ``time_fn`` synchronises around every round, and
``synced`` wraps a function so that every call waits for the device before returning (for a timer
that does not, such as pytest-benchmark's in ``benchmarks/``). ``summarize`` gives the statistics
of the timing records. Timing is advisory: it depends on the machine and its load, and is never
a pass/fail gate.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def _device(device: str | torch.device) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(device)


def synchronize(device: str | torch.device) -> None:
    """Wait for every queued kernel on ``device`` (a no-op on CPU)."""
    dev = _device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def synced(fn: Callable[[], Any], device: str | torch.device) -> Callable[[], Any]:
    """``fn`` followed by a device synchronisation, so a timer around a call sees all its work."""
    dev = _device(device)
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
    """Seconds per call of ``fn`` over ``rounds`` rounds, after ``warmup`` untimed calls.

    The device is synchronised before each round starts and before its clock stops, so queued
    work of a previous call is never charged to the next one.

    Args:
        fn: the work to time (no arguments).
        device: where ``fn`` runs (``"cpu"``, ``"cuda"``, a torch.device).
        warmup: untimed calls first (allocator, caches, cuDNN/autotuning).
        rounds: timed calls.

    Returns:
        One wall-clock duration in seconds per round.
    """
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
    """First and third quartiles, computed as pytest-benchmark computes them.

    That is Wikipedia's method 2 for an even count and method 3 for an odd one, so that ``iqr``
    means the same in both.
    """
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
    """Summary statistics of per-round seconds.

    The median, mean, sample standard deviation, min, max, interquartile range and count.
    """
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
