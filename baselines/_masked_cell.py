"""A masked recurrent cell over a whole sequence as one autograd node, in C++ (issue 54).

Phased LSTM, Random Updates and the Clockwork RNN decide every unit's update before the
recurrence (the time gate k, the Bernoulli draw, the schedule), so a training step is a dense
cell candidate and ``h_t = lerp(h_{t-1}, h~_t, m_t)``: a dozen small torch ops a step, and a
training step at the paper sizes is bound by their dispatch. Where the optional C++ kernel builds
(``masked_cell_kernel``, ``csrc/masked_cell.cpp``, built, cached and switched off as
``baselines._kernels`` does for its kernels), ``masked_sequence`` runs all T steps, forward and
backward, in one call each: the tanh (Elman) cell, the reset-after GRU
(``baselines._cells.gru_step_lean``) or the LSTM without peepholes (``LSTMWeights.step``), each
mixed with the previous state by the mask or gate ``m [B, T, D]`` (for the LSTM the cell state
too, by the same m). The gradient of m is returned, so a differentiable gate (Phased LSTM's k)
learns through autograd.

The methods' per-step PyTorch loops are the reference, and the path in eval mode and wherever the
kernel cannot run (not CPU: one warning line, ``_kernels.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``): the kernel equals them to float rounding, not bit for bit
(tests/test_kernels.py: values and the gradients of every parameter, the input and the mask, in
float64 and float32).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines._kernels import TrainingKernel

CELLS = {"tanh": 0, "gru": 1, "lstm": 2}
"""The cells of the kernel, by name: the index ``csrc/masked_cell.cpp`` takes."""


# Its source is part of the code version of the method that trains with it (``method_code``).
masked_cell_kernel = TrainingKernel("masked_cell", "masked-cell training")
masked_cell_kernel_status = masked_cell_kernel.status
sequence_kernel = masked_cell_kernel.for_tensors


def masked_sequence(
    kernel: Any,
    cell: str,
    xp: Tensor,
    h0: Tensor,
    weight_hh: Tensor,
    m: Tensor,
    c0: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """All T steps of a masked cell: ``(hs [B, T, D], c_T [B, D] or None)``.

    Args:
        kernel: ``sequence_kernel``'s.
        cell: a key of ``CELLS``.
        xp: the input terms of every step, ``W_i x + b``, time-major ``[T, B, G D]`` (G = 1, 3,
            4; ``input_terms``).
        h0: ``h_0 [B, D]``.
        weight_hh: the recurrent weight ``[G D, D]`` (gate order r, z, n; i, f, g, o).
        m: the update mask or gate ``[B, T, D]``: ``h_t = lerp(h_{t-1}, h~_t, m_t)``.
        c0: the LSTM's ``c_0 [B, D]`` (the cell state is mixed by the same m); else None.
    """
    return _MaskedSequence.apply(kernel, CELLS[cell], xp, h0, c0, weight_hh, m)


class _MaskedSequence(torch.autograd.Function):
    """``masked_sequence``'s node: the kernel's forward and the gradients of xp, h0, c0, W, m."""

    @staticmethod
    def forward(ctx, kernel, cell, xp, h0, c0, weight_hh, m):
        ctx.set_materialize_grads(False)
        weight_hh, m = weight_hh.contiguous(), m.contiguous()
        h0, c0 = h0.contiguous(), _NONE if c0 is None else c0.contiguous()
        hs, *saved = kernel.forward(xp.contiguous(), h0, c0, weight_hh, m, cell)
        saved = [_NONE if s is None else s for s in saved]  # H, A, X, C (X, C: the cell's)
        ctx.kernel, ctx.cell = kernel, cell
        ctx.save_for_backward(weight_hh, m, *saved)
        return hs, saved[3][-1].clone() if cell == CELLS["lstm"] else None

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_c):
        weight_hh, m, H, A, X, C = ctx.saved_tensors
        grad_hs = torch.zeros_like(m) if grad_hs is None else grad_hs.contiguous()
        if ctx.cell == CELLS["lstm"]:
            grad_c = torch.zeros_like(H[0]) if grad_c is None else grad_c.contiguous()
        d_xp, d_h0, d_c0, d_w, d_m = ctx.kernel.backward(
            grad_hs, _NONE if grad_c is None else grad_c, weight_hh, m, H, A, X, C, ctx.cell
        )
        return None, None, d_xp, d_h0, d_c0, d_w, d_m


_NONE = torch.empty(0)  # what the kernel takes and gives for a tensor the cell has not
