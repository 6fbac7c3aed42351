"""Clockwork RNN (docs/methods.md 2.5): equations against a literal reference, the schedule, the
block-triangular W_H, S-SA's Skip % table, exact copies, and both MAC accountings."""

import pytest
import torch

from harness.components import config
from harness.components.flops import sequence_macs
from harness.components.method import SeqOut
from harness.components.metrics import skip_fraction
from harness.components.registry import METHODS
from harness.errors import ConfigError


def make(V=2, D=6, num_modules=3, base=2, phase=0):
    cls = METHODS.get("clockwork-rnn")
    torch.manual_seed(0)
    cfg = cls.config_cls(num_modules=num_modules, base=base, phase=phase)
    return cls(V, D, cfg).double()


def reference(m, x, base, phase):
    """Literal CW-RNN: loops over steps and units; unit i reads only units of modules >= its own."""
    B, T, V = x.shape
    D, k = m.hidden_size, m.module_size
    outs = []
    for n in range(B):
        h = [x.new_zeros(()) for _ in range(D)]
        seq = []
        for t in range(T):
            new = []
            for i in range(D):
                if (t + phase) % base ** (i // k) != 0:
                    new.append(h[i])
                    continue
                pre = m.bias[i] + sum(m.weight_ih[i, j] * x[n, t, j] for j in range(V))
                pre = pre + sum(m.weight_hh[i, j] * h[j] for j in range(D) if j // k >= i // k)
                new.append(torch.tanh(pre))  # eq. 1
            h = new
            seq.append(torch.stack(h))
        outs.append(torch.stack(seq))
    return torch.stack(outs)  # [B, T, D]


@pytest.mark.parametrize("base,phase", [(2, 0), (3, 1)])
def test_outputs_and_gradients_match_literal_reference(base, phase):
    m = make(base=base, phase=phase)
    with torch.no_grad():  # fill the masked block too: the forward must ignore it
        m.weight_hh.add_(torch.randn_like(m.weight_hh) * (1 - m.hh_mask))
    x = torch.randn(2, 7, 2, dtype=torch.double, requires_grad=True)
    out = m(x)
    ref = reference(m, x, base, phase)
    torch.testing.assert_close(out.outputs, ref, rtol=1e-10, atol=1e-12)
    w = torch.randn_like(ref)
    inputs = [x, *m.parameters()]
    g_m = torch.autograd.grad((out.outputs * w).sum(), inputs)
    g_r = torch.autograd.grad((ref * w).sum(), inputs, allow_unused=True)
    for p, a, b in zip(inputs, g_m, g_r, strict=True):
        torch.testing.assert_close(a, torch.zeros_like(p) if b is None else b, rtol=1e-10, atol=0)


def test_schedule_and_mask():
    m = make(D=6, num_modules=3, base=2)  # periods 1, 2, 4; modules of 2 units
    assert m.periods.tolist() == [1, 1, 2, 2, 4, 4]
    out = m(torch.randn(1, 6, 2, dtype=torch.double))
    active = out.mask[0, :, ::2].tolist()  # [T, g]
    assert active == [[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]]
    shifted = make(D=6, num_modules=3, base=2, phase=1)(torch.randn(1, 4, 2, dtype=torch.double))
    assert shifted.mask[0, :, ::2].tolist() == [[1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 1, 1]]


def test_recurrent_weights_stay_block_upper_triangular():
    m = make(D=6, num_modules=3)
    below = m.hh_mask == 0
    assert below.sum() == 36 - 24 and bool((m.weight_hh[below] == 0).all())
    assert m.hh_mask[0].tolist() == [1] * 6 and m.hh_mask[5].tolist() == [0] * 4 + [1] * 2
    opt = torch.optim.Adam(m.parameters(), lr=0.1, weight_decay=0.1)
    for _ in range(3):
        opt.zero_grad()
        m(torch.randn(2, 5, 2, dtype=torch.double)).outputs.pow(2).sum().backward()
        assert bool((m.weight_hh.grad[below] == 0).all())
        opt.step()
    assert bool((m.weight_hh[below] == 0).all()) and bool((m.weight_hh[~below] != 0).all())
    assert m.free_parameter_count() == 6 * 2 + 2 * 2 * 3 * 4 // 2 + 6
    total = sum(p.numel() for p in m.parameters())  # includes the frozen zeros below the blocks
    assert total == m.free_parameter_count() + int(below.sum())


def test_forward_equals_step_loop_and_the_clock_carries_across_windows():
    m = make(D=6, num_modules=3, base=2)
    x = torch.randn(2, 11, 2, dtype=torch.double)
    fast, slow = m(x), m.step_loop(x)
    torch.testing.assert_close(fast.outputs, slow.outputs, rtol=1e-12, atol=1e-12)
    assert torch.equal(fast.mask, slow.mask)
    first = m(x[:, :4])
    second = m(x[:, 4:], state=first.state)
    torch.testing.assert_close(torch.cat([first.outputs, second.outputs], 1), fast.outputs)
    assert torch.equal(torch.cat([first.mask, second.mask], 1), fast.mask)
    assert fast.state[1].tolist() == [11, 11]


def test_inactive_units_are_bit_identical_copies():
    m = make(D=6, num_modules=3, base=2)
    out = m(torch.randn(3, 9, 2, dtype=torch.double))
    prev = torch.cat([torch.zeros(3, 1, 6, dtype=torch.double), out.outputs[:, :-1]], 1)
    keep = out.mask == 0
    assert keep.any()
    assert torch.equal(out.outputs[keep], prev[keep])
    assert (out.outputs[~keep] != prev[~keep]).all()


@pytest.mark.parametrize(
    "base,phase,expected",
    [(3, 0, (81.2, 80.7, 82.4)), (2, 1, (81.2, 82.7, 81.2))],  # docs/methods.md 2.5 table
)
def test_skip_percent_reproduces_the_methods_table(base, phase, expected):
    m = make(V=1, D=50, num_modules=10, base=base, phase=phase)
    for T, want in zip((17, 15, 25), expected, strict=True):  # Seizures, Twitter, Yahoo
        out = m(torch.randn(2, T, 1, dtype=torch.double))
        skip = skip_fraction(out.mask)
        assert torch.equal(skip[0], skip[1])  # input-independent
        assert round(100 * skip[0].item(), 1) == want


def test_skip_percent_on_a_hand_made_case():
    out = make(D=6, num_modules=3, base=2)(torch.randn(1, 4, 2, dtype=torch.double))
    # t = 0: 3 modules, t = 1: 1, t = 2: 2, t = 3: 1 -> 7 of 12 module-steps updated
    assert skip_fraction(out.mask).item() == pytest.approx(5 / 12, abs=1e-7)
    # a padded sequence of true length 2: 4 of 6
    assert skip_fraction(out.mask, torch.tensor([2])).item() == pytest.approx(2 / 6, abs=1e-7)


def test_effective_and_exact_macs_on_a_hand_computed_mask():
    m = make(V=2, D=6, num_modules=3, base=2)
    out = m(torch.randn(1, 4, 2, dtype=torch.double))  # units updated: 6, 2, 4, 2
    macs = sequence_macs(m, out)
    assert float(macs["effective"][0]) == (6 + 2) * (6 + 2 + 4 + 2)  # (D+V) per updated unit
    # k (V + k (g - j + 1)) for modules j = 1, 2, 3: 16, 12, 8
    assert float(macs["exact"][0]) == 36 + 16 + 28 + 16
    assert float(macs["dense"][0]) == 6 * 8 * 4
    full = SeqOut(outputs=torch.zeros(1, 4, 6), mask=torch.ones(1, 4, 6))
    full_macs = sequence_macs(m, full)
    assert float(full_macs["effective"][0]) == float(full_macs["dense"][0])
    assert float(full_macs["exact"][0]) == 36 * 4  # the triangular structure is always cheaper


def test_config_and_clear_errors():
    cfg = config.resolve("clockwork-rnn", "synthetic", 0, "smoke", {"num_modules": "4"})
    assert (cfg.method_cfg.num_modules, cfg.method_cfg.base, cfg.method_cfg.phase) == (4, 3, 0)
    cls = METHODS.get("clockwork-rnn")
    assert cls.config_cls().num_modules == 10
    with pytest.raises(ConfigError, match=r"hidden_size 8 is not divisible by num_modules 10"):
        cls(2, 8)
    with pytest.raises(ConfigError, match=r"\[1, 2, 4, 8\]"):
        cls(2, 8)
    for bad in ({"num_modules": "0"}, {"base": "0"}, {"phase": "-1"}, {"num_modules": "60"}):
        with pytest.raises(ConfigError):
            config.resolve("clockwork-rnn", "synthetic", 0, "smoke", bad)
    m = cls(3, 50)  # the default layout: 10 x 5, periods 3^(j-1)
    assert m.module_size == 5 and m.periods[::5].tolist() == [3**j for j in range(10)]


# --- fast inference path -------------------------------------


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize(
    "num_modules, base, phase, regime",
    [(1, 2, 0, "none"), (4, 2, 0, "mixed"), (12, 9, 1, "all")],  # "all": 11 of 12 units skip
)
def test_fast_forward_equals_dense_in_hand_made_regimes(num_modules, base, phase, regime, batch):
    from reference import check_fast_path_in_regime

    m = make(V=3, D=12, num_modules=num_modules, base=base, phase=phase)
    check_fast_path_in_regime(m, regime, batch)


def test_clockwork_layout_is_the_nearest_schedule():
    from baselines.clockwork_rnn import clockwork_layout

    assert clockwork_layout(12, 0.0, 16) == (1, 2, 0.0)  # one module never skips
    for D, skip, T in [(12, 0.5, 16), (40, 0.9, 40), (256, 0.75, 50)]:
        g, base, achieved = clockwork_layout(D, skip, T)
        assert D % g == 0 and 2 <= base <= 8 and abs(achieved - skip) < 0.05
        m = make(V=2, D=D, num_modules=g, base=base)
        u = m.active_mask(torch.zeros(1, dtype=torch.long), T, torch.float64)
        assert achieved == pytest.approx(1 - u.mean().item())  # what the model really skips


def test_at_skip_uses_the_layout():
    from baselines.clockwork_rnn import clockwork_layout

    cls = METHODS.get("clockwork-rnn")
    m, setting = cls.at_skip(3, 40, 0.9, 40)
    g, base, _ = clockwork_layout(40, 0.9, 40)
    assert not m.training and (m.cfg.num_modules, m.cfg.base, m.cfg.phase) == (g, base, 0)
    assert setting == f"num_modules={g}, base={base}"
