"""SREHN's training forward over a whole sequence, in C++ (issue 54), as the ops
``condrnn::srehn_forward`` (its backward registered with it: one autograd node) and
``..._backward``.

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
cannot run (on CUDA: one warning line, ``library.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit (values and
the gradients of every parameter, the input and the initial state, d^1's mean and the compute
penalty; the mask and the depth exactly: tests/test_kernel_srehn.py). On the meta device, and
under FakeTensor, the ops' fake implementations run (the shapes ``csrc/srehn.cpp`` returns).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, autograd, fake, none_if_empty

# Its source is part of the code version of the method that trains with it (``method_code``).
srehn_kernel = Kernel("srehn", "SREHN training")
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
    """All T steps of SREHN at depth ``r_max``: ``(hs, d1, n, mask)``, each ``[B, T, D]``, by the
    op ``condrnn::srehn_forward`` (its backward registered with it: the gradients of p, h0, rate_h,
    alpha, beta, weight and bias); n and mask (float) carry no gradient.

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
    args = (p, h0, rate_h, alpha, beta, weight, bias)
    hs, d1, n, mask, *_saved = kernel.forward(*(t.contiguous() for t in args), r_max)
    return hs, d1, n, mask


@fake("srehn_forward")
def _forward_fake(p, h0, rate_h, alpha, beta, weight, bias, r_max):
    B, S = p.shape[0], p.shape[1]
    D = h0.shape[1]
    return [
        p.new_empty(B, S, D),  # hs
        p.new_empty(B, S, D),  # d1
        p.new_empty(B, S, D),  # n
        p.new_empty(B, S, D),  # mask
        p.new_empty(S, B, D),  # AT: alpha_t
        p.new_empty(S, B, r_max, D),  # DG: the gate d
        p.new_empty(S, B, r_max, D),  # MG: 1 - e^{-u}
        p.new_empty(S, B, r_max, D),  # EG: e^q
        p.new_empty(r_max, S, B, D),  # HIN: every layer's input
        p.new_empty(r_max, S, 2, B, D),  # SA: s, tau
    ]


@fake("srehn_backward")
def _backward_fake(grad_hs, grad_d1, rate_h, weight, AT, DG, MG, EG, HIN, SA):
    S, B, D = AT.shape
    r_max = DG.shape[2]
    return [
        AT.new_empty(B, S, 3 * D),  # p
        AT.new_empty(B, D),  # h0
        AT.new_empty(D, D),  # rate_h
        AT.new_empty(D),  # alpha
        AT.new_empty(D),  # beta
        AT.new_empty(2 * D, D),  # weight
        AT.new_empty(2 * D) if r_max > 1 else AT.new_empty(0),  # bias: layers 2..r_max only
    ]


def _setup(ctx, inputs, output):
    _p, _h0, rate_h, _alpha, _beta, weight, _bias, _r_max = inputs
    _hs, _d1, n, mask, *saved = output  # AT, DG, MG, EG, HIN, SA: what only the backward reads
    ctx.save_for_backward(rate_h, weight, *saved)
    ctx.mark_non_differentiable(n, mask, *saved)
    ctx.set_materialize_grads(False)


def _backward(ctx, grads):
    grad_hs, grad_d1 = grads[0], grads[1]
    d = torch.ops.condrnn.srehn_backward(grad_hs, grad_d1, *ctx.saved_tensors)
    return (*map(none_if_empty, d), None)


autograd("srehn_forward", _backward, _setup)
