"""Delta GRU (baselines/delta_gru.py) against a float64 transcription of the authors' DeltaGRU
(gaochangw/DeltaRNN @ c33c36cb7f085ed782e2491f1d6f13202c51362e : networks/layers/deltagru.py,
``process_inputs``, ``compute_deltas``, ``update_states``, ``compute_gates``, ``layer_forward``
with ``qa = 0`` and the smooth nonlinearities; the regulariser as ``calculate_loss`` in
modules/gscdv2/train_func.py uses it), and at zero thresholds against the plain GRU."""

from __future__ import annotations

import pytest
import torch
from reference import assert_grads_match

from baselines.delta_gru import DeltaGRU, DeltaGRUConfig
from baselines.gru import GRU
from harness.components.config import resolve
from harness.components.flops import fvcore_macs, sequence_macs
from harness.components.method import SeqOut
from harness.errors import ConfigError

B, T, V, D = 2, 5, 3, 4


# --- the authors' code, transcribed (time-major, as the code) ---------------------------------


def authors_process_inputs(x, bias_ih, bias_hh, hidden_size):
    """``DeltaGRU.process_inputs`` without external state, one layer, no quantisation."""
    batch_size = x.size()[1]
    x_p_length = max(x.size(-1), hidden_size)
    x_p_0 = torch.zeros(batch_size, x_p_length, dtype=x.dtype)
    h_0 = torch.zeros(batch_size, hidden_size, dtype=x.dtype)
    h_p_0 = torch.zeros(batch_size, hidden_size, dtype=x.dtype)
    dm_ch_0 = torch.zeros(batch_size, hidden_size, dtype=x.dtype)
    dm_0 = torch.zeros(batch_size, 3 * hidden_size, dtype=x.dtype)
    H = hidden_size
    dm_0 = torch.cat(
        [
            dm_0[:, :H] + bias_ih[:H] + bias_hh[:H],
            dm_0[:, H : 2 * H] + bias_ih[H : 2 * H] + bias_hh[H : 2 * H],
            dm_0[:, 2 * H :] + bias_ih[2 * H :],
        ],
        1,
    )  # the code writes these slices in place; the same values
    dm_ch_0 = dm_ch_0 + bias_hh[2 * H :]
    return x, x_p_0, h_0, h_p_0, dm_ch_0, dm_0


def authors_compute_deltas(x, x_p, h, h_p, th_x, th_h):
    delta_x = x - x_p
    delta_h = h - h_p
    delta_x_abs = torch.abs(delta_x)
    delta_x = delta_x.masked_fill(delta_x_abs < th_x, 0)
    delta_h_abs = torch.abs(delta_h)
    delta_h = delta_h.masked_fill(delta_h_abs < th_h, 0)
    return delta_x, delta_h, delta_x_abs, delta_h_abs


def authors_update_states(delta_x_abs, delta_h_abs, x, h, x_p, h_p, th_x, th_h):
    # (the code also copies x_p into an output buffer, x_prev_out, that reaches no output)
    x_p = torch.where(delta_x_abs >= th_x, x, x_p)
    h_p = torch.where(delta_h_abs >= th_h, h, h_p)
    return x_p, h_p


def authors_compute_gates(delta_x, delta_h, dm, dm_nh, weight_ih, weight_hh):
    mac_x = torch.mm(delta_x, weight_ih.t()) + dm
    mac_h = torch.mm(delta_h, weight_hh.t())
    mac_x_chunks = mac_x.chunk(3, dim=1)
    mac_h_chunks = mac_h.chunk(3, dim=1)
    dm_r = mac_x_chunks[0] + mac_h_chunks[0]
    dm_z = mac_x_chunks[1] + mac_h_chunks[1]
    dm_n = mac_x_chunks[2]
    dm_nh = mac_h_chunks[2] + dm_nh
    dm = torch.cat((dm_r, dm_z, dm_n), 1)
    return dm, dm_r, dm_z, dm_n, dm_nh


def authors_layer_forward(x, weight_ih, weight_hh, bias_ih, bias_hh, thx, thh):
    """``layer_forward`` after ``process_inputs``: outputs [T, B, D], the regulariser and the
    thresholded deltas of every step."""
    hidden_size = weight_hh.shape[1]
    x, x_p_0, h_0, h_p_0, dm_nh_0, dm_0 = authors_process_inputs(x, bias_ih, bias_hh, hidden_size)
    input_size = x.size(-1)
    th_x = torch.tensor(thx, dtype=x.dtype)
    th_h = torch.tensor(thh, dtype=x.dtype)
    inputs = x.unbind(0)
    output = []
    reg = torch.zeros(1, dtype=x.dtype).squeeze()
    x_p = x_p_0[:, :input_size]
    h = h_0
    h_p = h_p_0
    dm_nh = dm_nh_0
    dm = dm_0
    deltas = []
    for t in range(len(inputs)):
        xt = inputs[t]
        delta_x, delta_h, delta_x_abs, delta_h_abs = authors_compute_deltas(
            xt, x_p, h, h_p, th_x, th_h
        )
        reg = reg + torch.sum(torch.abs(delta_h))
        deltas.append((delta_x, delta_h))
        x_p, h_p = authors_update_states(delta_x_abs, delta_h_abs, xt, h, x_p, h_p, th_x, th_h)
        dm, dm_r, dm_z, dm_n, dm_nh = authors_compute_gates(
            delta_x, delta_h, dm, dm_nh, weight_ih, weight_hh
        )
        gate_r = torch.sigmoid(dm_r)
        gate_z = torch.sigmoid(dm_z)
        pre_act_nh = dm_nh
        pre_act_n = dm_n + torch.mul(gate_r, pre_act_nh)
        gate_n = torch.tanh(pre_act_n)
        one_minus_u = torch.ones_like(gate_z) - gate_z
        a = torch.mul(one_minus_u, gate_n)
        b = torch.mul(gate_z, h)
        h = a + b
        output += [h]
    return torch.stack(output), reg, deltas


def authors(m: DeltaGRU, x: torch.Tensor, beta: float = 0.0):
    """The code on ``m``'s weights, batch-first in and out: outputs [B, T, D], reads
    [B, T, V + D] (non-zero deltas) and ``beta * reg``. The code's second bias is zero (one
    bias per gate here)."""
    c = m.cell
    out, reg, deltas = authors_layer_forward(
        x.transpose(0, 1),
        c.weight_ih,
        c.weight_hh,
        c.bias,
        torch.zeros_like(c.bias),
        m.cfg.theta_x,
        m.cfg.theta_h,
    )
    reads = torch.stack([torch.cat([dx != 0, dh != 0], 1) for dx, dh in deltas], 1)
    return out.transpose(0, 1), reads.to(x.dtype), beta * reg


def make(seed=0, V=V, D=D, **cfg) -> DeltaGRU:
    torch.manual_seed(seed)
    return DeltaGRU(V, D, DeltaGRUConfig(**cfg)).double()


def inputs(seed=1, b=B, t=T, v=V) -> torch.Tensor:
    return torch.randn(b, t, v, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


# thresholds that cut a good share of both kinds of delta on these inputs (checked below)
SPARSE = {"theta_x": 0.8, "theta_h": 0.15}


@pytest.mark.parametrize("thresholds", [{"theta_x": 0.0, "theta_h": 0.0}, SPARSE])
@pytest.mark.parametrize("path", ["forward", "step_loop"])
def test_matches_authors_code(path, thresholds):
    """Outputs, reads, the regulariser and the gradients of every parameter and of the input
    (what a stacked layer passes down), float64."""
    beta = 0.05
    m = make(**thresholds, beta=beta)
    x = inputs().requires_grad_()
    w = torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    out = m(x) if path == "forward" else m.step_loop(x)
    ref_out, ref_reads, ref_aux = authors(m, x, beta)
    torch.testing.assert_close(out.outputs, ref_out, rtol=1e-12, atol=1e-12)
    assert torch.equal(out.reads, ref_reads)
    assert torch.equal(out.mask, torch.ones(B, T, D, dtype=torch.float64))
    assert out.extras == {}
    torch.testing.assert_close(out.aux_loss, ref_aux, rtol=1e-12, atol=1e-12)
    got, want = (out.outputs * w).sum() + out.aux_loss, (ref_out * w).sum() + ref_aux
    gx = torch.autograd.grad(got, x, retain_graph=True)[0]
    gx_ref = torch.autograd.grad(want, x, retain_graph=True)[0]
    assert_grads_match(m, got, want)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-10, atol=1e-12)
    assert gx.abs().sum() > 0
    if thresholds is SPARSE:  # the thresholds cut a good share of both kinds of delta
        cut_x, cut_h = 1 - out.reads[..., :V].mean(), 1 - out.reads[:, 1:, V:].mean()
        assert 0.25 < cut_x < 0.75 and 0.25 < cut_h < 0.75, (cut_x, cut_h)


def test_theta_zero_is_the_gru():
    """At zero thresholds: the harness's GRU and torch's GRUCell (second bias zero) on the same
    weights, outputs and gradients; every column read, except the state columns at step 1
    (``h_0 = h^_0 = 0``: a zero delta)."""
    m = make(theta_x=0.0, theta_h=0.0)
    torch.manual_seed(0)
    gru = GRU(V, D).double()
    assert all(torch.equal(a, b) for a, b in zip(m.parameters(), gru.parameters(), strict=True))
    x = inputs()
    w = torch.randn(B, T, D, dtype=torch.float64)
    out, ref = m(x), gru(x)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad((out.outputs * w).sum(), list(m.parameters()))
    want = torch.autograd.grad((ref.outputs * w).sum(), list(gru.parameters()))
    for (name, _), a, b in zip(m.named_parameters(), got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)
    expected = torch.ones(B, T, V + D, dtype=torch.float64)
    expected[:, 0, V:] = 0
    assert torch.equal(out.reads, expected)
    assert torch.equal(m.step_loop(x).reads, expected)

    cell = torch.nn.GRUCell(V, D).double()
    with torch.no_grad():
        cell.weight_ih.copy_(m.cell.weight_ih)
        cell.weight_hh.copy_(m.cell.weight_hh)
        cell.bias_ih.copy_(m.cell.bias)
        cell.bias_hh.zero_()
    h, hs = torch.zeros(B, D, dtype=torch.float64), []
    for x_t in x.unbind(1):
        h = cell(x_t, h)
        hs.append(h)
    torch.testing.assert_close(out.outputs, torch.stack(hs, 1), rtol=1e-12, atol=1e-12)


def test_a_cut_delta_leaves_the_reference_and_the_memory():
    """Changes smaller than Theta_x add up against the reference until they reach it (feature
    0 at the last step); a change of exactly Theta_x is propagated (feature 1), as the code's
    ``|d| < theta`` cut; the gates see the memorised values (``M = b + W_i x^ + W_h h^``)."""
    m = make(theta_x=0.5, theta_h=0.0)
    x = [[[1.0, 2.0, -1.0], [1.2, 2.0, 0.0], [1.4, 2.5, 0.2], [1.6, 3.0, 0.3]]]
    xt = torch.tensor(x, dtype=torch.float64)
    for out in (m(xt), m.step_loop(xt)):
        assert out.reads[0, :, :V].tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 0], [1, 1, 0]]
    x_hat, h, h_hat, mem, mem_nh = out.state
    assert x_hat.tolist() == [[1.6, 3.0, 0.0]]  # the memorised values, not the last inputs
    c = m.cell
    direct = c.bias + x_hat @ c.weight_ih.t() + h_hat @ c.weight_hh.t()
    torch.testing.assert_close(mem[:, : 2 * D], direct[:, : 2 * D], rtol=0, atol=1e-13)
    torch.testing.assert_close(
        mem[:, 2 * D :], direct[:, 2 * D :] - h_hat @ c.weight_hh[2 * D :].t()
    )
    torch.testing.assert_close(mem_nh, h_hat @ c.weight_hh[2 * D :].t(), rtol=0, atol=1e-13)


@pytest.mark.parametrize("path", ["forward", "step_loop"])
def test_state_carries_across_windows(path):
    m = make(**SPARSE)
    x = inputs(t=9)
    run = m if path == "forward" else m.step_loop
    full = run(x)
    for split in (1, 4):
        first = run(x[:, :split])
        second = run(x[:, split:], state=first.state)
        torch.testing.assert_close(
            torch.cat([first.outputs, second.outputs], 1), full.outputs, rtol=0, atol=1e-13
        )
        assert torch.equal(torch.cat([first.reads, second.reads], 1), full.reads)
        for a, b in zip(second.state, full.state, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


def test_forward_equals_step_loop_in_float32():
    m = DeltaGRU(5, 16, DeltaGRUConfig(theta_x=0.3, theta_h=0.05))
    x = torch.randn(3, 30, 5)
    a, b = m(x), m.step_loop(x)
    torch.testing.assert_close(a.outputs, b.outputs, rtol=1e-5, atol=1e-6)
    assert torch.equal(a.reads, b.reads)
    assert 0.1 < 1 - a.reads.mean() < 0.9


def test_dense_cost_is_the_gru_and_reads_leave_it_unchanged():
    """``3D(D+V)`` MACs per step, what fvcore counts; the update mask is all ones, so the
    row-based effective count is the dense one (the saving is in ``reads``)."""
    m = DeltaGRU(3, 10)
    assert m.cost().dense_step() == 3 * 10 * 13 == GRU(3, 10).cost().dense_step()
    x = torch.randn(2, 6, 3)
    assert fvcore_macs(m, x)[0] == m.cost().dense_step() * 12
    out = m(x)
    assert (1 - out.reads.mean()) > 0.2  # the default thresholds cut columns ...
    macs = sequence_macs(m, SeqOut(out.outputs, out.mask))
    torch.testing.assert_close(macs["effective"], macs["dense"])  # ... and no rows


def test_initialisation():
    torch.manual_seed(3)
    a = DeltaGRU(3, 4)
    torch.manual_seed(3)
    g = GRU(3, 4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), g.parameters(), strict=True))
    m = DeltaGRU(3, 4, DeltaGRUConfig(init="authors"))
    assert torch.equal(m.cell.bias, torch.zeros(12))
    for g in range(3):
        w = m.cell.weight_hh[4 * g : 4 * (g + 1)]
        torch.testing.assert_close(w @ w.t(), torch.eye(4), rtol=0, atol=1e-5)
        bound = (6 / (3 + 4)) ** 0.5  # Xavier-uniform of a [D, V] block
        assert m.cell.weight_ih[4 * g : 4 * (g + 1)].abs().max() <= bound


def test_config():
    assert DeltaGRUConfig() == DeltaGRUConfig(theta_x=0.1, theta_h=0.1, beta=0.0, init="gru")
    cfg = resolve("delta-gru", "adding", 0, "smoke", {"theta_x": "0.2", "beta": "1e-3"})
    assert cfg.method_cfg == DeltaGRUConfig(theta_x=0.2, beta=1e-3)
    for key, value in [("theta_x", "-1"), ("theta_h", "-0.5"), ("beta", "-0.1")]:
        with pytest.raises(ConfigError, match=rf"^{key}={value} is out of range for delta-gru"):
            resolve("delta-gru", "adding", 0, "smoke", {key: value})
    with pytest.raises(ConfigError, match=r"^method.theta_h=inf is out of range for delta-gru"):
        DeltaGRUConfig(theta_h=float("inf"))
    with pytest.raises(ConfigError, match=r"^init='xavier' is out of range .*one of gru, authors"):
        resolve("delta-gru", "adding", 0, "smoke", {"init": "xavier"})


def test_bad_threshold_on_the_command_line_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["run", "--tasks", "adding", "--methods", "delta-gru", "--set", "theta_h=-1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "theta_h=-1 is out of range" in err[0], err
