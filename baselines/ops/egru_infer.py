"""EGRU's whole-sequence inference in C++, the op ``condrnn::egru_infer_sequence``
(``csrc/egru_infer.cpp``), the fused kernel of ``EGRU.fast_forward``.

On CPU, where the library builds (``baselines.ops.library``), the kernel runs the whole eval
sequence in one call, at any batch size, from the input terms of every step (``x W + b``, one
matmul before the call: the code reads every input column): each step, only the rows of the
recurrent matrix ``R [D, 3D]`` (row-major as the method holds it: row j is what unit j's event
multiplies) of the units that fired at the previous step in that sequence (each sequence its
own, so the cost follows each sequence's event rate, not the union of the batch's), then the
gates, the events and the subtractive reset, with no per-step Python dispatch. It is inference
only: no backward is registered. Its outputs, the events ``[B, T, D]`` and the internal state
``c_T [B, D]``, have the shapes of its inputs', so its fake implementation needs no value.

``EGRU.fast_forward``'s PyTorch path computes the same thing (tests/test_kernel_egru_infer.py:
events and reads exactly, outputs to rounding) and runs wherever the kernel cannot (not CPU: one
warning line, ``library.on_cpu``; not float32/64; not built; ``HARNESS_NO_KERNELS=1``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, KernelStatus, fake, on_cpu

# the family's source counts in the code version of every method whose modules use it
# (``method_code``); it is in the library's inference part (``PARTS``)
egru_infer_family = Kernel("egru_infer", "EGRU inference")


def egru_infer_kernel_status() -> KernelStatus:
    """The state of the EGRU inference kernel (the library's), found without building it."""
    return egru_infer_family.status()


def egru_infer_kernel() -> Any:
    """The op ``condrnn::egru_infer_sequence``, or None where the library cannot be built."""
    if egru_infer_family() is None:
        return None
    return torch.ops.condrnn.egru_infer_sequence.default


FAST_PATH = "EGRU's fused inference kernel"
"""What ``on_cpu`` names in its one warning line where the fast path leaves the CPU."""


def egru_infer_kernel_for(*tensors: Tensor) -> Any:
    """The op where it can run on ``tensors`` (CPU, float32 or float64, one dtype), else None
    (also where the library cannot be built or ``HARNESS_NO_KERNELS`` is set). Off the CPU the
    first call of a process warns once (``on_cpu``), and the PyTorch path runs."""
    if not on_cpu(FAST_PATH, *tensors):
        return None
    dtype = tensors[0].dtype
    if dtype not in (torch.float32, torch.float64) or any(t.dtype != dtype for t in tensors):
        return None
    return egru_infer_kernel()


@fake("egru_infer_sequence")
def _sequence_fake(wx, rk, rbias, thr, c0, y0):
    B, T, G = wx.shape
    return [wx.new_empty(B, T, G // 3), c0.new_empty(c0.shape)]  # events, c_T
