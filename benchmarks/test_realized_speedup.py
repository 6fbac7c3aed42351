"""SA-RNN inference on CPU: the dense masked forward against ``fast_forward`` at D = 1024, batch 1,
90 % skip (advisory; never a pass/fail gate on speed).

The model is untrained with its coordinator bias set for 90 % skip (its ``at_skip`` hook, through
``harness.bench.speedup.build_at_skip``). The ratio dense / fast comes from interleaved rounds (a
block of dense calls, a block of fast calls, ...; median of per-round ratios) so that load from
other processes hits both sides alike; it is stored in extra_info next to the FLOP reduction and
the fraction of it realised. pytest-benchmark's table times each side on its own too. Runs on
one thread (the fast path's many small ops suffer most from OpenMP contention on a shared
machine); the thread count is recorded in extra_info.
"""

import pytest
import torch

from harness.bench.speedup import achieved_skip, build_at_skip, interleaved_rounds, ratio_spread
from harness.components.flops import sequence_macs

D, B, T, V, SKIP = 1024, 1, 50, 8, 0.9


@pytest.fixture(scope="module")
def sa_rnn():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, setting = build_at_skip("sa-rnn", V, D, SKIP, T)
    x = torch.randn(B, T, V, generator=torch.Generator().manual_seed(B))  # as measure_speedups
    with torch.no_grad():
        ref = model(x)
    macs = sequence_macs(model, ref)
    info = {
        "D": D,
        "B": B,
        "T": T,
        "V": V,
        "setting": setting,
        "threads": torch.get_num_threads(),
        "skip": achieved_skip(ref, model),
        "flop_reduction": (macs["dense"] / macs["effective"]).mean().item(),
    }

    def dense():
        with torch.no_grad():
            return model(x)

    yield {"dense": dense, "fast": lambda: model.fast_forward(x)}, info
    torch.set_num_threads(threads)


@pytest.mark.benchmark(group="sa-rnn-inference-cpu")
@pytest.mark.parametrize("which", ["dense", "fast"])
def test_sa_rnn_inference(benchmark, sa_rnn, which):
    fns, info = sa_rnn
    benchmark.extra_info.update(info)
    if which == "fast":
        t = interleaved_rounds(fns, torch.device("cpu"), budget_s=5.0)
        ratio = ratio_spread(t["dense"], t["fast"])[0]
        benchmark.extra_info.update(speedup=ratio, realised_frac=ratio / info["flop_reduction"])
        print(
            f"\nSA-RNN D={D} B={B} T={T} skip {100 * info['skip']:.1f}%: dense/fast "
            f"{ratio:.2f}x for a {info['flop_reduction']:.2f}x FLOP reduction "
            f"({ratio / info['flop_reduction']:.2f} realised)"
        )
    benchmark.pedantic(fns[which], rounds=10, warmup_rounds=2)
