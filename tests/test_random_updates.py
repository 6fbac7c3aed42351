"""Random Updates (docs/methods.md 2.4): equations against a literal reference, the Bernoulli mask,
the fixed test-time RNG, exact copies, Skip % and effective MACs."""

import pytest
import torch

from harness.components import config
from harness.components.flops import sequence_macs
from harness.components.method import SeqOut
from harness.components.metrics import skip_fraction
from harness.components.registry import METHODS
from harness.errors import ConfigError

V, D = 2, 3


def make(p_skip: float = 0.5, eval_seed: int = 0, V: int = V, D: int = D, gru_form="after"):
    cls = METHODS.get("random-updates")
    torch.manual_seed(0)
    cfg = cls.config_cls(p_skip=p_skip, eval_seed=eval_seed, gru_form=gru_form)
    return cls(V, D, cfg).double()


def sig(v):
    return 1.0 / (1.0 + torch.exp(-v))


def gate_row(m, x_t, h, g, i):
    """Input and recurrent pre-activation of gate g (0 r, 1 z, 2 n) of unit i, as plain sums."""
    W_i, W_h, b = m.cell.weight_ih, m.cell.weight_hh, m.cell.bias
    r = g * D + i
    xi = sum(W_i[r, j] * x_t[j] for j in range(V)) + b[r]
    return xi, sum(W_h[r, j] * h[j] for j in range(D))


def reference(m, x, mask, form="after"):
    """Literal GRU with the given mask, one unit and one step at a time: the reset gate after
    the matmul, ``r_i (W_hn h)_i``, or before it (S-SA eq. 3), ``(W_hn (r * h))_i``."""
    B, T, _ = x.shape
    outs = []
    for n in range(B):
        h = [x.new_zeros(()) for _ in range(D)]
        seq = []
        for t in range(T):
            r = [sig(sum(gate_row(m, x[n, t], h, 0, j))) for j in range(D)]
            rh = [r[j] * h[j] for j in range(D)]
            new = []
            for i in range(D):
                xz, hz = gate_row(m, x[n, t], h, 1, i)
                z_g = sig(xz + hz)
                if form == "before":
                    xn, hn = gate_row(m, x[n, t], rh, 2, i)  # W_hn (r * h)
                    cand = torch.tanh(xn + hn)
                else:
                    xn, hn = gate_row(m, x[n, t], h, 2, i)  # r * (W_hn h)
                    cand = torch.tanh(xn + r[i] * hn)
                h_tilde = (1 - z_g) * cand + z_g * h[i]
                new.append(h_tilde if mask[n, t, i] > 0 else h[i])
            h = new
            seq.append(torch.stack(h))
        outs.append(torch.stack(seq))
    return torch.stack(outs)  # [B, T, D]


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_outputs_and_gradients_match_literal_reference(mode, form):
    m = make(p_skip=0.4, gru_form=form).train(mode == "train")
    x = torch.randn(2, 5, V, dtype=torch.double, requires_grad=True)
    out = m(x)
    assert 0 < out.mask.sum() < out.mask.numel()  # both branches exercised
    ref = reference(m, x, out.mask, form)
    torch.testing.assert_close(out.outputs, ref, rtol=1e-10, atol=1e-12)
    w = torch.randn_like(ref)
    inputs = [x, *m.parameters()]
    g_m = torch.autograd.grad((out.outputs * w).sum(), inputs)
    g_r = torch.autograd.grad((ref * w).sum(), inputs)
    for a, b in zip(g_m, g_r, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_forward_equals_step_loop(mode):
    m = make().train(mode == "train")
    x = torch.randn(3, 7, V, dtype=torch.double)
    torch.manual_seed(5)
    fast = m(x)
    torch.manual_seed(5)
    slow = m.step_loop(x)
    torch.testing.assert_close(fast.outputs, slow.outputs, rtol=1e-12, atol=1e-12)
    assert torch.equal(fast.mask, slow.mask)
    torch.testing.assert_close(fast.state, slow.state, rtol=1e-12, atol=1e-12)


def test_skipped_units_are_bit_identical_copies():
    m = make(p_skip=0.5)
    x = torch.randn(4, 9, V, dtype=torch.double)
    out = m(x)
    prev = torch.cat([torch.zeros(4, 1, D, dtype=torch.double), out.outputs[:, :-1]], 1)
    keep = out.mask == 0
    assert keep.any() and (~keep).any()
    assert torch.equal(out.outputs[keep], prev[keep])
    assert (out.outputs[~keep] != prev[~keep]).all()  # updated units got a new value


@pytest.mark.parametrize("p_skip", [0.0, 0.25, 0.76, 0.9])
def test_mask_is_bernoulli_with_the_configured_rate(p_skip):
    m = make(p_skip=p_skip, V=1, D=50)
    for mode in (True, False):
        out = m.train(mode)(torch.zeros(40, 25, 1, dtype=torch.double))
        skip = skip_fraction(out.mask).mean().item()
        assert abs(skip - p_skip) < 0.02, (mode, skip)
    if p_skip == 0.0:
        assert bool((out.mask == 1).all())


def test_eval_masks_are_reproducible_and_independent_of_the_global_rng():
    m = make(p_skip=0.5).eval()
    x = torch.randn(3, 8, V, dtype=torch.double)
    torch.manual_seed(1)
    a = m(x)
    torch.manual_seed(2)
    torch.rand(10)  # move the global RNG: eval must not read it
    b = m(x)
    assert torch.equal(a.mask, b.mask) and torch.equal(a.outputs, b.outputs)
    c = make(p_skip=0.5, eval_seed=1).eval()(x)
    assert not torch.equal(a.mask, c.mask)  # the seed is a real knob
    g = torch.Generator().manual_seed(0)  # the documented draw: U(0,1) per [B, D] per step
    expect = torch.stack([torch.rand(3, D, generator=g, dtype=torch.double) for _ in range(8)], 1)
    assert torch.equal(a.mask, (expect >= 0.5).double())


def test_training_masks_come_from_the_global_rng():
    m = make(p_skip=0.5).train()
    x = torch.randn(3, 8, V, dtype=torch.double)
    assert not torch.equal(m(x).mask, m(x).mask)
    torch.manual_seed(3)
    a = m(x).mask
    torch.manual_seed(3)
    assert torch.equal(a, m(x).mask)


def test_skip_percent_on_a_hand_made_mask():
    mask = torch.zeros(2, 4, D)
    mask[0, 0] = 1  # 3 updates of 12
    mask[1, :, 0] = 1  # 4 updates of 12, but only 2 valid steps -> 2 of 6
    skip = skip_fraction(mask, torch.tensor([4, 2]))
    torch.testing.assert_close(skip, torch.tensor([0.75, 2 / 3]))


def test_effective_macs_on_a_hand_computed_mask():
    m = make()
    row = 3 * (D + V)  # one row of the three gate matrices
    assert m.cost().per_unit == row and m.cost().always == 0 and m.cost().dense_step() == D * row
    mask = torch.tensor([[[1, 1, 0], [0, 0, 0], [1, 1, 1], [0, 1, 0]]], dtype=torch.float)
    out = SeqOut(outputs=torch.zeros(1, 4, D), mask=mask)
    macs = sequence_macs(m, out)
    assert float(macs["effective"][0]) == row * (2 + 0 + 3 + 1)
    assert float(macs["exact"][0]) == row * 6  # reset-after: effective is exact
    assert float(macs["dense"][0]) == row * D * 4
    full = sequence_macs(m, SeqOut(outputs=torch.zeros(1, 4, D), mask=torch.ones(1, 4, D)))
    assert float(full["effective"][0]) == float(full["dense"][0])


def test_config_knobs_and_errors():
    cfg = config.resolve("random-updates", "synthetic", 0, "smoke", {"p_skip": "0.9"})
    assert cfg.method_cfg.p_skip == 0.9 and cfg.method_cfg.eval_seed == 0
    cfg = config.resolve("random-updates", "synthetic", 0, "smoke", {"method.eval_seed": "7"})
    assert cfg.method_cfg.eval_seed == 7
    for bad in ("1.0", "-0.1"):
        with pytest.raises(ConfigError, match="p_skip"):
            config.resolve("random-updates", "synthetic", 0, "smoke", {"p_skip": bad})
    assert METHODS.get("random-updates").config_cls().p_skip == 0.76
    n = sum(p.numel() for p in make().parameters())
    assert n == 3 * D * (D + V + 1)  # no parameters beyond the GRU


def test_reset_before_exact_macs_on_a_hand_computed_mask():
    """Reset-before: every unit's r row (D + V MACs) once any unit updates, then the z and n rows
    of the updated units only; the effective (paper) count does not change."""
    m = make(gru_form="before")
    row = D + V
    mask = torch.tensor([[[1, 1, 0], [0, 0, 0], [1, 1, 1], [0, 1, 0]]], dtype=torch.float)
    macs = sequence_macs(m, SeqOut(outputs=torch.zeros(1, 4, D), mask=mask))
    assert float(macs["effective"][0]) == 3 * row * (2 + 0 + 3 + 1)
    assert float(macs["exact"][0]) == (D * row + 2 * 2 * row) + 0 + (D * row + 2 * 3 * row) + (
        D * row + 2 * 1 * row
    )
    assert float(macs["dense"][0]) == 3 * row * D * 4
    full = sequence_macs(m, SeqOut(outputs=torch.zeros(1, 4, D), mask=torch.ones(1, 4, D)))
    assert float(full["exact"][0]) == float(full["dense"][0])  # all units: 3D(D+V) either way


def test_masks_do_not_depend_on_the_gru_form():
    x = torch.randn(3, 8, V, dtype=torch.double)
    a = make(p_skip=0.5).eval()(x)
    b = make(p_skip=0.5, gru_form="before").eval()(x)
    assert torch.equal(a.mask, b.mask)
    assert not torch.allclose(a.outputs, b.outputs)
    prev = torch.cat([torch.zeros(3, 1, D, dtype=torch.double), b.outputs[:, :-1]], 1)
    keep = b.mask == 0
    assert keep.any() and torch.equal(b.outputs[keep], prev[keep])  # exact copies
