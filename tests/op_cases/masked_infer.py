"""Sample inputs of the masked cells' inference op (baselines/ops/masked_infer.py), for opcheck:
no backward (inference only)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from baselines.ops.masked_infer import pack_rows

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"masked_infer_sequence"}


def cases_masked_infer_sequence(dtype: torch.dtype) -> Iterator[Args]:
    """D = 5 units, V = 3 inputs, T = 6 steps: the packed rows of a GRU (both forms) and an LSTM,
    random states, and gates of zeros, ones and values between (per sequence at B 1 and 3, the
    union of the batch's at B 3, one shared by a batch of 2 and of 12: the GEMM's path)."""
    T, V, D = 6, 3, 5
    gen = torch.Generator().manual_seed(4)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, generator=gen) * scale

    def gate(rows: int) -> torch.Tensor:
        u = torch.rand(rows, T, D, dtype=dtype, generator=gen)
        return torch.where(u < 0.5, 0.0, torch.where(u < 0.8, 1.0, u)).to(dtype)

    for G, before in ((3, False), (3, True), (4, False)):
        w = pack_rows(randn(G * D, V, scale=0.5), randn(G * D, D, scale=0.5), randn(G * D))
        for B, rows, per_sequence in ((1, 1, True), (3, 3, True), (3, 3, False), (2, 1, True)):
            c0 = randn(B, D) if G == 4 else torch.empty(0, dtype=dtype)
            yield (w, randn(B, T, V), randn(B, D), c0, gate(rows), per_sequence, before)
        if not before:
            c0 = randn(12, D) if G == 4 else torch.empty(0, dtype=dtype)
            yield (w, randn(12, T, V), randn(12, D), c0, gate(1), True, before)
