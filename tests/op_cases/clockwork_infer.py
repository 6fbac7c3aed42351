"""Sample inputs of the Clockwork RNN's inference op (baselines/ops/clockwork_infer.py), for
opcheck: no backward (inference only)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from baselines.ops.clockwork_infer import pack_modules

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"clockwork_infer_sequence"}


def cases_clockwork_infer_sequence(dtype: torch.dtype) -> Iterator[Args]:
    """Two sequences (T = 9) of D = 6 units in g = 3 modules of k = 2 and V = 3 inputs: the
    packed module operands (``pack_modules``), ``x [B, T, V]``, ``h_0 [B, D]`` and the number of
    active modules of each step, periods 1, 2, 4 (from 0 to all 3 modules: a step with none too);
    k = 1 (every unit a module); and g = 2 modules of k = 3 in panels of 2 columns (the last
    narrower)."""
    B, T, V = 2, 9, 3
    gen = torch.Generator().manual_seed(5)
    for D, k, panel in ((6, 2, 64), (3, 1, 64), (6, 3, 2)):
        w_hh = torch.randn(D, D, dtype=dtype, generator=gen) * 0.5
        w_ih = torch.randn(D, V, dtype=dtype, generator=gen) * 0.5
        bias = torch.randn(D, dtype=dtype, generator=gen) * 0.5
        t = torch.arange(T)
        active = (t[:, None] % torch.tensor([1, 2, 4])[: D // k] == 0).sum(1)
        active[3] = 0
        yield (
            pack_modules(w_hh, w_ih, bias, k, panel),
            torch.randn(B, T, V, dtype=dtype, generator=gen),
            torch.randn(B, D, dtype=dtype, generator=gen),
            active,
            k,
            panel,
        )
