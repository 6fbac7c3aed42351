"""Inference and one training step of every registered method's model, on CPU and on CUDA when
available, with pytest-benchmark (advisory timing; never a pass/fail gate).

A thin entry point for ``tox -e bench``: the phases are those of ``harness bench``
(``harness.bench.phases.method_phase``: the model as a run builds it, at the sizes of one task
preset, timed on one batch of the task's test split), which times them in-process and writes the
timing records and ``reports/TIMING.md``. Environment variables:

- ``HARNESS_BENCH_METHODS``: names or globs, comma-separated (default ``all``);
- ``HARNESS_BENCH_TASK`` / ``HARNESS_BENCH_PRESET``: sizes to time at (default adding / smoke);
- ``HARNESS_BENCH_SET``: JSON object of config overrides (``{"seq_len": 5}``);
- ``HARNESS_BENCH_DEVICE``: ``cpu``, ``cuda`` or ``auto`` (default: CPU, plus CUDA when present);
- ``HARNESS_BENCH_ROUNDS`` / ``HARNESS_BENCH_WARMUP``: timed and warm-up rounds (10 / 2);
- ``HARNESS_BENCH_THREADS``: torch CPU threads (default 0: torch's default).
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from harness.bench.phases import PHASES, SplitCache, method_phase
from harness.components.registry import METHODS

TASK = os.environ.get("HARNESS_BENCH_TASK", "adding")
PRESET = os.environ.get("HARNESS_BENCH_PRESET", "smoke")
OVERRIDES = json.loads(os.environ.get("HARNESS_BENCH_SET") or "{}")
ROUNDS = int(os.environ.get("HARNESS_BENCH_ROUNDS", "10"))
WARMUP = int(os.environ.get("HARNESS_BENCH_WARMUP", "2"))
THREADS = int(os.environ.get("HARNESS_BENCH_THREADS", "0"))
DEVICE = os.environ.get("HARNESS_BENCH_DEVICE", "auto")

if THREADS > 0:
    torch.set_num_threads(THREADS)

_NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
DEVICES = {
    "auto": [pytest.param("cpu"), pytest.param("cuda", marks=[_NO_CUDA, pytest.mark.cuda])],
    "cpu": [pytest.param("cpu")],
    "cuda": [pytest.param("cuda", marks=[_NO_CUDA, pytest.mark.cuda])],
}[DEVICE]
SPLITS: SplitCache = {}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("method", METHODS.resolve(os.environ.get("HARNESS_BENCH_METHODS", "all")))
def test_method_timing(benchmark, method: str, phase: str, device: str):
    benchmark.group = f"{TASK}-{PRESET}-{phase}-{device}"
    timed = method_phase(
        method, phase, torch.device(device), TASK, PRESET, OVERRIDES, splits=SPLITS
    )
    benchmark.extra_info.update(timed.info, rounds=ROUNDS, warmup_rounds=WARMUP)
    benchmark.pedantic(timed.fn, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
