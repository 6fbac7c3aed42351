"""Sample inputs of Phased LSTM's time-gate ops (baselines/ops/phased_gate.py), for opcheck."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Args = tuple[Any, ...]

_KNOBS = (2.0, 1e-3)  # min_period, r_min


def _forward_inputs(dtype: torch.dtype, grad: bool, leak: float, times: bool) -> Args:
    """The timestamps ``tau [N, T]`` (float64: the clock's steps, or sample times, negative and
    fractional) and P, s and r_on ``[D]`` with a period and an open ratio each side of their
    clamps, the parameters requiring grad (tau never does: it has no gradient)."""
    N, T = 2, 7
    if times:
        tau = torch.rand(N, T, dtype=torch.float64).cumsum(1) * 7 - 20
    else:
        tau = (torch.tensor([0, 5])[:, None] + torch.arange(T)).double()
    period = torch.tensor([1.0, 2.0, 3.7, 17.0, 4.0], dtype=dtype)
    shift = torch.tensor([-4.25, 1e3, 0.5, 3.0, 0.0], dtype=dtype)
    r_on = torch.tensor([1e-4, 1.5, 1.0, 0.05, 0.5], dtype=dtype)
    params = tuple(p.requires_grad_(grad) for p in (period, shift, r_on))
    return (tau, *params, *_KNOBS, leak)


_CASES = [(1e-3, False), (0.0, True)]  # (leak, given sample times)


def cases_phased_gate_forward(dtype: torch.dtype) -> Iterator[Args]:
    for leak, times in _CASES:
        yield _forward_inputs(dtype, True, leak, times)


def cases_phased_gate_backward(dtype: torch.dtype) -> Iterator[Args]:
    for leak, times in _CASES:
        args = _forward_inputs(dtype, False, leak, times)
        k = torch.ops.condrnn.phased_gate_forward(*args)
        yield (torch.randn_like(k), *args)
