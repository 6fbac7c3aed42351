"""Delta GRU's whole-sequence inference in C++, the op ``condrnn::delta_gru_infer_sequence``
(``csrc/delta_gru_infer.cpp``), the fused kernel of ``DeltaGRU.fast_forward``.

On CPU, where the library builds (``baselines.ops.library``), the kernel runs the whole eval
sequence in one call, at any batch size: each step the thresholded input and state deltas of
every sequence, then only the rows of the transposed weights ``W_i^T [V, 3D]`` and
``W_h^T [D, 3D]`` (packed once by the caller, cached on the model) of the columns that sequence
reads (its non-zero deltas; each sequence its own, so the cost follows each sequence's activity
sparsity, not the union of the batch's), then the gates, with no per-step Python dispatch. It is
inference only: no backward is registered. Its outputs (the states ``[B, T, D]``, the reads
``[B, T, V + D]``, the memories after the last step and the regulariser's sum of ``|dh|`` per
sequence) have shapes that follow from its inputs', whatever the deltas, so its fake
implementation needs no value.

``baselines._delta_gru_fast.fast_forward``'s PyTorch path computes the same thing
(tests/test_kernel_delta_gru_infer.py: reads exactly, outputs to rounding) and runs wherever the
kernel cannot (not CPU: one warning line, ``library.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, KernelStatus, fake, on_cpu

# the family's source counts in the code version of every method whose modules use it
# (``method_code``); it is in the library's inference part (``PARTS``)
delta_gru_infer_family = Kernel("delta_gru_infer", "Delta GRU inference")


def delta_gru_infer_kernel_status() -> KernelStatus:
    """The state of the Delta GRU inference kernel (the library's), found without building it."""
    return delta_gru_infer_family.status()


def delta_gru_infer_kernel() -> Any:
    """The op ``condrnn::delta_gru_infer_sequence``, or None where the library cannot be built."""
    if delta_gru_infer_family() is None:
        return None
    return torch.ops.condrnn.delta_gru_infer_sequence.default


FAST_PATH = "Delta GRU's fast path (its fused kernel and NumPy delta scan)"
"""What ``on_cpu`` names in its one warning line where the fast path leaves the CPU."""


def delta_gru_infer_kernel_for(*tensors: Tensor) -> Any:
    """The op where it can run on ``tensors`` (CPU, float32 or float64, one dtype), else None
    (also where the library cannot be built or ``HARNESS_NO_KERNELS`` is set). Off the CPU the
    first call of a process warns once (``on_cpu``), and the PyTorch path runs."""
    if not on_cpu(FAST_PATH, *tensors):
        return None
    dtype = tensors[0].dtype
    if dtype not in (torch.float32, torch.float64) or any(t.dtype != dtype for t in tensors):
        return None
    return delta_gru_infer_kernel()


@fake("delta_gru_infer_sequence")
def _sequence_fake(x, wi_t, wh_t, x_hat0, h0, h_hat0, acc_x0, acc_h0, theta_x, theta_h):
    B, T, V = x.shape
    D = h0.shape[1]
    return [
        x.new_empty(B, T, D),  # hs
        x.new_empty(B, T, V + D),  # reads
        x.new_empty(B, V),  # x^_T
        x.new_empty(B, D),  # h^_T
        x.new_empty(B, 3 * D),  # acc_x_T
        x.new_empty(B, 3 * D),  # acc_h_T
        x.new_empty(B),  # sum |dh| per sequence
    ]
