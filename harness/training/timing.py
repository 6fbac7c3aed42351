"""Wall-clock timing on CPU and CUDA: warm-up rounds, then synchronised per-round times.

CUDA kernels run asynchronously, so a timed region must end with ``torch.cuda.synchronize()`` or it
measures only the kernel launches: ``time_fn`` synchronises around every round, and ``synced`` wraps
a function so that every call waits for the device before returning (for a timer that does not, such
as pytest-benchmark's in ``benchmarks/``). ``summarize`` gives the statistics of the timing records.
``CompileClock`` reads what ``torch.compile`` spent on a run. Timing is advisory: it depends on the
machine and its load, and is never a pass/fail gate.
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


# What torch.compile's own timers call the compilation of a frame (dynamo, AOTAutograd and
# inductor; the backward too when it is loaded from the cache) and the lazy compilation of a
# backward graph at its first backward (a cache miss).
_COMPILE_TIMERS = ("_compile.compile_inner", "backward._backward_impl")


class CompileClock:
    """What ``torch.compile`` spent on a run (``train.compile``).

    Seconds compiling, and how many compiled graphs inductor built afresh or loaded from its
    on-disk cache.

    Read from torch's own compile timers and counters (``torch._dynamo.utils``), as differences
    between ``start`` and ``stop``, so the runs of one process each get their own. The cache is
    inductor's FX-graph cache (``TORCHINDUCTOR_CACHE_DIR``, by default
    ``/tmp/torchinductor_$USER``), kept across runs and processes: the first run of a sweep
    compiles, the later runs of the same graphs load them
    (``harness.planning.sweep.estimate_runs`` counts the compilation once).
    """

    def __init__(self) -> None:
        self._at: tuple[float, int, int] | None = None

    @staticmethod
    def _read() -> tuple[float, int, int]:
        from torch._dynamo.utils import compilation_time_metrics, counters

        seconds = sum(sum(compilation_time_metrics.get(k, ())) for k in _COMPILE_TIMERS)
        inductor = counters["inductor"]
        return seconds, inductor["fxgraph_cache_hit"], inductor["fxgraph_cache_miss"]

    def start(self) -> None:
        """Take the counts the run's are measured from."""
        self._at = self._read()

    def stop(self) -> dict[str, float]:
        """``compile_s`` (for the record's ``time``), ``compile_cache_hits`` and ``_misses``."""
        if self._at is None:
            return {}
        now = self._read()
        s, hits, misses = (b - a for a, b in zip(self._at, now, strict=True))
        return {"compile_s": s, "compile_cache_hits": hits, "compile_cache_misses": misses}
