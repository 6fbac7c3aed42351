"""EGRU's layer over a whole sequence as one autograd node, in C++ (issue 54).

EGRU's training forward (``baselines.egru.EGRU.forward``: the input terms of every step in one
matmul, then a step loop) runs about thirty small torch ops a step, and a training step at the
paper sizes is bound by their dispatch. Where the optional C++ kernel builds (``egru_kernel``,
``csrc/egru.cpp``, built, cached and switched off as ``baselines._kernels`` does for its kernels),
``egru_sequence`` runs all T steps of a layer, forward and backward, in one call each: the gates
z, r, g (reset after the product), the internal state ``c~``, the event ``o = H(c~ - theta)``,
the output ``y = o c~`` and the subtractive reset, with H's pseudo-derivative
``dampening * max(0, 1 - support |c~ - theta|)`` in the backward. It returns the events ``o``
with their gradient, so the event rate and the activity regulariser learn through them as on the
step loop. The arithmetic is dense: the event sparsity is the harness's cost model, not the
kernel's.

``EGRU.forward``'s step loop is the reference, and the path in eval mode and wherever the kernel
cannot run (not CPU: one warning line, ``_kernels.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit
(tests/test_kernel_egru.py: values, events and the gradients of every parameter, the input and the
initial state, in float64 and float32).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines._kernels import KernelStatus, _last, _load, _status, kernel_sources, on_cpu


# The loader is here, not in ``baselines._kernels`` (whose helpers it uses), so that the methods
# whose code version holds that module keep theirs.
def egru_kernel_status() -> KernelStatus:
    """The state of the EGRU training kernel, found without building or loading it."""
    return _status(egru_kernel, "egru")


@functools.lru_cache(maxsize=1)
def egru_kernel() -> Any:
    """The compiled kernel (``forward``, ``backward``: ``csrc/egru.cpp``), or None where it cannot
    be built (``baselines._kernels``: compiled on first use, cached, optional)."""
    mod, _last["egru"] = _load("egru", "EGRU training", "EGRU training")
    return mod


# Its source is part of EGRU's code version (``method_code``): the kernel runs in its training.
egru_kernel.kernel_source_files = functools.partial(kernel_sources, "egru")  # type: ignore[attr-defined]


def sequence_kernel(*tensors: Tensor) -> Any:
    """The kernel where it can run on these tensors (CPU, float32/64, one dtype), else None
    (also where it cannot be built or ``HARNESS_NO_KERNELS`` is set). It is built, or found
    built, at the first call, never at import; off the CPU the first call warns once."""
    if not on_cpu("the EGRU training kernel", *tensors):
        return None
    dtype = tensors[0].dtype
    if dtype not in (torch.float32, torch.float64) or any(t.dtype != dtype for t in tensors):
        return None
    return egru_kernel()


def input_terms(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``x W + b`` for every step, time-major, ``[B, T, V] -> [T, B, 3D]`` (a step's rows
    contiguous, as the kernel reads them): one ``addmm`` on ``x`` transposed, whose backward
    computes W's gradient as ``x^T dwx`` (the same values as ``forward``'s ``matmul``, the
    gradient summed in another order)."""
    B, T, V = x.shape
    return torch.addmm(bias, x.transpose(0, 1).reshape(T * B, V), weight).view(T, B, -1)


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
