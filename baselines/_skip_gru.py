"""Skip RNN's training sequence as one autograd node, in C++ (issue 54).

Skip-GRU's gate is a scalar per sequence and step computed from the candidate of the step before,
so its update mask is not known before the recurrence; a training step is the GRU candidate, the
p / P / u~ / u / C recurrences and two lerps: ~30 small torch ops a step, and a training step at
the paper sizes is bound by their dispatch. Where the optional C++ kernel builds
(``skip_gru_kernel``, ``csrc/skip_gru.cpp``, built, cached and switched off as
``baselines._kernels`` does for its kernels), ``skip_sequence`` runs all T steps of
``SkipRNN._step``, forward and backward, in one call each, in both GRU forms: the same graph,
straight-through gradients (of round, through u into the mask, h_t and C_t) and TF's Minimum
gradient included, so the gradients of the input terms, the initial state, W_hh, w_p and b_p are
the per-step path's.

The per-step PyTorch loop (``SkipRNN._step``) is the reference, and the path in eval mode and
wherever the kernel cannot run (not CPU: one warning line, ``_kernels.on_cpu``; not float32/64;
not built; ``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit
(tests/test_kernel_skip_gru.py: values, masks and the gradients of every parameter, the input and
the carried state, in float64 and float32).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines._kernels import KernelStatus, _last, _load, _status, kernel_sources, on_cpu

FORMS = {"after": 0, "before": 1}
"""The GRU forms of the kernel, by name: the index ``csrc/skip_gru.cpp`` takes."""


def skip_gru_kernel_status() -> KernelStatus:
    """The state of the Skip-GRU training kernel, found without building or loading it."""
    return _status(skip_gru_kernel, "skip_gru")


@functools.lru_cache(maxsize=1)
def skip_gru_kernel() -> Any:
    """The compiled kernel (``forward``, ``backward``: ``csrc/skip_gru.cpp``), or None where it
    cannot be built (``baselines._kernels``: compiled on first use, cached, optional)."""
    mod, _last["skip_gru"] = _load("skip_gru", "Skip-GRU training", "Skip-GRU training")
    return mod


# Its source is part of Skip RNN's code version (``method_code``).
skip_gru_kernel.kernel_source_files = functools.partial(  # type: ignore[attr-defined]
    kernel_sources, "skip_gru"
)


def sequence_kernel(*tensors: Tensor) -> Any:
    """The kernel where it can run on these tensors (CPU, float32/64, one dtype), else None
    (also where it cannot be built or ``HARNESS_NO_KERNELS`` is set). It is built, or found
    built, at the first call, never at import; off the CPU the first call warns once."""
    if not on_cpu("the Skip-GRU training kernel", *tensors):
        return None
    dtype = tensors[0].dtype
    if dtype not in (torch.float32, torch.float64) or any(t.dtype != dtype for t in tensors):
        return None
    return skip_gru_kernel()


def input_terms(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``W_i x + b`` for every step, time-major, ``[B, T, V] -> [T, B, 3D]`` (a step's rows
    contiguous, as the kernel reads them): ``GRUWeights.input_proj``'s values, as one ``addmm`` on
    ``x`` transposed, so that its backward reads the kernel's time-major gradient in place (no
    transposed copy of ``[T, B, 3D]``) and computes W_i's gradient as ``x^T dxp``, several times
    faster at few inputs than ``F.linear``'s ``dxp^T x`` (the same sums, in another order). The
    masked-cell kernel's ``input_terms``, not imported from there so that Skip RNN's code version
    holds no other kernel's source."""
    B, T, V = x.shape
    x_t = x.transpose(0, 1).reshape(T * B, V)
    return torch.addmm(bias, x_t, weight.t().contiguous()).view(T, B, -1)


def skip_sequence(
    kernel: Any,
    form: str,
    xp: Tensor,
    state: tuple[Tensor, Tensor, Tensor, Tensor, Tensor],
    weight_hh: Tensor,
    w_p: Tensor,
    b_p: Tensor,
) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor, Tensor, Tensor]]:
    """All T steps of ``SkipRNN._step``: ``(hs [B, T, D], mask [B, T, D], final state)``.

    Args:
        kernel: ``sequence_kernel``'s.
        form: a key of ``FORMS``.
        xp: the input terms of every step, ``W_i x + b``, time-major ``[T, B, 3D]``
            (``input_terms``).
        state: ``(h_0, h~_0, u_0, P_{-1}, C_0)`` as ``SkipRNN.init_state`` gives it.
        weight_hh: the recurrent weight ``[3D, D]`` (gate order r, z, n).
        w_p: the update-probability projection ``[1, D]``.
        b_p: its bias ``[1]``.
    """
    hs, mask, cand, up, cum = _SkipSequence.apply(
        kernel, FORMS[form], xp, *state, weight_hh, w_p, b_p
    )
    return hs, mask, (hs[:, -1], cand, mask[:, -1, :1], up, cum)


class _SkipSequence(torch.autograd.Function):
    """``skip_sequence``'s node: the kernel's forward and the gradients of xp, the initial state,
    W_hh, w_p and b_p."""

    @staticmethod
    def forward(ctx, kernel, form, xp, h, cand, u, up, cum, weight_hh, w_p, b_p):
        ctx.set_materialize_grads(False)
        args = [t.contiguous() for t in (xp, h, cand, u, up, cum, weight_hh, w_p, b_p)]
        hs, mask, cand_T, up_T, cum_T, *saved = kernel.forward(*args, form)  # H, N, A, X, Z
        ctx.kernel, ctx.form = kernel, form
        ctx.save_for_backward(args[3], args[4], args[6], args[7], *saved)
        return hs, mask, cand_T, up_T, cum_T

    @staticmethod
    @once_differentiable
    def backward(ctx, g_hs, g_mask, g_cand, g_up, g_cum):
        u, up, weight_hh, w_p, H, N, A, X, Z = ctx.saved_tensors
        B, T, D = H.shape[1], A.shape[0], H.shape[2]
        grads = [
            g.contiguous() if g is not None else H.new_zeros(shape)
            for g, shape in (
                (g_hs, (B, T, D)),
                (g_mask, (B, T, D)),
                (g_cand, (B, D)),
                (g_up, u.shape),
                (g_cum, u.shape),
            )
        ]
        d_xp, *rest = ctx.kernel.backward(*grads, u, up, weight_hh, w_p, H, N, A, X, Z, ctx.form)
        return None, None, d_xp, *rest
