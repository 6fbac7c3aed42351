"""SA-RNN's training step over a whole sequence in C++ (issue 54), forward and backward, as the
ops ``condrnn::sarnn_train_forward`` (its backward registered with it) and ``..._backward``.

SA-RNN's coordinator decides per unit and per step from the state (``u = 1[hsig_a(w_u * h + W_u x
+ b_u) > 0.5]``), so a training step is the coordinator, a dense GRU candidate and the mix
``h_t = lerp(h_{t-1}, h~_t, u_t)``: about twenty small torch ops a step, and a training step at
the paper sizes is bound by their dispatch. Where the optional C++ kernel builds
(``sarnn_train_kernel``, ``csrc/sarnn_train.cpp``, built, cached and switched off as
``baselines.ops.library`` does for its kernels), ``sarnn_sequence`` runs all T steps, forward and
backward, in one call each: the coordinator with its straight-through gradient through the hard
sigmoid (zero where clipped), the GRU candidate in either form (reset after or before the
matmul) and the mix. Its outputs are the states and the mask u; the mask's gradient (the budget
reads it) flows back through the same straight-through path.

``SARNN``'s per-step PyTorch loop is the reference, and the path in eval mode and wherever the
kernel cannot run (not CPU: one warning line, ``library.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit
(tests/test_kernel_sarnn_train.py: outputs, masks, budget and the gradients of every parameter,
the input and the initial state, in float64 and float32). csrc/sarnn.cpp, the batch-1 inference
kernel of ``SARNN.fast_forward``, is another kernel.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, autograd, fake, incoming

# Its source is part of the code version of the method that trains with it (``method_code``).
sarnn_train_kernel = Kernel("sarnn_train", "SA-RNN training")
sarnn_train_kernel_status = sarnn_train_kernel.status
sequence_kernel = sarnn_train_kernel.for_tensors


def sarnn_sequence(
    kernel: Any,
    xp: Tensor,
    h0: Tensor,
    weight_hh: Tensor,
    w_u: Tensor,
    slope: float,
    before: bool,
) -> tuple[Tensor, Tensor]:
    """All T steps of SA-RNN: ``(hs [B, T, D], u [B, T, D])``, the states and the update mask, by
    the op ``condrnn::sarnn_train_forward`` (its backward registered with it: the gradients of
    xp, h0, W and w_u).

    Args:
        kernel: ``sequence_kernel``'s.
        xp: the input terms of every step, ``[W_i x + b, W_u x + b_u]`` ``[B, T, 4D]``
            (``SARNN._input_proj`` with ``input_terms``).
        h0: ``h_0 [B, D]``.
        weight_hh: the GRU's recurrent weight ``[3D, D]`` (gate order r, z, n).
        w_u: the coordinator's recurrent weight ``[D]``.
        slope: the hard sigmoid's slope a (it sets where u's gradient flows and its scale).
        before: the reset-before GRU form (else reset after the matmul).
    """
    args = (xp.contiguous(), h0.contiguous(), weight_hh.contiguous(), w_u.contiguous())
    hs, u, *_saved = kernel.forward(*args, float(slope), bool(before))
    return hs, u


@fake("sarnn_train_forward")
def _forward_fake(xp, h0, weight, w_u, slope, before):
    B, S, _XD = xp.shape
    D = h0.shape[1]
    return [
        xp.new_empty(B, S, D),  # hs
        xp.new_empty(B, S, D),  # U: the mask
        xp.new_empty(S, B, 3 * D),  # A: the gate activations
        xp.new_empty(S, B, D),  # X: W_n h (after) or r h (before)
        xp.new_empty(S, B, D),  # P: where the clip passes u's gradient
    ]


@fake("sarnn_train_backward")
def _backward_fake(grad_hs, grad_u, weight, w_u, slope, h0, hs, U, A, X, P, before):
    S, B, GD = A.shape
    D = h0.shape[1]
    return [
        A.new_empty(B, S, 4 * D),  # xp
        A.new_empty(B, D),  # h0
        A.new_empty(GD, D),  # W
        A.new_empty(D),  # w_u
    ]


def _setup(ctx, inputs, output):
    _xp, h0, weight, w_u, slope, before = inputs
    hs, u, *saved = output  # A, X, P: what only the backward reads
    ctx.slope, ctx.before = slope, before
    ctx.save_for_backward(weight, w_u, h0, hs, u, *saved)
    ctx.mark_non_differentiable(*saved)
    ctx.set_materialize_grads(False)


def _backward(ctx, grads):
    grad_hs, grad_u = grads[0], grads[1]
    weight, w_u, h0, hs, u, A, X, P = ctx.saved_tensors
    grad_hs = incoming(grad_hs, hs)
    grad_u = incoming(grad_u, u)
    d_xp, d_h0, d_w, d_wu = torch.ops.condrnn.sarnn_train_backward(
        grad_hs, grad_u, weight, w_u, ctx.slope, h0, hs, u, A, X, P, ctx.before
    )
    return d_xp, d_h0, d_w, d_wu, None, None


autograd("sarnn_train_forward", _backward, _setup)
