"""EGRU (baselines/egru.py) against a float64 transcription of the authors' PyTorch reference of the
layer, ``EGRUScript`` and ``SpikeFunction`` (Efficient-Scalable-Machine-Learning/EvNN @
b1d23e726390aa566448a3874002fbe3c22ecd37 : frameworks/pytorch/egru.py), and of the activity
regulariser of its sMNIST script (benchmarks/smnist/smnist.py, ``train_batch``)."""

from __future__ import annotations

import pytest
import torch
from reference import assert_grads_match

from baselines.egru import EGRU, EGRUConfig
from harness.components import config
from harness.components.metrics import skip_fraction
from harness.errors import ConfigError

B, T, V, D = 2, 5, 3, 4

# --- the authors' code, transcribed ----------------------------------------------------------


class SpikeFunction(torch.autograd.Function):
    """``SpikeFunction``: Heaviside forward (``torch.heaviside(inp, inp)``: 0 at 0), backward
    ``dampening_factor * max(1 - pseudo_derivative_support * |inp|, 0)``."""

    @staticmethod
    def forward(ctx, inp, dampening_factor, pseudo_derivative_support):
        ctx.save_for_backward(inp, dampening_factor, pseudo_derivative_support)
        return torch.heaviside(inp, inp)

    @staticmethod
    def backward(ctx, grad_output):
        inp, dampening_factor, pseudo_derivative_support = ctx.saved_tensors
        dE_dz = grad_output
        dz_du = dampening_factor * torch.maximum(
            1 - pseudo_derivative_support * torch.abs(inp), torch.zeros(1, dtype=inp.dtype)
        )
        dE_dv = dE_dz * dz_du
        return dE_dv, None, None


def egru_script(
    dampening_factor, pseudo_derivative_support, input, h0, kernel, recurrent_kernel, bias,
    recurrent_bias, thr,
):  # fmt: skip
    """``EGRUScript`` without zoneout (0 in the code's default): ``input`` is time-major
    ``[T, B, V]``; returns the code's ``y, h, o`` stacks ``[T + 1, B, D]`` (index 0 initial)."""
    time_steps = input.shape[0]
    h = [torch.zeros_like(h0)]
    o = [torch.zeros_like(h0)]
    y = [h0]
    Wx = input @ kernel + bias
    for t in range(time_steps):
        Rh = y[t] @ recurrent_kernel + recurrent_bias
        vx = torch.chunk(Wx[t], 3, 1)
        vh = torch.chunk(Rh, 3, 1)

        z = torch.sigmoid(vx[0] + vh[0])
        r = torch.sigmoid(vx[1] + vh[1])
        g = torch.tanh(vx[2] + r * vh[2])

        cur_h = z * h[t] + (1 - z) * g
        event = SpikeFunction.apply(cur_h - thr, dampening_factor, pseudo_derivative_support)
        o.append(event)
        h.append(cur_h - event * thr)
        y.append(event * cur_h)
    return torch.stack(y), torch.stack(h), torch.stack(o)


def authors_layer(m: EGRU, x: torch.Tensor):
    """The code's ``EGRU.forward`` (batch_first) on ``m``'s parameters: thresholds clamped to
    [0, 1], ``y_0 = 0``; returns outputs, internal states and events ``[B, T, D]``."""
    m.thr.data.clamp_(min=0.0, max=1.0)
    inp = x.permute(1, 0, 2)
    h0 = torch.zeros(x.shape[0], m.hidden_size, dtype=x.dtype)
    damp = torch.tensor([m.cfg.dampening_factor], dtype=x.dtype)
    supp = torch.tensor([m.cfg.pseudo_derivative_support], dtype=x.dtype)
    y, h, o = egru_script(
        damp, supp, inp, h0, m.kernel, m.recurrent_kernel, m.bias, m.recurrent_bias, m.thr
    )
    return tuple(s[1:].permute(1, 0, 2) for s in (y, h, o))


def smnist_activity_reg(o_vals, constant, target):
    """``train_batch``'s ``activity_regularization_constant * (mean(o_vals) - target) ** 2``."""
    mean_activity = torch.mean(o_vals)
    return constant * (mean_activity - target) ** 2


# --- helpers -----------------------------------------------------------------------------------


def make(seed: int = 0, **cfg) -> EGRU:
    """A float64 EGRU with non-zero biases (so that every bias has its own gradient) and
    thresholds low enough for a mix of events and silence on ``x ~ N(0, 1)``."""
    torch.manual_seed(seed)
    m = EGRU(V, D, EGRUConfig(**cfg)).double()
    with torch.no_grad():
        m.kernel.mul_(2.0)
        m.recurrent_kernel.mul_(2.0)
        m.bias.uniform_(-0.5, 0.5)
        m.recurrent_bias.uniform_(-0.5, 0.5)
        m.thr.uniform_(0.05, 0.3)
    return m


def inputs(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, V, generator=g, dtype=torch.float64)


def losses(out_y, c_last, seed: int = 2):
    """A loss reading every output and the final internal state with random weights."""
    g = torch.Generator().manual_seed(seed)
    wy = torch.randn(out_y.shape, generator=g, dtype=out_y.dtype)
    wc = torch.randn(c_last.shape, generator=g, dtype=out_y.dtype)
    return (wy * out_y).sum() + (wc * c_last).sum()


# --- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["forward", "step_loop"])
@pytest.mark.parametrize("seed", [0, 3])
def test_matches_authors_code(path, seed):
    m = make(seed)
    x = inputs(seed + 1)
    y_ref, c_ref, o_ref = authors_layer(m, x)
    out = m(x) if path == "forward" else m.step_loop(x)
    # Both events and silence occur, and some silent units lie inside the pseudo-derivative's
    # support, so the gradients exercise H's surrogate on both sides of the threshold.
    assert 0 < float(o_ref.detach().mean()) < 1
    v = (c_ref + o_ref * m.thr - m.thr).detach()  # c~ - theta
    assert ((o_ref == 0) & (v.abs() < 1) & (v < 0)).any()  # silent, inside the support
    assert ((o_ref == 1) & (v.abs() < 1)).any()  # fired, inside the support
    torch.testing.assert_close(out.outputs, y_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.state[0], c_ref[:, -1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.state[1], y_ref[:, -1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.extras["event_rate"], o_ref.mean((1, 2)), rtol=1e-12, atol=0)
    # Reads: every input column; unit j's recurrent column where it fired at the step before.
    prev = torch.cat([torch.zeros(B, 1, D, dtype=x.dtype), o_ref[:, :-1]], 1)
    assert torch.equal(out.reads, torch.cat([torch.ones(B, T, V, dtype=x.dtype), prev], -1))
    # Update mask: every unit's internal state is recomputed at every step.
    assert torch.equal(out.mask, torch.ones(B, T, D, dtype=x.dtype))
    assert float(skip_fraction(out.mask).sum()) == 0.0
    grads = assert_grads_match(
        m, losses(out.outputs, out.state[0]), losses(y_ref, c_ref[:, -1]), rtol=1e-10, atol=1e-12
    )
    assert set(grads) == {"kernel", "recurrent_kernel", "bias", "recurrent_bias", "thr"}
    assert all(g.abs().sum() > 0 for g in grads.values())


def test_activity_regulariser_matches_the_smnist_script():
    m = make(0, activity_reg=0.5, activity_target=0.05)
    x = inputs()
    _, _, o_ref = authors_layer(m, x)
    out = m(x)
    want = smnist_activity_reg(o_ref, 0.5, 0.05)
    torch.testing.assert_close(out.aux_loss, want, rtol=1e-12, atol=0)
    assert_grads_match(m, out.aux_loss, want, allow_unused=True)
    assert make(0).forward(x).aux_loss is None  # off by default, as in the code


def test_units_at_or_below_threshold_emit_exactly_zero():
    m = make(0)
    x = inputs()
    y_ref, c_ref, o_ref = authors_layer(m, x)
    c_tilde = c_ref + o_ref * m.thr  # the state before the reset
    out = m(x)
    silent = c_tilde <= m.thr
    assert silent.any() and (~silent).any()
    assert torch.equal(out.outputs[silent], torch.zeros_like(out.outputs[silent]))
    assert (out.outputs[~silent] > m.thr.expand_as(silent)[~silent]).all()
    # Exactly at the threshold: H(0) = 0, no event. One unit, zero weights: z = sigmoid(0) = 1/2
    # and c~_1 = g / 2 exactly, with the threshold set to that same value.
    one = EGRU(1, 1).double()
    with torch.no_grad():
        for p in (one.kernel, one.recurrent_kernel, one.bias, one.recurrent_bias):
            p.zero_()
        one.bias[2] = 1.0
        one.thr.fill_(0.5 * float(torch.tanh(torch.tensor(1.0, dtype=torch.float64))))
    with torch.no_grad():
        at = one(torch.zeros(1, 1, 1, dtype=torch.float64))
    assert float(at.outputs) == 0.0 and float(at.extras["event_rate"]) == 0.0
    with torch.no_grad():
        one.thr.mul_(1 - 1e-9)  # just below: the unit fires
        assert float(one(torch.zeros(1, 1, 1, dtype=torch.float64)).outputs) > 0


def test_pseudo_derivative_has_the_codes_shape():
    from baselines.egru import _Spike

    # v = c~ - theta; pseudo-derivative 0.7 max(0, 1 - 2 |v|), H(0) = 0.
    v = torch.tensor([-1.5, -0.3, 0.0, 0.05, 0.3, 1.1], dtype=torch.float64, requires_grad=True)
    o = _Spike.apply(v, 0.7, 2.0)
    assert o.tolist() == [0, 0, 0, 1, 1, 1]
    (g,) = torch.autograd.grad(o.sum(), v)
    want = [0.0, 0.7 * 0.4, 0.7, 0.7 * 0.9, 0.7 * 0.4, 0.0]
    torch.testing.assert_close(g, torch.tensor(want, dtype=torch.float64), rtol=1e-15, atol=0)
    knobs = (torch.tensor([0.7], dtype=torch.float64), torch.tensor([2.0], dtype=torch.float64))
    ref = SpikeFunction.apply(v, *knobs)
    assert torch.equal(o, ref)
    (g_ref,) = torch.autograd.grad(ref.sum(), v)
    torch.testing.assert_close(g, g_ref, rtol=1e-15, atol=0)


def test_thresholds_are_clamped_at_each_forward_without_breaking_earlier_graphs():
    m = make(0)
    x = inputs()
    out_of_range = torch.tensor([-0.5, 0.25, 1.5, 0.75], dtype=torch.float64)
    m.thr.data.copy_(out_of_range)  # as an optimiser step might leave them
    first = m(x)
    assert m.thr.tolist() == [0.0, 0.25, 1.0, 0.75]
    m.thr.data.copy_(out_of_range)
    second = m(x)  # clamps again, in place, after ``first`` saved theta for its backward
    assert m.thr.tolist() == [0.0, 0.25, 1.0, 0.75]
    torch.testing.assert_close(first.outputs, second.outputs, rtol=0, atol=0)
    first.outputs.sum().backward()  # the clamp did not invalidate the first graph
    assert m.thr.grad is not None


def test_initialisation_follows_the_code():
    torch.manual_seed(0)
    m = EGRU(30, 200, EGRUConfig(thr_mean=0.3))
    assert torch.equal(m.bias, torch.zeros(600)) and torch.equal(m.recurrent_bias, torch.zeros(600))
    assert ((m.thr > 0) & (m.thr < 1)).all()
    assert abs(float(m.thr.detach().mean()) - 0.3) < 0.03  # Beta(9/7, 3), mean 0.3
    for w in (m.kernel.detach(), m.recurrent_kernel.detach()):  # Xavier normal, gain 1
        std = (2.0 / (w.shape[0] + w.shape[1])) ** 0.5
        assert abs(float(w.std()) / std - 1) < 0.05
        assert float(w.abs().max()) > 2 * std  # normal, not uniform (bounded by sqrt(3) std)
    n = sum(p.numel() for p in m.parameters())
    assert n == 3 * 200 * (30 + 200 + 2) + 200


def test_config_is_validated():
    cfg = config.resolve("egru", "synthetic", 0, "smoke", {"thr_mean": "0.1"})
    assert cfg.method_cfg.thr_mean == 0.1
    for bad in ({"thr_mean": "1.0"}, {"dampening_factor": "0"}, {"activity_reg": "-1"}):
        with pytest.raises(ConfigError):
            config.resolve("egru", "synthetic", 0, "smoke", bad)


def test_bad_knob_on_the_command_line_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["run", "--methods", "egru", "--tasks", "adding", "--set", "thr_mean=2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "thr_mean=2 is out of range" in err[0], err
