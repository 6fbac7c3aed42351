"""Phased LSTM (docs/methods.md 2.6): the time gate and cell against a literal reference (outputs
and gradients, including the trainable period, shift and r_on), leak on/off, exact copies, Skip %,
effective MACs and the initialisation that gives S-SA's ~70% Skip."""

import math

import pytest
import torch

from harness.components import config
from harness.components.flops import sequence_macs
from harness.components.method import SeqOut
from harness.components.metrics import skip_fraction
from harness.components.registry import METHODS
from harness.errors import ConfigError


def make(V=2, D=3, **knobs):
    cls = METHODS.get("phased-lstm")
    torch.manual_seed(0)
    return cls(V, D, cls.config_cls(**knobs)).double()


def sig(v):
    return 1.0 / (1.0 + torch.exp(-v))


def openness(t, P, s, r, leak):
    """eqs. 6-7 for one unit, with ``mod`` written out as a - P floor(a / P)."""
    a = t - s
    phi = (a - P * torch.floor(a / P)) / P  # eq. 6
    if phi < r / 2:
        return 2 * phi / r
    if phi < r:
        return 2 - 2 * phi / r
    return leak * phi  # eq. 7


def reference(m, x, leak):
    """Literal Phased LSTM, one unit and one step at a time: outputs and k, ``[B, T, D]`` each."""
    B, T, V = x.shape
    D = m.hidden_size
    W_i, W_h, b = m.cell.weight_ih, m.cell.weight_hh, m.cell.bias
    outs, ks = [], []
    for n in range(B):
        h = [x.new_zeros(()) for _ in range(D)]
        c = [x.new_zeros(()) for _ in range(D)]
        seq, kseq = [], []
        for t in range(T):
            new_h, new_c, k_t = [], [], []
            for i in range(D):
                pre = [
                    b[g * D + i]
                    + sum(W_i[g * D + i, j] * x[n, t, j] for j in range(V))
                    + sum(W_h[g * D + i, j] * h[j] for j in range(D))
                    for g in range(4)  # i, f, g, o
                ]
                c_tilde = sig(pre[1]) * c[i] + sig(pre[0]) * torch.tanh(pre[2])  # eq. 8
                h_tilde = sig(pre[3]) * torch.tanh(c_tilde)  # eq. 10
                P = torch.clamp(m.period[i], min=2.0)
                k = openness(float(t), P, m.shift[i], m.r_on[i], leak)
                new_c.append(k * c_tilde + (1 - k) * c[i])  # eq. 9
                new_h.append(k * h_tilde + (1 - k) * h[i])  # eq. 11
                k_t.append(k if torch.is_tensor(k) else x.new_tensor(k))
            h, c = new_h, new_c
            seq.append(torch.stack(h))
            kseq.append(torch.stack(k_t))
        outs.append(torch.stack(seq))
        ks.append(torch.stack(kseq))
    return torch.stack(outs), torch.stack(ks)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_outputs_and_gradients_match_literal_reference(mode):
    m = make(period_low=2.5, period_high=6.0).train(mode == "train")
    with torch.no_grad():
        m.period[0] = 1.5  # below min_period: the forward clamps it to 2
    x = torch.randn(2, 9, 2, dtype=torch.double, requires_grad=True)
    out = m(x)
    ref, k = reference(m, x, leak=1e-3 if mode == "train" else 0.0)
    torch.testing.assert_close(out.outputs, ref, rtol=1e-10, atol=1e-12)
    assert torch.equal(out.mask, (k > 0).double())
    if mode == "eval":
        assert 0 < out.mask.sum() < out.mask.numel()
    w = torch.randn_like(ref)
    inputs = [x, *m.parameters()]
    g_m = torch.autograd.grad((out.outputs * w).sum(), inputs)
    g_r = torch.autograd.grad((ref * w).sum(), inputs, allow_unused=True)
    names = ["x"] + [n for n, _ in m.named_parameters()]
    for name, p, a, b in zip(names, inputs, g_m, g_r, strict=True):
        b = torch.zeros_like(p) if b is None else b
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12, msg=name)
    assert m.period.grad is None and g_m[names.index("period")][0] == 0  # clamped: no gradient


def set_gate(m, period, shift, r_on):
    with torch.no_grad():
        for p, v in ((m.period, period), (m.shift, shift), (m.r_on, r_on)):
            p.copy_(torch.tensor(v, dtype=torch.double))


def test_time_gate_on_hand_computed_values():
    m = make(V=3, D=2).eval()
    set_gate(m, [4.0, 10.0], [3.5, 9.5], [0.5, 0.2])
    k = m.time_gate(torch.zeros(1, dtype=torch.long), 10)[0]  # [T, D]
    # unit 0: phi = (t + 0.5) / 4 mod 1 -> open (k = 0.5) at t = 0, 1, 4, 5, 8, 9
    # unit 1: phi = (t + 0.5) / 10 mod 1 -> open (k = 0.5) at t = 0, 1
    want = torch.zeros(10, 2, dtype=torch.double)
    want[[0, 1, 4, 5, 8, 9], 0] = 0.5
    want[[0, 1], 1] = 0.5
    torch.testing.assert_close(k, want, rtol=0, atol=1e-12)
    k_train = m.train().time_gate(torch.zeros(1, dtype=torch.long), 10)[0]
    torch.testing.assert_close(k_train[2, 0], torch.tensor(1e-3 * 2.5 / 4, dtype=torch.double))
    assert bool((k_train > 0).all())  # the leak: every unit updates in training


def test_skip_percent_and_effective_macs_on_a_hand_made_case():
    m = make(V=3, D=2).eval()
    set_gate(m, [4.0, 10.0], [3.5, 9.5], [0.5, 0.2])
    out = m(torch.randn(2, 10, 3, dtype=torch.double))
    assert out.mask.sum(1)[0].tolist() == [6, 2]  # 8 of 20 unit-steps updated
    torch.testing.assert_close(skip_fraction(out.mask), torch.tensor([0.6, 0.6]))
    macs = sequence_macs(m, out)
    assert m.cost().per_unit == 4 * (2 + 3)
    assert float(macs["effective"][0]) == 4 * 5 * 8
    assert float(macs["dense"][0]) == 4 * 5 * 2 * 10
    assert torch.equal(macs["exact"], macs["effective"])
    train_out = m.train()(torch.randn(2, 10, 3, dtype=torch.double))
    assert skip_fraction(train_out.mask).tolist() == [0.0, 0.0]
    full = SeqOut(outputs=torch.zeros(1, 10, 2), mask=torch.ones(1, 10, 2))
    full_macs = sequence_macs(m, full)
    assert float(full_macs["effective"][0]) == float(full_macs["dense"][0])


def test_closed_units_are_bit_identical_copies_of_h_and_c():
    m = make(V=2, D=4).eval()
    x = torch.randn(3, 12, 2, dtype=torch.double)
    state = m.init_state(3, x)
    seen = 0
    for t in range(12):
        so = m.step(x[:, t], state, t)
        keep = so.mask == 0
        seen += int(keep.sum())
        assert torch.equal(so.state[0][keep], state[0][keep])  # h
        assert torch.equal(so.state[1][keep], state[1][keep])  # c
        state = so.state
    assert seen > 0


def test_forward_equals_step_loop_and_the_clock_carries_across_windows():
    for mode in (True, False):
        m = make(V=2, D=4).train(mode)
        x = torch.randn(2, 13, 2, dtype=torch.double)
        fast, slow = m(x), m.step_loop(x)
        torch.testing.assert_close(fast.outputs, slow.outputs, rtol=1e-12, atol=1e-12)
        assert torch.equal(fast.mask, slow.mask)
        first = m(x[:, :5])
        second = m(x[:, 5:], state=first.state)
        torch.testing.assert_close(torch.cat([first.outputs, second.outputs], 1), fast.outputs)
        assert fast.state[2].tolist() == [13, 13]


def test_initialisation_gives_about_one_minus_r_on_skip():
    m = METHODS.get("phased-lstm")(1, 400).eval()
    P, s = m.period.detach(), m.shift.detach()
    assert bool((P >= 2).all() and (P <= 20).all()) and bool(((s >= 0) & (s < P)).all())
    assert abs(P.log().mean().item() - (math.log(2) + math.log(20)) / 2) < 0.15  # log-uniform
    assert bool((m.r_on == 0.3).all())
    skip = skip_fraction(m(torch.zeros(1, 60, 1)).mask).item()
    assert abs(skip - 0.7) < 0.03, skip  # S-SA reports 69-70%
    assert all(p.requires_grad for p in (m.period, m.shift, m.r_on))


def test_config_knobs_and_errors():
    over = {"r_on": "0.1", "leak": "0", "period_high": "50"}
    cfg = config.resolve("phased-lstm", "synthetic", 0, "smoke", over)
    assert (cfg.method_cfg.r_on, cfg.method_cfg.leak, cfg.method_cfg.period_high) == (0.1, 0, 50)
    for bad in ({"r_on": "0"}, {"r_on": "1.5"}, {"leak": "-1"}, {"period_low": "1"}):
        with pytest.raises(ConfigError):
            config.resolve("phased-lstm", "synthetic", 0, "smoke", bad)
    m = make(V=2, D=3)
    extra = sum(p.numel() for p in m.parameters()) - 4 * 3 * (3 + 2 + 1)
    assert extra == 3 * 3  # period, shift, r_on per unit; no peepholes
