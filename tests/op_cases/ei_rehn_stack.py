"""Sample inputs of EI-REHN's ops (baselines/ops/ei_rehn_stack.py), for opcheck: a step's layers
(``ei_rehn_stack_forward``) and the whole step (``ei_rehn_stack_step_forward``), whose layer count
L is data: the cases run L = 0, 1 (bias's gradient has no elements) and several."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

Args = tuple[Any, ...]

_EI = {"B": 3, "D": 5, "Dz": 4}
R_MAX = 4
LAYERS = (1, 3)  # the layers ``ei_rehn_stack_forward`` runs: one (bias's gradient: 0), several
STEPS = (("mixed", False), ("mixed", True), ("dead", False), ("dead", True))
"""The steps ``ei_rehn_stack_step_forward`` runs, (gate, first): "mixed" has various depths among
the units (L > 1), "dead" none (alpha = 1000: d = 0 at every layer), so L = 0, or 1 at first."""


def _weights(dtype: torch.dtype, grad: bool, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """weight0, bias, proj, mix_bias, hyper_weight, hyper_bias, init."""
    D, Dz = _EI["D"], _EI["Dz"]
    shapes = ((2 * D, D), (2 * D,), (4 * D, Dz), (2 * D,), (Dz, 2 * D + Dz), (Dz,), (2 * D + Dz,))
    return tuple(
        (torch.randn(*s, dtype=dtype, generator=g) * 0.5).requires_grad_(grad) for s in shapes
    )


def _stack_inputs(layers: int, dtype: torch.dtype, grad: bool) -> Args:
    """h, d (zeros among its values), bx and the weights."""
    B, D = _EI["B"], _EI["D"]
    g = torch.Generator().manual_seed(3 + layers)
    h = torch.randn(B, D, dtype=dtype, generator=g)
    d = torch.rand(B, layers, D, dtype=dtype, generator=g).sub(0.3).clamp(min=0)
    bx = torch.randn(B, 2 * D, dtype=dtype, generator=g)
    tensors = (t.requires_grad_(grad) for t in (h, d, bx))
    return (*tensors, *_weights(dtype, grad, g))


def cases_ei_rehn_stack_forward(dtype: torch.dtype) -> Iterator[Args]:
    for layers in LAYERS:
        yield _stack_inputs(layers, dtype, grad=True)


def cases_ei_rehn_stack_backward(dtype: torch.dtype) -> Iterator[Args]:
    for layers in LAYERS:
        args = _stack_inputs(layers, dtype, grad=False)
        h_t, *saved = torch.ops.condrnn.ei_rehn_stack_forward(*args)
        d, weight0, proj, hyper_weight = args[1], args[3], args[5], args[7]
        yield (torch.randn_like(h_t), d, weight0, proj, hyper_weight, *saved)


def _step_inputs(gate: str, first: bool, dtype: torch.dtype, grad: bool) -> Args:
    """p, h, rate_h, alpha, beta, the weights, r_max, first."""
    B, D = _EI["B"], _EI["D"]
    g = torch.Generator().manual_seed(5)
    p = torch.randn(B, 3 * D, dtype=dtype, generator=g)
    h = torch.randn(B, D, dtype=dtype, generator=g)
    rate_h = torch.randn(D, D, dtype=dtype, generator=g) * 0.5
    alpha_hat = torch.empty(D, dtype=dtype).uniform_(-4, 0, generator=g)
    if gate == "dead":
        alpha_hat.fill_(1000.0)
    alpha, beta = F.softplus(alpha_hat), torch.sigmoid(torch.randn(D, dtype=dtype, generator=g))
    tensors = (t.requires_grad_(grad) for t in (p, h, rate_h, alpha, beta))
    return (*tensors, *_weights(dtype, grad, g), R_MAX, first)


def cases_ei_rehn_stack_step_forward(dtype: torch.dtype) -> Iterator[Args]:
    for gate, first in STEPS:
        yield _step_inputs(gate, first, dtype, grad=True)


def cases_ei_rehn_stack_step_backward(dtype: torch.dtype) -> Iterator[Args]:
    """Both incoming gradients, and h_t's alone (d^1's None: ``Tensor?``)."""
    for gate, first in STEPS:
        args = _step_inputs(gate, first, dtype, grad=False)
        (h_t, d1, _n, _mask, *saved), _layers = torch.ops.condrnn.ei_rehn_stack_step_forward(*args)
        rate_h, weight0, proj, hyper_weight = args[2], args[5], args[7], args[9]
        for grad_d1 in (torch.randn_like(d1), None):
            yield (torch.randn_like(h_t), grad_d1, rate_h, weight0, proj, hyper_weight, *saved)
