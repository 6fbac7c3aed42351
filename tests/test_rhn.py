"""RHN (docs/methods.md 2.10): the cell against a literal reference of its equations and against a
transcription of the authors' TF cell (outputs and gradients), the initialisation, parameter
counts against S-EI Tables 1-2, cost model and MAC accounting."""

from __future__ import annotations

import pytest
import torch
from reference import assert_grads_match
from torch import nn

from baselines._highway import HighwayConfig
from baselines.rhn import RHN
from harness.components.flops import fvcore_macs, sequence_macs
from harness.components.metrics import depth_stats, skip_fraction
from harness.errors import ConfigError


def reference_rhn(m: RHN, x: torch.Tensor) -> torch.Tensor:
    """The RHN layer of S-EI eqs. 6-8 (coupled carry), one sequence at a time, separate named
    matrices."""
    D, L = m.hidden_size, m.cfg.depth
    W_H, W_T = m.cell.weight_x[:D], m.cell.weight_x[D:]
    outs = []
    for b in range(x.shape[0]):
        h, hs = torch.zeros(D, dtype=x.dtype), []
        for t in range(x.shape[1]):
            for r in range(L):
                R_H, R_T = m.cell.weight_h[r, :D], m.cell.weight_h[r, D:]
                b_H, b_T = m.cell.bias[r, :D], m.cell.bias[r, D:]
                xin_H = W_H @ x[b, t] if r == 0 else 0.0
                xin_T = W_T @ x[b, t] if r == 0 else 0.0
                s = torch.tanh(xin_H + R_H @ h + b_H)
                tau = torch.sigmoid(xin_T + R_T @ h + b_T)
                c = 1 - tau  # coupled carry (S-EI eq. 8 prints a separate one)
                h = tau * s + c * h
            hs.append(h)
        outs.append(torch.stack(hs))
    return torch.stack(outs)


def reference_authors_rhn(m: RHN, x: torch.Tensor) -> torch.Tensor:
    """``RHNCell.__call__`` of jzilly/RecurrentHighwayNetworks @ 9ab03a3 (``rhn.py``), in the
    authors' layout and order of operations, with the dropout masks at 1: per layer i a scope
    ``h_i`` and ``t_i`` with ``Matrix [in, D]`` on ``concat([x, s])`` (i = 0) or ``s`` and a
    ``Bias [D]``; ``s = (h - s) * t + s``. Our parameters are laid out in that form first."""
    D, L = m.hidden_size, m.cfg.depth
    c = m.cell
    scopes = {}
    for i in range(L):
        for name, rows in (("h", slice(0, D)), ("t", slice(D, 2 * D))):
            w = c.weight_h[i, rows]
            if i == 0:
                w = torch.cat([c.weight_x[rows], w], 1)
            scopes[f"{name}_{i}"] = (w.T, c.bias[i, rows])  # Matrix [in, D], Bias [D]
    state = torch.zeros(x.shape[0], D, dtype=x.dtype)
    outs = []
    for t in range(x.shape[1]):
        for i in range(L):
            args = torch.cat([x[:, t], state], 1) if i == 0 else state
            matrix, bias = scopes[f"h_{i}"]
            h = torch.tanh(args @ matrix + bias)
            matrix, bias = scopes[f"t_{i}"]
            tt = torch.sigmoid(args @ matrix + bias)
            state = (h - state) * tt + state
        outs.append(state)
    return torch.stack(outs, 1)


@pytest.mark.parametrize("depth", [1, 3])
def test_matches_authors_cell(depth: int) -> None:
    torch.manual_seed(3)
    m = RHN(3, 4, HighwayConfig(depth=depth)).double()
    with torch.no_grad():
        m.cell.bias.uniform_(-1, 1)  # every bias nonzero, so their placement is checked too
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    w = torch.randn(2, 5, 4, dtype=torch.float64)
    out = m(x)
    ref = reference_authors_rhn(m, x)
    torch.testing.assert_close(out.outputs, ref, rtol=0, atol=1e-12)
    assert_grads_match(m, (out.outputs * w).sum(), (ref * w).sum())


def test_init_against_the_reference() -> None:
    """``init_bound=0.04`` gives the reference's weight range and b_T; b_H stays 0 where the
    reference draws it from U(+-0.04) (documented; the default init is kept)."""
    torch.manual_seed(4)
    D = 200
    m = RHN(9, D, HighwayConfig(depth=3, init_bound=0.04))
    for w in (m.cell.weight_x, m.cell.weight_h):
        assert w.abs().max() <= 0.04 and w.abs().max() > 0.039  # U(+-0.04), as init_scale
    assert torch.all(m.cell.bias[:, D:] == -2.0)  # b_T: rhn_train.py init_bias (PTB)
    assert torch.all(m.cell.bias[:, :D] == 0)  # b_H: 0 here, U(+-0.04) in the reference


@pytest.mark.parametrize("depth", [1, 3])
def test_matches_literal_reference(depth: int) -> None:
    torch.manual_seed(0)
    m = RHN(3, 4, HighwayConfig(depth=depth)).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    w = torch.randn(2, 5, 4, dtype=torch.float64)
    out = m(x)
    ref = reference_rhn(m, x)
    torch.testing.assert_close(out.outputs, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(m.step_loop(x).outputs, ref, rtol=0, atol=1e-12)
    assert_grads_match(m, (out.outputs * w).sum(), (ref * w).sum())


def test_mask_depth_and_init() -> None:
    m = RHN(2, 6, HighwayConfig(depth=4))
    assert RHN.has_depth and m.cfg.depth == 4
    assert torch.all(m.cell.bias[:, 6:] == -2.0) and torch.all(m.cell.bias[:, :6] == 0)
    out = m(torch.randn(3, 7, 2))
    assert torch.all(out.mask == 1) and torch.all(out.depth == 4)
    assert torch.all(skip_fraction(out.mask) == 0)
    stats = depth_stats(out.depth, m.cost().max_depth)
    assert torch.all(stats["depth_skip"] == 0) and torch.all(stats["mean_depth"] == 4)
    with pytest.raises(ConfigError):
        HighwayConfig(depth=0)


def _count(*modules: nn.Module) -> int:
    return sum(p.numel() for mod in modules for p in mod.parameters())


@pytest.mark.parametrize("D, expected", [(10, 1162), (15, 2492), (20, 4322)])
def test_param_count_synthetic(D: int, expected: int) -> None:
    # S-EI Table 1: V = 2, 2-d regression read-out, depth 5 ([INFERRED], docs/methods.md P2.6)
    assert _count(RHN(2, D, HighwayConfig(depth=5)), nn.Linear(D, 2)) == expected


@pytest.mark.parametrize("L, expected", [(1, 7366), (2, 11590), (3, 15814)])
def test_param_count_har(L: int, expected: int) -> None:
    # S-EI Table 2: two stacked layers (V = 9, then D = 32), 6-way read-out, plus the unexplained
    # +10*D term that every HAR count carries (docs/methods.md P2.6), added here as a constant.
    D = 32
    layers = (RHN(9, D, HighwayConfig(depth=L)), RHN(D, D, HighwayConfig(depth=L)))
    assert _count(*layers, nn.Linear(D, 6)) + 10 * D == expected


def test_cost_and_effective_macs() -> None:
    D, V, L, T = 5, 3, 4, 6
    m = RHN(V, D, HighwayConfig(depth=L))
    c = m.cost()
    assert c.dense_step() == 2 * D * (D + V) + 2 * (L - 1) * D * D  # docs/methods.md 1.4
    x = torch.randn(2, T, V)
    out = m(x)
    macs = sequence_macs(m, out)
    assert torch.equal(macs["effective"], macs["dense"])
    assert torch.equal(macs["exact"], macs["dense"])
    assert macs["dense"][0].item() == c.dense_step() * T
    total, _ = fvcore_macs(m, x)
    assert total == (c.dense_step() - c.fvcore_uncounted) * T * 2
