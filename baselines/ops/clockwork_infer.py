"""The Clockwork RNN's inference over a whole sequence in C++, the op
``condrnn::clockwork_infer_sequence`` (``csrc/clockwork_infer.cpp``), the fused kernel of
``ClockworkRNN.fast_forward``.

On the CPU, where the library builds (``baselines.ops.library``), the kernel runs the whole eval
sequence in one call at any batch size: each step, for every active module, one product of the
batch's state rows with the module's packed weights (the nonzero blocks of its recurrent rows,
its input rows and its biases, contiguous: ``pack_modules``); the inactive modules are copied.
The schedule (the number of active modules of each step, a prefix) is the caller's: it does not
depend on the input. It is inference only: no backward is registered. Its output, the states
``[B, T, D]``, has the shape of its inputs', so its fake implementation needs no value.

``ClockworkRNN.fast_forward``'s PyTorch path computes the same thing
(tests/test_kernel_clockwork_infer.py: outputs to rounding) and runs wherever the kernel cannot
(not CPU: one warning line, ``library.on_cpu``; not float32/64; not built;
``HARNESS_NO_KERNELS=1``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.inference import column_panels
from baselines.ops.library import Kernel, KernelStatus, fake

# the family's source counts in the code version of every method whose modules use it
# (``method_code``); it is in the library's inference part (``PARTS``)
clockwork_infer_family = Kernel("clockwork_infer", "Clockwork RNN inference")


def clockwork_infer_kernel_status() -> KernelStatus:
    """The state of the Clockwork inference kernel (the library's), found without building it."""
    return clockwork_infer_family.status()


def clockwork_infer_kernel() -> Any:
    """The op ``condrnn::clockwork_infer_sequence``, or None where the library cannot be built.
    The caller asks ``on_cpu`` first and passes float32 or float64 tensors of one dtype
    (``fused_dtype``)."""
    ok = clockwork_infer_family() is not None
    return torch.ops.condrnn.clockwork_infer_sequence.default if ok else None


def fused_dtype(*tensors: Tensor) -> bool:
    """Whether the kernel computes in the tensors' dtype: float32 or float64, all alike."""
    dtype = tensors[0].dtype
    return dtype in (torch.float32, torch.float64) and all(t.dtype == dtype for t in tensors)


def pack_modules(
    weight_hh: Tensor, weight_ih: Tensor, bias: Tensor, module_size: int, panel: int
) -> Tensor:
    """The operand of each module ``j`` (``k = module_size`` units from ``jk``), one after the
    other, flat: ``[W_H[jk:(j+1)k, jk:]^T; W_I[jk:(j+1)k]^T; b[jk:(j+1)k]]``, ``(D - jk + V + 1)
    x k``, as column panels of ``panel`` (``column_panels``), what the kernel multiplies the
    state rows ``[h[jk:], x_t, 1]`` with. Only the blocks on and above the diagonal of
    ``weight_hh`` are read (those below are its masked zeros)."""
    D, k = weight_hh.shape[0], module_size
    blocks = []
    for lo in range(0, D, k):
        rows = slice(lo, lo + k)
        part = [weight_hh[rows, lo:].t(), weight_ih[rows].t(), bias[None, rows]]
        blocks.append(column_panels(torch.cat(part, 0), panel))
    return torch.cat(blocks)


@fake("clockwork_infer_sequence")
def _sequence_fake(packed, x, h0, active, module_size, panel):
    B, T, _ = x.shape
    return x.new_empty(B, T, h0.shape[1])
