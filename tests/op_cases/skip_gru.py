"""Sample inputs of Skip RNN's ops (baselines/ops/skip_gru.py), for opcheck."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from baselines.ops.skip_gru import FORMS

Args = tuple[Any, ...]

_SG = {"S": 5, "B": 3, "D": 4}


def _skip_gru_inputs(form: str, carried: bool, dtype: torch.dtype, grad: bool) -> Args:
    """The inputs of ``skip_gru_forward``: the initial state ``SkipRNN.init_state`` gives, or a
    state carried over from a window before (u_0 = 1, P and C between 0 and 1), where the gate
    projection ``w_p`` (scaled up) makes the updates and skips vary."""
    S, B, D = _SG["S"], _SG["B"], _SG["D"]
    gen = torch.Generator().manual_seed(7)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, dtype=dtype, generator=gen) * scale).requires_grad_(grad)

    h0, n0 = randn(B, D), randn(B, D)
    if carried:
        u0 = torch.ones(B, 1, dtype=dtype)
        up0 = torch.rand(B, 1, dtype=dtype, generator=gen)
        c0 = torch.rand(B, 1, dtype=dtype, generator=gen) * 0.5
    else:
        u0, up0 = torch.zeros(B, 1, dtype=dtype), torch.ones(B, 1, dtype=dtype)
        c0 = torch.zeros(B, 1, dtype=dtype)
    state = [t.requires_grad_(grad) for t in (u0, up0, c0)]
    weight, w_p, b_p = randn(3 * D, D, scale=0.5), randn(1, D, scale=2.0), randn(1)
    return (randn(S, B, 3 * D), h0, n0, *state, weight, w_p, b_p, FORMS[form])


def cases_skip_gru_forward(dtype: torch.dtype) -> Iterator[Args]:
    for form in FORMS:
        for carried in (False, True):
            yield _skip_gru_inputs(form, carried, dtype, grad=True)


def cases_skip_gru_backward(dtype: torch.dtype) -> Iterator[Args]:
    for form in FORMS:
        for carried in (False, True):
            args = _skip_gru_inputs(form, carried, dtype, grad=False)
            _xp, _h0, _n0, u0, up0, _c0, weight, w_p, _b_p, code = args
            hs, mask, cand, up, cum, H, N, A, X, Z = torch.ops.condrnn.skip_gru_forward(*args)
            grads = [torch.randn_like(t) for t in (hs, mask, cand, up, cum)]
            yield (*grads, u0, up0, weight, w_p, H, N, A, X, Z, code)
