"""Delta GRU's training sequence in C++: the input scan and the state side as one autograd node
(issue 54).

``DeltaGRU.forward`` finds the input side of the memories for the whole sequence in a few torch
ops, but its memorised steps come from a per-step scan and its state side runs a dozen small
ops a step: a training step at the paper sizes is bound by their dispatch. Where the optional
C++ kernel builds (``delta_gru_seq_kernel``, ``csrc/delta_gru_seq.cpp``, built, cached and
switched off as ``baselines._kernels`` does for its kernels), the scan (``memorised_steps``, the
same steps exactly) and all T steps of the state side (``state_sequence``: thresholded state
deltas, accumulated memories, reset-after GRU gates), forward and backward, run in one call
each; the input side between them (gather, deltas, ``W_i`` projection, cumulative sum) stays
the method's sequence-wide torch ops.

The method's PyTorch path is the reference, and the path in eval mode and wherever the kernel
cannot run (not CPU: one warning line, ``_kernels.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit
(tests/test_kernel_delta_gru_seq.py: outputs, reads, regulariser, final state and the gradients
of every parameter, the input and the initial state, in float64 and float32).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines._kernels import KernelStatus, _last, _load, _status, kernel_sources, on_cpu


# The loader is here, not in ``baselines._kernels``, so that the methods whose code version holds
# that module (SA-RNN, VC-RNN, EI-REHN) keep theirs.
def delta_gru_seq_kernel_status() -> KernelStatus:
    """The state of the Delta GRU training kernel, found without building or loading it."""
    return _status(delta_gru_seq_kernel, "delta_gru_seq")


@functools.lru_cache(maxsize=1)
def delta_gru_seq_kernel() -> Any:
    """The compiled kernel (``memorised_steps``, ``forward``, ``backward``:
    ``csrc/delta_gru_seq.cpp``), or None where it cannot be built (``baselines._kernels``:
    compiled on first use, cached, optional)."""
    mod, _last["delta_gru_seq"] = _load("delta_gru_seq", "Delta GRU training", "Delta GRU training")
    return mod


# Its source is part of Delta GRU's code version (``method_code``).
delta_gru_seq_kernel.kernel_source_files = functools.partial(  # type: ignore[attr-defined]
    kernel_sources, "delta_gru_seq"
)


def sequence_kernel(*tensors: Tensor) -> Any:
    """The kernel where it can run on these tensors (CPU, float32/64, one dtype), else None
    (also where it cannot be built or ``HARNESS_NO_KERNELS`` is set). It is built, or found
    built, at the first call, never at import; off the CPU the first call warns once."""
    if not on_cpu("the Delta GRU training kernel", *tensors):
        return None
    dtype = tensors[0].dtype
    if dtype not in (torch.float32, torch.float64) or any(t.dtype != dtype for t in tensors):
        return None
    return delta_gru_seq_kernel()


def memorised_steps(kernel: Any, x: Tensor, x_hat0: Tensor, theta_x: float) -> Tensor:
    """``DeltaGRU._memorised_steps`` in one call: ``[B, T, V]`` long, the same steps exactly."""
    return kernel.memorised_steps(x.detach().contiguous(), x_hat0.detach().contiguous(), theta_x)


def state_sequence(
    kernel: Any,
    acc_x: Tensor,
    h0: Tensor,
    h_hat0: Tensor,
    acc_h0: Tensor,
    weight_hh: Tensor,
    theta_h: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """All T steps of ``DeltaGRU._state_step``: ``(hs, dhs, h^_T, acc_h_T)``.

    Args:
        kernel: ``sequence_kernel``'s.
        acc_x: the input side of the memories of every step, ``b + W_i x^_t``, ``[B, T, 3D]``.
        h0: ``h_0 [B, D]``.
        h_hat0: the state reference ``h^_0 [B, D]``.
        acc_h0: the state side of the memories ``[B, 3D]`` (r, z: 0 at a fresh start; n:
            ``M_nh,0``).
        weight_hh: ``W_h [3D, D]`` (gate order r, z, n).
        theta_h: the state delta threshold.

    Returns:
        The states ``hs [B, T, D]``, the thresholded state deltas ``dhs [B, T, D]`` (zero where
        cut), the reference and the state side of the memories after the last step.
    """
    return _StateSequence.apply(kernel, theta_h, acc_x, h0, h_hat0, acc_h0, weight_hh)


class _StateSequence(torch.autograd.Function):
    """``state_sequence``'s node: the kernel's forward and the gradients of acc_x, h_0, h^_0,
    acc_h_0 and W_h."""

    @staticmethod
    def forward(ctx, kernel, theta_h, acc_x, h0, h_hat0, acc_h0, weight_hh):
        ctx.set_materialize_grads(False)
        h0, weight_hh = h0.contiguous(), weight_hh.contiguous()
        hs, dhs, h_hat, acc_h, *saved = kernel.forward(
            acc_x.contiguous(), h0, h_hat0.contiguous(), acc_h0.contiguous(), weight_hh, theta_h
        )
        ctx.kernel = kernel
        ctx.save_for_backward(weight_hh, h0, hs, dhs, *saved)  # saved: A, N, K
        return hs, dhs, h_hat, acc_h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_dhs, grad_h_hat, grad_acc):
        weight_hh, h0, hs, dhs, A, N, K = ctx.saved_tensors

        def given(grad: Tensor | None, like: Tensor) -> Tensor:
            return torch.zeros_like(like) if grad is None else grad.contiguous()

        d_acc_x, d_h0, d_h_hat0, d_acc_h0, d_w = ctx.kernel.backward(
            given(grad_hs, hs),
            given(grad_dhs, dhs),
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
        return None, None, d_acc_x, d_h0, d_h_hat0, d_acc_h0, d_w
