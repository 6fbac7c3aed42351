"""HSG (METHODS.md 2.11): the cell against a literal reference (RHN fed s_{t-1}, outputs and
gradients, the gate-mean diagnostic), a closed gate is a vanilla RHN, cost and MACs."""

from __future__ import annotations

import torch
from reference import assert_grads_match

from baselines._highway import HighwayConfig
from baselines.hsg import HSG, HSGConfig
from baselines.rhn import RHN
from harness.flops import fvcore_macs, sequence_macs


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


def test_params_cost_and_macs() -> None:
    D, V, L, T = 4, 3, 3, 5
    m = HSG(V, D, HSGConfig(depth=L))
    rhn = RHN(V, D, HighwayConfig(depth=L))
    n = sum(p.numel() for p in m.parameters())
    assert n == sum(p.numel() for p in rhn.parameters()) + 2 * D * D + D  # METHODS.md 2.11
    c = m.cost()
    assert c.dense_step() == rhn.cost().dense_step() + 2 * D * D
    x = torch.randn(2, T, V)
    macs = sequence_macs(m, m(x))
    assert torch.equal(macs["effective"], macs["dense"])
    assert macs["dense"][0].item() == c.dense_step() * T
    assert fvcore_macs(m, x)[0] == c.dense_step() * T * 2
