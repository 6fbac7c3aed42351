"""Delta GRU's training sequence in C++: the input scan, and the recurrence as one autograd
node (issue 54).

``DeltaGRU.forward`` finds the input side of the memories for the whole sequence in a few torch
ops, but its memorised steps come from a per-step scan, its state side runs a dozen small ops a
step (a training step at the paper sizes is bound by their dispatch) and the cumulative sum of
the projected deltas, forward and backward, passes over a ``[B, T, 3D]`` tensor several times.
Where the optional C++ kernel builds (``delta_gru_seq_kernel``, ``csrc/delta_gru_seq.cpp``,
built, cached and switched off as ``baselines.ops.library`` does for its kernels), the scan
(``memorised_steps``, the same steps exactly) runs in one call, and the recurrence
(``state_sequence``: the cumulative sum of the projected input deltas onto ``M_0``, then per
step the thresholded state deltas, the accumulated memories and the reset-after GRU gates) in
one call each way; the gather, the input deltas and their ``W_i`` projection stay the method's
sequence-wide torch ops.

The method's PyTorch path is the reference, and the path in eval mode and wherever the kernel
cannot run (not CPU: one warning line, ``library.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit
(tests/test_kernel_delta_gru_seq.py: outputs, reads, regulariser, final state and the gradients
of every parameter, the input and the initial state, in float64 and float32).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines.ops.library import TrainingKernel

# Its source is part of the code version of the method that trains with it (``method_code``).
delta_gru_seq_kernel = TrainingKernel("delta_gru_seq", "Delta GRU training")
delta_gru_seq_kernel_status = delta_gru_seq_kernel.status
sequence_kernel = delta_gru_seq_kernel.for_tensors


def memorised_steps(kernel: Any, x: Tensor, x_hat0: Tensor, theta_x: float) -> Tensor:
    """``DeltaGRU._memorised_steps`` in one call: ``[B, T, V]`` long, the same steps exactly."""
    return kernel.memorised_steps(x.detach().contiguous(), x_hat0.detach().contiguous(), theta_x)


def state_sequence(
    kernel: Any,
    proj: Tensor,
    m0: Tensor,
    h0: Tensor,
    h_hat0: Tensor,
    acc_h0: Tensor,
    weight_hh: Tensor,
    theta_h: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """All T steps of the recurrence: ``(hs, dhs, acc_x_T, h^_T, acc_h_T)``.

    Per step, the input side of the memories ``acc_x += proj_t`` (from ``M_0``: the method's
    cumulative sum, ``acc_x_t = b + W_i x^_t``), then ``DeltaGRU._state_step``.

    Args:
        kernel: ``sequence_kernel``'s.
        proj: the projected input deltas of every step, ``W_i dx_t``, ``[B, T, 3D]``.
        m0: the memory ``M_0 [B, 3D]`` (the bias at a fresh start).
        h0: ``h_0 [B, D]``.
        h_hat0: the state reference ``h^_0 [B, D]``.
        acc_h0: the state side of the memories ``[B, 3D]`` (r, z: 0 at a fresh start; n:
            ``M_nh,0``).
        weight_hh: ``W_h [3D, D]`` (gate order r, z, n).
        theta_h: the state delta threshold.

    Returns:
        The states ``hs [B, T, D]``, the thresholded state deltas ``dhs [B, T, D]`` (zero where
        cut), and after the last step the input side of the memories, the reference and the
        state side of the memories.
    """
    return _StateSequence.apply(kernel, theta_h, proj, m0, h0, h_hat0, acc_h0, weight_hh)


class _StateSequence(torch.autograd.Function):
    """``state_sequence``'s node: the kernel's forward and the gradients of proj, M_0, h_0, h^_0,
    acc_h_0 and W_h."""

    @staticmethod
    def forward(ctx, kernel, theta_h, proj, m0, h0, h_hat0, acc_h0, weight_hh):
        ctx.set_materialize_grads(False)
        h0, weight_hh = h0.contiguous(), weight_hh.contiguous()
        inputs = (proj.contiguous(), m0.contiguous(), h0, h_hat0.contiguous(), acc_h0.contiguous())
        hs, dhs, acc_x, h_hat, acc_h, *saved = kernel.forward(*inputs, weight_hh, theta_h)
        ctx.kernel = kernel
        ctx.save_for_backward(weight_hh, h0, hs, dhs, *saved)  # saved: A, N, K
        return hs, dhs, acc_x, h_hat, acc_h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_dhs, grad_acc_x, grad_h_hat, grad_acc):
        weight_hh, h0, hs, dhs, A, N, K = ctx.saved_tensors

        def given(grad: Tensor | None, like: Tensor) -> Tensor:
            return torch.zeros_like(like) if grad is None else grad.contiguous()

        d_proj, d_m0, d_h0, d_h_hat0, d_acc_h0, d_w = ctx.kernel.backward(
            given(grad_hs, hs),
            _NONE if grad_dhs is None else grad_dhs.contiguous(),  # none without a regulariser
            given(grad_acc_x, A[0]),
            given(grad_h_hat, h0),
            given(grad_acc, A[0]),
            weight_hh,
            h0,
            hs,
            dhs,
            A,
            N,
            K,
        )
        return None, None, d_proj, d_m0, d_h0, d_h_hat0, d_acc_h0, d_w


_NONE = torch.empty(0)  # what the kernel takes for a gradient that is not there
