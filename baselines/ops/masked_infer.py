"""The inference of a masked GRU or LSTM over a whole sequence in C++, the op
``condrnn::masked_infer_sequence`` (``csrc/masked_infer.cpp``): the fast paths of Random Updates
and Phased LSTM (``fast_forward``) on CPU, at any batch size.

The caller computes the gate first, ``w [B or 1, T, D]``, ``w >= 0`` (Random Updates' drawn
mask, Phased LSTM's time gate k; one row for a gate the batch shares), as its dense loop does;
the op then runs every step in one call. A unit that some sequence updates at a step (``w > 0``)
has its gate rows (input row and bias included) read once and multiplied with the states of the
sequences that update it; every other unit is left as it was (``h_t = lerp(h_{t-1}, h~_t, w)``
with w = 0 is an exact copy in the dense loop too). Its cost follows each sequence's own
decisions, not the union of the batch's (``per_sequence=False`` computes the union instead, for
measuring the difference; the outputs are the same). Where every sequence of a batch of 12 or more
shares the gate, a step is one product of the open units' rows with the batch's states. Weights
are unit-major and padded (``pack_rows``), packed once per model (cached,
``baselines._cells.cached_pack``).

It is inference only: no backward is registered. Its outputs (the states ``[B, T, D]`` and the
LSTM's last cell state, or no elements for the GRU) have shapes that follow from its inputs', so
its fake implementation needs no value. The methods' dense masked loops (``model.eval()(x)``)
are the reference and the path wherever the op cannot run (not CPU: one warning line,
``library.on_cpu``; another dtype; not built; ``HARNESS_NO_KERNELS=1``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import Tensor, nn

from baselines.ops.library import Kernel, KernelStatus, fake, on_cpu

# the family's source counts in the code version of every method whose modules use it
# (``method_code``); it is in the library's inference part (``PARTS``)
masked_infer_family = Kernel("masked_infer", "masked-cell inference")


def masked_infer_kernel_status() -> KernelStatus:
    """The state of the kernel (the library's), found without building or loading it."""
    return masked_infer_family.status()


def masked_infer_kernel() -> Any:
    """The op ``condrnn::masked_infer_sequence``, or None where the library cannot be built."""
    ok = masked_infer_family() is not None
    return torch.ops.condrnn.masked_infer_sequence.default if ok else None


def kernel_for(what: str, x: Tensor) -> Any:
    """The op where it can run on ``x`` (CPU, float32 or float64, the library built), else None;
    off the CPU the first call for ``what`` warns once (``on_cpu``)."""
    if not on_cpu(what, x) or x.dtype not in (torch.float32, torch.float64):
        return None
    return masked_infer_kernel()


def kernel_note(method: str) -> str:
    """The speedup report's line on where the method's fast path ran: the kernel's state, read
    without building it."""
    status = masked_infer_kernel_status()
    if status.state == "loaded":
        state = "used"
    elif status.state == "not tried":
        state = "not tried: nothing ran on CPU"
    else:
        state = f"unavailable here, {status.reason}: the dense loop"
    return f"{method}: on CPU the fast path runs a fused C++ kernel at any batch size ({state})"


PAD = 16
"""The op's rows and states are padded to a multiple of this many values (64 bytes in float32)."""


def padded(n: int) -> int:
    """``n`` rounded up to a multiple of ``PAD``."""
    return -(-n // PAD) * PAD


def pack_rows(weight_ih: Tensor, weight_hh: Tensor, bias: Tensor) -> Tensor:
    """The op's unit-major copy of a cell of G gates (``weight_hh [G D, D]``, ``weight_ih
    [G D, V]``, ``bias [G D]``): ``w [D, G, L]``, row ``[i, g]`` being gate g's recurrent row of
    unit i, zeros up to ``padded(D)``, its input row, its bias, zeros up to ``L = padded(D) +
    padded(V + 1)``. One unit's rows are one contiguous block, and one product of a row with a
    sequence's ``[h, 0, x_t, 1, 0]`` gives the gate's whole pre-activation."""
    GD, D = weight_hh.shape
    G, V = GD // D, weight_ih.shape[1]
    Dp = padded(D)
    w = weight_hh.new_zeros(D, G, Dp + padded(V + 1))
    w[..., :D] = weight_hh.detach().view(G, D, D).transpose(0, 1)
    w[..., Dp : Dp + V] = weight_ih.detach().view(G, D, V).transpose(0, 1)
    w[..., Dp + V] = bias.detach().view(G, D).t()
    return w


def cached_schedule(owner: nn.Module, name: str, key: Hashable, build: Callable[[], Any]) -> Any:
    """``build()`` (under no_grad), kept on ``owner`` as attribute ``name`` for one ``key`` at a
    time (a schedule of decisions that depends on the sizes of the call, not on the inputs)."""
    hit = owner.__dict__.get(name)
    if hit is None or hit[0] != key:
        with torch.no_grad():
            hit = (key, build())
        owner.__dict__[name] = hit
    return hit[1]


@fake("masked_infer_sequence")
def _sequence_fake(w, x, h0, c0, gate, per_sequence, before):
    B, T = x.shape[:2]
    return [x.new_empty(B, T, w.shape[0]), c0.new_empty(c0.shape)]  # outputs, c_T
