"""Skip RNN's training sequence as one autograd node, in C++ (issue 54).

Skip-GRU's gate is a scalar per sequence and step computed from the candidate of the step before,
so its update mask is not known before the recurrence; a training step is the GRU candidate, the
p / P / u~ / u / C recurrences and two lerps: ~30 small torch ops a step, and a training step at
the paper sizes is bound by their dispatch. Where the optional C++ kernel builds
(``skip_gru_kernel``, ``csrc/skip_gru.cpp``, built, cached and switched off as
``baselines.ops.library`` does for its kernels), ``skip_sequence`` runs all T steps of
``SkipRNN._step``, forward and backward, in one call each, in both GRU forms: the same graph,
straight-through gradients (of round, through u into the mask, h_t and C_t) and TF's Minimum
gradient included, so the gradients of the input terms, the initial state, W_hh, w_p and b_p are
the per-step path's.

The per-step PyTorch loop (``SkipRNN._step``) is the reference, and the path in eval mode and
wherever the kernel cannot run (not CPU: one warning line, ``library.on_cpu``; not float32/64;
not built; ``HARNESS_NO_KERNELS=1``): the kernel equals it to float rounding, not bit for bit
(tests/test_kernel_skip_gru.py: values, masks and the gradients of every parameter, the input and
the carried state, in float64 and float32).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines.ops.library import TrainingKernel

FORMS = {"after": 0, "before": 1}
"""The GRU forms of the kernel, by name: the index ``csrc/skip_gru.cpp`` takes."""


# Its source is part of the code version of the method that trains with it (``method_code``).
skip_gru_kernel = TrainingKernel("skip_gru", "Skip-GRU training")
skip_gru_kernel_status = skip_gru_kernel.status
sequence_kernel = skip_gru_kernel.for_tensors


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
