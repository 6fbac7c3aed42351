"""One training step of every method at the paper preset of every task, on CPU, against the fused
cell the method is held against (``Method.fused_cell``) at the same sizes, with pytest-benchmark
(advisory: the ratios and the target go into ``extra_info`` and are printed; never a gate).

The work timed, the references, the ratios and the targets are those of ``harness bench``
(``harness.bench.phases.method_phase`` and ``make_reference``; ``harness.bench.suite``'s
``timing_record``, ``reference_kinds`` and ``apply_ratios``): a method's step comes from
pytest-benchmark's rounds, each reference (the fused GRU, and the method's own fused cell where
that is another) is timed once per size with ``harness.training.timing.time_fn``, the same rounds.
The report with spreads and the eager step-loop GRU for every task at once is ``harness bench --task
all --preset paper --device cpu --threads 1 --rounds 3 --warmup 1``.

At the paper sizes this is slow: about a quarter of an hour for every method and task on one
thread (the elastic highway methods' steps take seconds at the adding problem's 256 x 500).
Environment variables:

- ``HARNESS_BENCH_PAPER_METHODS``: method names or globs, comma-separated (default ``all``);
- ``HARNESS_BENCH_PAPER_TASKS``: task names or globs (default ``all``); tasks without usable data
  are skipped, one line each;
- ``HARNESS_BENCH_PAPER_PRESET``: the preset (default ``paper``; ``smoke`` for a quick check);
- ``HARNESS_BENCH_ROUNDS`` / ``HARNESS_BENCH_WARMUP``: timed and warm-up rounds (3 / 1);
- ``HARNESS_BENCH_THREADS``: torch CPU threads (default 1; 0: torch's default);
- ``HARNESS_DATA_DIR``: the datasets of the real-data tasks.
"""

from __future__ import annotations

import os

import pytest
import torch

from harness import env
from harness.bench.phases import STEP_LOOP, TIMED_CELLS, Phase, SplitCache, method_phase
from harness.bench.suite import apply_ratios, reference_kinds, runnable_tasks, timing_record
from harness.components.registry import METHODS, TASKS
from harness.training.timing import time_fn

PRESET = os.environ.get("HARNESS_BENCH_PAPER_PRESET", "paper")
ROUNDS = int(os.environ.get("HARNESS_BENCH_ROUNDS", "3"))
WARMUP = int(os.environ.get("HARNESS_BENCH_WARMUP", "1"))
THREADS = int(os.environ.get("HARNESS_BENCH_THREADS", "1"))
CPU = torch.device("cpu")

_methods = METHODS.resolve(os.environ.get("HARNESS_BENCH_PAPER_METHODS", "all"))
_tasks, _no_data = runnable_tasks(TASKS.resolve(os.environ.get("HARNESS_BENCH_PAPER_TASKS", "all")))
CASES = [pytest.param(t, m, id=f"{t}-{m}") for t in _tasks for m in _methods] + [
    pytest.param(t, None, id=f"{t}-no-data", marks=pytest.mark.skip(reason=f"no data: {why}"))
    for t, why in _no_data.items()
]
SPLITS: SplitCache = {}
REFERENCE_RECORDS: dict[tuple[str, str], dict] = {}  # (reference key, kind) -> record


@pytest.fixture(scope="module")
def environment():
    previous = torch.get_num_threads()
    if THREADS > 0:
        torch.set_num_threads(THREADS)
    yield env.environment(CPU)
    torch.set_num_threads(previous)


def reference_record(phase: Phase, kind: str, environment: dict) -> dict:
    """The timing record of one reference at the phase's sizes, timed on first use."""
    key = (phase.reference_key, kind)
    if key not in REFERENCE_RECORDS:
        ref = phase.make_reference(kind)
        times = time_fn(ref.fn, CPU, warmup=WARMUP, rounds=ROUNDS)
        REFERENCE_RECORDS[key] = timing_record(
            ref, times, warmup=WARMUP, environment=environment, reference=True
        )
    return REFERENCE_RECORDS[key]


@pytest.mark.parametrize(("task", "method"), CASES)
def test_train_step_vs_fused_cell(benchmark, environment, task: str, method: str):
    phase = method_phase(method, "train", CPU, task, PRESET, splits=SPLITS)
    benchmark.group = f"{task}-{PRESET}-train-cpu"
    benchmark.pedantic(phase.fn, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
    if benchmark.stats is not None:
        times = list(benchmark.stats.stats.data)
    else:  # --benchmark-disable: the step ran once, untimed
        times = time_fn(phase.fn, CPU, warmup=0, rounds=ROUNDS)
    rec = timing_record(phase, times, warmup=WARMUP, environment=environment)
    # the step loop's dispatch figure is in harness bench's report; here only the ratio targets
    kinds = [k for k in reference_kinds(phase) if k != STEP_LOOP]
    refs = {TIMED_CELLS[k]: reference_record(phase, k, environment) for k in kinds}
    for r in refs.values():
        apply_ratios(r, refs)
    apply_ratios(rec, refs)
    target = rec["target"]
    benchmark.extra_info.update(
        task=task, preset=PRESET, sizes=rec["sizes"], threads=environment["threads"],
        fused_cell=rec["fused_cell"], reference=TIMED_CELLS[rec["fused_cell"]],
        ratio_vs_reference=rec["ratio_vs_cell"], ratio_vs_gru=rec["ratio_vs_gru"],
        mac_ratio=rec["mac_ratio"], target=target,
        reference_median_s={name: r["median_s"] for name, r in refs.items()},
    )  # fmt: skip
    s, cell = rec["sizes"], rec["fused_cell"]
    vs_gru = "" if cell == "GRU" else f", {rec['ratio_vs_gru']:.2f}x fused GRU"
    print(
        f"\n{method} at {task} ({PRESET}: B={s['B']} T={s['T']} D={s['D']} L={s['layers']}): "
        f"train step {1e3 * rec['median_s']:.3g} ms = {rec['ratio_vs_cell']:.2f}x fused {cell}"
        f"{vs_gru}; target <= {target['ratio']:.2f}x {target['reference']}: "
        + ("met" if target["met"] else "not met")
    )
