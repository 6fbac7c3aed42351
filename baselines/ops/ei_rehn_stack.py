"""EI-REHN's highway layers of one training step as one autograd node (docs/methods.md 2.14).

``EIREHN._layers`` writes a step's layers as the paper's equations (eqs. 9-10, 17-22) in torch
ops: autograd records about 35 nodes per layer, and a training step runs about 85 small kernels
per layer, forward and backward, plus the engine's bookkeeping of each node (361 nodes per step at
R_max 10). ``stack_layers`` computes the same equations without recording them, in shorter forms
(``addmm``, ``addcmul``), with their derivatives written out below: about 50 kernels per layer and
one autograd node per step, and the weight gradients of all the step's layers in one matmul per
weight. Equal to ``_layers`` to float rounding, values and gradients (tests/test_ei_rehn.py, in
float64); not bit for bit.

On CPU in float32/float64, where the optional C++ kernel builds (``ei_rehn_stack_kernel``, a
``baselines.ops.library.TrainingKernel``), ``stack_layers`` runs ``_FusedStack``: the same forward
and
backward (``csrc/ei_rehn_stack.cpp``) with no Python per layer, only the matmuls calling ATen (into
preallocated buffers) and tanh/sigmoid ATen's vectorised ones on whole buffers, every other
elementwise part of a layer one fused loop over B x D. The Python ``_Stack`` below is the reference
(and the path wherever the kernel cannot run, or with ``HARNESS_NO_KERNELS=1``): the kernel equals
it to float rounding, not bit for bit (tests/test_kernels.py, float64, against ``_Stack`` and
``_layers``). At HAR's sizes this cuts the layers' time by a third to a half; they are then bound by
their matmuls (docs/methods.md 2.14).

Layer r (0-based) from ``h = h^r``, ``u = [s^r; g^r; z^r]`` (``[s0; g0; z0]`` at r = 0) and
``acc = sum_{k<r} w^k``, the branches s and g side by side in ``[B, 2D]`` tensors (s first)::

    z = tanh(u W_z^T + b_z)                                    eq. 18
    [w; gbar] = [z P^T; sigmoid(z Pbar^T + bbar)]              eqs. 19-21
    diag = w + gbar * (acc - w)                                eqs. 17, 22: gbar acc + (1 - gbar) w
    a = gbar * (h W0^T) + diag * [h; h] + b (+ W_x x_t at r = 0)
    s = tanh(a_s);  g = sigmoid(a_g);  gate = d^r * g          eqs. 22, 10
    h' = h + gate * (s - h)                                    eq. 9

and its derivatives, from ``dh'`` and what the next layer sends back to ``s, g, z`` (through its
``u``) and to ``acc``::

    dgate = dh' (s - h);  ds = dh' gate + ds_next;  dg = dgate d^r + dg_next;  dd^r = dgate g
    da = [ds (1 - s^2); dg g (1 - g)]
    dgbar = da * (h W0^T + (acc - w) * [h; h]);  ddiag = da * [h; h]
    dw = dacc_next + ddiag (1 - gbar);  dacc = dacc_next + ddiag gbar;  dm = dgbar gbar (1 - gbar)
    dh = dh' (1 - gate) + (da gbar) W0 + (da * diag)_s + (da * diag)_g    (one matmul: [W0; I; I])
    dz = [dw; dm] P + dz_next;  du = (dz (1 - z^2)) W_z
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines.ops.library import TrainingKernel, none_if_empty

_tanh_backward = torch.ops.aten.tanh_backward
_sigmoid_backward = torch.ops.aten.sigmoid_backward

# EI-REHN's training kernel (``_FusedStack`` here, the whole step in
# ``baselines.ops.ei_rehn_fused``):
# its source is part of the code version of the methods whose modules hold it (``method_code``).
ei_rehn_stack_kernel = TrainingKernel("ei_rehn_stack", "EI-REHN training")
ei_rehn_stack_kernel_status = ei_rehn_stack_kernel.status


def stack_layers(
    h: Tensor,
    d: Tensor,
    bx: Tensor,
    weight0: Tensor,
    bias: Tensor,
    proj: Tensor,
    mix_bias: Tensor,
    hyper_weight: Tensor,
    hyper_bias: Tensor,
    init: Tensor,
) -> Tensor:
    """``h_t`` after the layers ``1..R`` of one step, ``R = d.shape[1]`` (``EIREHN._layers``).

    Args:
        h: ``h_{t-1}`` ``[B, D]``.
        d: the elastic gate of the layers to run, ``[B, R, D]``.
        bx: ``W_x x_t + b`` ``[B, 2D]``: layer 1's input term and bias.
        weight0: ``W^0`` ``[2D, D]``; bias: ``b`` ``[2D]`` (layers 2..R).
        proj: ``[P; Pbar]`` ``[4D, Dz]``; mix_bias: ``bbar`` ``[2D]``.
        hyper_weight: ``[W_zh, W_zg, W_zz]`` ``[Dz, 2D + Dz]``; hyper_bias: ``b_z`` ``[Dz]``.
        init: ``[s0; g0; z0]`` ``[2D + Dz]``.
    """
    if d.shape[1] == 0:
        return h
    args = (h, d, bx, weight0, bias, proj, mix_bias, hyper_weight, hyper_bias, init)
    kernel = stack_kernel(*args)
    if kernel is not None:
        return _FusedStack.apply(kernel, *args)
    return _Stack.apply(*args)


def stack_kernel(*tensors: Tensor) -> Any:
    """The kernel where it can run the layers on these tensors, else None
    (``TrainingKernel.for_tensors``)."""
    return ei_rehn_stack_kernel.for_tensors(*tensors)


class _Stack(torch.autograd.Function):
    """The layers of one step: the forward keeps what the written-out backward reads."""

    @staticmethod
    def forward(ctx, h, d, bx, weight0, bias, proj, mix_bias, hyper_weight, hyper_bias, init):
        w0_t, proj_t, hyper_t = weight0.t(), proj.t(), hyper_weight.t()
        u = init.expand(h.shape[0], -1)
        keep = []  # per layer: h, [h; h], u, z, w, gbar, acc - w, h W0^T, diag, s, g, gate, s - h
        acc = None
        for r, d_r in enumerate(d.unbind(1)):
            z = torch.tanh(torch.addmm(hyper_bias, u, hyper_t))  # eq. 18
            w, gbar = torch.mm(z, proj_t).chunk(2, 1)
            gbar.add_(mix_bias).sigmoid_()  # eqs. 19-21
            if acc is None:  # acc = 0
                aw, diag, acc = None, torch.addcmul(w, gbar, w, value=-1), w
            else:
                aw = acc - w
                diag = torch.addcmul(w, gbar, aw)  # eqs. 17, 22
                acc = acc + w
            hw = torch.mm(h, w0_t)
            h2 = torch.cat([h, h], 1)
            a = torch.addcmul(bx if r == 0 else bias, gbar, hw).addcmul_(diag, h2)
            a_s, a_g = a.chunk(2, 1)
            s, g = torch.tanh(a_s), torch.sigmoid(a_g)  # eq. 22
            gate, sh = d_r * g, s - h  # eq. 10
            keep.append((h, h2, u, z, w, gbar, aw, hw, diag, s, g, gate, sh))
            h = torch.addcmul(h, gate, sh)  # eq. 9
            u = torch.cat([s, g, z], 1)
        ctx.save_for_backward(d, weight0, proj, hyper_weight)
        ctx.keep = keep
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        d, weight0, proj, hyper_weight = ctx.saved_tensors
        keep, ctx.keep = ctx.keep, None
        R, D = d.shape[1], d.shape[2]
        split = (D, D, hyper_weight.shape[0])  # u = [s; g; z]
        d_r = d.unbind(1)
        eye = torch.eye(D, dtype=d.dtype, device=d.device)
        w0_ii = torch.cat([weight0, eye, eye])  # [h W0^T, diag * [h; h]] -> dh
        dd, da, dhw, dpw, dz = ([None] * R for _ in range(5))
        dh, du, dacc = grad_h, None, None  # from layer r + 1: to h^{r+1}, to its u, to acc
        for r in reversed(range(R)):
            h, h2, u, z, w, gbar, aw, hw, diag, s, g, gate, sh = keep[r]
            dgate = dh * sh  # eq. 9
            if du is None:
                ds, dg = dh * gate, dgate * d_r[r]
            else:
                ds_next, dg_next, dz_next = du.split_with_sizes(split, 1)
                ds, dg = torch.addcmul(ds_next, dh, gate), torch.addcmul(dg_next, dgate, d_r[r])
            dd[r] = dgate * g  # eq. 10
            da[r] = torch.cat([_tanh_backward(ds, s), _sigmoid_backward(dg, g)], 1)  # eq. 22
            dhw[r] = da[r] * gbar
            ddiag = da[r] * h2
            dgbar = da[r] * hw
            if aw is None:
                dgbar.addcmul_(ddiag, w, value=-1)
            else:
                dgbar.addcmul_(ddiag, aw)
            dw = torch.addcmul(ddiag if dacc is None else dacc + ddiag, ddiag, gbar, value=-1)
            if r > 0:  # eq. 17
                dacc = ddiag * gbar if dacc is None else dacc.addcmul_(ddiag, gbar)
            dpw[r] = torch.cat([dw, _sigmoid_backward(dgbar, gbar)], 1)  # eqs. 19-21
            dh = torch.addcmul(dh, dh, gate, value=-1).addmm_(
                torch.cat([dhw[r], da[r] * diag], 1), w0_ii
            )
            dzz = torch.mm(dpw[r], proj) if du is None else torch.addmm(dz_next, dpw[r], proj)
            dz[r] = _tanh_backward(dzz, z)  # eq. 18
            du = torch.mm(dz[r], hyper_weight)
        hs, _, us, zs = (torch.cat(k) for k in list(zip(*keep, strict=True))[:4])
        dpw_all, dz_all = torch.cat(dpw), torch.cat(dz)  # the layers' rows stacked: [R B, .]
        return (
            dh,
            torch.stack(dd, 1),
            da[0],
            torch.cat(dhw).t().mm(hs),
            torch.cat(da[1:]).sum(0) if R > 1 else None,
            dpw_all.t().mm(zs),
            dpw_all[:, 2 * D :].sum(0),
            dz_all.t().mm(us),
            dz_all.sum(0),
            du.sum(0),
        )


class _FusedStack(torch.autograd.Function):
    """``_Stack`` in C++ (``csrc/ei_rehn_stack.cpp``): the same forward, what it saves packed
    per layer ``[R, B, .]``, and the same 10 gradients (bias's None where R = 1)."""

    @staticmethod
    def forward(ctx, kernel, *args):
        args = [t.contiguous() for t in args]
        h, *saved = kernel.forward(*args)
        d, weight0, proj, hyper_weight = args[1], args[3], args[5], args[7]
        ctx.kernel = kernel
        ctx.save_for_backward(d, weight0, proj, hyper_weight, *saved)
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h):
        grads = ctx.kernel.backward(grad_h.contiguous(), *ctx.saved_tensors)
        return None, *map(none_if_empty, grads)
