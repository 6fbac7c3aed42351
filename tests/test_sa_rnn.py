"""SA-RNN (baselines/sa_rnn.py) against a literal, loop-by-loop reference of S-SA eqs. 5-9."""

from __future__ import annotations

import pytest
import torch
from reference import assert_grads_match, ref_gru, ste

from baselines.sa_rnn import SARNN, SARNNConfig
from harness import train
from harness.config import resolve
from harness.errors import ConfigError
from harness.flops import sequence_macs
from harness.method import SeqOut
from harness.metrics import skip_fraction


def ref_sa_rnn(m: SARNN, x: torch.Tensor, slope: float, lam: float):
    """Outputs [B, T, D], mask [B, T, D] and budget of S-SA eqs. 5-9 (code normalisation)."""
    B, T, _ = x.shape
    D = m.hidden_size
    outs, masks, budget = [], [], 0.0
    for b in range(B):
        h = torch.zeros(D, dtype=x.dtype)
        hs, us = [], []
        for t in range(T):
            cand = ref_gru(m.cell, x[b, t], h)
            new, u_row = [], []
            for i in range(D):
                v = m.w_u[i] * h[i] + m.w_i[i] @ x[b, t] + m.b_u[i]  # eq. 5
                soft = torch.clamp((slope * v + 1) / 2, 0.0, 1.0)
                u = ste((soft > 0.5).to(x.dtype), soft)  # eqs. 6, 8
                new.append(u * cand[i] + (1 - u) * h[i])  # eq. 7
                u_row.append(u)
            h = torch.stack(new)
            hs.append(h)
            us.append(torch.stack(u_row))
            budget = budget + lam / D * sum(u_row)  # eq. 9, mean over units
        outs.append(torch.stack(hs))
        masks.append(torch.stack(us))
    return torch.stack(outs), torch.stack(masks), budget / B


def make(V=3, D=4, seed=0, **cfg) -> SARNN:
    torch.manual_seed(seed)
    return SARNN(V, D, SARNNConfig(**cfg)).double()


def test_matches_reference_outputs_and_gradients():
    m = make(lam=0.3)
    m.on_epoch_start(10, 20)  # slope 1.4
    assert m.slope == pytest.approx(1.4)
    x = torch.randn(2, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w = torch.randn(2, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    out = m(x)
    ref_out, ref_mask, ref_aux = ref_sa_rnn(m, x, 1.4, 0.3)
    assert 0 < out.mask.mean() < 1  # a mix of updates and skips
    assert torch.equal(out.mask, ref_mask)
    torch.testing.assert_close(out.outputs, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.aux_loss, ref_aux, rtol=1e-12, atol=1e-12)
    named = assert_grads_match(
        m, (out.outputs * w).sum() + out.aux_loss, (ref_out * w).sum() + ref_aux
    )
    # the straight-through path reaches every coordinator parameter, from the task and the budget
    for name in ("w_u", "w_i", "b_u"):
        assert named[name].abs().sum() > 0, name
    (g_b,) = torch.autograd.grad(out.aux_loss, [m.b_u])
    assert g_b.abs().sum() > 0


def test_forward_equals_step_loop_and_carries_state():
    m = make()
    x = torch.randn(3, 7, 3, dtype=torch.float64)
    full = m(x)
    loop = m.step_loop(x)
    assert torch.equal(full.outputs, loop.outputs) and torch.equal(full.mask, loop.mask)
    first = m(x[:, :3])
    second = m(x[:, 3:], state=first.state)
    assert torch.equal(torch.cat([first.outputs, second.outputs], 1), full.outputs)


def test_skipped_units_are_bit_identical_copies():
    m = SARNN(3, 6)
    x = torch.randn(4, 9, 3)
    out = m(x)
    prev = torch.cat([torch.zeros(4, 1, 6), out.outputs[:, :-1]], 1)
    skipped = out.mask == 0
    assert skipped.any() and (~skipped).any()
    assert torch.equal(out.outputs[skipped], prev[skipped])


def test_skip_pct_on_hand_made_coordinators():
    m = SARNN(1, 5)
    with torch.no_grad():  # fixed decisions: units 0 and 2 always update, the others never
        m.w_u.zero_()
        m.w_i.zero_()
        m.b_u.copy_(torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0]))
    out = m(torch.rand(2, 4, 1))
    assert torch.equal(out.mask[0, 0], torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(skip_fraction(out.mask), torch.tensor([0.6, 0.6]))
    assert torch.equal(out.outputs[..., [1, 3, 4]], torch.zeros(2, 4, 3))  # h_0 = 0 kept
    with torch.no_grad():  # every unit updates exactly when the input exceeds 0.5
        m.w_i.fill_(1.0)
        m.b_u.fill_(-0.5)
    out = m(torch.tensor([[[0.0], [1.0], [0.2], [0.9]]]))
    assert torch.equal(out.mask[0, :, 0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    torch.testing.assert_close(skip_fraction(out.mask), torch.tensor([0.5]))
    # with lengths, padded steps are excluded: 2 true steps, 1 of them updated
    torch.testing.assert_close(skip_fraction(out.mask, torch.tensor([2])), torch.tensor([0.5]))


def test_slope_annealing_changes_gradients_not_decisions():
    m = make()
    m.on_epoch_start(0, 10)
    assert m.slope == 1.0
    m.on_epoch_start(200, 300)
    assert m.slope == 5.0
    assert make(anneal=False).slope == 0.1
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    a = m(x)
    m.slope = 0.1
    b = m(x)
    assert torch.equal(a.mask, b.mask) and torch.equal(a.outputs, b.outputs)


def test_macs_on_hand_computed_masks():
    m = SARNN(3, 4)  # always D + DV = 16; per unit 3(D+V) = 21
    c = m.cost()
    assert (c.always, c.per_unit, c.fvcore_uncounted, c.dense_step()) == (16, 21, 4, 100)
    mask = torch.zeros(1, 3, 4)
    mask[0, 0] = 1  # k = 4, 1, 0
    mask[0, 1, 2] = 1
    macs = sequence_macs(m, SeqOut(torch.zeros(1, 3, 4), mask))
    assert macs["effective"].item() == (16 + 84) + (16 + 21) + 16
    assert macs["exact"].item() == macs["effective"].item()
    assert macs["dense"].item() == 300
    full = sequence_macs(m, SeqOut(torch.zeros(2, 3, 4), torch.ones(2, 3, 4)))
    assert torch.equal(full["effective"], full["dense"])


def test_config_from_overrides():
    cfg = resolve("sa-rnn", "adding", 0, "smoke", {"lam": "0.5", "anneal": "false"})
    assert cfg.method_cfg == SARNNConfig(lam=0.5, anneal=False)
    with pytest.raises(ConfigError):
        resolve("sa-rnn", "adding", 0, "smoke", {"lam": "-1"})


def test_budget_lowers_update_rate_on_adding():
    """Issue 3: a larger lambda gives fewer updates (smoke adding, fixed seed, ~2 s)."""
    skips = []
    for lam in ("0", "1e-2", "1"):
        rec = train.run(resolve("sa-rnn", "adding", 0, "smoke", {"lam": lam}))
        assert rec["status"] == "ok", rec["error"]
        skips.append(rec["metrics"]["skip_pct"])
    assert skips[0] + 5 < skips[1] and skips[1] + 5 < skips[2], skips


# --- fast inference path -------------------------------------


def fast_model(regime: str, V: int = 3, D: int = 12) -> SARNN:
    """Decisions that vary across units, steps and sequences; ``b_u`` sets how many update."""
    m = make(V, D)
    with torch.no_grad():
        m.b_u.fill_({"none": 10.0, "mixed": 0.0, "all": -10.0}[regime])
        m.w_i.mul_(4.0)
        m.w_u.mul_(4.0)
    return m


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("regime", ["none", "mixed", "all"])
def test_fast_forward_equals_dense_in_hand_made_regimes(regime, batch):
    from reference import check_fast_equals_dense

    m = fast_model(regime)
    ref = check_fast_equals_dense(m, torch.randn(batch, 16, 3, dtype=torch.float64))
    skip = 1 - ref.mask.mean().item()
    assert {"none": skip == 0.0, "mixed": 0.1 < skip < 0.9, "all": skip >= 0.9}[regime], skip


@pytest.mark.parametrize("batch", [1, 5])
def test_fast_path_gathers_rows_or_multiplies_all_of_them(batch):
    """Steps whose union of updated units is small gather those rows; past ``D B / (B + 2)``
    units they multiply all rows in place: both branches agree with the dense forward."""
    from reference import check_fast_equals_dense

    m = fast_model("mixed")
    fracs = []
    for bias in (-2.0, 2.0):
        with torch.no_grad():
            m.b_u.fill_(bias)
        ref = check_fast_equals_dense(m, torch.randn(batch, 16, 3, dtype=torch.float64))
        fracs.append(ref.mask.amax(0).mean(-1))  # [T] union fraction per step
    frac, threshold = torch.cat(fracs), batch / (batch + 2)
    assert (frac <= threshold).any() and (frac > threshold).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("slope", [0.1, 1.0, 5.0])
def test_update_decision_is_the_hard_sigmoid_threshold(dtype, slope):
    from baselines._cells import hard_sigmoid
    from baselines.sa_rnn import update_decision

    eps = torch.finfo(dtype).eps
    edges = torch.tensor([0.0, eps / 4, eps / 2, eps, 2 * eps, -eps, 1e-3], dtype=torch.float64)
    v = torch.cat([edges / slope, edges * 0.999 / slope, edges * 1.001 / slope]).to(dtype)
    v = torch.cat([v, torch.randn(1000, dtype=dtype), torch.randn(1000, dtype=dtype) * 1e-7])
    assert torch.equal(update_decision(v, slope), hard_sigmoid(v, slope) > 0.5)


def test_fused_kernel_and_fallback_agree_with_dense(monkeypatch):
    """At batch 1 the fused C++ kernel runs (where it builds); with it disabled the PyTorch path
    runs; both equal the dense eval forward (masks exactly, outputs to rounding). The speedup
    report's note says which of the two ran."""
    import baselines.sa_rnn as sa
    from baselines._kernels import sarnn_kernel

    torch.manual_seed(0)
    model, _ = SARNN.at_skip(3, 64, 0.8, 30)
    model = model.double()
    x = torch.randn(1, 30, 3, dtype=torch.float64)
    dense = model(x)
    calls = []
    kernel = sarnn_kernel()
    assert SARNN.fast_path_note().endswith("(used)" if kernel is not None else "fallback)")
    if kernel is not None:
        monkeypatch.setattr(sa, "sarnn_kernel", lambda: lambda *a: calls.append(1) or kernel(*a))
        fused = model.fast_forward(x)
        assert calls, "the fused kernel was not used at batch 1"
        assert torch.equal(fused.mask, dense.mask)
        torch.testing.assert_close(fused.outputs, dense.outputs, rtol=0, atol=1e-10)
    monkeypatch.setattr(sa, "sarnn_kernel", lambda: None)
    assert "PyTorch fallback" in SARNN.fast_path_note()
    fallback = model.fast_forward(x)
    assert torch.equal(fallback.mask, dense.mask)
    torch.testing.assert_close(fallback.outputs, dense.outputs, rtol=0, atol=1e-10)
    assert 0.6 < 1 - dense.mask.mean().item() < 0.95  # a real mix of skips


def test_at_skip_sets_independent_decisions_at_the_target():
    from statistics import NormalDist

    m, setting = SARNN.at_skip(8, 32, 0.75, 50)
    assert not m.training and "independent" in setting
    assert torch.equal(m.w_u, torch.zeros(32))
    assert torch.allclose(m.b_u, torch.full((32,), NormalDist().inv_cdf(0.25)), atol=1e-6)
    assert abs(m.w_i.std().item() - 8**-0.5) < 0.05
