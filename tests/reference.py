"""Literal reference computations shared by the method tests: written independently of the
harness (no ``harness.cells``), unit by unit, so they share no code with what they check."""

import torch


def ste(hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Value of ``hard``, gradient of ``soft`` (written independently of harness.cells)."""
    return soft + (hard - soft).detach()


def ref_gru(cell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Reset-after GRU candidate of one sequence at one step, computed unit by unit."""
    D = h.shape[0]
    Wi, Wh, b = cell.weight_ih, cell.weight_hh, cell.bias
    out = []
    for i in range(D):
        r = torch.sigmoid(Wi[i] @ x + b[i] + Wh[i] @ h)
        z = torch.sigmoid(Wi[D + i] @ x + b[D + i] + Wh[D + i] @ h)
        n = torch.tanh(Wi[2 * D + i] @ x + b[2 * D + i] + r * (Wh[2 * D + i] @ h))
        out.append((1 - z) * n + z * h[i])
    return torch.stack(out)
