"""The masked cell's CUDA implementation in Triton: ``condrnn::masked_cell_forward`` and
``..._backward`` (``baselines/ops/masked_cell.py``, ``csrc/masked_cell.cpp``: the same
equations, the same inputs and outputs, the same saved tensors H, A, X, C), as persistent
kernels over T: one program per tile of ``BLOCK_B`` sequences runs all T steps, the state in
registers, each step's ``W h`` one ``tl.dot`` per gate (IEEE float32, no TF32), so a whole
sequence is one launch each way where the PyTorch path launches a dozen kernels a step.

The recurrent weight is read from global memory at every step (it stays in the L2 cache; a
gate's ``[D, D]`` tile goes through shared memory into ``tl.dot``), whole: the kernels take D up
to ``MAX_D`` = 128 (a tile of ``BLOCK_D = next power of 2 >= D`` columns; at 256 one gate's tile
alone, 256 KB in float32, is more than an H100's shared memory), and beyond it ``takes`` says no
and the method runs its PyTorch path (the PTB task's D = 256). The weight's gradient is one matmul
over all steps after the backward kernel (``DW^T H``), as the C++ kernel does. Activations are
written out (Triton's interpreter has no libdevice): ``sigmoid(a) = 1 / (1 + exp(-a))``,
``tanh(a) = sign(a) (1 - e) / (1 + e)`` with ``e = exp(-2|a|)``; lerp rounds as torch's. The
compiler may contract a multiply and an add: the kernels equal the per-step reference to float
rounding, not bit for bit. Not yet compiled on a GPU: the interpreter checks the values, not
what the compiler makes of the tiles (shared memory, registers); scripts/gpu-check's CUDA tests
are the first to.

On CPU tensors the launchers run in Triton's interpreter (``TRITON_INTERPRET=1`` set before
triton is imported): that is how the tests run them without a GPU. There the loop over T is
bounded by a compile-time constant (``S_STATIC``): Triton 3.6's interpreter cannot loop over a
run-time integer with numpy 2.4 (it converts a one-element array with ``int``, which numpy 2.4
refuses); compiled, the bound is the run-time ``S`` (one compile for every T).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

TANH, GRU, LSTM = 0, 1, 2
"""The cells, as ``baselines.ops.masked_cell.CELLS`` numbers them."""

GATES = {TANH: 1, GRU: 3, LSTM: 4}
BLOCK_B = 16
"""Sequences a program runs (``tl.dot`` takes at least 16 rows)."""
MAX_D = 128
"""The widest state the kernels take (a gate's whole weight tile in shared memory)."""
NUM_WARPS = 8
"""Warps a program runs: a [128, 128] tile is 64 registers a thread at 8 warps."""
SIZES = ("B", "D", "S")
"""The sizes, not specialised on (Triton would compile again for a size of 1 or a multiple of 16):
a compile per cell, dtype and ``BLOCK_D``."""
NUM_STAGES = 1
"""No software pipelining of the loop over T: with Triton's default (3 stages) the kernels' tiles
need 0.4-1.4 MB of shared memory at D = 128, with 1 at most 192 KB (the LSTM's backward in
float64), within an H100's 227 KB (tests/test_triton_masked_cell.py compiles them for sm_90)."""


def fits(hidden_size: int) -> bool:
    """Whether the kernels take a state of ``hidden_size`` units."""
    return hidden_size <= MAX_D


def takes(*tensors: Tensor) -> bool:
    """Whether the kernels take a call on ``tensors`` (``Kernel.for_tensors``'s: the input, the
    state ``[B, D]``, the weight ``[G D, D]``, ...): the narrowest matrix's width, which in a
    call is D, ``fits``."""
    widths = [t.shape[-1] for t in tensors if getattr(t, "ndim", 0) == 2]
    return bool(widths) and fits(min(widths))


def block_d(hidden_size: int) -> int:
    return max(16, triton.next_power_of_2(hidden_size))


@triton.jit
def _sigmoid(a):
    return 1.0 / (1.0 + tl.exp(-a))


@triton.jit
def _tanh(a):
    e = tl.exp(-2.0 * tl.abs(a))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(a < 0, -t, t)


@triton.jit
def _lerp(start, end, w):
    # torch's lerp: start + w (end - start) below one half, end - (end - start) (1 - w) above
    d = end - start
    return tl.where(w < 0.5, start + w * d, end - d * (1.0 - w))


@triton.jit
def _times_wt(h, w, g, D, j, wmask):
    # h [BB, BD] times gate g's recurrent rows transposed: (W_g h)^T, [BB, BD]
    wt = tl.load(w + (g * D + j[None, :]) * D + j[:, None], mask=wmask, other=0.0)
    return tl.dot(h, wt, input_precision="ieee", out_dtype=h.dtype)


@triton.jit
def _times_w(d, w, g, D, j, wmask):
    # d [BB, BD] (a gate's gradient) times gate g's recurrent rows: d W_g, [BB, BD]
    wg = tl.load(w + (g * D + j[:, None]) * D + j[None, :], mask=wmask, other=0.0)
    return tl.dot(d, wg, input_precision="ieee", out_dtype=d.dtype)


@triton.jit(do_not_specialize=SIZES)
def _forward_kernel(
    xp, h0, c0, w, m, hs, H, A, X, C, B, D, S, S_STATIC: tl.constexpr,
    CELL: tl.constexpr, G: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    j = tl.arange(0, BLOCK_D)
    mask = (b < B)[:, None] & (j < D)[None, :]
    wmask = (j < D)[:, None] & (j < D)[None, :]
    bd = b[:, None] * D + j[None, :]  # [B, D] offsets
    h = tl.load(h0 + bd, mask=mask, other=0.0)
    c = tl.zeros([BLOCK_B, BLOCK_D], dtype=h.dtype)
    if CELL == 2:
        c = tl.load(c0 + bd, mask=mask, other=0.0)
        tl.store(C + bd, c, mask=mask)
    # S_STATIC in Triton's interpreter (the module's docstring says why), else the run-time S
    for t in range(S_STATIC if S_STATIC > 0 else S):
        row = t * B * G * D + b[:, None] * (G * D) + j[None, :]  # gate 0 of [T, B, GD]
        bsd = b[:, None] * S * D + t * D + j[None, :]  # [B, T, D] offsets
        u = tl.load(m + bsd, mask=mask, other=0.0)
        tl.store(H + t * B * D + bd, h, mask=mask)
        a0 = tl.load(xp + row, mask=mask, other=0.0) + _times_wt(h, w, 0, D, j, wmask)
        if CELL == 0:
            cand = _tanh(a0)
            tl.store(A + row, cand, mask=mask)
        elif CELL == 1:
            x1 = tl.load(xp + row + D, mask=mask, other=0.0)
            x2 = tl.load(xp + row + 2 * D, mask=mask, other=0.0)
            r = _sigmoid(a0)
            z = _sigmoid(x1 + _times_wt(h, w, 1, D, j, wmask))
            hn = _times_wt(h, w, 2, D, j, wmask)
            n = _tanh(x2 + r * hn)
            tl.store(A + row, r, mask=mask)
            tl.store(A + row + D, z, mask=mask)
            tl.store(A + row + 2 * D, n, mask=mask)
            tl.store(X + t * B * D + bd, hn, mask=mask)
            cand = _lerp(n, h, z)
        else:
            ig = _sigmoid(a0)
            a1 = tl.load(xp + row + D, mask=mask, other=0.0) + _times_wt(h, w, 1, D, j, wmask)
            a2 = tl.load(xp + row + 2 * D, mask=mask, other=0.0) + _times_wt(h, w, 2, D, j, wmask)
            a3 = tl.load(xp + row + 3 * D, mask=mask, other=0.0) + _times_wt(h, w, 3, D, j, wmask)
            fg = _sigmoid(a1)
            gg = _tanh(a2)
            og = _sigmoid(a3)
            ct = fg * c + ig * gg  # eq. 8 of Phased LSTM
            tc = _tanh(ct)
            tl.store(A + row, ig, mask=mask)
            tl.store(A + row + D, fg, mask=mask)
            tl.store(A + row + 2 * D, gg, mask=mask)
            tl.store(A + row + 3 * D, og, mask=mask)
            tl.store(X + t * B * D + bd, tc, mask=mask)
            c = _lerp(c, ct, u)
            tl.store(C + (t + 1) * B * D + bd, c, mask=mask)
            cand = og * tc
        h = _lerp(h, cand, u)
        tl.store(hs + bsd, h, mask=mask)


@triton.jit(do_not_specialize=SIZES)
def _backward_kernel(
    g_hs, g_c, w, m, H, A, X, C, DX, DW, dm, dh0, dc0, B, D, S, S_STATIC: tl.constexpr,
    CELL: tl.constexpr, G: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    j = tl.arange(0, BLOCK_D)
    mask = (b < B)[:, None] & (j < D)[None, :]
    wmask = (j < D)[:, None] & (j < D)[None, :]
    bd = b[:, None] * D + j[None, :]
    dh = tl.zeros([BLOCK_B, BLOCK_D], dtype=g_hs.dtype.element_ty)  # dh_t from step t + 1
    dc = tl.zeros([BLOCK_B, BLOCK_D], dtype=dh.dtype)
    if CELL == 2:
        dc = tl.load(g_c + bd, mask=mask, other=0.0)
    for tt in range(S_STATIC if S_STATIC > 0 else S):
        t = S - 1 - tt
        row = t * B * G * D + b[:, None] * (G * D) + j[None, :]
        bsd = b[:, None] * S * D + t * D + j[None, :]
        tbd = t * B * D + bd
        u = tl.load(m + bsd, mask=mask, other=0.0)
        hprev = tl.load(H + tbd, mask=mask, other=0.0)
        dht = tl.load(g_hs + bsd, mask=mask, other=0.0) + dh
        g0 = tl.load(A + row, mask=mask, other=0.0)
        if CELL == 0:
            cand = g0
        elif CELL == 1:
            z = tl.load(A + row + D, mask=mask, other=0.0)
            n = tl.load(A + row + 2 * D, mask=mask, other=0.0)
            cand = _lerp(n, hprev, z)
        else:
            og = tl.load(A + row + 3 * D, mask=mask, other=0.0)
            tc = tl.load(X + tbd, mask=mask, other=0.0)
            cand = og * tc
        dcand = dht * u  # lerp's backward: (1 - w), w, end - self
        dprev = dht * (1.0 - u)
        dmj = dht * (cand - hprev)
        if CELL == 0:
            da = dcand * (1.0 - cand * cand)
            tl.store(DX + row, da, mask=mask)
            dh = dprev + _times_w(da, w, 0, D, j, wmask)
        elif CELL == 1:
            dn = dcand * (1.0 - z)
            dz = dcand * (hprev - n)
            dprev = dprev + dcand * z
            dnpre = dn * (1.0 - n * n)
            dr = dnpre * tl.load(X + tbd, mask=mask, other=0.0)
            d0 = dr * (1.0 - g0) * g0
            d1 = dz * (1.0 - z) * z
            dwn = dnpre * g0
            tl.store(DX + row, d0, mask=mask)
            tl.store(DX + row + D, d1, mask=mask)
            tl.store(DX + row + 2 * D, dnpre, mask=mask)
            tl.store(DW + row, d0, mask=mask)
            tl.store(DW + row + D, d1, mask=mask)
            tl.store(DW + row + 2 * D, dwn, mask=mask)
            dh = dprev + _times_w(d0, w, 0, D, j, wmask) + _times_w(d1, w, 1, D, j, wmask)
            dh = dh + _times_w(dwn, w, 2, D, j, wmask)
        else:
            fg = tl.load(A + row + D, mask=mask, other=0.0)
            gg = tl.load(A + row + 2 * D, mask=mask, other=0.0)
            cprev = tl.load(C + tbd, mask=mask, other=0.0)
            ct = fg * cprev + g0 * gg  # c~, as the forward computed it
            dmj = dmj + dc * (ct - cprev)
            dctil = dc * u + dcand * og * (1.0 - tc * tc)
            dc = dc * (1.0 - u) + dctil * fg
            d0 = dctil * gg * (1.0 - g0) * g0
            d1 = dctil * cprev * (1.0 - fg) * fg
            d2 = dctil * g0 * (1.0 - gg * gg)
            d3 = dcand * tc * (1.0 - og) * og
            tl.store(DX + row, d0, mask=mask)
            tl.store(DX + row + D, d1, mask=mask)
            tl.store(DX + row + 2 * D, d2, mask=mask)
            tl.store(DX + row + 3 * D, d3, mask=mask)
            dh = dprev + _times_w(d0, w, 0, D, j, wmask) + _times_w(d1, w, 1, D, j, wmask)
            dh = dh + _times_w(d2, w, 2, D, j, wmask) + _times_w(d3, w, 3, D, j, wmask)
        tl.store(dm + bsd, dmj, mask=mask)
    tl.store(dh0 + bd, dh, mask=mask)
    if CELL == 2:
        tl.store(dc0 + bd, dc, mask=mask)


def _launch(kernel):
    """``kernel[grid]`` through ``torch.library.wrap_triton`` where it takes the kernel (a
    compiled one: ``torch.compile`` then sees the launch), else as is (the interpreter's)."""
    try:
        return torch.library.wrap_triton(kernel)
    except Exception:  # the interpreter's kernels are not JITFunctions
        return kernel


def _static(steps: int) -> int:
    """The sequence length as a compile-time constant in Triton's interpreter, else 0 (a run-time
    loop bound: one compile for every T)."""
    return steps if type(_forward_kernel).__name__ == "InterpretedFunction" else 0


def forward(xp: Tensor, h0: Tensor, c0: Tensor, weight: Tensor, m: Tensor, cell: int):
    """``condrnn::masked_cell_forward``: ``[hs, c_T, H, A, X, C]`` as the C++ kernel returns
    them (empty tensors where the cell has none)."""
    S, B, GD = xp.shape
    D = h0.shape[1]
    empty = xp.new_empty(0)
    hs, H, A = xp.new_empty(B, S, D), xp.new_empty(S, B, D), xp.new_empty(S, B, GD)
    X = empty if cell == TANH else xp.new_empty(S, B, D)
    C = xp.new_empty(S + 1, B, D) if cell == LSTM else empty
    args = (xp.contiguous(), h0.contiguous(), c0.contiguous(), weight.contiguous())
    grid = (triton.cdiv(B, BLOCK_B),)
    _launch(_forward_kernel)[grid](
        *args, m.contiguous(), hs, H, A, X, C, B, D, S,
        S_STATIC=_static(S), CELL=cell, G=GATES[cell], BLOCK_B=BLOCK_B, BLOCK_D=block_d(D),
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    c_T = C[S].clone() if cell == LSTM else empty
    return [hs, c_T, H, A, X, C]


def backward(grad_hs, grad_c, weight, m, H, A, X, C, cell: int):
    """``condrnn::masked_cell_backward``: the gradients ``[xp, h0, c0, weight, m]``."""
    S, B, GD = A.shape
    D = H.shape[2]
    DX = A.new_empty(S, B, GD)
    DW = A.new_empty(S, B, GD) if cell == GRU else DX  # W h's gradient (GRU: n's part differs)
    dm, dh0 = A.new_empty(B, S, D), A.new_empty(B, D)
    dc0 = A.new_empty(B, D) if cell == LSTM else A.new_empty(0)
    grid = (triton.cdiv(B, BLOCK_B),)
    _launch(_backward_kernel)[grid](
        grad_hs.contiguous(), grad_c.contiguous(), weight.contiguous(), m.contiguous(),
        H, A, X, C, DX, DW, dm, dh0, dc0, B, D, S,
        S_STATIC=_static(S), CELL=cell, G=GATES[cell], BLOCK_B=BLOCK_B, BLOCK_D=block_d(D),
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    dweight = DW.view(S * B, GD).t() @ H.view(S * B, D)  # sum over steps of dA^T h
    return [DX, dh0, dc0, dweight, dm]


OPS = {"masked_cell_forward": forward, "masked_cell_backward": backward}
"""The ops this module implements on CUDA (``library.PythonParts.register_cuda``)."""
