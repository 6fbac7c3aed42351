"""Phased LSTM's time gate in C++, forward and backward (issue 54), as the ops
``condrnn::phased_gate_forward`` (its backward registered with it) and ``..._backward``.

``PhasedLSTM.time_gate`` computes the gate ``k [N, T, D]`` in about fifteen torch ops (float64
phases, two ``where``) and autograd's backward in about thirty; with the masked cell's sequence
kernel that was a tenth of a training step at the paper sizes, all of it dispatch. Where the
optional kernel builds (``phased_gate_kernel``, ``csrc/phased_gate.cpp``, built, cached and
switched off as ``baselines.ops.library`` does for every training kernel), the training step on
the CPU computes the same gate in one call each way (``time_gate_sequence``).

``PhasedLSTM.time_gate`` is the reference and the path everywhere else (eval, the per-step loop,
off the CPU: one warning line, ``library.on_cpu``; another dtype, no build,
``HARNESS_NO_KERNELS=1``): the kernel equals its values exactly where no sum is involved (the
phase is exact, eq. 7 rounds as the reference's ops do) and its gradients to float rounding (the
sums over the batch and the steps in float64); tested in tests/test_kernel_phased_gate.py. On the
meta device the op runs (its fake implementation).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, autograd, fake

# Its source is part of Phased LSTM's code version (``method_code``).
phased_gate_kernel = Kernel("phased_gate", "Phased LSTM time-gate")
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
    """The gate ``k [N, T, D]`` at the timestamps ``tau [N, T]`` (float64), by the op
    ``condrnn::phased_gate_forward`` (its backward registered with it: the gradients of P, s and
    r_on).

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
    params = (period.contiguous(), shift.contiguous(), r_on.contiguous())
    return kernel.forward(tau.contiguous(), *params, float(min_period), float(r_min), float(leak))


@fake("phased_gate_forward")
def _forward_fake(tau, period, shift, r_on, min_period, r_min, leak):
    N, S = tau.shape
    return period.new_empty(N, S, period.shape[0])  # k, in P's dtype


@fake("phased_gate_backward")
def _backward_fake(grad, tau, period, shift, r_on, min_period, r_min, leak):
    return [torch.empty_like(period), torch.empty_like(period), torch.empty_like(period)]


def _setup(ctx, inputs, output):
    tau, period, shift, r_on, *knobs = inputs  # knobs: min_period, r_min, leak
    ctx.knobs = knobs
    ctx.save_for_backward(tau, period, shift, r_on)
    ctx.set_materialize_grads(False)


def _backward(ctx, grad):
    if grad is None:
        return None, None, None, None, None, None, None
    tau, period, shift, r_on = ctx.saved_tensors
    d_p, d_s, d_r = torch.ops.condrnn.phased_gate_backward(
        grad.contiguous(), tau, period, shift, r_on, *ctx.knobs
    )
    return None, d_p, d_s, d_r, None, None, None  # tau: timestamps, no gradient


autograd("phased_gate_forward", _backward, _setup)
