"""EGRU's layer over a whole sequence as one autograd node, in C++ (issue 54).

EGRU's training forward (``baselines.egru.EGRU.forward``: the input terms of every step in one
matmul, then a step loop) runs about thirty small torch ops a step, and a training step at the
paper sizes is bound by their dispatch. Where the optional C++ kernel builds (``egru_kernel``,
``csrc/egru.cpp``, built, cached and switched off as ``baselines.ops.library`` does for every
kernel),
``egru_sequence`` runs all T steps of a layer, forward and backward, in one call each: the gates
z, r, g (reset after the product), the internal state ``c~``, the event ``o = H(c~ - theta)``,
the output ``y = o c~`` and the subtractive reset, with H's pseudo-derivative
``dampening * max(0, 1 - support |c~ - theta|)`` in the backward. It returns the events ``o``
with their gradient, so the event rate and the activity regulariser learn through them as on the
step loop. The arithmetic is dense: the event sparsity is the harness's cost model, not the
kernel's.

``EGRU.forward``'s step loop is the reference, and the path in eval mode and wherever the kernel
cannot run (not CPU: one warning line, ``library.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit
(tests/test_kernel_egru.py: values, events and the gradients of every parameter, the input and the
initial state, in float64 and float32).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines.ops.library import TrainingKernel

# Its source is part of the code version of the method that trains with it (``method_code``).
egru_kernel = TrainingKernel("egru", "EGRU training")
egru_kernel_status = egru_kernel.status
sequence_kernel = egru_kernel.for_tensors


def egru_sequence(
    kernel: Any,
    wx: Tensor,
    state: tuple[Tensor, Tensor],
    recurrent_kernel: Tensor,
    recurrent_bias: Tensor,
    thr: Tensor,
    dampening: float,
    support: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """All T steps of an EGRU layer: ``(y [B, T, D], o [B, T, D], c_T [B, D])``.

    Args:
        kernel: ``sequence_kernel``'s.
        wx: the input terms of every step, ``x W + b``, time-major ``[T, B, 3D]``
            (``input_terms``; gate order z, r, g).
        state: ``(c_0, y_0)``, each ``[B, D]``.
        recurrent_kernel: ``R [D, 3D]``.
        recurrent_bias: ``b' [3D]``.
        thr: the thresholds ``theta [D]``.
        dampening: the pseudo-derivative's height.
        support: its inverse half-width.
    """
    c0, y0 = state
    return _EGRUSequence.apply(
        kernel, wx, c0, y0, recurrent_kernel, recurrent_bias, thr, dampening, support
    )


class _EGRUSequence(torch.autograd.Function):
    """``egru_sequence``'s node: the kernel's forward and the gradients of wx, c_0, y_0, R, b',
    theta."""

    @staticmethod
    def forward(ctx, kernel, wx, c0, y0, recurrent_kernel, recurrent_bias, thr, damp, supp):
        R, thr = recurrent_kernel.contiguous(), thr.contiguous()
        ys, os, c_last, *saved = kernel.forward(
            wx.contiguous(), c0.contiguous(), y0.contiguous(), R, recurrent_bias, thr
        )
        ctx.kernel, ctx.damp, ctx.supp = kernel, damp, supp
        ctx.save_for_backward(R, thr, *saved)  # Y, C, A, HG, CT
        return ys, os, c_last

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_ys, grad_os, grad_c):
        R, thr, *saved = ctx.saved_tensors
        grads = ctx.kernel.backward(
            grad_ys.contiguous(),
            grad_os.contiguous(),
            grad_c.contiguous(),
            R,
            thr,
            *saved,
            ctx.damp,
            ctx.supp,
        )
        return None, *grads, None, None
