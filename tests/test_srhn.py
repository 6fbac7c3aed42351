"""SRHN (docs/methods.md 2.12): shared-weight RHN against a literal reference (outputs, gradients);
parameter count independent of depth; cost as RHN."""

from __future__ import annotations

import pytest
import torch
from reference import assert_grads_match

from baselines._highway import HighwayConfig
from baselines.srhn import SRHN
from harness.components.flops import sequence_macs


def reference_srhn(m: SRHN, x: torch.Tensor) -> torch.Tensor:
    """RHN equations with R_H^r = R_H, R_T^r = R_T, b^r = b for every layer."""
    D, L = m.hidden_size, m.cfg.depth
    W_H, W_T = m.cell.weight_x[:D], m.cell.weight_x[D:]
    R_H, R_T = m.cell.weight_h[0, :D], m.cell.weight_h[0, D:]
    b_H, b_T = m.cell.bias[0, :D], m.cell.bias[0, D:]
    outs = []
    for b in range(x.shape[0]):
        h, hs = torch.zeros(D, dtype=x.dtype), []
        for t in range(x.shape[1]):
            for r in range(L):
                s = torch.tanh((W_H @ x[b, t] if r == 0 else 0.0) + R_H @ h + b_H)
                tau = torch.sigmoid((W_T @ x[b, t] if r == 0 else 0.0) + R_T @ h + b_T)
                h = tau * s + (1 - tau) * h
            hs.append(h)
        outs.append(torch.stack(hs))
    return torch.stack(outs)


@pytest.mark.parametrize("depth", [1, 4])
def test_matches_literal_reference(depth: int) -> None:
    torch.manual_seed(1)
    m = SRHN(2, 4, HighwayConfig(depth=depth)).double()
    x = torch.randn(3, 4, 2, dtype=torch.float64)
    w = torch.randn(3, 4, 4, dtype=torch.float64)
    out = m(x)
    ref = reference_srhn(m, x)
    torch.testing.assert_close(out.outputs, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(m.step_loop(x).outputs, ref, rtol=0, atol=1e-12)
    assert_grads_match(m, (out.outputs * w).sum(), (ref * w).sum())
    assert torch.all(out.mask == 1) and torch.all(out.depth == depth)


def test_params_shared_across_depth() -> None:
    D, V = 20, 2
    counts = {
        sum(p.numel() for p in SRHN(V, D, HighwayConfig(depth=L)).parameters()) for L in (1, 6)
    }
    assert counts == {2 * D * V + 2 * D * D + 2 * D}  # docs/methods.md 2.12


def test_cost_same_as_rhn() -> None:
    D, V, L, T = 4, 3, 3, 5
    m = SRHN(V, D, HighwayConfig(depth=L))
    assert m.cost().dense_step() == 2 * D * (D + V) + 2 * (L - 1) * D * D
    macs = sequence_macs(m, m(torch.randn(2, T, V)))
    assert torch.equal(macs["effective"], macs["dense"])
