"""SA-RNN's training step over a whole sequence as one autograd node, in C++ (issue 54).

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
from torch.autograd.function import once_differentiable

from baselines.ops.library import TrainingKernel

# Its source is part of the code version of the method that trains with it (``method_code``).
sarnn_train_kernel = TrainingKernel("sarnn_train", "SA-RNN training")
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
    """All T steps of SA-RNN: ``(hs [B, T, D], u [B, T, D])``, the states and the update mask.

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
    return _Sequence.apply(kernel, float(slope), bool(before), xp, h0, weight_hh, w_u)


class _Sequence(torch.autograd.Function):
    """``sarnn_sequence``'s node: the kernel's forward and the gradients of xp, h0, W, w_u."""

    @staticmethod
    def forward(ctx, kernel, slope, before, xp, h0, weight_hh, w_u):
        ctx.set_materialize_grads(False)
        weight_hh, w_u, h0 = weight_hh.contiguous(), w_u.contiguous(), h0.contiguous()
        hs, u, *saved = kernel.forward(xp.contiguous(), h0, weight_hh, w_u, slope, before)
        ctx.kernel, ctx.slope, ctx.before = kernel, slope, before
        ctx.save_for_backward(weight_hh, w_u, h0, hs, u, *saved)
        return hs, u

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_u):
        weight_hh, w_u, h0, hs, u, A, X, P = ctx.saved_tensors
        grad_hs = torch.zeros_like(hs) if grad_hs is None else grad_hs.contiguous()
        grad_u = torch.zeros_like(u) if grad_u is None else grad_u.contiguous()
        d_xp, d_h0, d_w, d_wu = ctx.kernel.backward(
            grad_hs, grad_u, weight_hh, w_u, ctx.slope, h0, hs, u, A, X, P, ctx.before
        )
        return None, None, None, d_xp, d_h0, d_w, d_wu
