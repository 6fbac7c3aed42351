"""Sample inputs of VC-RNN's training ops (baselines/ops/vcrnn_train.py), for opcheck."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

_S, _B, _D = 5, 3, 4
_LAM, _EPS = 2.0, 0.01  # a soft band of a few units: soft, updated and skipped units


def randn(*shape: int, dtype: torch.dtype, grad: bool = False, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, dtype=dtype) * scale).requires_grad_(grad)


def _forward_inputs(masked: bool, before: bool, dtype: torch.dtype, grad: bool) -> Args:
    """``vcrnn_train_forward``'s arguments: the input masked (V = D: x time-major, the scheduler's
    input terms only) or not (V = 3: P holds the GRU's input terms too, G = 1 + 3D)."""
    S, B, D = _S, _B, _D
    none = torch.empty(0, dtype=dtype)
    G = 1 if masked else 1 + 3 * D
    return (
        randn(S, B, G, dtype=dtype, grad=grad),
        randn(S, B, D, dtype=dtype, grad=grad) if masked else none,
        randn(B, D, dtype=dtype, grad=grad),
        randn(3 * D, D, dtype=dtype, grad=grad, scale=0.5),
        randn(D, dtype=dtype, grad=grad, scale=0.5),
        randn(3 * D, D, dtype=dtype, grad=grad, scale=0.5) if masked else none,
        randn(3 * D, dtype=dtype, grad=grad, scale=0.1) if masked else none,
        _LAM,
        _EPS,
        before,
    )


_FORMS = [(masked, before) for masked in (False, True) for before in (False, True)]


def cases_vcrnn_train_forward(dtype: torch.dtype) -> Iterator[Args]:
    for masked, before in _FORMS:
        yield _forward_inputs(masked, before, dtype, grad=True)


def cases_vcrnn_train_backward(dtype: torch.dtype) -> Iterator[Args]:
    for masked, before in _FORMS:
        P, xt, h0, whh, wh, wih, bias, lam, eps, before = _forward_inputs(
            masked, before, dtype, grad=False
        )
        out = torch.ops.condrnn.vcrnn_train_forward(P, xt, h0, whh, wh, wih, bias, lam, eps, before)
        hs, m, e, HB, A, X, EX = out
        grads = (torch.randn_like(hs), torch.randn_like(m))
        saved = (xt, h0, hs, m, e, HB, A, X, EX, whh, wh, wih)
        yield (*grads, *saved, lam, P.shape[2], before)
