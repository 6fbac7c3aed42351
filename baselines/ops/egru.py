"""EGRU's layer over a whole sequence in C++, as the op ``condrnn::egru_forward`` (its backward
registered with it) and ``..._backward`` (issue 54).

EGRU's training forward (``baselines.egru.EGRU.forward``: the input terms of every step in one
matmul, then a step loop) runs about thirty small torch ops a step, and a training step at the
paper sizes is bound by their dispatch. Where the optional C++ kernel builds (``egru_kernel``,
``csrc/egru.cpp``, built, cached and switched off as ``baselines.ops.library`` does for every
kernel), ``egru_sequence`` runs all T steps of a layer, forward and backward, in one call each:
the gates z, r, g (reset after the product), the internal state ``c~``, the event
``o = H(c~ - theta)``, the output ``y = o c~`` and the subtractive reset, with H's
pseudo-derivative ``dampening * max(0, 1 - support |c~ - theta|)`` in the backward (the forward
op takes dampening and support for it). It returns the events ``o`` with their gradient, so the
event rate and the activity regulariser learn through them as on the step loop. The arithmetic
is dense: the event sparsity is the harness's cost model, not the kernel's.

``EGRU.forward``'s step loop is the reference, and the path in eval mode and wherever the kernel
cannot run (not CPU: one warning line, ``library.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit
(tests/test_kernel_egru.py: values, events and the gradients of every parameter, the input and the
initial state, in float64 and float32). On the meta device the ops' fake implementations run.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, autograd, fake, incoming

# Its source is part of the code version of the method that trains with it (``method_code``).
egru_kernel = Kernel("egru", "EGRU training")
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
    """All T steps of an EGRU layer: ``(y [B, T, D], o [B, T, D], c_T [B, D])``, by the op
    ``condrnn::egru_forward`` (its backward registered with it: the gradients of wx, c_0, y_0, R,
    b' and theta).

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
    ys, os, c_T, *_saved = kernel.forward(
        wx.contiguous(),
        c0.contiguous(),
        y0.contiguous(),
        recurrent_kernel.contiguous(),
        recurrent_bias,
        thr.contiguous(),
        dampening,
        support,
    )
    return ys, os, c_T


@fake("egru_forward")
def _forward_fake(wx, c0, y0, R, rbias, thr, dampening, support):
    S, B, G = wx.shape
    D = c0.shape[1]
    return [
        wx.new_empty(B, S, D),  # ys
        wx.new_empty(B, S, D),  # os
        wx.new_empty(B, D),  # c_T
        wx.new_empty(S + 1, B, D),  # Y: the events, Y[0] = y_0
        wx.new_empty(S + 1, B, D),  # C: the internal states after the reset
        wx.new_empty(S, B, G),  # A: the gates z, r, g
        wx.new_empty(S, B, D),  # HG: the reset gate's operand
        wx.new_empty(S, B, D),  # CT: c~
    ]


@fake("egru_backward")
def _backward_fake(gys, gos, gc, R, thr, Y, C, A, HG, CT, dampening, support):
    S, B, G = A.shape
    D = HG.shape[2]
    return [
        A.new_empty(S, B, G),  # wx's
        torch.empty_like(gc),  # c_0's
        A.new_empty(B, D),  # y_0's
        A.new_empty(D, G),  # R's
        A.new_empty(G),  # b''s
        A.new_empty(D),  # theta's
    ]


def _setup(ctx, inputs, output):
    _wx, _c0, _y0, R, _rbias, thr, dampening, support = inputs
    _ys, _os, _c_T, *saved = output  # Y, C, A, HG, CT: what only the backward reads
    ctx.dampening, ctx.support = dampening, support
    ctx.save_for_backward(R, thr, *saved)
    ctx.mark_non_differentiable(*saved)
    ctx.set_materialize_grads(False)


def _backward(ctx, grads):
    grad_ys, grad_os, grad_c = grads[0], grads[1], grads[2]
    R, thr, Y, C, A, HG, CT = ctx.saved_tensors
    S, B, D = HG.shape

    d_wx, d_c0, d_y0, d_R, d_rbias, d_thr = torch.ops.condrnn.egru_backward(
        incoming(grad_ys, HG, B, S, D),
        incoming(grad_os, HG, B, S, D),
        incoming(grad_c, HG, B, D),
        R,
        thr,
        Y,
        C,
        A,
        HG,
        CT,
        ctx.dampening,
        ctx.support,
    )
    return d_wx, d_c0, d_y0, d_R, d_rbias, d_thr, None, None


autograd("egru_forward", _backward, _setup)
