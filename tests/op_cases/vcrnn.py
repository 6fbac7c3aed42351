"""Sample inputs of VC-RNN's batch-1 inference op (baselines/ops/vcrnn.py), for opcheck."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"vcrnn_sequence"}  # inference only


def cases_vcrnn_sequence(dtype: torch.dtype) -> Iterator[Args]:
    """One sequence (T = 9) of D = 6 units, both GRU forms, the input masked (V = D) or not
    (V = 3): unit-major rows ``hh [D, 3, D]`` and ``ih [D, 3, V + 1]`` (bias last), the
    scheduler's terms, ``xs = [x_t, 1]`` and the unit index 1..D; a soft band of a few units
    (sharpness 2) and a scheduler that reads the state, so that k_t varies. Nothing requires
    grad: the op has no backward."""
    T, D = 9, 6
    for masked in (False, True):
        V = D if masked else 3
        for before in (False, True):
            xs = torch.cat([torch.randn(T, V, dtype=dtype), torch.ones(T, 1, dtype=dtype)], 1)
            yield (
                torch.randn(D, 3, D, dtype=dtype) * 0.5,
                torch.randn(D, 3, V + 1, dtype=dtype) * 0.5,
                torch.randn(D, dtype=dtype),
                torch.randn(T, dtype=dtype),
                xs,
                torch.arange(1, D + 1, dtype=dtype),
                2.0,
                0.01,
                masked,
                before,
            )
