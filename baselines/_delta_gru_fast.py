"""Delta GRU's inference fast path and its threshold calibration (``harness bench --speedup``).

``fast_forward`` is ``DeltaGRU.forward`` in eval mode without the products of zero deltas. On
CPU, where the kernel library builds, it is one call of the fused kernel
(``baselines.ops.delta_gru_infer``: each sequence reads the rows of its own non-zero deltas).
Elsewhere the PyTorch path: the input deltas come from a NumPy scan (``input_deltas``) and are
projected for the whole sequence before the loop, one product per non-zero delta
(``project_deltas``); per step, only the rows of ``W_h^T`` whose unit's state delta is non-zero in
some sequence of the batch are multiplied (``baselines._sparse.addmm_read_columns``). The state
step and the ``SeqOut`` it returns are the method's own (``DeltaGRU._state_step``,
``DeltaGRU._sequence_out``), so the two paths share the gates, thresholds and regulariser.
``calibrate`` sets the thresholds that ``DeltaGRU.at_skip`` aims at a given activity sparsity.
The method's spec and its differences from the authors' code are in ``baselines/delta_gru.py``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from baselines._cells import cached_pack
from baselines._sparse import addmm_read_columns, bisect_level
from baselines.ops.delta_gru_infer import FAST_PATH, delta_gru_infer_kernel_for
from baselines.ops.library import on_cpu
from harness.components.method import Method, SeqOut


def pack(model: Method) -> tuple[Tensor, Tensor]:
    """``W_i^T [V, 3D]`` and ``W_h^T [D, 3D]``, contiguous: row j is what column j reads."""
    return model.cell.weight_ih.t().contiguous(), model.cell.weight_hh.t().contiguous()


def input_deltas(x: Tensor, x_hat0: Tensor, theta_x: float) -> tuple[Tensor, Tensor]:
    """The thresholded input deltas ``dx [B, T, V]`` of ``DeltaGRU.forward`` and the last
    memorised input ``x^_T [B, V]``, scanned in NumPy.

    The same IEEE operations as ``DeltaGRU._memorised_steps`` (subtract, absolute value, ``>=``
    the threshold in the inputs' dtype, select), so the same deltas bit for bit, at a fraction of
    a torch op's dispatch per step; ``dx_t = x_t - x^_{t-1}`` where kept (the subtraction
    ``forward`` makes as ``x^_t - x^_{t-1}``), else exactly 0. Off the CPU (``on_cpu``: CUDA,
    meta) the same scan runs in torch ops (``scan_deltas``), without a copy to the host.
    """
    if not on_cpu(FAST_PATH, x, x_hat0):
        return scan_deltas(x, x_hat0, theta_x)
    xs = x.detach().numpy()
    ref = x_hat0.detach().numpy().copy()
    theta = xs.dtype.type(theta_x)
    steps = []
    for x_t in np.moveaxis(xs, 1, 0):  # T x [B, V] views
        d = x_t - ref
        keep = np.abs(d) >= theta
        steps.append(np.where(keep, d, xs.dtype.type(0)))
        ref = np.where(keep, x_t, ref)
    dx = np.stack(steps, 1) if steps else np.zeros_like(xs)
    return torch.from_numpy(dx).to(x.device), torch.from_numpy(ref).to(x.device)


def scan_deltas(x: Tensor, x_hat0: Tensor, theta_x: float) -> tuple[Tensor, Tensor]:
    """``input_deltas`` in torch ops, on ``x``'s device: the same deltas, bit for bit."""
    ref, steps = x_hat0.detach(), []
    for x_t in x.detach().unbind(1):
        d = x_t - ref
        keep = d.abs() >= theta_x
        steps.append(torch.where(keep, d, 0.0))
        ref = torch.where(keep, x_t, ref)
    return (torch.stack(steps, 1) if steps else torch.zeros_like(x)), ref


def project_deltas(dx: Tensor, wi_t: Tensor) -> Tensor:
    """``dx @ W_i^T`` for every step, ``[B, T, 3D]``, multiplying only the non-zero deltas.

    Each non-zero ``dx[b, t, v]`` scales row v of ``W_i^T`` and is added into its step's row
    (``index_add_``). Where more than half the deltas are non-zero, or their products would take
    more than 4 Mi elements, one dense matmul does it (equal to rounding).
    """
    B, T, V = dx.shape
    flat = dx.reshape(B * T, V)
    nz = flat.nonzero()  # [N, 2]: (b * T + t, v)
    n = nz.shape[0]
    if 2 * n > flat.numel() or n * wi_t.shape[1] > 1 << 22:
        return torch.matmul(dx, wi_t)
    rows, cols = nz.unbind(1)
    vals = flat[rows, cols].unsqueeze(1)  # [N, 1]
    prods = wi_t.index_select(0, cols).mul_(vals)  # [N, 3D]
    out = dx.new_zeros(B * T, wi_t.shape[1]).index_add_(0, rows, prods)
    return out.view(B, T, -1)


@torch.no_grad()
def fast_forward(model: Method, x: Tensor) -> SeqOut:
    """Inference that multiplies only the columns read: ``model.forward`` without the zero deltas.

    On CPU (float32/64), where the library builds, the whole sequence is one call of the fused
    kernel ``condrnn::delta_gru_infer_sequence`` (``baselines.ops.delta_gru_infer``): the same
    steps, each sequence of a batch multiplying only the rows of its own non-zero deltas (not the
    union's); the rest of this docstring is the PyTorch path that runs elsewhere (off the CPU
    with one warning line).

    The input side (deltas from ``input_deltas``) is projected for the whole sequence before the
    loop, one product per non-zero delta (``project_deltas``), and added into the memory at the
    steps that have one. Per step, the state deltas are thresholded as in ``forward`` and only
    the rows of the cached ``W_h^T`` whose unit's delta is non-zero in some sequence of the batch
    (the union; at batch 1 exactly the non-zero deltas) are multiplied into the memory
    (``addmm_read_columns``: a weighted ``embedding_bag`` at batch 1, a gathered ``addmm`` at
    batch > 1, nothing when no unit changed enough); the gates are those of ``forward``. Outputs,
    reads, final state and regulariser equal ``model.eval()(x)``'s, outputs to rounding (the sums
    run in another order; a delta within rounding of ``theta_h`` could then be cut differently),
    reads and mask exactly otherwise. Eval semantics, no autograd.
    """
    B = x.shape[0]
    D = model.hidden_size
    x_hat0, h, h_hat, m0, m_nh0 = model.init_state(B, x)
    params = (model.cell.weight_ih, model.cell.weight_hh)
    wi_t, wh_t = cached_pack(model, "_fast_delta", params, lambda: pack(model))
    acc_h0 = torch.cat([torch.zeros_like(m0[:, : 2 * D]), m_nh0], 1)
    kernel = delta_gru_infer_kernel_for(x, wi_t, wh_t, model.cell.bias)
    if kernel is not None:  # the whole sequence in one C++ call
        theta_x, theta_h = model.cfg.theta_x, model.cfg.theta_h
        hs, reads, x_last, h_hat, acc_x, acc_h, abs_dh = kernel(
            x, wi_t, wh_t, x_hat0, h, h_hat, m0, acc_h0, theta_x, theta_h
        )
        abs_dh = abs_dh if model.cfg.beta else None
        return model._reads_out(hs, reads, abs_dh, x_last, acc_x, h_hat, acc_h)
    dx, x_last = input_deltas(x, x_hat0, model.cfg.theta_x)
    proj = project_deltas(dx, wi_t).unbind(1)  # T x [B, 3D]
    changed = dx.ne(0).any(-1).any(0).tolist()  # [T]: some input delta at step t
    acc_x, acc_h = m0, acc_h0  # the input and state sides of the memories
    hs, dhs = [], []
    for proj_t, changed_t in zip(proj, changed, strict=True):
        if changed_t:
            acc_x = acc_x + proj_t
        h, h_hat, acc_h, dh = model._state_step(acc_x, h, h_hat, acc_h, wh_t, addmm_read_columns)
        hs.append(h)
        dhs.append(dh)
    return model._sequence_out(
        torch.stack(hs, 1), torch.stack(dhs, 1), dx, x_last, acc_x, h_hat, acc_h
    )


def calibrate(model: Method, x: Tensor, skip: float) -> str:
    """Set ``model``'s thresholds so that its activity sparsity on ``x`` (the share of the V + D
    columns its steps do not read) is ``skip``; returns them, for a report.

    By bisection: ``theta_x`` so that the share of input columns not read is ``skip`` (i.i.d.
    inputs change a lot from step to step, so it comes out large: about 2 at 90 % for
    ``x ~ N(0, I)``), then ``theta_h``, with that ``theta_x``, so that the share of all columns
    not read is ``skip``. At ``skip = 0`` both are 0: the dense GRU, which still reads no state
    column at the first step (``h_0 = 0``) and no delta that is exactly zero.
    """
    if skip <= 0:
        model.cfg = replace(model.cfg, theta_x=0.0, theta_h=0.0)
        return "theta_x = 0, theta_h = 0"
    x_hat0 = x.new_zeros(x.shape[0], x.shape[2])

    def input_share(theta_x: float) -> float:
        return (input_deltas(x, x_hat0, theta_x)[0] == 0).double().mean().item()

    def total_share(theta_h: float) -> float:
        model.cfg = replace(model.cfg, theta_h=theta_h)
        return 1.0 - fast_forward(model, x).reads.double().mean().item()

    theta_x, _ = bisect_level(input_share, skip, 0.0, 2 * x.abs().max().item() + 1.0, 20)
    model.cfg = replace(model.cfg, theta_x=theta_x)
    theta_h, _ = bisect_level(total_share, skip, 0.0, 2.0, 16)  # |h - h^| < 2
    return f"theta_x = {theta_x:.3g}, theta_h = {theta_h:.3g}"
