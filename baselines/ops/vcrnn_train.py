"""VC-RNN's training forward over a whole sequence in C++ (issue 54), as the ops
``condrnn::vcrnn_train_forward`` (its backward registered with it) and ``..._backward``.

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
input and the initial state, in float64 and float32). On the meta device the op runs (its fake
implementation).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, autograd, fake, incoming, none_if_empty

# Its source is part of the code version of the method that trains with it (``method_code``).
vcrnn_train_kernel = Kernel("vcrnn_train", "VC-RNN training")
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
    """All T steps of ``VCRNN._step``: ``(hs [B, T, D], m [B, T], e [B, T, D])``, by the op
    ``condrnn::vcrnn_train_forward`` (its backward registered with it: the gradients of the input
    terms, x (input masked), h0, W_h, w_h and (input masked) W_i and b_i; e is not
    differentiable).

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
    none = x.new_empty(0)  # what the op takes for a tensor it has not
    if mask_input:
        xs, weight_ih, bias = x_t.view(T, B, V), weight_ih.contiguous(), bias.contiguous()
    else:
        xs, weight_ih, bias = none, none, none
    hs, m, e, *_saved = kernel.forward(
        p.contiguous(), xs, h0.contiguous(), weight_hh.contiguous(), sched_h.contiguous().view(-1),
        weight_ih, bias, float(sharpness), float(eps), bool(before),
    )  # fmt: skip
    return hs, m, e


@fake("vcrnn_train_forward")
def _forward_fake(P, xt, h0, whh, wh, wih, bias, lam, eps, before):
    S, B, _G = P.shape
    D = h0.shape[1]
    masked = xt.numel() > 0
    return [
        P.new_empty(B, S, D),  # hs
        P.new_empty(B, S),  # m
        P.new_empty(B, S, D),  # e: the soft mask
        P.new_empty(S, B, D),  # HB: e * h_{t-1}
        P.new_empty(S, B, 3 * D),  # A: r, z, n
        P.new_empty(S, B, D),  # X: W_n hb (after) or r * hb (before)
        P.new_empty(S, B, D) if masked else P.new_empty(0),  # EX: e * x_t
    ]


@fake("vcrnn_train_backward")
def _backward_fake(grad_hs, grad_m, xt, h0, hs, M, E, HB, A, X, EX, whh, wh, wih, lam, G, before):
    S, B = A.shape[0], A.shape[1]
    D = h0.shape[1]
    masked = xt.numel() > 0
    return [
        A.new_empty(S, B, G),  # P
        A.new_empty(S, B, D) if masked else A.new_empty(0),  # x
        A.new_empty(B, D),  # h0
        A.new_empty(3 * D, D),  # W_h
        A.new_empty(D),  # w_h
        A.new_empty(3 * D, D) if masked else A.new_empty(0),  # W_i
        A.new_empty(3 * D) if masked else A.new_empty(0),  # b_i
    ]


def _setup(ctx, inputs, output):
    P, xs, h0, weight_hh, sched_h, weight_ih, _bias, sharpness, _eps, before = inputs
    hs, m, e, *saved = output  # HB, A, X, EX: what only the backward reads
    ctx.knobs, ctx.G = (sharpness, before), P.shape[2]
    ctx.save_for_backward(xs, h0, hs, m, e, weight_hh, sched_h, weight_ih, *saved)
    ctx.mark_non_differentiable(e, *saved)
    ctx.set_materialize_grads(False)


def _backward(ctx, grads):
    g_hs, g_m = grads[0], grads[1]
    xs, h0, hs, m, e, weight_hh, sched_h, weight_ih, HB, A, X, EX = ctx.saved_tensors
    g_hs = incoming(g_hs, hs)
    g_m = incoming(g_m, m)
    sharpness, before = ctx.knobs
    d_p, d_xs, d_h0, d_whh, d_wh, d_wih, d_bias = torch.ops.condrnn.vcrnn_train_backward(
        g_hs, g_m, xs, h0, hs, m, e, HB, A, X, EX, weight_hh, sched_h, weight_ih, sharpness,
        ctx.G, before,
    )  # fmt: skip
    d_xs, d_wih, d_bias = none_if_empty(d_xs), none_if_empty(d_wih), none_if_empty(d_bias)
    return d_p, d_xs, d_h0, d_whh, d_wh, d_wih, d_bias, None, None, None


autograd("vcrnn_train_forward", _backward, _setup)
