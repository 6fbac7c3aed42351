"""SREHN's training forward over a whole sequence as one autograd node, in C++ (issue 54).

A step of ``SREHN._step`` at the fixed depth (the sequence forward's path) is the local rate
``alpha_t`` (eq. 14), the elastic gate of every layer with its depth trace
(``ElasticGate.trace``) and ``r_max`` shared-weight highway layers (``elastic_layers``): at HAR's
two layers ``harness bench`` counted 146 torch calls from Python and 458 ATen operators a training
step dispatches per time step, so a training step at the paper sizes is bound by their dispatch.
Where the optional C++ kernel builds (``srehn_kernel``, ``csrc/srehn.cpp``, built, cached and
switched off as ``baselines.ops.library`` does for its kernels), ``elastic_sequence`` runs all T
steps, forward and backward, in one call each: the same equations, the gate as EI-REHN's fused
step computes it (``_gate``'s ops, ATen's expm1, log and exp), the matmuls ATen's, the rest fused
loops over the B x D units. It returns every ``h_t``,
the gate of layer 1 ``d^1`` (with its gradient, for the compute penalty), the depth ``n`` and the
mask, ``[B, T, D]`` each. EI-REHN's kernel cannot run SREHN's layers (its layers read a
hypernetwork), hence this one.

SREHN's per-step PyTorch loop is the reference, and the path in eval mode and wherever the kernel
cannot run (not CPU: one warning line, ``library.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit (values and
the gradients of every parameter, the input and the initial state, d^1's mean and the compute
penalty; the mask and the depth exactly: tests/test_kernel_srehn.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines.ops.library import TrainingKernel, none_if_empty

# Its source is part of the code version of the method that trains with it (``method_code``).
srehn_kernel = TrainingKernel("srehn", "SREHN training")
srehn_kernel_status = srehn_kernel.status
sequence_kernel = srehn_kernel.for_tensors


def elastic_sequence(
    kernel: Any,
    p: Tensor,
    h0: Tensor,
    rate_h: Tensor,
    alpha: Tensor,
    beta: Tensor,
    weight: Tensor,
    bias: Tensor,
    r_max: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """All T steps of SREHN at depth ``r_max``: ``(hs, d1, n, mask)``, each ``[B, T, D]``; n and
    mask (float) carry no gradient.

    Args:
        kernel: ``sequence_kernel``'s.
        p: the input terms of every step ``[W_a,x x + b_a; W x + b]`` ``[B, T, 3D]``
            (``SREHN._input_terms``).
        h0: ``h_0 [B, D]``.
        rate_h: ``W_a``'s columns on h, ``[D, D]``.
        alpha, beta: ``softplus(alpha_hat)``, ``sigmoid(beta_hat)`` ``[D]`` (eqs. 13, 12).
        weight: the shared recurrent weight ``[2D, D]`` (rows s, tau); bias: its bias ``[2D]``
            (layers 2..r_max; layer 1's is in p).
        r_max: the layers a step runs.
    """
    return _ElasticSequence.apply(kernel, r_max, p, h0, rate_h, alpha, beta, weight, bias)


class _ElasticSequence(torch.autograd.Function):
    """``elastic_sequence``'s node: the kernel's forward and the gradients of its 7 tensors."""

    @staticmethod
    def forward(ctx, kernel, r_max, p, h0, rate_h, alpha, beta, weight, bias):
        ctx.set_materialize_grads(False)
        rate_h, weight = rate_h.contiguous(), weight.contiguous()
        args = (p, h0, rate_h, alpha, beta, weight, bias)
        hs, d1, n, mask, *saved = kernel.forward(*(t.contiguous() for t in args), r_max)
        ctx.kernel = kernel
        ctx.save_for_backward(rate_h, weight, *saved)
        ctx.mark_non_differentiable(n, mask)
        return hs, d1, n, mask

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_d1, _n, _mask):
        grads = ctx.kernel.backward(grad_hs, grad_d1, *ctx.saved_tensors)
        return None, None, *map(none_if_empty, grads)
