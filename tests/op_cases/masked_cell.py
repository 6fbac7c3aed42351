"""Sample inputs of the masked cell's ops (baselines/ops/masked_cell.py), for opcheck."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from baselines.ops.masked_cell import CELLS

Args = tuple[Any, ...]


def randn(*shape: int, dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


_MC = {"S": 5, "B": 3, "D": 4}
_GATES = {"tanh": 1, "gru": 3, "lstm": 4}


def _masked_cell_inputs(cell: str, dtype: torch.dtype, grad: bool) -> Args:
    S, B, D = _MC["S"], _MC["B"], _MC["D"]
    G = _GATES[cell]
    c0 = randn(B, D, dtype=dtype, grad=grad) if cell == "lstm" else torch.empty(0, dtype=dtype)
    m = torch.rand(B, S, D, dtype=dtype).requires_grad_(grad)
    return (
        randn(S, B, G * D, dtype=dtype, grad=grad),
        randn(B, D, dtype=dtype, grad=grad),
        c0,
        (randn(G * D, D, dtype=dtype) * 0.5).requires_grad_(grad),
        m,
        CELLS[cell],
    )


def cases_masked_cell_forward(dtype: torch.dtype) -> Iterator[Args]:
    for cell in CELLS:
        yield _masked_cell_inputs(cell, dtype, grad=True)


def cases_masked_cell_backward(dtype: torch.dtype) -> Iterator[Args]:
    for cell in CELLS:
        xp, h0, c0, weight, m, code = _masked_cell_inputs(cell, dtype, grad=False)
        hs, _c_T, H, A, X, C = torch.ops.condrnn.masked_cell_forward(xp, h0, c0, weight, m, code)
        grad_c = torch.randn_like(h0) if cell == "lstm" else torch.empty(0, dtype=dtype)
        yield (torch.randn_like(hs), grad_c, weight, m, H, A, X, C, code)
