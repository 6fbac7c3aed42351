"""VC-RNN's inference loop in C++, as the op ``condrnn::vcrnn_sequence``
(``csrc/infer/vcrnn.cpp``): the fast path of ``VCRNN.fast_forward`` on the CPU at any batch size,
which reads only the rows and columns of the weights the updated units need (at batch > 1 those
of the union of the sequences' prefixes), once a step, with no per-step Python dispatch
(``baselines.ops.library`` says why and how it is built).

It is inference only (no backward). Its outputs' shapes follow from its inputs' (the outputs
``[B, T, D]``, the update mask ``[B, T, D]`` and the scheduler's ``m [B, T]``): the fake
implementation gives them, so the op also runs on the meta device and under FakeTensor.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from baselines.ops.library import Kernel, KernelStatus, fake

# the family's source counts in the code version of every method whose modules use it
# (``method_code``); it is in the library's inference part (``PARTS``)
vcrnn_family = Kernel("vcrnn", "VC-RNN inference")


def vcrnn_kernel_status() -> KernelStatus:
    """The state of the VC-RNN kernel (the library's), found without building or loading it."""
    return vcrnn_family.status()


def vcrnn_kernel() -> Any:
    """The op ``condrnn::vcrnn_sequence``, or None where the library cannot be built."""
    return torch.ops.condrnn.vcrnn_sequence.default if vcrnn_family() is not None else None


def pack_vc_columns(weight_hh: Tensor, weight_ih: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
    """A GRU's weights by input column, for ``vcrnn_sequence``: ``hh [D, 3D + 16]`` and
    ``ih [V + 1, 3D + 16]`` (the bias last). Row j holds the weights of input j to the n gates of
    every unit in reverse unit order (``n_{D-1}, ..., n_1, n_0``), then to the r and z gates,
    unit-major (``r_0, z_0, r_1, z_1, ...``), then 16 zeros (rows 3D apart would fall into the
    same few cache sets): the units ``[:k]`` are the row's columns ``[D - k, D + 2k)``, one
    contiguous piece; a step reads the first k rows of ``hh`` (and of a masked input's ``ih``,
    with its bias row)."""
    D = weight_hh.shape[1]

    def columns(w: Tensor) -> Tensor:  # [3D, C] gate-major rows -> [C, 3D + 16]
        g = w.detach().view(3, D, -1)
        rz = g[:2].permute(2, 1, 0).reshape(-1, 2 * D)
        return F.pad(torch.cat([g[2].t().flip(1), rz], 1), (0, 16))

    return columns(weight_hh), columns(torch.cat([weight_ih, bias[:, None]], 1))


@fake("vcrnn_sequence")
def _sequence_fake(hh, ih, sched_h, sched_x, xs, index, sharpness, eps, masked, before):
    (B, T), D = sched_x.shape, index.shape[0]
    return [xs.new_empty(B, T, D), xs.new_empty(B, T, D), xs.new_empty(B, T)]  # outputs, mask, m
