"""Skip RNN's training sequence in C++ (issue 54), forward and backward, as the ops
``condrnn::skip_gru_forward`` (its backward registered with it) and ``..._backward``.

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

from baselines.ops.library import Kernel, autograd, fake, incoming

FORMS = {"after": 0, "before": 1}
"""The GRU forms of the kernel, by name: the index ``csrc/skip_gru.cpp`` takes."""


# Its source is part of the code version of the method that trains with it (``method_code``).
skip_gru_kernel = Kernel("skip_gru", "Skip-GRU training")
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
    """All T steps of ``SkipRNN._step``: ``(hs [B, T, D], mask [B, T, D], final state)``, by the
    op ``condrnn::skip_gru_forward`` (its backward registered with it: the gradients of xp, the
    initial state, W_hh, w_p and b_p).

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
    args = [t.contiguous() for t in (xp, *state, weight_hh, w_p, b_p)]
    hs, mask, cand, up, cum, *_saved = kernel.forward(*args, FORMS[form])
    return hs, mask, (hs[:, -1], cand, mask[:, -1, :1], up, cum)


@fake("skip_gru_forward")
def _forward_fake(xp, h0, n0, u0, up0, c0, weight, w_p, b_p, form):
    S, B, GD = xp.shape
    D = h0.shape[1]
    return [
        xp.new_empty(B, S, D),  # hs
        xp.new_empty(B, S, D),  # mask
        xp.new_empty(B, D),  # h~_T
        torch.empty_like(up0),  # P_{T-1}
        torch.empty_like(c0),  # C_T
        xp.new_empty(S + 1, B, D),  # H: the states h_0 .. h_T
        xp.new_empty(S + 1, B, D),  # N: the candidates h~_0 .. h~_T
        xp.new_empty(S, B, GD),  # A: the gate activations
        xp.new_empty(S, B, D),  # X: W_n h (after) or r h (before)
        xp.new_empty(S, B, 5),  # Z: p, P, C_{t-1}, u~, u of every step
    ]


@fake("skip_gru_backward")
def _backward_fake(
    grad_hs, grad_mask, grad_n, grad_up, grad_cum, u0, up0, weight, w_p, H, N, A, X, Z, form
):
    B, D = H.shape[1], H.shape[2]
    return [
        torch.empty_like(A),  # xp
        H.new_empty(B, D),  # h_0
        H.new_empty(B, D),  # h~_0
        torch.empty_like(u0),  # u_0
        torch.empty_like(grad_up),  # P_{-1}
        torch.empty_like(grad_cum),  # C_0
        torch.empty_like(weight),  # W_hh
        torch.empty_like(w_p),  # w_p
        H.new_empty(1),  # b_p
    ]


def _setup(ctx, inputs, output):
    _xp, _h, _cand, u, up, _cum, weight, w_p, _b_p, form = inputs
    saved = output[5:]  # H, N, A, X, Z: what only the backward reads
    ctx.form = form
    ctx.save_for_backward(u, up, weight, w_p, *saved)
    ctx.mark_non_differentiable(*saved)
    ctx.set_materialize_grads(False)


def _backward(ctx, grads):
    u, up, weight, w_p, H, N, A, X, Z = ctx.saved_tensors
    B, T, D = H.shape[1], A.shape[0], H.shape[2]
    g_hs, g_mask, g_cand, g_up, g_cum = grads[:5]
    grads = [
        incoming(g_hs, H, B, T, D),
        incoming(g_mask, H, B, T, D),
        incoming(g_cand, H, B, D),
        incoming(g_up, H, *u.shape),
        incoming(g_cum, H, *u.shape),
    ]
    d = torch.ops.condrnn.skip_gru_backward(*grads, u, up, weight, w_p, H, N, A, X, Z, ctx.form)
    return *d, None


autograd("skip_gru_forward", _backward, _setup)
