"""HSG (docs/methods.md 2.11): the cell against a literal reference (RHN fed s_{t-1}, outputs and
gradients, the gate-mean diagnostic), a closed gate is a vanilla RHN, the third-party TF cell
(equal while the gate is closed, different once it opens), cost and MACs."""

from __future__ import annotations

import torch
from reference import assert_grads_match

from baselines._highway import HighwayConfig
from baselines.hsg import HSG, HSGConfig
from baselines.rhn import RHN
from harness.components.flops import fvcore_macs, sequence_macs


def reference_hsg(m: HSG, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """y_t = RHN_L(s_{t-1}, x_t); g_t = sigma(W_R s_{t-1} + W_Y y_t + b_g);
    s_t = g_t s_{t-1} + (1 - g_t) y_t. Returns the states and per-sequence mean of g."""
    D, L = m.hidden_size, m.cfg.depth
    W_H, W_T = m.cell.weight_x[:D], m.cell.weight_x[D:]
    W_R, W_Y, b_g = m.gate.weight[:, :D], m.gate.weight[:, D:], m.gate.bias
    outs, gmeans = [], []
    for b in range(x.shape[0]):
        s, ss, gs = torch.zeros(D, dtype=x.dtype), [], []
        for t in range(x.shape[1]):
            y = s  # the RHN starts from the HSG state, not from y_{t-1}
            for r in range(L):
                R_H, R_T = m.cell.weight_h[r, :D], m.cell.weight_h[r, D:]
                b_H, b_T = m.cell.bias[r, :D], m.cell.bias[r, D:]
                hs_ = torch.tanh((W_H @ x[b, t] if r == 0 else 0.0) + R_H @ y + b_H)
                tau = torch.sigmoid((W_T @ x[b, t] if r == 0 else 0.0) + R_T @ y + b_T)
                y = tau * hs_ + (1 - tau) * y
            g = torch.sigmoid(W_R @ s + W_Y @ y + b_g)
            s = g * s + (1 - g) * y
            ss.append(s)
            gs.append(g.mean())
        outs.append(torch.stack(ss))
        gmeans.append(torch.stack(gs).mean())
    return torch.stack(outs), torch.stack(gmeans)


def test_matches_literal_reference() -> None:
    torch.manual_seed(2)
    # gate bias 0 so the gate is half open and the state path matters
    m = HSG(3, 4, HSGConfig(depth=2, gate_bias=0.0)).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    w = torch.randn(2, 5, 4, dtype=torch.float64)
    out = m(x)
    ref, gmean = reference_hsg(m, x)
    torch.testing.assert_close(out.outputs, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.extras["hsg_gate_mean"], gmean, rtol=0, atol=1e-12)
    loop = m.step_loop(x)
    torch.testing.assert_close(loop.outputs, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(loop.extras["hsg_gate_mean"], gmean, rtol=0, atol=1e-12)
    assert_grads_match(m, (out.outputs * w).sum(), (ref * w).sum())
    assert torch.all(out.mask == 1) and torch.all(out.depth == 2)


def test_defaults_and_closed_gate_is_rhn() -> None:
    m = HSG(2, 5)
    assert torch.all(m.gate.bias == -2.0) and torch.all(m.cell.bias[:, 5:] == -2.0)
    x = torch.randn(2, 4, 2)
    gmean = m(x).extras["hsg_gate_mean"]
    assert gmean.shape == (2,) and torch.all((gmean > 0.02) & (gmean < 0.5))  # starts mostly closed
    # a fully closed gate (g = 0) gives s_t = y_t: the vanilla RHN on the same weights
    closed = HSG(2, 5, HSGConfig(depth=3, gate_bias=-1e4))
    rhn = RHN(2, 5, HighwayConfig(depth=3))
    rhn.cell.load_state_dict(closed.cell.state_dict())
    torch.testing.assert_close(closed(x).outputs, rhn(x).outputs, rtol=0, atol=0)


def reference_asahi417_hsg(m: HSG, x: torch.Tensor) -> torch.Tensor:
    """``CustomRNNCell.call`` of asahi417/LSTMCell @ cb49d17 (``lstm_cell/basic_rnn_cell.py``)
    with recurrent_highway, highway_state_gate and coupling_gate on, no dropout or layer norm:
    two states (s, y); the RHN starts from the previous RHN output y, not from s. Kernels
    ``[in, D]`` on ``concat([x, y])`` (layer 1) or ``y``; the gate's on ``concat([s, y])``."""
    D, L = m.hidden_size, m.cfg.depth
    c = m.cell
    s = y = torch.zeros(x.shape[0], D, dtype=x.dtype)
    outs = []
    for t in range(x.shape[1]):
        inter_out = y
        for r in range(L):
            args = torch.cat([x[:, t], inter_out], 1) if r == 0 else inter_out
            k_h, k_t = c.weight_h[r, :D], c.weight_h[r, D:]
            if r == 0:
                k_h, k_t = torch.cat([c.weight_x[:D], k_h], 1), torch.cat([c.weight_x[D:], k_t], 1)
            h = torch.tanh(args @ k_h.T + c.bias[r, :D])
            tt = torch.sigmoid(args @ k_t.T + c.bias[r, D:])
            inter_out = (h - inter_out) * tt + inter_out
        g = torch.sigmoid(torch.cat([s, inter_out], 1) @ m.gate.weight.T + m.gate.bias)
        s = g * s + (1 - g) * inter_out
        y = inter_out
        outs.append(s)
    return torch.stack(outs, 1)


def test_against_the_third_party_cell() -> None:
    """docs/methods.md 4 item 7: the third-party cell feeds its RHN y_{t-1}; ours feeds s_{t-1}.
    With the gate closed (s_t = y_t) the two are the same model; open, they part after step 1."""
    torch.manual_seed(5)
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    closed = HSG(3, 4, HSGConfig(depth=2, gate_bias=-1e4)).double()
    ref = reference_asahi417_hsg(closed, x)
    torch.testing.assert_close(closed(x).outputs, ref, rtol=0, atol=1e-12)
    opened = HSG(3, 4, HSGConfig(depth=2, gate_bias=0.0)).double()
    ours, theirs = opened(x).outputs, reference_asahi417_hsg(opened, x)
    torch.testing.assert_close(ours[:, 0], theirs[:, 0], rtol=0, atol=1e-12)  # s_0 = y_0 = 0
    assert (ours[:, 1:] - theirs[:, 1:]).abs().amax((0, 2)).min() > 1e-4


def test_params_cost_and_macs() -> None:
    D, V, L, T = 4, 3, 3, 5
    m = HSG(V, D, HSGConfig(depth=L))
    rhn = RHN(V, D, HighwayConfig(depth=L))
    n = sum(p.numel() for p in m.parameters())
    assert n == sum(p.numel() for p in rhn.parameters()) + 2 * D * D + D  # docs/methods.md 2.11
    c = m.cost()
    assert c.dense_step() == rhn.cost().dense_step() + 2 * D * D
    x = torch.randn(2, T, V)
    macs = sequence_macs(m, m(x))
    assert torch.equal(macs["effective"], macs["dense"])
    assert macs["dense"][0].item() == c.dense_step() * T
    assert fvcore_macs(m, x)[0] == c.dense_step() * T * 2
