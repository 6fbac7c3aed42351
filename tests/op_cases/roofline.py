"""Sample inputs of the machine-measure ops (baselines/ops/roofline.py), for opcheck: no backward
(they measure the machine, no method runs them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

import baselines.ops.roofline  # noqa: F401  (no method imports it: its fake implementations)

Args = tuple[Any, ...]

NOT_DIFFERENTIABLE = {"roofline_triad", "roofline_product", "roofline_empty_loop"}


def cases_roofline_triad(dtype: torch.dtype) -> Iterator[Args]:
    """``b``, ``c`` of one shape (a vector, a non-contiguous matrix), a scale, 1 or 3 passes."""
    gen = torch.Generator().manual_seed(5)
    b, c = (torch.randn(37, dtype=dtype, generator=gen) for _ in range(2))
    yield (b, c, 2.5, 1)
    m = torch.randn(6, 4, dtype=dtype, generator=gen)
    yield (m.t(), torch.randn(4, 6, dtype=dtype, generator=gen), -0.5, 3)


def cases_roofline_product(dtype: torch.dtype) -> Iterator[Args]:
    """``w [5, 4]`` by a vector and by a batch of 3, 1 and 2 times."""
    gen = torch.Generator().manual_seed(6)
    w = torch.randn(5, 4, dtype=dtype, generator=gen)
    yield (w, torch.randn(4, dtype=dtype, generator=gen), 1)
    yield (w, torch.randn(3, 4, dtype=dtype, generator=gen), 2)


def cases_roofline_empty_loop(dtype: torch.dtype) -> Iterator[Args]:
    """More steps than ``x`` has values (it wraps around), fewer, and none."""
    x = torch.arange(5, dtype=dtype)
    for steps in (12, 3, 0):
        yield (x, steps)
