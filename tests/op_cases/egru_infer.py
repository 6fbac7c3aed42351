"""Sample inputs of EGRU's inference op (baselines/ops/egru_infer.py), for opcheck: no backward
(inference only)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"egru_infer_sequence"}


def cases_egru_infer_sequence(dtype: torch.dtype) -> Iterator[Args]:
    """Two sequences (T = 7) of D = 5 units: the input terms ``wx [B, T, 3D]``, ``R [D, 3D]``,
    ``b' [3D]``, thresholds in [0.05, 0.3] (a mix of events and silence) or all 0, and a carried-in
    ``c_0`` and ``y_0`` (some units fired, some not)."""
    B, T, D = 2, 7, 5
    gen = torch.Generator().manual_seed(5)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, generator=gen) * scale

    for low in (False, True):
        thr = torch.zeros(D, dtype=dtype) if low else 0.05 + 0.25 * torch.rand(D, generator=gen)
        y0 = randn(B, D).clamp_min(0.0)  # events are positive; the others 0
        yield (
            randn(B, T, 3 * D),
            randn(D, 3 * D, scale=0.8),
            randn(3 * D, scale=0.3),
            thr.to(dtype),
            randn(B, D, scale=0.3),
            y0,
        )
