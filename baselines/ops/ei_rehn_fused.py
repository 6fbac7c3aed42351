"""EI-REHN's whole training step as one autograd node, in C++ (docs/methods.md 2.14).

A step of ``EIREHN._train_forward`` is the local rate ``alpha_t = sigmoid(W_a [h; x] + b_a)``
(eq. 14), the elastic gate of every layer with its depth trace (``ElasticGate.trace``: eq. 11 in
the overflow-safe form of ``baselines._elastic._gate``, ``n``, the mask and ``R``) and the batch's
``max_b R_t`` highway layers (``stack_layers``). In Python that is about 40 torch ops and four
autograd nodes per step besides the layers, and a ``.item()`` to learn the depth. Where the optional
C++ kernel builds (``baselines.ops.ei_rehn_stack.ei_rehn_stack_kernel``, the same module as the
fused
layers), ``fused_step`` does all of it in one call, forward (``step_forward``) and backward
(``step_backward``: ``_ElasticGate.backward``, the rate's sigmoid and matmul, ``_Stack.backward``),
and returns the number of layers it ran. The gate's expm1, log and exp are ATen's vectorised ones on
whole ``[B, R_max, D]`` buffers, so its values round as the Python gate's do.

The Python step (``_ElasticGate``, ``_gate``, ``_Stack``) is the reference and the path wherever
the kernel cannot run (not CPU, not float32/64, not built, ``HARNESS_NO_KERNELS=1``): the fused
step equals it to float rounding, not bit for bit (tests/test_kernels.py, float64, values and
every gradient, the gate's edge cases included).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines.ops.ei_rehn_stack import ei_rehn_stack_kernel
from baselines.ops.library import none_if_empty


def step_kernel(*tensors: Tensor) -> Any:
    """The kernel where it can run a step on these tensors, else None
    (``TrainingKernel.for_tensors``)."""
    return ei_rehn_stack_kernel.for_tensors(*tensors)


def fused_step(
    kernel: Any,
    first: bool,
    p: Tensor,
    h: Tensor,
    rate_h: Tensor,
    alpha: Tensor,
    beta: Tensor,
    r_max: int,
    weights: tuple[Tensor, ...],
) -> tuple[Tensor, Tensor, Tensor, Tensor, int]:
    """One training step: ``(h_t, d^1, n, mask, layers)``.

    Args:
        kernel: ``step_kernel``'s.
        first: no layer has run yet in this sequence: run at least one (``_train_forward``).
        p: the step's input terms ``[W_a,x x_t + b_a; W_x x_t + b]`` ``[B, 3D]``.
        h: ``h_{t-1}`` ``[B, D]``.
        rate_h: ``W_a``'s columns on h, ``[D, D]``.
        alpha, beta: ``softplus(alpha_hat)``, ``sigmoid(beta_hat)`` ``[D]``.
        r_max: R_max.
        weights: ``stack_layers``'s ``weight0, bias, proj, mix_bias, hyper_weight, hyper_bias,
            init``.

    Returns:
        h_t; the gate of layer 1, ``d^1 [B, D]`` (with its gradient, for the compute penalty); the
        depth ``n`` and mask ``[B, D]`` (float, no gradient); the number of layers run,
        ``max(max_b R_t, first)``.
    """
    return _FusedStep.apply(kernel, first, r_max, p, h, rate_h, alpha, beta, *weights)


class _FusedStep(torch.autograd.Function):
    """``fused_step``'s node: the kernel's forward and its 12 gradients."""

    @staticmethod
    def forward(ctx, kernel, first, r_max, p, h, rate_h, alpha, beta, *weights):
        ctx.set_materialize_grads(False)
        weights = [w.contiguous() for w in weights]
        (h_t, d1, n, mask, *saved), layers = kernel.step_forward(
            p, h.contiguous(), rate_h, alpha.contiguous(), beta.contiguous(), *weights, r_max, first
        )
        w0, proj, hyper_weight = weights[0], weights[2], weights[4]
        ctx.kernel = kernel
        ctx.save_for_backward(rate_h, w0, proj, hyper_weight, *saved)
        ctx.mark_non_differentiable(n, mask)
        return h_t, d1, n, mask, layers

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h, grad_d1, _n, _mask, _layers):
        saved = ctx.saved_tensors
        if grad_h is None:
            grad_h = torch.zeros_like(saved[4])  # alpha_t's shape, [B, D]
        grads = ctx.kernel.step_backward(grad_h.contiguous(), grad_d1, *saved)
        return None, None, None, *map(none_if_empty, grads)
