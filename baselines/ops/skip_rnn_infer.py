"""Skip RNN's inference over a whole sequence in C++, the op ``condrnn::skip_rnn_infer_sequence``
(``csrc/skip_rnn_infer.cpp``), the fused kernel of ``SkipRNN.fast_forward``.

On the CPU, where the library builds (``baselines.ops.library``), the kernel runs the whole eval
sequence in one call at any batch size: each step the gate of every sequence (the dense loop's
arithmetic in the tensors' dtype), then the GRU for the sequences that update, gathered, so that
its cost follows each sequence's own decisions; a step no sequence updates copies the states and
reads no weight. It is inference only: no backward is registered. Its outputs (the states
``[B, T, D]``, the decisions ``u [B, T]`` and the final ``P`` and ``C``, ``[B]`` each) have the
shapes of its inputs', whatever the decisions, so its fake implementation needs no value.

``SkipRNN.fast_forward``'s PyTorch path computes the same thing
(tests/test_kernel_skip_rnn_infer.py: the decisions exactly, outputs to rounding) and runs
wherever the kernel cannot (not CPU: one warning line, ``library.on_cpu``; not float32/64; not
built; ``HARNESS_NO_KERNELS=1``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from baselines.ops.library import Kernel, KernelStatus, fake

# the family's source counts in the code version of every method whose modules use it
# (``method_code``); it is in the library's inference part (``PARTS``)
skip_rnn_infer_family = Kernel("skip_rnn_infer", "Skip RNN inference")


def skip_rnn_infer_kernel_status() -> KernelStatus:
    """The state of the Skip RNN inference kernel (the library's), found without building it."""
    return skip_rnn_infer_family.status()


def skip_rnn_infer_kernel() -> Any:
    """The op ``condrnn::skip_rnn_infer_sequence``, or None where the library cannot be built.
    The caller asks ``on_cpu`` first and passes float32 or float64 tensors of one dtype
    (``fused_dtype``)."""
    return (
        torch.ops.condrnn.skip_rnn_infer_sequence.default
        if skip_rnn_infer_family() is not None
        else None
    )


def fused_dtype(*tensors: Tensor) -> bool:
    """Whether the kernel computes in the tensors' dtype: float32 or float64, all alike."""
    dtype = tensors[0].dtype
    return dtype in (torch.float32, torch.float64) and all(t.dtype == dtype for t in tensors)


@fake("skip_rnn_infer_sequence")
def _sequence_fake(x, h0, wi, wh, bias, w_p, b_p, panel, before):
    B, T, _ = x.shape
    D = h0.shape[1]
    return [x.new_empty(B, T, D), x.new_empty(B, T), x.new_empty(B), x.new_empty(B)]
