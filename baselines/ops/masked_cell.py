"""A masked recurrent cell over a whole sequence, forward and backward, as the ops
``condrnn::masked_cell_forward`` (its backward registered with it) and ``..._backward``.

Phased LSTM, Random Updates and the Clockwork RNN decide every unit's update before the
recurrence (the time gate k, the Bernoulli draw, the schedule), so a training step is a dense
cell candidate and ``h_t = lerp(h_{t-1}, h~_t, m_t)``: a dozen small torch ops a step, and a
training step at the paper sizes is bound by their dispatch. Where the optional C++ kernel builds
(``masked_cell_kernel``, ``csrc/masked_cell.cpp``, built, cached and switched off as
``baselines.ops.library`` does for its kernels), ``masked_sequence`` runs all T steps, forward and
backward, in one call each: the tanh (Elman) cell, the reset-after GRU
(``baselines._cells.gru_step_lean``) or the LSTM without peepholes (``LSTMWeights.step``), each
mixed with the previous state by the mask or gate ``m [B, T, D]`` (for the LSTM the cell state
too, by the same m). The gradient of m is returned, so a differentiable gate (Phased LSTM's k)
learns through autograd.

On CUDA the same ops run Triton kernels (``baselines/ops/gpu/masked_cell.py``: a persistent
kernel over T each way, registered as the ops' CUDA implementation), where triton is installed
and D is at most 128; the library is still built there (it defines the ops).

The methods' per-step PyTorch loops are the reference, and the path in eval mode and wherever the
kernel cannot run (neither CPU nor CUDA with Triton: one warning line, ``library.on_cpu``; not
float32/64; not built; ``HARNESS_NO_KERNELS=1``): the kernel equals them to float rounding, not
bit for bit (tests/test_kernels.py: values and the gradients of every parameter, the input and
the mask, in float64 and float32; tests/test_triton_masked_cell.py the Triton kernels, in
Triton's interpreter).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, autograd, fake, incoming, none_if_empty

CELLS = {"tanh": 0, "gru": 1, "lstm": 2}
"""The cells of the kernel, by name: the index ``csrc/masked_cell.cpp`` takes."""


# Its source is part of the code version of the method that trains with it (``method_code``).
masked_cell_kernel = Kernel(
    "masked_cell", "masked-cell training", gpu="baselines.ops.gpu.masked_cell"
)
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
    """All T steps of a masked cell: ``(hs [B, T, D], c_T [B, D] or None)``, by the op
    ``condrnn::masked_cell_forward`` (its backward registered with it: the gradients of xp, h0,
    c0, W and m).

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
    c0 = xp.new_empty(0) if c0 is None else c0.contiguous()
    args = (xp.contiguous(), h0.contiguous(), c0, weight_hh.contiguous(), m.contiguous())
    hs, c_T, *_saved = kernel.forward(*args, CELLS[cell])
    return hs, none_if_empty(c_T)


@fake("masked_cell_forward")
def _forward_fake(xp, h0, c0, weight, m, cell):
    S, B, GD = xp.shape
    D = h0.shape[1]
    lstm, tanh = cell == CELLS["lstm"], cell == CELLS["tanh"]
    return [
        xp.new_empty(B, S, D),  # hs
        xp.new_empty(B, D) if lstm else xp.new_empty(0),  # c_T
        xp.new_empty(S, B, D),  # H: the state each step starts from
        xp.new_empty(S, B, GD),  # A: the gate activations
        xp.new_empty(0) if tanh else xp.new_empty(S, B, D),  # X
        xp.new_empty(S + 1, B, D) if lstm else xp.new_empty(0),  # C: the cell states
    ]


@fake("masked_cell_backward")
def _backward_fake(grad_hs, grad_c, weight, m, H, A, X, C, cell):
    B, D = H.shape[1], H.shape[2]
    lstm = cell == CELLS["lstm"]
    return [
        torch.empty_like(A),
        H.new_empty(B, D),
        H.new_empty(B, D) if lstm else H.new_empty(0),
        torch.empty_like(weight),
        torch.empty_like(m),
    ]


def _setup(ctx, inputs, output):
    _xp, _h0, _c0, weight, m, cell = inputs
    _hs, _c_T, *saved = output  # H, A, X, C: what only the backward reads
    ctx.cell = cell
    ctx.save_for_backward(weight, m, *saved)
    ctx.mark_non_differentiable(*saved)
    ctx.set_materialize_grads(False)


def _backward(ctx, grads):
    g_hs, g_c = grads[0], grads[1]
    weight, m, H, A, X, C = ctx.saved_tensors
    g_hs = incoming(g_hs, m)
    if ctx.cell == CELLS["lstm"]:
        g_c = incoming(g_c, H[0])
    else:
        g_c = H.new_empty(0)
    d_xp, d_h0, d_c0, d_w, d_m = torch.ops.condrnn.masked_cell_backward(
        g_hs, g_c, weight, m, H, A, X, C, ctx.cell
    )
    return d_xp, d_h0, none_if_empty(d_c0), d_w, d_m, None


autograd("masked_cell_forward", _backward, _setup)
