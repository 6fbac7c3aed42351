"""Sample inputs of SA-RNN's batch-1 inference op (baselines/ops/sarnn.py), for opcheck: no
backward (inference only)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"sarnn_sequence"}

_SQ = {"T": 6, "V": 3, "D": 5}


def cases_sarnn_sequence(dtype: torch.dtype) -> Iterator[Args]:
    """Unit-major GRU rows ``hh [D, 3, D]``, ``ih [D, 3, V+1]`` (the input rows end in the bias),
    ``w_u [D]``, the coordinator's input terms ``coord [T, D]``, ``xs = [x_t, 1] [T, V+1]`` and
    ``h_0 [D]``, in both GRU forms: a mix of updates and skips."""
    T, V, D = _SQ["T"], _SQ["V"], _SQ["D"]
    gen = torch.Generator().manual_seed(3)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, generator=gen) * scale

    for before in (False, True):
        xs = torch.cat([randn(T, V), torch.ones(T, 1, dtype=dtype)], -1)
        hh, ih = randn(D, 3, D, scale=0.5), randn(D, 3, V + 1, scale=0.5)
        yield (hh, ih, randn(D), randn(T, D), xs, randn(D), 1.0, before)
