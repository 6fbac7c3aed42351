"""EI-REHN's training step, forward and backward, in C++ (docs/methods.md 2.14), as the ops of
``csrc/ei_rehn_stack.cpp``: a step's highway layers, ``condrnn::ei_rehn_stack_forward`` (its
backward registered with it) and ``..._backward``; the whole step (the local rate, the elastic gate
and its depth trace, then the same layers), ``condrnn::ei_rehn_stack_step_forward`` (its backward
registered with it) and ``..._step_backward``.

The layers (``stack_layers``). ``EIREHN._layers`` writes a step's layers as the paper's equations
(eqs. 9-10, 17-22) in torch ops: autograd records about 35 nodes per layer, and a training step
runs about 85 small kernels per layer, forward and backward, plus the engine's bookkeeping of each
node (361 nodes per step at R_max 10). ``_Stack`` below computes the same equations without
recording them, in shorter forms (``addmm``, ``addcmul``), with their derivatives written out:
about 50 kernels per layer and one autograd node per step, and the weight gradients of all the
step's layers in one matmul per weight. Equal to ``_layers`` to float rounding, values and
gradients (tests/test_ei_rehn.py, in float64); not bit for bit. On CPU in float32/float64, where
the optional C++ kernel builds (``ei_rehn_stack_kernel``, a
``baselines.ops.library.Kernel``), ``stack_layers`` runs the op
``condrnn::ei_rehn_stack_forward`` instead: the same forward and backward with no Python per
layer, only the matmuls calling ATen (into preallocated buffers) and tanh/sigmoid ATen's vectorised
ones on whole buffers, every other elementwise part of a layer one fused loop over B x D. The
Python ``_Stack`` is the reference (and the path wherever the kernel cannot run, or with
``HARNESS_NO_KERNELS=1``): the op equals it to float rounding, not bit for bit
(tests/test_kernels.py, float64, against ``_Stack`` and ``_layers``). At HAR's sizes this cuts the
layers' time by a third to a half; they are then bound by their matmuls (docs/methods.md 2.14).

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

The whole step (``fused_step``). A step of ``EIREHN._train_forward`` is the local rate
``alpha_t = sigmoid(W_a [h; x] + b_a)`` (eq. 14), the elastic gate of every layer with its depth
trace (``ElasticGate.trace``: eq. 11 in the overflow-safe form of ``baselines._elastic._gate``,
``n``, the mask and ``R``) and the batch's ``max_b R_t`` highway layers (``stack_layers``). In
Python that is about 40 torch ops and four autograd nodes per step besides the layers, and a
``.item()`` to learn the depth. Where the kernel builds, ``fused_step`` does all of it in one call
of ``condrnn::ei_rehn_stack_step_forward``, forward and backward (``..._step_backward``:
``_ElasticGate.backward``, the rate's sigmoid and matmul, ``_Stack.backward``), and returns the
number of layers it ran. The gate's expm1, log and exp are ATen's vectorised ones on whole
``[B, R_max, D]`` buffers, so its values round as the Python gate's do. The Python step
(``_ElasticGate``, ``_gate``, ``_Stack``) is the reference and the path wherever the kernel cannot
run: the fused step equals it to float rounding, not bit for bit (tests/test_kernels.py, float64,
values and every gradient, the gate's edge cases included).

The layer count of a step is data: the op returns it (``(Tensor[], SymInt)``), and the layers'
saved tensors have that many rows. Its fake implementation says so with an unbacked symbolic int
(``torch.library.get_ctx().new_dynamic_size``, bounded by ``first`` and R_max), which only
FakeTensor with a shape environment (``torch.compile``, export) can hold: on the meta device the
step op does not run (torch's meta kernel refuses an op of data-dependent shape, as the Python
step stops at its host sync ``int(tr.R.max())`` there); under FakeTensor it does, forward and
backward (tests/test_kernels.py). The method reads the count on the host (``ran += layers``; the
next step's ``first`` is ``ran == 0``), the fused step's equivalent of the Python step's sync.
Under ``torch.compile`` dynamo breaks the graph at the op (an operator of data-dependent output
shape) and runs it eagerly; with ``capture_dynamic_output_shape_ops`` it traces the forward, and
AOTAutograd the backward too: no gradient's shape depends on the count (the layers' parameters
get 0 where no layer ran, bias 0 where one did: layer 1 takes its bias with ``bx``, so a step's
bias gradient is 0, not none, as ``_Stack``'s; ``bias`` is also in ``bx``, so its gradient over a
sequence is the same either way), and opcheck's AOT dispatch test passes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from baselines.ops.library import Kernel, autograd, fake, incoming

_tanh_backward = torch.ops.aten.tanh_backward
_sigmoid_backward = torch.ops.aten.sigmoid_backward

# EI-REHN's training kernel (the layers of a step, and the whole step): its source is part of the
# code version of the methods whose modules hold it (``method_code``).
ei_rehn_stack_kernel = Kernel("ei_rehn_stack", "EI-REHN training")
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
    """``h_t`` after the layers ``1..R`` of one step, ``R = d.shape[1]`` (``EIREHN._layers``): by
    the op ``condrnn::ei_rehn_stack_forward`` where the kernel runs (its backward registered with
    it: the gradients of every input, bias's 0 where R = 1), else by ``_Stack``.

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
        h_t, *_saved = kernel.forward(*(t.contiguous() for t in args))
        return h_t
    return _Stack.apply(*args)


def stack_kernel(*tensors: Tensor) -> Any:
    """The kernel where it can run the layers on these tensors, else None
    (``Kernel.for_tensors``)."""
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
            torch.cat(da[1:]).sum(0) if R > 1 else da[0].new_zeros(2 * D),
            dpw_all.t().mm(zs),
            dpw_all[:, 2 * D :].sum(0),
            dz_all.t().mm(us),
            dz_all.sum(0),
            du.sum(0),
        )


@fake("ei_rehn_stack_forward")
def _stack_forward_fake(h, d, bx, weight0, bias, proj, mix_bias, hyper_weight, hyper_bias, init):
    B, R, D = d.shape
    U = 2 * D + hyper_weight.shape[0]
    return [
        h.new_empty(B, D),  # h_t
        h.new_empty(1, B, D),  # H: h^0
        h.new_empty(R + 1, B, U),  # SGZ: every layer's u = [s; g; z]
        h.new_empty(R, B, 2 * D),  # GBAR
        h.new_empty(R, B, 2 * D),  # HW: h W0^T
        h.new_empty(R, B, 2 * D),  # W: w
    ]


@fake("ei_rehn_stack_backward")
def _stack_backward_fake(grad_h, d, weight0, proj, hyper_weight, H, SGZ, GBAR, HW, W):
    B, R, D = d.shape
    return [
        grad_h.new_empty(B, D),  # h
        grad_h.new_empty(B, R, D),  # d
        grad_h.new_empty(B, 2 * D),  # bx
        *_layer_grads_fake(grad_h, D, hyper_weight),
    ]


def _layer_grads_fake(t: Tensor, D: Any, hyper_weight: Tensor) -> list[Tensor]:
    """The shapes of the gradients of weight0, bias, proj, mix_bias, hyper_weight, hyper_bias and
    init: their parameters', however many layers ran (0 where none did; bias's where one did:
    layer 1 takes its bias with bx), so that no shape depends on the layer count."""
    Dz, U = hyper_weight.shape
    return [
        t.new_empty(2 * D, D),  # weight0
        t.new_empty(2 * D),  # bias
        t.new_empty(4 * D, Dz),  # proj
        t.new_empty(2 * D),  # mix_bias
        t.new_empty(Dz, U),  # hyper_weight
        t.new_empty(Dz),  # hyper_bias
        t.new_empty(U),  # init
    ]


def _stack_setup(ctx, inputs, output):
    _h, d, _bx, weight0, _bias, proj, _mix_bias, hyper_weight, _hyper_bias, _init = inputs
    _h_t, *saved = output  # H, SGZ, GBAR, HW, W: what only the backward reads
    ctx.save_for_backward(d, weight0, proj, hyper_weight, *saved)
    ctx.mark_non_differentiable(*saved)
    ctx.set_materialize_grads(False)


def _stack_backward(ctx, grads):
    saved = ctx.saved_tensors
    grad_h = incoming(grads[0], saved[4][0])
    return tuple(torch.ops.condrnn.ei_rehn_stack_backward(grad_h, *saved))


autograd("ei_rehn_stack_forward", _stack_backward, _stack_setup)


def step_kernel(*tensors: Tensor) -> Any:
    """The kernel where it can run a step on these tensors, else None
    (``Kernel.for_tensors``)."""
    return ei_rehn_stack_kernel.for_tensors(*tensors)


def fused_step(
    kernel: Any,
    first: bool,
    p: Tensor,
    h: Tensor,
    rate_h: Tensor,
    alpha: Tensor,
    beta: Tensor,
    r_max: int,
    weights: tuple[Tensor, ...],
) -> tuple[Tensor, Tensor, Tensor, Tensor, int]:
    """One training step: ``(h_t, d^1, n, mask, layers)``, by the op
    ``condrnn::ei_rehn_stack_step_forward`` (its backward registered with it: the gradients of p,
    h, rate_h, alpha, beta and the weights; the layers' 0 where no layer ran, bias's where one
    did).

    Args:
        kernel: ``step_kernel``'s.
        first: no layer has run yet in this sequence: run at least one (``_train_forward``).
        p: the step's input terms ``[W_a,x x_t + b_a; W_x x_t + b]`` ``[B, 3D]`` (rows of any
            stride, each contiguous).
        h: ``h_{t-1}`` ``[B, D]``.
        rate_h: ``W_a``'s columns on h, ``[D, D]``.
        alpha, beta: ``softplus(alpha_hat)``, ``sigmoid(beta_hat)`` ``[D]``.
        r_max: R_max.
        weights: ``stack_layers``'s ``weight0, bias, proj, mix_bias, hyper_weight, hyper_bias,
            init``.

    Returns:
        h_t; the gate of layer 1, ``d^1 [B, D]`` (with its gradient, for the compute penalty); the
        depth ``n`` and mask ``[B, D]`` (float, no gradient); the number of layers run,
        ``max(max_b R_t, first)`` (under FakeTensor an unbacked symbolic int).
    """
    weights = tuple(w.contiguous() for w in weights)
    args = (p, h.contiguous(), rate_h, alpha.contiguous(), beta.contiguous(), *weights)
    (h_t, d1, n, mask, *_saved), layers = kernel.step_forward(*args, r_max, first)
    return h_t, d1, n, mask, layers


@fake("ei_rehn_stack_step_forward")
def _step_forward_fake(p, h, rate_h, alpha, beta, *weights_r_max_first):
    *weights, r_max, first = weights_r_max_first  # weight0, bias, proj, mix_bias, hyper_weight, ...
    hyper_weight = weights[4]
    B, D = h.shape
    U = 2 * D + hyper_weight.shape[0]
    # the layers run, max(max_b R_t, first): data (csrc/ei_rehn_stack.cpp)
    L = torch.library.get_ctx().new_dynamic_size(min=int(first), max=r_max)
    return [
        h.new_empty(B, D),  # h_t
        h.new_empty(B, D),  # d^1
        h.new_empty(B, D),  # n
        h.new_empty(B, D),  # mask
        h.new_empty(B, D),  # AT: alpha_t
        h.new_empty(B, r_max, D),  # DG: the gate d
        h.new_empty(B, r_max, D),  # MG: 1 - e^{-u}
        h.new_empty(B, r_max, D),  # EG: e^q
        h.new_empty(1, B, D),  # H: h^0
        h.new_empty(L + 1, B, U),  # SGZ
        h.new_empty(L, B, 2 * D),  # GBAR
        h.new_empty(L, B, 2 * D),  # HW
        h.new_empty(L, B, 2 * D),  # W
    ], L


@fake("ei_rehn_stack_step_backward")
def _step_backward_fake(
    grad_h, grad_d1, rate_h, weight0, proj, hyper_weight, AT, DG, MG, EG, H, SGZ, GBAR, HW, W
):
    B, D = AT.shape
    layers = _layer_grads_fake(AT, D, hyper_weight)  # 0 where no layer ran (GBAR: L rows)
    return [
        AT.new_empty(B, 3 * D),  # p
        AT.new_empty(B, D),  # h
        AT.new_empty(D, D),  # rate_h
        AT.new_empty(D),  # alpha
        AT.new_empty(D),  # beta
        *layers,
    ]


def _step_setup(ctx, inputs, output):
    _p, _h, rate_h, _alpha, _beta, weight0, _bias, proj, _mix, hyper_weight, *_rest = inputs
    (_h_t, _d1, n, mask, *saved), _layers = output  # AT, DG, MG, EG, H, SGZ, GBAR, HW, W
    ctx.save_for_backward(rate_h, weight0, proj, hyper_weight, *saved)
    ctx.mark_non_differentiable(n, mask, *saved)
    ctx.set_materialize_grads(False)


def _step_backward(ctx, grads, _grad_layers):
    # the op returns (Tensor[], SymInt): the tensors' gradients come as one list, then the
    # count's (None: an int has none)
    saved = ctx.saved_tensors
    grad_h = incoming(grads[0], saved[4])  # shaped like AT
    d = torch.ops.condrnn.ei_rehn_stack_step_backward(grad_h, grads[1], *saved)
    return (*d, None, None)


autograd("ei_rehn_stack_step_forward", _step_backward, _step_setup)
