"""What the whole-sequence inference ops that run at any batch size share (Skip RNN's,
``skip_rnn_infer``, and the Clockwork RNN's, ``clockwork_infer``): the column-panel layout of
their packed weights and the report line of their fast paths."""

from __future__ import annotations

import torch
from torch import Tensor

from baselines.ops.library import KernelStatus

PANEL = 64
"""The width of the column panels (``column_panels``): a panel is what csrc/gemm.h's AVX-512
product holds in registers for a row of its left operand."""


def panel_width(dtype: torch.dtype, columns: int) -> int:
    """The panels' width for a matrix of ``columns`` columns in ``dtype``: ``PANEL`` in float32
    (csrc/gemm.h's own product), else all its columns, one panel: ATen's products (float64), one
    call a panel, took 1.2-2.7x the PyTorch path's time on panels of 64 at D = 1024."""
    return PANEL if dtype == torch.float32 else columns


def column_panels(w: Tensor, width: int = PANEL) -> Tensor:
    """A ``[K, N]`` matrix as column panels of ``width`` columns (the last fewer), each ``[K, w]``
    row-major, one after the other, flat (``[K N]``): a product with a few rows reads each panel
    contiguously (``panel_mm`` in ``csrc/*_infer.cpp``), where a row-major ``[K, N]`` is read a
    short piece a row, the rows far apart (12 KB at N = 3072)."""
    panels = [w[:, c : c + width].reshape(-1) for c in range(0, w.shape[1], width)]
    return torch.cat(panels)


def fast_path_note(status: KernelStatus, method: str) -> str:
    """The report line of a method whose fast path on CPU, at any batch size, is a kernel of the
    library in ``status``."""
    if status.state == "loaded":
        state = "used"
    elif status.state == "not tried":
        state = "not tried: nothing ran on CPU"
    else:
        state = f"unavailable here, {status.reason}: PyTorch fallback"
    return f"{method}: on CPU the fast path runs a fused C++ kernel ({state})"
