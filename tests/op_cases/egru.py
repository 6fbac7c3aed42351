"""Sample inputs of EGRU's ops (baselines/ops/egru.py), for opcheck."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

_SIZES = {"S": 5, "B": 3, "D": 4}
# thresholds theta, candidate bias b_g: a mix of events and silence, (almost) none firing, most
# units firing
_LEVELS = {"mixed": (0.1, 0.0), "silent": (1.0, 0.0), "firing": (0.0, 12.0)}
_PSEUDO = {"mixed": (0.7, 1.0), "silent": (0.3, 4.0), "firing": (0.7, 0.2)}  # dampening, support


def _randn(*shape: int, dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


def _forward_inputs(level: str, dtype: torch.dtype, grad: bool) -> Args:
    S, B, D = _SIZES["S"], _SIZES["B"], _SIZES["D"]
    theta, b_g = _LEVELS[level]
    wx = _randn(S, B, 3 * D, dtype=dtype)
    wx[..., 2 * D :] += b_g
    thr = torch.full((D,), theta, dtype=dtype) + 0.05 * torch.rand(D, dtype=dtype)
    return (
        wx.requires_grad_(grad),
        (0.3 * _randn(B, D, dtype=dtype)).requires_grad_(grad),  # c_0
        torch.relu(_randn(B, D, dtype=dtype)).requires_grad_(grad),  # y_0: events, 0 or above
        _randn(D, 3 * D, dtype=dtype, grad=grad),  # R
        (0.5 * _randn(3 * D, dtype=dtype)).requires_grad_(grad),  # b'
        thr.requires_grad_(grad),
    )


def cases_egru_forward(dtype: torch.dtype) -> Iterator[Args]:
    for level in _LEVELS:
        yield (*_forward_inputs(level, dtype, grad=True), *_PSEUDO[level])


def cases_egru_backward(dtype: torch.dtype) -> Iterator[Args]:
    for level in _LEVELS:
        wx, c0, y0, R, rbias, thr = _forward_inputs(level, dtype, grad=False)
        op = torch.ops.condrnn.egru_forward
        ys, os, c_T, *saved = op(wx, c0, y0, R, rbias, thr, *_PSEUDO[level])
        grads = (torch.randn_like(ys), torch.randn_like(os), torch.randn_like(c_T))
        yield (*grads, R, thr, *saved, *_PSEUDO[level])
