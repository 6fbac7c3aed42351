"""Sample inputs of VC-RNN's inference op (baselines/ops/vcrnn.py), for opcheck."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"vcrnn_sequence"}  # inference only


def cases_vcrnn_sequence(dtype: torch.dtype) -> Iterator[Args]:
    """B = 1 and B = 3 sequences (T = 9) of D = 6 units, both GRU forms, the input masked
    (V = D) or not (V = 3): weights by input column ``hh [D, 3D + 16]`` and
    ``ih [V + 1, 3D + 16]`` (bias row last, padding after 3D columns; ``pack_vc_columns``), the
    scheduler's terms ``[B, T]``, ``xs = [x_t, 1]`` and the unit index 1..D; a soft band of a
    few units (sharpness 2; eps 1e-6 at B = 3: every soft value through ATen's sigmoid) and a
    scheduler that reads the state, so that k_t varies. Nothing requires grad: the op has no
    backward."""
    T, D = 9, 6
    for B, eps in ((1, 0.01), (3, 1e-6)):
        for masked in (False, True):
            V = D if masked else 3
            for before in (False, True):
                x = torch.randn(B, T, V, dtype=dtype)
                yield (
                    torch.randn(D, 3 * D + 16, dtype=dtype) * 0.5,
                    torch.randn(V + 1, 3 * D + 16, dtype=dtype) * 0.5,
                    torch.randn(D, dtype=dtype),
                    torch.randn(B, T, dtype=dtype),
                    torch.cat([x, torch.ones(B, T, 1, dtype=dtype)], -1),
                    torch.arange(1, D + 1, dtype=dtype),
                    2.0,
                    eps,
                    masked,
                    before,
                )
