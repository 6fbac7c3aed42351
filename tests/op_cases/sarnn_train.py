"""Sample inputs of SA-RNN's training ops (baselines/ops/sarnn_train.py), for opcheck."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

_SA = {"S": 5, "B": 3, "D": 4}
_SLOPES = (1.0, 5.0)  # the hard sigmoid's slope at the first epoch and the last


def _sarnn_train_inputs(before: bool, slope: float, dtype: torch.dtype, grad: bool) -> Args:
    """The inputs of ``sarnn_train_forward``: input terms, h_0 and weights that give a mix of
    updates and skips, some of u's gradients clipped by the hard sigmoid."""
    S, B, D = _SA["S"], _SA["B"], _SA["D"]
    gen = torch.Generator().manual_seed(5)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, dtype=dtype, generator=gen) * scale).requires_grad_(grad)

    xp, h0 = randn(B, S, 4 * D), randn(B, D)
    weight, w_u = randn(3 * D, D, scale=0.5), randn(D)
    return (xp, h0, weight, w_u, slope, before)


def cases_sarnn_train_forward(dtype: torch.dtype) -> Iterator[Args]:
    for before in (False, True):
        for slope in _SLOPES:
            yield _sarnn_train_inputs(before, slope, dtype, grad=True)


def cases_sarnn_train_backward(dtype: torch.dtype) -> Iterator[Args]:
    for before in (False, True):
        for slope in _SLOPES:
            args = _sarnn_train_inputs(before, slope, dtype, grad=False)
            _xp, h0, weight, w_u, _slope, _before = args
            hs, u, A, X, P = torch.ops.condrnn.sarnn_train_forward(*args)
            grad_hs, grad_u = torch.randn_like(hs), torch.randn_like(u)
            yield (grad_hs, grad_u, weight, w_u, slope, h0, hs, u, A, X, P, before)
