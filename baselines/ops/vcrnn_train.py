"""VC-RNN's training forward over a whole sequence as one autograd node, in C++ (issue 54).

VC-RNN's scheduler reads the state, so its mask cannot be computed before the recurrence: a
training step is the scheduler's dot product and sigmoid, the soft mask and its threshold, the GRU
on ``e * h`` and the mix, some 25 small torch ops a step, and a training step at the paper sizes
is bound by their dispatch. Where the optional C++ kernel builds (``vcrnn_train_kernel``,
``csrc/vcrnn_train.cpp``, built, cached and switched off as ``baselines.ops.library`` does for its
kernels), ``vc_sequence`` runs all T steps of ``VCRNN._step``, forward and backward, in one call
each: both GRU forms, the input masked (V = D: ``W_i (e * x_t) + b`` a step, inside the kernel)
or not (the input terms of every step in one matmul before), any sharpness and eps. It returns
the states, the scheduler's ``m`` (differentiable: the L1 pull's gradient flows into the
recurrence) and the soft mask ``e`` (the update mask is ``e > 0``).

``VCRNN._step``'s loop is the reference, and the path in eval mode and wherever the kernel cannot
run (not CPU: one warning line, ``library.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit
(tests/test_kernel_vcrnn_train.py: values, masks, ``m`` and the gradients of every parameter, the
input and the initial state, in float64 and float32).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines.ops.library import TrainingKernel

# Its source is part of the code version of the method that trains with it (``method_code``).
vcrnn_train_kernel = TrainingKernel("vcrnn_train", "VC-RNN training")
vcrnn_train_kernel_status = vcrnn_train_kernel.status
sequence_kernel = vcrnn_train_kernel.for_tensors


def vc_sequence(
    kernel: Any,
    x: Tensor,
    h0: Tensor,
    weights: tuple[Tensor, ...],
    sharpness: float,
    eps: float,
    mask_input: bool,
    before: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """All T steps of ``VCRNN._step``: ``(hs [B, T, D], m [B, T], e [B, T, D])``.

    Args:
        kernel: ``sequence_kernel``'s.
        x: the input ``[B, T, V]``.
        h0: ``h_0 [B, D]``.
        weights: the scheduler's ``w_h [1, D]``, ``w_x [1, V]``, ``b [1]`` and the GRU's
            ``weight_ih [3D, V]``, ``weight_hh [3D, D]``, ``bias [3D]``.
        sharpness: lam of the soft mask.
        eps: the threshold of ``Thr_eps``.
        mask_input: whether the GRU reads ``e * x_t`` (V = D) instead of ``x_t``.
        before: the reset-before GRU form (else reset-after).
    """
    sched_h, sched_x, sched_b, weight_ih, weight_hh, bias = weights
    B, T, V = x.shape
    x_t = x.transpose(0, 1).reshape(T * B, V)  # time-major: a step's rows contiguous
    # The input terms of every step in one addmm on x transposed and a row-major copy of W^T, so
    # that W's gradient is x^T dP ([V, T B] [T B, G]): F.linear's values, its gradient summed in
    # another order (several times faster at few inputs than F.linear's dP^T x).
    if mask_input:  # only the scheduler's: the GRU's depend on e, inside the kernel
        weight, b = sched_x, sched_b
    else:
        weight, b = torch.cat([sched_x, weight_ih]), torch.cat([sched_b, bias])
    p = torch.addmm(b, x_t, weight.t().contiguous()).view(T, B, -1)  # [T, B, G]
    xs = x_t.view(T, B, V) if mask_input else _NONE
    hs, m, e = _VCSequence.apply(
        kernel, (float(sharpness), float(eps), before), p, xs, h0, weight_hh, sched_h,
        weight_ih if mask_input else _NONE, bias if mask_input else _NONE,
    )  # fmt: skip
    return hs, m, e


class _VCSequence(torch.autograd.Function):
    """``vc_sequence``'s node: the kernel's forward and the gradients of the input terms, x (input
    masked), h0, W_h, w_h and (input masked) W_i and b_i."""

    @staticmethod
    def forward(ctx, kernel, knobs, p, xs, h0, weight_hh, sched_h, weight_ih, bias):
        ctx.set_materialize_grads(False)
        sharpness, eps, before = knobs
        weight_hh, sched_h = weight_hh.contiguous(), sched_h.contiguous().view(-1)
        xs, weight_ih, bias = xs.contiguous(), weight_ih.contiguous(), bias.contiguous()
        hs, m, e, *saved = kernel.forward(
            p.contiguous(), xs, h0.contiguous(), weight_hh, sched_h, weight_ih, bias,
            sharpness, eps, before,
        )  # fmt: skip
        saved = [_NONE if s is None else s for s in saved]  # HB, A, X, EX
        ctx.kernel, ctx.knobs, ctx.G = kernel, knobs, p.shape[2]
        ctx.save_for_backward(xs, h0, hs, m, e, weight_hh, sched_h, weight_ih, *saved)
        ctx.mark_non_differentiable(e)
        return hs, m, e

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_m, _grad_e):
        xs, h0, hs, m, e, weight_hh, sched_h, weight_ih, HB, A, X, EX = ctx.saved_tensors
        grad_hs = torch.zeros_like(hs) if grad_hs is None else grad_hs.contiguous()
        grad_m = torch.zeros_like(m) if grad_m is None else grad_m.contiguous()
        sharpness, _, before = ctx.knobs
        d_p, d_xs, d_h0, d_whh, d_wh, d_wih, d_bias = ctx.kernel.backward(
            grad_hs, grad_m, xs, h0, hs, m, e, HB, A, X, EX, weight_hh, sched_h, weight_ih,
            sharpness, ctx.G, before,
        )  # fmt: skip
        masked = xs.numel() > 0
        d_xs, d_wih, d_bias = (d_xs, d_wih, d_bias) if masked else (None, None, None)
        return None, None, d_p, d_xs, d_h0, d_whh, d_wh.view(1, -1), d_wih, d_bias


_NONE = torch.empty(0)  # what the kernel takes and gives for a tensor it has not
