"""Sample inputs of Skip RNN's inference op (baselines/ops/skip_rnn_infer.py), for opcheck: no
backward (inference only)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"skip_rnn_infer_sequence"}


def cases_skip_rnn_infer_sequence(dtype: torch.dtype) -> Iterator[Args]:
    """Three sequences (T = 8) of D = 5 units and V = 3 inputs, both GRU forms: ``x [B, T, V]``,
    ``h_0 [B, D]``, ``W_ih^T [V, 3D]``, ``W_hh^T`` gate by gate as column panels (flat; of 2
    columns, the last one narrower, and of 64, one a gate), the bias ``[3D]``, ``w_p [D]`` and
    ``b_p [1]``; ``w_p`` large enough that the sequences update at different steps."""
    B, T, V, D = 3, 8, 3, 5
    gen = torch.Generator().manual_seed(4)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, generator=gen) * scale

    for before, panel in ((False, 2), (True, 64)):
        b_p = torch.full((1,), -1.0, dtype=dtype)
        yield (
            randn(B, T, V),
            randn(B, D),
            randn(V, 3 * D, scale=0.5),
            randn(3 * D * D, scale=0.5),
            randn(3 * D, scale=0.5),
            randn(D, scale=2.0),
            b_p,
            panel,
            before,
        )
