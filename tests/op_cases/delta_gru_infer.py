"""Sample inputs of Delta GRU's inference op (baselines/ops/delta_gru_infer.py), for opcheck: no
backward (inference only)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"delta_gru_infer_sequence"}


def cases_delta_gru_infer_sequence(dtype: torch.dtype) -> Iterator[Args]:
    """Two sequences (T = 7) of V = 3 inputs and D = 5 units: the packed ``W_i^T [V, 3D]`` and
    ``W_h^T [D, 3D]``, a carried-in state (references, memories) and thresholds 0 (every changed
    column read) or a mix of read and cut deltas."""
    B, T, V, D = 2, 7, 3, 5
    gen = torch.Generator().manual_seed(4)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, generator=gen) * scale

    for theta_x, theta_h in ((0.0, 0.0), (0.7, 0.1)):
        acc_h0 = torch.cat([torch.zeros(B, 2 * D, dtype=dtype), randn(B, D, scale=0.1)], 1)
        yield (
            randn(B, T, V),
            randn(V, 3 * D, scale=0.5),
            randn(D, 3 * D, scale=0.5),
            randn(B, V),
            randn(B, D, scale=0.5),
            randn(B, D, scale=0.5),
            randn(B, 3 * D, scale=0.5),
            acc_h0,
            theta_x,
            theta_h,
        )
