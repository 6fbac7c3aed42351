"""Sample inputs of the elastic highway methods' inference ops (baselines/ops/highway_infer.py),
for opcheck: no backward (inference only)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"highway_infer_ei_rehn", "highway_infer_srehn"}

_SQ = {"T": 5, "B": 2, "D": 4, "Dz": 2, "R": 3}


def _gen(dtype: torch.dtype):
    gen = torch.Generator().manual_seed(5)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, generator=gen) * scale

    return randn


def _gate(randn, T: int, B: int, D: int) -> tuple[torch.Tensor, ...]:
    """The input terms ``p [T, B, 3D]`` (the local rate's near -2: a mix of depths), ``h_0``,
    ``W_a,h^T``, alpha and beta at the methods' initial values."""
    p = randn(T, B, 3 * D)
    p[..., :D] -= 2.0
    alpha = torch.nn.functional.softplus(torch.full((D,), -3.0, dtype=p.dtype))
    beta = torch.sigmoid(torch.full((D,), 3.0, dtype=p.dtype))
    return p, randn(B, D), randn(D, D, scale=0.5), alpha, beta


def cases_highway_infer_ei_rehn(dtype: torch.dtype) -> Iterator[Args]:
    """EI-REHN's weights as the op takes them (transposed: ``W^0`` ``[D, 2D]``, ``P`` ``[Dz, 4D]``,
    the hypernetwork ``[2D + Dz, Dz]``), at R_max 3."""
    T, B, D, Dz, R = (_SQ[k] for k in ("T", "B", "D", "Dz", "R"))
    randn = _gen(dtype)
    p, h0, rate_t, alpha, beta = _gate(randn, T, B, D)
    yield (
        p, h0, rate_t, alpha, beta, randn(D, 2 * D, scale=0.5), randn(2 * D),
        randn(Dz, 4 * D, scale=0.5), randn(2 * D), randn(2 * D + Dz, Dz, scale=0.5), randn(Dz),
        randn(2 * D + Dz), R,
    )  # fmt: skip


def cases_highway_infer_srehn(dtype: torch.dtype) -> Iterator[Args]:
    """SREHN's shared weight unit-major ``[2D, D]`` and bias ``[2D]``, at R_max 3."""
    T, B, D, R = (_SQ[k] for k in ("T", "B", "D", "R"))
    randn = _gen(dtype)
    p, h0, rate_t, alpha, beta = _gate(randn, T, B, D)
    yield (p, h0, rate_t, alpha, beta, randn(2 * D, D, scale=0.5), randn(2 * D), R)
