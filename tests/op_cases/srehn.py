"""Sample inputs of SREHN's ops (baselines/ops/srehn.py), for opcheck."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

_SR = {"B": 3, "T": 4, "D": 5}
R_MAX = (1, 3)  # one layer: bias's gradient has no elements (None)


def _srehn_inputs(r_max: int, dtype: torch.dtype, grad: bool) -> Args:
    """p, h0, rate_h, alpha, beta, weight, bias, r_max: a gate whose depths vary among the units
    (alpha and beta as ``softplus(alpha_hat)``, ``sigmoid(beta_hat)`` of SREHN's tests)."""
    B, T, D = _SR["B"], _SR["T"], _SR["D"]
    g = torch.Generator().manual_seed(7 + r_max)

    def randn(*shape: int, scale: float = 0.7) -> torch.Tensor:
        return (torch.randn(*shape, dtype=dtype, generator=g) * scale).requires_grad_(grad)

    p = torch.randn(B, T, 3 * D, dtype=dtype, generator=g)
    p[..., :D] = p[..., :D] * 2 - 1  # the local rate's terms: alpha_t across (0, 1)
    alpha = torch.nn.functional.softplus(torch.empty(D, dtype=dtype).uniform_(-4, 0, generator=g))
    beta = torch.sigmoid(torch.randn(D, dtype=dtype, generator=g))
    return (
        p.requires_grad_(grad),
        randn(B, D),
        randn(D, D),
        alpha.requires_grad_(grad),
        beta.requires_grad_(grad),
        randn(2 * D, D),
        randn(2 * D),
        r_max,
    )


def cases_srehn_forward(dtype: torch.dtype) -> Iterator[Args]:
    for r_max in R_MAX:
        yield _srehn_inputs(r_max, dtype, grad=True)


def cases_srehn_backward(dtype: torch.dtype) -> Iterator[Args]:
    """Both incoming gradients, and each alone (the other None: ``Tensor?``)."""
    for r_max in R_MAX:
        args = _srehn_inputs(r_max, dtype, grad=False)
        hs, d1, _n, _mask, *saved = torch.ops.condrnn.srehn_forward(*args)
        rate_h, weight = args[2], args[5]
        g_hs, g_d1 = torch.randn_like(hs), torch.randn_like(d1)
        for grads in ((g_hs, g_d1), (g_hs, None), (None, g_d1)):
            yield (*grads, rate_h, weight, *saved)
