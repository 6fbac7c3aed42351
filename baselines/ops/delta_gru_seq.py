"""Delta GRU's training sequence in C++: the input scan, as the op
``condrnn::delta_gru_seq_memorised_steps``, and the recurrence as the op
``condrnn::delta_gru_seq_forward`` (its backward registered with it) and ``..._backward`` (issue
54).

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
of every parameter, the input and the initial state, in float64 and float32). On the meta device
the ops' fake implementations run.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, autograd, fake, incoming

# Its source is part of the code version of the method that trains with it (``method_code``).
delta_gru_seq_kernel = Kernel("delta_gru_seq", "Delta GRU training")
delta_gru_seq_kernel_status = delta_gru_seq_kernel.status
sequence_kernel = delta_gru_seq_kernel.for_tensors


def memorised_steps(kernel: Any, x: Tensor, x_hat0: Tensor, theta_x: float) -> Tensor:
    """``DeltaGRU._memorised_steps`` in one call, the op ``condrnn::delta_gru_seq_memorised_steps``:
    ``[B, T, V]`` long, the same steps exactly (no gradient: the method gathers ``x^`` from it
    differentiably)."""
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
    """All T steps of the recurrence: ``(hs, dhs, acc_x_T, h^_T, acc_h_T)``, by the op
    ``condrnn::delta_gru_seq_forward`` (its backward registered with it: the gradients of proj,
    M_0, h_0, h^_0, acc_h_0 and W_h).

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
    h0, weight_hh = h0.contiguous(), weight_hh.contiguous()
    inputs = (proj.contiguous(), m0.contiguous(), h0, h_hat0.contiguous(), acc_h0.contiguous())
    hs, dhs, acc_x, h_hat, acc_h, *_saved = kernel.forward(*inputs, weight_hh, theta_h)
    return hs, dhs, acc_x, h_hat, acc_h


@fake("delta_gru_seq_memorised_steps")
def _memorised_steps_fake(x, x_hat0, theta_x):
    return x.new_empty(x.shape, dtype=torch.long)


@fake("delta_gru_seq_forward")
def _forward_fake(proj, m0, h0, h_hat0, acc_h0, weight, theta_h):
    B, S, G = proj.shape
    D = h0.shape[1]
    return [
        proj.new_empty(B, S, D),  # hs
        proj.new_empty(B, S, D),  # dhs
        torch.empty_like(m0),  # acc_x_T
        torch.empty_like(h_hat0),  # h^_T
        torch.empty_like(acc_h0),  # acc_h_T
        proj.new_empty(S, B, G),  # A: the gates r, z, n
        proj.new_empty(S, B, D),  # N: acc_h[n] after the step's addmm
        proj.new_empty(S, B, D),  # K: the keep decisions
    ]


@fake("delta_gru_seq_backward")
def _backward_fake(
    grad_hs, grad_dhs, grad_acc_x, grad_h_hat, grad_acc, weight, h0, hs, dhs, A, N, K
):
    S, B, G = A.shape
    D = h0.shape[1]
    return [
        A.new_empty(B, S, G),  # proj's
        torch.empty_like(grad_acc_x),  # M_0's
        A.new_empty(B, D),  # h_0's
        torch.empty_like(grad_h_hat),  # h^_0's
        torch.empty_like(grad_acc),  # acc_h_0's
        A.new_empty(G, D),  # W_h's
    ]


def _setup(ctx, inputs, output):
    _proj, _m0, h0, _h_hat0, _acc_h0, weight, _theta_h = inputs
    hs, dhs, _acc_x, _h_hat, _acc_h, *saved = output  # A, N, K: what only the backward reads
    ctx.save_for_backward(weight, h0, hs, dhs, *saved)
    ctx.mark_non_differentiable(*saved)
    ctx.set_materialize_grads(False)


def _backward(ctx, grads):
    grad_hs, grad_dhs, grad_acc_x, grad_h_hat, grad_acc = grads[:5]
    weight, h0, hs, dhs, A, N, K = ctx.saved_tensors

    d_proj, d_m0, d_h0, d_h_hat0, d_acc_h0, d_w = torch.ops.condrnn.delta_gru_seq_backward(
        incoming(grad_hs, hs),
        hs.new_empty(0) if grad_dhs is None else grad_dhs.contiguous(),  # none: no regulariser
        incoming(grad_acc_x, A[0]),
        incoming(grad_h_hat, h0),
        incoming(grad_acc, A[0]),
        weight,
        h0,
        hs,
        dhs,
        A,
        N,
        K,
    )
    return d_proj, d_m0, d_h0, d_h_hat0, d_acc_h0, d_w, None


autograd("delta_gru_seq_forward", _backward, _setup)
