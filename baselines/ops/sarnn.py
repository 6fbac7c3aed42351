"""SA-RNN's batch-1 inference loop in C++, the op ``condrnn::sarnn_sequence`` (``csrc/sarnn.cpp``),
the fused kernel of ``SARNN.fast_forward``.

At batch 1 on CPU, where the library builds (``baselines.ops.library``), the kernel runs the whole
eval sequence in one call: each step the coordinator's decisions, then only the GRU rows the
updated units need (in the reset-before form the r rows of every unit first, where any unit
updates), read once, with no per-step Python dispatch. It is inference only: no backward is
registered. Its outputs, the states and the update mask ``[T, D]``, have the shapes of its
inputs' (``coord``'s), whatever the decisions, so its fake implementation needs no value.

``SARNN.fast_forward``'s PyTorch path computes the same thing (tests/test_kernels.py: masks
exactly, outputs to rounding) and runs wherever the kernel cannot (batch > 1, not CPU: one
warning line, ``library.on_cpu``; not built; ``HARNESS_NO_KERNELS=1``).
"""

from __future__ import annotations

from typing import Any

import torch

from baselines.ops.library import Kernel, KernelStatus, fake

# the family's source counts in the code version of every method whose modules use it
# (``method_code``); it is in the library's inference part (``PARTS``)
sarnn_family = Kernel("sarnn", "SA-RNN inference")


def sarnn_kernel_status() -> KernelStatus:
    """The state of the SA-RNN kernel (the library's), found without building or loading it."""
    return sarnn_family.status()


def sarnn_kernel() -> Any:
    """The op ``condrnn::sarnn_sequence``, or None where the library cannot be built."""
    return torch.ops.condrnn.sarnn_sequence.default if sarnn_family() is not None else None


@fake("sarnn_sequence")
def _sequence_fake(hh, ih, wu, coord, xs, h0, slope, before):
    T, D = coord.shape
    return [coord.new_empty(T, D), coord.new_empty(T, D)]  # outputs, mask
