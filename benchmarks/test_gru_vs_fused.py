"""One training step (forward + backward) of the harness GRU against torch's fused ``nn.GRU``
at the same sizes, on CPU, reported as a ratio (advisory; never a pass/fail gate).

The ratio is taken from interleaved rounds (reference, candidate, reference, ...) so that load
from other processes hits both sides alike; pytest-benchmark's own table times each side too.
"""

import statistics
import time

import pytest
import torch

from harness.components.registry import METHODS

B, T, V, D = 32, 100, 8, 128


def train_step(model, x, outputs):
    def run():
        outputs(model(x)).pow(2).mean().backward()

    return run


def interleaved_ratio(candidate, reference, rounds: int = 11) -> float:
    """Median over rounds of candidate time / reference time, measured back to back."""
    for f in (candidate, reference):
        f()
    ratios = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        reference()
        t1 = time.perf_counter()
        candidate()
        t2 = time.perf_counter()
        ratios.append((t2 - t1) / (t1 - t0))
    return statistics.median(ratios)


@pytest.fixture(scope="module")
def steps():
    torch.manual_seed(0)
    x = torch.randn(B, T, V)
    ref = torch.nn.GRU(V, D, batch_first=True)
    gru = METHODS.get("gru")(V, D)
    return {
        "fused": train_step(ref, x, lambda o: o[0]),
        "harness": train_step(gru, x, lambda o: o.outputs),
        # The per-step path the skipping methods build on (a Python loop over time).
        "step-loop": train_step(gru.step_loop, x, lambda o: o.outputs),
    }


@pytest.mark.benchmark(group="gru-train-step-cpu")
@pytest.mark.parametrize("which", ["fused", "harness", "step-loop"])
def test_gru_train_step(benchmark, steps, which):
    benchmark.extra_info.update(B=B, T=T, V=V, D=D, reference="torch.nn.GRU (fused)")
    if which != "fused":
        ratio = interleaved_ratio(steps[which], steps["fused"])
        benchmark.extra_info["ratio_vs_reference"] = ratio
        print(f"\n{which} GRU / fused nn.GRU, train step B={B} T={T} V={V} D={D}: {ratio:.3f}x")
    benchmark.pedantic(steps[which], rounds=5, warmup_rounds=1)
