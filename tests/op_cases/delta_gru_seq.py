"""Sample inputs of Delta GRU's ops (baselines/ops/delta_gru_seq.py), for opcheck.

``condrnn::delta_gru_seq_memorised_steps`` is the input side's scan: it returns the step each
input reference was memorised at (int64), from inputs the method detaches, and no gradient flows
through it (the method gathers ``x^`` from those steps differentiably), so it has no backward.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"delta_gru_seq_memorised_steps"}

_SIZES = {"S": 5, "B": 3, "D": 4, "V": 3}
_THETAS = (0.3, 0.0, 1e4)  # some deltas cut, every one kept, every one cut


def _randn(*shape: int, dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


def cases_delta_gru_seq_memorised_steps(dtype: torch.dtype) -> Iterator[Args]:
    S, B, V = _SIZES["S"], _SIZES["B"], _SIZES["V"]
    for theta in (0.5, *_THETAS):
        yield _randn(B, S, V, dtype=dtype), _randn(B, V, dtype=dtype), theta


def _forward_inputs(dtype: torch.dtype, theta: float, grad: bool) -> Args:
    S, B, D = _SIZES["S"], _SIZES["B"], _SIZES["D"]
    h0 = _randn(B, D, dtype=dtype) * 0.5
    h_hat0 = torch.where(torch.arange(D) % 2 == 0, h0, 0.0)  # some deltas of exactly 0
    return (
        (_randn(B, S, 3 * D, dtype=dtype) * 0.5).requires_grad_(grad),  # proj
        _randn(B, 3 * D, dtype=dtype, grad=grad),  # M_0
        h0.requires_grad_(grad),
        h_hat0.requires_grad_(grad),
        _randn(B, 3 * D, dtype=dtype, grad=grad),  # acc_h_0
        (_randn(3 * D, D, dtype=dtype) * 0.5).requires_grad_(grad),  # W_h
        theta,
    )


def cases_delta_gru_seq_forward(dtype: torch.dtype) -> Iterator[Args]:
    for theta in _THETAS:
        yield _forward_inputs(dtype, theta, grad=True)


def cases_delta_gru_seq_backward(dtype: torch.dtype) -> Iterator[Args]:
    for theta in _THETAS:
        proj, m0, h0, h_hat0, acc_h0, weight, _ = _forward_inputs(dtype, theta, grad=False)
        op = torch.ops.condrnn.delta_gru_seq_forward
        hs, dhs, acc_x, h_hat, acc_h, A, N, K = op(proj, m0, h0, h_hat0, acc_h0, weight, theta)
        for grad_dhs in (torch.randn_like(dhs), torch.empty(0, dtype=dtype)):  # regulariser or not
            grads = (torch.randn_like(hs), grad_dhs, torch.randn_like(acc_x))
            grads += (torch.randn_like(h_hat), torch.randn_like(acc_h))
            yield (*grads, weight, h0, hs, dhs, A, N, K)
