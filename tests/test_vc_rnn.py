"""VC-GRU (baselines/vc_rnn.py) against a literal reference of docs/methods.md 2.7."""

from __future__ import annotations

import math

import pytest
import torch
from reference import REF_GRU, assert_grads_match

from baselines.vc_rnn import VCRNN, VCRNNConfig
from harness.components.config import resolve
from harness.components.flops import sequence_macs
from harness.components.method import SeqOut
from harness.components.metrics import skip_fraction
from harness.errors import ConfigError


def ref_vc_rnn(m: VCRNN, x: torch.Tensor, sharpness: float, cfg: VCRNNConfig):
    """Outputs [B, T, D], mask [B, T, D], soft-band count and the L1 pull, written out literally
    with the literal GRU of ``cfg.gru_form``."""
    ref_gru = REF_GRU[cfg.gru_form]
    B, T, V = x.shape
    D = m.hidden_size
    outs, masks, pull, in_band = [], [], 0.0, 0
    for b in range(B):
        h = torch.zeros(D, dtype=x.dtype)
        hs, us = [], []
        for t in range(T):
            xt = x[b, t]
            m_t = torch.sigmoid(m.sched_h[0] @ h + m.sched_x[0] @ xt + m.sched_b[0])
            e = []
            for i in range(1, D + 1):
                v = torch.sigmoid(sharpness * (m_t * D - i))
                if v > 1 - cfg.eps:
                    e.append(torch.tensor(1.0, dtype=x.dtype))
                elif v < cfg.eps:
                    e.append(torch.tensor(0.0, dtype=x.dtype))
                else:
                    e.append(v)
                    in_band += 1
            e = torch.stack(e)
            x_bar = e * xt if V == D else xt
            new = ref_gru(m.cell, x_bar, e * h)
            h = e * new + (1 - e) * h
            hs.append(h)
            us.append((e > 0).to(x.dtype))
            pull = pull + cfg.gamma * (m_t - cfg.m_target).abs()
        outs.append(torch.stack(hs))
        masks.append(torch.stack(us))
    return torch.stack(outs), torch.stack(masks), in_band, pull / B


def make(V: int, D: int, seed: int = 0, **cfg) -> VCRNN:
    torch.manual_seed(seed)
    m = VCRNN(V, D, VCRNNConfig(**cfg)).double()
    with torch.no_grad():  # a non-trivial scheduler (it starts at zero)
        for p in (m.sched_h, m.sched_x, m.sched_b):
            p.normal_(0.0, 0.7)
    return m


def set_schedule(m: VCRNN, proportion: float) -> None:
    """Make ``m_t`` a constant."""
    with torch.no_grad():
        m.sched_h.zero_()
        m.sched_x.zero_()
        m.sched_b.fill_(math.log(proportion / (1 - proportion)))


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("V, D", [(3, 6), (6, 6)])  # x not masked / masked (V = D)
def test_matches_reference_outputs_and_gradients(V, D, form):
    cfg = VCRNNConfig(gamma=0.2, gru_form=form)
    m = make(V, D, gamma=0.2, gru_form=form)
    m.sharpness = 2.0  # mid-ramp: some units in the soft band, some thresholded
    x = torch.randn(2, 5, V, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w = torch.randn(2, 5, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    out = m(x)
    ref_out, ref_mask, in_band, ref_aux = ref_vc_rnn(m, x, 2.0, cfg)
    assert 0 < in_band < ref_mask.sum() < ref_mask.numel()  # soft, hard-1 and hard-0 units
    assert torch.equal(out.mask, ref_mask)
    torch.testing.assert_close(out.outputs, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.aux_loss, ref_aux, rtol=1e-12, atol=1e-12)
    assert_grads_match(m, (out.outputs * w).sum() + out.aux_loss, (ref_out * w).sum() + ref_aux)
    task_only = torch.autograd.grad((out.outputs * w).sum(), [m.sched_h, m.sched_x, m.sched_b])
    assert all(t.abs().sum() > 0 for t in task_only)  # through the soft band, not only the pull


def test_sharpness_ramp_and_final_sharpness_at_eval():
    m = VCRNN(2, 8)
    assert m.sharpness == 0.1 and m.current_sharpness() == 0.1
    m.on_epoch_start(2, 5)
    assert m.current_sharpness() == pytest.approx(0.1 + 19.9 / 2)
    m.on_epoch_start(4, 5)
    assert m.current_sharpness() == 20.0
    m.on_epoch_start(0, 5)
    m.eval()
    assert m.current_sharpness() == 20.0  # evaluation always uses the final sharpness
    m.on_epoch_start(0, 1)  # a one-epoch run trains at the start value
    m.train()
    assert m.current_sharpness() == 0.1


def test_skip_pct_on_hand_made_schedules():
    m = VCRNN(2, 8).eval()  # lam = 20, eps = 0.01: at most one unit in the soft band
    set_schedule(m, 0.5)  # m D = 4: units 1-3 full, unit 4 soft (e = 0.5), units 5-8 skipped
    out = m(torch.randn(2, 3, 2))
    assert torch.equal(out.mask[0, 0], torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0]))
    torch.testing.assert_close(skip_fraction(out.mask), torch.tensor([0.5, 0.5]))
    set_schedule(m, 2.5 / 8)  # m D = 2.5: units 1-2 full, the rest below eps
    out = m(torch.randn(2, 3, 2))
    assert torch.equal(out.mask[1, 2], torch.tensor([1.0, 1, 0, 0, 0, 0, 0, 0]))
    torch.testing.assert_close(skip_fraction(out.mask), torch.tensor([0.75, 0.75]))
    m.train()  # at the start sharpness every unit is in the soft band: no skips at all
    assert m(torch.randn(1, 3, 2)).mask.all()


def test_skipped_units_are_bit_identical_copies():
    torch.manual_seed(0)
    m = VCRNN(3, 8).eval()
    with torch.no_grad():
        m.sched_h.normal_(0.0, 2.0)
        m.sched_x.normal_(0.0, 2.0)
    out = m(torch.randn(4, 7, 3))
    prev = torch.cat([torch.zeros(4, 1, 8), out.outputs[:, :-1]], 1)
    skipped = out.mask == 0
    assert skipped.any() and (~skipped).any()
    assert torch.equal(out.outputs[skipped], prev[skipped])


def test_forward_equals_step_loop_and_carries_state():
    m = make(3, 6)
    x = torch.randn(2, 8, 3, dtype=torch.float64)
    full = m(x)
    loop = m.step_loop(x)
    # forward projects the input of every step in one matmul, step_loop one step at a time: the
    # same values to the matmul's rounding, the same decisions
    torch.testing.assert_close(full.outputs, loop.outputs, rtol=0, atol=1e-14)
    assert torch.equal(full.mask, loop.mask)
    for key in ("m", "m_dev"):
        torch.testing.assert_close(full.extras[key], loop.extras[key], rtol=0, atol=1e-14)
    first = m(x[:, :5])
    second = m(x[:, 5:], state=first.state)
    both = torch.cat([first.outputs, second.outputs], 1)
    torch.testing.assert_close(both, full.outputs, rtol=0, atol=1e-14)


def test_macs_on_hand_computed_masks():
    m = VCRNN(3, 8)  # always D + V = 11; per unit 3(D+V) = 33
    c = m.cost()
    assert (c.always, c.per_unit, c.dense_step()) == (11, 33, 275)
    mask = torch.zeros(1, 3, 8)
    for t, k in enumerate((8, 4, 2)):
        mask[0, t, :k] = 1
    out = SeqOut(torch.zeros(1, 3, 8), mask)
    macs = sequence_macs(m, out)
    assert macs["effective"].item() == (11 + 8 * 33) + (11 + 4 * 33) + (11 + 2 * 33)
    # VC-structural: 3 k (k + V) + (D + V)
    assert macs["exact"].item() == (3 * 8 * 11 + 11) + (3 * 4 * 7 + 11) + (3 * 2 * 5 + 11)
    assert macs["dense"].item() == 3 * 275
    square = VCRNN(4, 4)  # V = D: the input is masked too, 3 k (k + k) + (D + V)
    sq = SeqOut(torch.zeros(1, 2, 4), torch.tensor([[[1.0, 1, 0, 0], [1, 1, 1, 1]]]))
    assert sequence_macs(square, sq)["exact"].item() == (3 * 2 * 4 + 8) + (3 * 4 * 8 + 8)
    full = sequence_macs(m, SeqOut(torch.zeros(2, 3, 8), torch.ones(2, 3, 8)))
    assert torch.equal(full["effective"], full["dense"])
    assert torch.equal(full["exact"], full["dense"])


def test_config_from_overrides():
    over = {"m_target": "0.5", "gamma": "0.1", "sharpness_end": "30"}
    cfg = resolve("vc-rnn", "adding", 0, "smoke", over)
    assert cfg.method_cfg == VCRNNConfig(m_target=0.5, gamma=0.1, sharpness_end=30.0)
    for bad in ({"eps": "0.7"}, {"m_target": "0"}, {"gamma": "-1"}, {"sharpness_start": "0"}):
        with pytest.raises(ConfigError):
            resolve("vc-rnn", "adding", 0, "smoke", bad)


# --- fast inference path -------------------------------------


def fast_model(regime: str, V: int = 3, D: int = 12, gru_form: str = "after") -> VCRNN:
    """A scheduler whose ``m_t`` varies across steps and sequences around ``sigmoid(b)``."""
    m = make(V, D, gru_form=gru_form)
    with torch.no_grad():
        m.sched_b.fill_({"none": 10.0, "mixed": 0.0, "all": -10.0}[regime])
        m.sched_h.normal_(0.0, 1.0)
        m.sched_x.normal_(0.0, 1.0)
    return m


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("regime", ["none", "mixed", "all"])
def test_fast_forward_equals_dense_in_hand_made_regimes(regime, batch, form):
    from reference import check_fast_path_in_regime

    m = fast_model(regime, gru_form=form)
    check_fast_path_in_regime(m, regime, batch)


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("batch", [1, 3])
def test_fast_forward_masked_input(batch, form):
    """V = D: the input is masked too, and the fast path reads only its first k dims."""
    from reference import check_fast_equals_dense

    m = fast_model("mixed", V=12, D=12, gru_form=form)
    check_fast_equals_dense(m, torch.randn(batch, 16, 12, dtype=torch.float64))


def test_at_skip_sets_a_constant_schedule():
    m, setting = VCRNN.at_skip(3, 10, 0.7, 20)
    assert not m.training and setting == "m_t=0.3"
    with torch.no_grad():
        out = m(torch.randn(2, 20, 3))
    torch.testing.assert_close(out.extras["m"], torch.full((2,), 0.3))
    assert abs(1 - (out.mask > 0).float().mean().item() - 0.7) < 0.1


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("V", [3, 12])  # input not masked / masked (V = D)
def test_fast_path_counts_exactly_the_vc_structural_macs(V, form):
    """The fast path at batch 1, counted by FlopCounterMode, multiplies exactly the VC-structural
    MACs of ``exact_step_macs`` (plus, for an unmasked input, the bias column of the packed input
    rows, one MAC per gate row): in the reset-before form too, the r rows of the skipped units
    are not needed, because ``e * h`` is 0 there."""
    from torch.utils.flop_counter import FlopCounterMode

    m = fast_model("mixed", V=V, D=12, gru_form=form).eval()
    x = torch.randn(1, 16, V, dtype=torch.float64)
    with FlopCounterMode(display=False) as fc:
        out = m.fast_forward(x)
    k = (out.mask > 0).sum(-1).double()  # [1, T]
    assert ((0 < k) & (k < 12)).sum() > 3  # partial prefixes of several sizes
    bias = 0 if V == 12 else 3 * k.sum().item()
    exact = m.exact_step_macs(out).sum().item()
    assert exact == sequence_macs(VCRNN(V, 12), out)["exact"].item()  # the same in both forms
    assert fc.get_total_flops() == 2 * (exact + bias)
