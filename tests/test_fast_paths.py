"""Inference fast paths (``Method.fast_forward``) against the dense masked forward.

For each skipping method with a real fast path, ``fast_forward(x)`` must give the outputs and
the mask of ``model.eval()(x)`` (and the depth, for EI-REHN) on random inputs, at batch 1 and
batch > 1, with decision parameters set for no skipping, mixed skipping and (nearly) all
skipping. The comparisons run in float64 so that matmul rounding (the fast paths multiply
fewer rows, in another order) cannot flip a thresholded decision; masks must match exactly.
"""

from __future__ import annotations

import pytest
import torch

from baselines.sa_rnn import update_decision
from baselines._cells import hard_sigmoid
from harness.registry import METHODS
from harness.bench.speedup import (
    achieved_skip,
    build_at_skip,
    main,
    measure_speedups,
    speedup_markdown,
)

FAST = ["sa-rnn", "skip-rnn", "clockwork-rnn", "vc-rnn", "ei-rehn"]
V, D, T = 3, 12, 16


@torch.no_grad()
def configured(name: str, regime: str, input_size: int = V):
    """A float64 model of ``name`` whose decisions give no skip, mixed skip or (nearly) all skip."""
    cls = METHODS.get(name)
    big = {"none": 10.0, "mixed": 0.0, "all": -10.0}[regime]
    if name == "clockwork-rnn":  # module 1 fires at every step: "all" skips 11 of 12 units
        g, base, phase = {"none": (1, 2, 0), "mixed": (4, 2, 0), "all": (12, 9, 1)}[regime]
        cfg = cls.config_cls(num_modules=g, base=base, phase=phase)
        return cls(input_size, D, cfg).double()
    m = cls(input_size, D).double()
    if name == "sa-rnn":
        m.b_u.fill_(big)
        m.w_i.mul_(4.0)  # decisions that vary across units, steps and sequences
        m.w_u.mul_(4.0)
    elif name == "skip-rnn":  # du ~ sigmoid(b_p) accumulates; the first step always updates
        m.b_p.fill_({"none": 10.0, "mixed": -1.0, "all": -10.0}[regime])
        m.w_p.normal_(0.0, 0.5)  # varying update periods
    elif name == "vc-rnn":
        m.sched_b.fill_(big)
        m.sched_h.normal_(0.0, 1.0)
        m.sched_x.normal_(0.0, 1.0)
    elif name == "ei-rehn":  # alpha_t -> 0: full depth; -> 1: no layer at all
        m.elastic.rate.bias.fill_(-big)
        m.elastic.rate.weight.mul_(0.0 if regime != "mixed" else 8.0)
    return m


def check_fast_equals_dense(m, x: torch.Tensor):
    ref = m.eval()(x)
    out = m.fast_forward(x)
    assert torch.equal(out.mask, ref.mask)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=1e-10, atol=1e-10)
    if ref.depth is not None:
        assert torch.equal(out.depth, ref.depth)
    for k, v in ref.extras.items():
        torch.testing.assert_close(out.extras[k], v, rtol=1e-10, atol=1e-10)
    return ref


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("regime", ["none", "mixed", "all"])
@pytest.mark.parametrize("name", FAST)
def test_fast_forward_equals_dense(name, regime, batch):
    m = configured(name, regime)
    x = torch.randn(batch, T, V, dtype=torch.float64)
    ref = check_fast_equals_dense(m, x)
    skip = achieved_skip(ref, m)  # the regime really is what it says
    if regime == "none":
        assert skip == 0.0
    elif regime == "all":
        assert skip >= 0.9
    else:
        assert 0.1 < skip < 0.9


@pytest.mark.parametrize("batch", [1, 3])
def test_vc_rnn_masked_input(batch):
    """V = D: the input is masked too, and the fast path reads only its first k dims."""
    m = configured("vc-rnn", "mixed", input_size=D)
    check_fast_equals_dense(m, torch.randn(batch, T, D, dtype=torch.float64))


@pytest.mark.parametrize("name", FAST)
def test_float32_batch1(name):
    """The everyday dtype: close outputs and identical masks at a fixed seed."""
    m = configured(name, "mixed").float()
    x = torch.randn(1, T, V)
    ref, out = m.eval()(x), m.fast_forward(x)
    assert torch.equal(out.mask, ref.mask)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch", [1, 5])
def test_sa_rnn_gather_and_dense_fallback(batch):
    """Steps whose union of updated units is small gather those rows; past ``D B / (B + 2)``
    units they multiply all rows in place: both branches agree with the dense forward."""
    m = configured("sa-rnn", "mixed")
    fracs = []
    for bias in (-2.0, 2.0):
        with torch.no_grad():
            m.b_u.fill_(bias)
        ref = check_fast_equals_dense(m, torch.randn(batch, T, V, dtype=torch.float64))
        fracs.append(ref.mask.amax(0).mean(-1))  # [T] union fraction per step
    frac, threshold = torch.cat(fracs), batch / (batch + 2)
    assert (frac <= threshold).any() and (frac > threshold).any()


def test_fast_forward_keeps_mode_and_builds_no_graph():
    for name in [*FAST, "gru"]:
        m = METHODS.get(name)(V, D if name != "clockwork-rnn" else 10).train()
        out = m.fast_forward(torch.randn(2, 5, V))
        assert m.training and not out.outputs.requires_grad


def test_default_fast_forward_is_the_eval_forward():
    m = METHODS.get("gru")(V, D).train()
    x = torch.randn(2, T, V)
    out = m.fast_forward(x)
    assert m.training
    torch.testing.assert_close(out.outputs, m.eval()(x).outputs)


def test_packed_weights_follow_parameter_updates():
    """The repacked weights are cached; an optimizer step must invalidate them."""
    m = configured("sa-rnn", "mixed")
    x = torch.randn(2, T, V, dtype=torch.float64)
    m.fast_forward(x)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m.train()(x).outputs.sum().backward()
    opt.step()
    check_fast_equals_dense(m, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("slope", [0.1, 1.0, 5.0])
def test_update_decision_is_the_hard_sigmoid_threshold(dtype, slope):
    eps = torch.finfo(dtype).eps
    edges = torch.tensor([0.0, eps / 4, eps / 2, eps, 2 * eps, -eps, 1e-3], dtype=torch.float64)
    v = torch.cat([edges / slope, edges * 0.999 / slope, edges * 1.001 / slope]).to(dtype)
    v = torch.cat([v, torch.randn(1000, dtype=dtype), torch.randn(1000, dtype=dtype) * 1e-7])
    assert torch.equal(update_decision(v, slope), hard_sigmoid(v, slope) > 0.5)


@pytest.mark.parametrize("name", FAST)
def test_build_at_skip_hits_its_target(name):
    for target in (0.5, 0.9):
        m, note = build_at_skip(name, 4, 40, target, 40)
        with torch.no_grad():
            out = m(torch.randn(3, 40, 4))
        assert abs(achieved_skip(out, m) - target) < 0.12, (name, target, note)


def test_measure_speedups_rows_and_markdown():
    rows = measure_speedups(
        methods=("sa-rnn", "clockwork-rnn"), skips=(0.5,), hidden=(16,), batches=(1, 2),
        seq_len=6, budget_s=0.0,
    )  # fmt: skip
    assert len(rows) == 4
    for r in rows:
        assert r["mask_mismatch"] == 0 and r["max_abs_diff"] < 1e-4
        assert r["speedup"] > 0 and r["flop_reduction"] >= 1 and r["rounds"] >= 3
    md = speedup_markdown(rows, "python -c 'measure_speedups(...)'")
    assert "Generated file" in md and "threads" in md and md.count("| sa-rnn |") == 2


def test_speedup_main_writes_the_report(tmp_path):
    out = tmp_path / "SPEEDUP.md"
    threads = torch.get_num_threads()
    args = ["--out", str(out), "--methods", "skip-rnn", "--skips", "0.5", "--hidden", "8"]
    args += ["--batches", "1", "--seq-len", "4", "--budget", "0"]
    try:
        main(args)
    finally:
        torch.set_num_threads(threads)
    text = out.read_text()
    assert "python -m harness.bench.speedup --out" in text and "| skip-rnn | 8 | 1 | 50 |" in text


def test_sa_rnn_fused_kernel_and_fallback_agree_with_dense(monkeypatch):
    """At batch 1 the fused C++ kernel runs (where it builds); with it disabled the PyTorch path
    runs; both equal the dense eval forward (masks exactly, outputs to rounding)."""
    import baselines.sa_rnn as sa
    from baselines._kernels import sarnn_kernel
    from harness.bench.speedup import build_at_skip

    built = build_at_skip("sa-rnn", 3, 64, 0.8, 30)
    model = (built[0] if isinstance(built, tuple) else built).double().eval()
    x = torch.randn(1, 30, 3, dtype=torch.float64)
    dense = model(x)
    calls = []
    kernel = sarnn_kernel()
    if kernel is not None:
        monkeypatch.setattr(sa, "sarnn_kernel", lambda: lambda *a: calls.append(1) or kernel(*a))
        fused = model.fast_forward(x)
        assert calls, "the fused kernel was not used at batch 1"
        assert torch.equal(fused.mask, dense.mask)
        torch.testing.assert_close(fused.outputs, dense.outputs, rtol=0, atol=1e-10)
    monkeypatch.setattr(sa, "sarnn_kernel", lambda: None)
    fallback = model.fast_forward(x)
    assert torch.equal(fallback.mask, dense.mask)
    torch.testing.assert_close(fallback.outputs, dense.outputs, rtol=0, atol=1e-10)
    assert 0.6 < 1 - dense.mask.mean().item() < 0.95  # a real mix of skips
