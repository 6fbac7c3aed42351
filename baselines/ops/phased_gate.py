"""Phased LSTM's time gate in C++, forward and backward, as one autograd node (issue 54).

``PhasedLSTM.time_gate`` computes the gate ``k [N, T, D]`` in about fifteen torch ops (float64
phases, two ``where``) and autograd's backward in about thirty; with the masked cell's sequence
kernel that was a tenth of a training step at the paper sizes, all of it dispatch. Where the
optional kernel builds (``phased_gate_kernel``, ``csrc/phased_gate.cpp``, built, cached and
switched off as ``baselines.ops.library`` does for every training kernel), the training step on
the CPU computes the same gate in one call each way (``time_gate_sequence``).

``PhasedLSTM.time_gate`` is the reference and the path everywhere else (eval, the per-step loop,
off the CPU, another dtype, no build, ``HARNESS_NO_KERNELS=1``): the kernel equals its values
exactly where no sum is involved (the phase is exact, eq. 7 rounds as the reference's ops do)
and its gradients to float rounding (the sums over the batch and the steps in float64); tested in
tests/test_kernel_phased_gate.py.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines.ops.library import TrainingKernel

# Its source is part of Phased LSTM's code version (``method_code``).
phased_gate_kernel = TrainingKernel("phased_gate", "Phased LSTM time-gate")
phased_gate_kernel_status = phased_gate_kernel.status
gate_kernel = phased_gate_kernel.for_tensors


def time_gate_sequence(
    kernel: Any,
    tau: Tensor,
    period: Tensor,
    shift: Tensor,
    r_on: Tensor,
    min_period: float,
    r_min: float,
    leak: float,
) -> Tensor:
    """The gate ``k [N, T, D]`` at the timestamps ``tau [N, T]`` (float64).

    Args:
        kernel: ``gate_kernel``'s.
        tau: the timestamps.
        period: P ``[D]``, clamped to at least ``min_period`` in the forward.
        shift: s ``[D]``.
        r_on: the open ratio ``[D]``, clamped to ``[r_min, 1]`` in the forward.
        min_period: see ``period``.
        r_min: see ``r_on``.
        leak: alpha, k's slope outside the open phase.
    """
    knobs = (float(min_period), float(r_min), float(leak))
    return _TimeGate.apply(kernel, tau.contiguous(), period, shift, r_on, knobs)


class _TimeGate(torch.autograd.Function):
    """``time_gate_sequence``'s node: the kernel's k, and the gradients of P, s and r_on."""

    @staticmethod
    def forward(ctx, kernel, tau, period, shift, r_on, knobs):
        period, shift, r_on = period.contiguous(), shift.contiguous(), r_on.contiguous()
        ctx.kernel, ctx.knobs = kernel, knobs
        ctx.save_for_backward(tau, period, shift, r_on)
        return kernel.forward(tau, period, shift, r_on, *knobs)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        tau, period, shift, r_on = ctx.saved_tensors
        d_p, d_s, d_r = ctx.kernel.backward(grad.contiguous(), tau, period, shift, r_on, *ctx.knobs)
        return None, None, d_p, d_s, d_r, None
