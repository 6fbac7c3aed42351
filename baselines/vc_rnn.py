"""VC-RNN (Variable Computation RNN) in its GRU form: a scalar scheduler picks how many leading
hidden units are recomputed at each step.

Paper: Jernite, Grave, Joulin & Mikolov, "Variable Computation in Recurrent Neural Networks",
ICLR 2017, https://arxiv.org/abs/1611.06188; used as a baseline by S-SA (Hartvigsen et al.,
CIKM 2020, https://doi.org/10.1145/3340531.3412018). Equations as restated in docs/methods.md 2.7
(the VC paper itself could not be consulted, so no equation numbers are given)::

    m_t = sigmoid(w_h . h_{t-1} + w_x . x_t + b)                 scheduler, a scalar per sequence
    e_{t,i} = Thr_eps(sigmoid(lam * (m_t * D - i))),  i = 1..D   soft mask over the units
    h_t = e_t * GRU(e_t * h_{t-1}, x_t) + (1 - e_t) * h_{t-1}     partial update
    loss += gamma * sum_t |m_t - m_target|                        (mean over the batch)

``Thr_eps(v)`` is 1 above ``1 - eps``, 0 below ``eps`` and ``v`` between; the update mask is
``u = 1[e > 0]`` (a soft update counts as an update, docs/methods.md 1.1).

Differences from the paper:
- [DECISION] docs/methods.md 2.3: the reset-after GRU shared by all GRU-based methods.
- [DECISION] docs/methods.md 2.7: the input is masked to its first dims (``e_t * x_t``) only when
  V = D; when V != D it is not masked.
- [DECISION] docs/methods.md 2.7: the sharpness ``lam`` ramps linearly from ``sharpness_start``
  (0.1) at the first epoch to ``sharpness_end`` (20, a soft band under one unit wide) at the last;
  evaluation always uses ``sharpness_end``, so Skip % is reported at the final, sharp mask
  (docs/methods.md 4.1). eps = 0.01.
- The scheduler is initialised to zero (m = 0.5 at the start), as in the third-party PyTorch code.
- The target proportion ``m_target`` = 0.34 is inferred from S-SA's 66% Skip; ``gamma`` (the
  weight of the L1 pull) is not given by S-SA and defaults to 1e-2 here.
- Cost: the paper-effective count (S-SA's convention) charges ``3(D+V)`` per updated unit plus the
  scheduler ``D+V`` at every step. ``exact_step_macs`` gives the VC-structural count, where the
  updated units read only the first ``k_t`` state dims: ``3 k_t (k_t + V) + (D+V)`` (with ``V``
  replaced by ``k_t`` when the input is masked too). ``forward`` computes every unit and masks;
  ``fast_forward`` (inference) computes only that VC-structural part: rows and columns ``[:k]``.
- ``gru_form="before"`` runs the reset-before GRU of S-SA eq. 3 on the same parameters. No count
  changes. Paper-effective: by definition ``3(D+V)`` per updated unit. VC-structural: an updated
  unit's candidate reads ``r_j hbar_j`` of every unit j, but ``hbar = e * h`` is 0 beyond the
  prefix ``[:k_t]``, so only the r rows of the updated units are needed, and each reads only
  the first ``k_t`` state dims: still ``3 k_t (k_t + V)``. A skipped unit needs no row at all.
  ``fast_forward`` serves both forms.
- Training on CPU (float32/64) runs the sequence as one C++ autograd node where the optional
  kernel builds (``baselines.ops.vcrnn_train``, ``csrc/vcrnn_train.cpp``, built before the epoch's
  timer starts): the scheduler, the thresholded soft mask, the GRU on ``e * h`` (either form; with
  the input masked, ``W_i (e * x_t) + b`` a step inside the kernel) and the mix over all steps,
  forward and backward, ``Thr_eps`` passing the gradient where ``eps <= soft <= 1 - eps`` as
  ``torch.where`` does. It returns ``m``, so the L1 pull's gradient flows as on the per-step path.
  It equals the per-step ``_step`` loop (the reference, and the path in eval, on CUDA, in
  other dtypes, where the kernel does not build and with ``HARNESS_NO_KERNELS=1``) to float
  rounding, not bit for bit; skipped units (e = 0) stay exact copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines._cells import (
    GRU_FORMS,
    GRUWeights,
    cached_pack,
    gru_macs_per_unit,
    gru_rows,
    masked_lerp,
    pack_gru_rows,
)
from baselines.ops.library import on_cpu
from baselines.ops.vcrnn import pack_vc_columns, vcrnn_kernel, vcrnn_kernel_status
from baselines.ops.vcrnn_train import sequence_kernel, vc_sequence
from harness.components.config import MAX_PENALTY, check_knobs, knob
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method

# sigmoid(lam * (m D - i)): at 1e4 the soft band is far narrower than one unit, a hard step
MAX_SHARPNESS = 1e4


@dataclass(frozen=True)
class VCRNNConfig:
    """Knobs of VC-GRU.

    Attributes:
        m_target: target update proportion m-bar of the L1 pull.
        gamma: weight of the L1 pull ``gamma * sum_t |m_t - m_target|``.
        sharpness_start: mask sharpness ``lam`` at the first training epoch.
        sharpness_end: sharpness at the last training epoch and at evaluation.
        eps: threshold of ``Thr_eps``.
        gru_form: ``after`` (reset after the recurrent matmul, docs/methods.md 2.3 [DECISION]) or
            ``before`` (S-SA eq. 3).
    """

    m_target: float = knob(0.34, gt=0, le=1)
    gamma: float = knob(1e-2, ge=0, le=MAX_PENALTY)
    sharpness_start: float = knob(0.1, gt=0, le=MAX_SHARPNESS)
    sharpness_end: float = knob(20.0, gt=0, le=MAX_SHARPNESS)
    eps: float = knob(0.01, gt=0, lt=0.5)
    gru_form: str = knob("after", choices=GRU_FORMS, legacy="after")  # an option since 824fa7b

    def __post_init__(self) -> None:
        check_knobs(self, "method", "vc-rnn")


def _rows_before(w_h: Tensor, h_bar: Tensor, xp: Tensor) -> Tensor:
    """Reset-before GRU candidate of the prefix ``[:k]`` from its recurrent rows and columns
    ``w_h [k, 3, k]``, ``h_bar [k, B]`` (``e * h``, 0 beyond k, so ``r * h_bar`` is too and no
    other r row is needed) and ``xp = W_i x + b [k, 3, B]``."""
    k, B = h_bar.shape
    hrz = torch.mm(w_h[:, :2].reshape(2 * k, k), h_bar).view(k, 2, B)
    xr, xz, xn = xp.unbind(1)
    r = torch.sigmoid(xr + hrz[:, 0])  # S-SA eq. 1
    z = torch.sigmoid(xz + hrz[:, 1])  # S-SA eq. 2
    n = torch.tanh(xn + torch.mm(w_h[:, 2], r * h_bar))  # S-SA eq. 3, reset before the matmul
    return torch.lerp(n, h_bar, z)  # (1 - z) n + z h-bar


def threshold_eps(v: Tensor, eps: float) -> Tensor:
    """``Thr_eps``: 1 above ``1 - eps``, 0 below ``eps``, ``v`` (and its gradient) in between."""
    return torch.where(v > 1 - eps, 1.0, torch.where(v < eps, 0.0, v))


@register_method("vc-rnn")
class VCRNN(Method):
    """VC-GRU: a GRU whose leading ``~m_t D`` units are updated, the others copied."""

    config_cls = VCRNNConfig
    budget_knobs = ("m_target", "gamma")  # the target update share, the pull towards it

    def __init__(self, input_size: int, hidden_size: int, cfg: VCRNNConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        D, V = self.hidden_size, self.input_size
        self.cell = GRUWeights(V, D, form=self.cfg.gru_form)
        self.sched_h = nn.Parameter(torch.zeros(1, D))  # w_h
        self.sched_x = nn.Parameter(torch.zeros(1, V))  # w_x
        self.sched_b = nn.Parameter(torch.zeros(1))  # b
        self.mask_input = V == D
        self.register_buffer("unit_index", torch.arange(1, D + 1).float(), persistent=False)
        self.sharpness = self.cfg.sharpness_start

    # --- schedule ------------------------------------------------------------------------------
    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        super().on_epoch_start(epoch, num_epochs)
        c = self.cfg
        frac = epoch / max(num_epochs - 1, 1)
        self.sharpness = c.sharpness_start + (c.sharpness_end - c.sharpness_start) * min(frac, 1.0)
        # the training kernel, built (or loaded) before the epoch's timer starts: time.train_s
        # holds no compile
        sequence_kernel(*self.parameters())  # cached: a build at most once per process

    def current_sharpness(self) -> float:
        """The ramped sharpness while training; the final one at evaluation."""
        return self.sharpness if self.training else self.cfg.sharpness_end

    # --- cost ----------------------------------------------------------------------------------
    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, always=D + V, per_unit=gru_macs_per_unit(V, D))

    def exact_step_macs(self, out: SeqOut) -> Tensor:
        """VC-structural MACs ``[B, T]``: the updated units are the first ``k_t``, and read only
        the first ``k_t`` state dims (and input dims when the input is masked). The same in both
        GRU forms (module docstring)."""
        D, V = self.hidden_size, self.input_size
        k = (out.mask.detach() > 0).sum(-1).double()  # [B, T]
        v_read = k if self.mask_input else V
        return 3 * k * (k + v_read) + (D + V)

    # --- recurrence ----------------------------------------------------------------------------
    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        weights = (self.cell.weight_hh.t(), self.sched_h.t())
        h_new, u, m = self._step(x_t, self._input_proj(x_t), state, *weights)
        m1 = m.squeeze(-1)  # [B]
        extras = {"m": m1, "m_dev": (m1 - self.cfg.m_target).abs()}
        return StepOut(h_new, h_new, u, extras=extras)

    def _input_proj(self, x: Tensor) -> Tensor:
        """The input terms of every step in one matmul: the scheduler's ``w_x . x + b``, then,
        unless the input is masked (V = D, so the GRU reads ``e * x``), ``W_i x + b_i``:
        ``[..., 1]`` or ``[..., 1 + 3D]``."""
        if self.mask_input:
            return F.linear(x, self.sched_x, self.sched_b)
        weight = torch.cat([self.sched_x, self.cell.weight_ih])  # [1 + 3D, V]
        return F.linear(x, weight, torch.cat([self.sched_b, self.cell.bias]))

    def _step(
        self, x_t: Tensor, p_t: Tensor, h: Tensor, weight_hh_t: Tensor, sched_h_t: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(h_t, u_t, m_t [B, 1])`` from ``h = h_{t-1} [B, D]``, the input terms ``p_t`` of
        ``_input_proj`` and the recurrent weights transposed once per sequence."""
        D = self.hidden_size
        sched_x, xp = (p_t, None) if self.mask_input else p_t.split((1, 3 * D), -1)
        m = torch.sigmoid(torch.addmm(sched_x, h, sched_h_t))  # [B, 1] scheduler
        soft = torch.sigmoid(self.current_sharpness() * (m * D - self.unit_index))  # [B, D]
        e = threshold_eps(soft, self.cfg.eps)  # [B, D] soft mask, 0 on skipped units
        if xp is None:  # the input is masked: x-bar = e * x
            xp = self.cell.input_proj(e * x_t)
        cand = self.cell.train_step(xp, e * h, weight_hh_t)  # GRU(h-bar, x-bar), [B, D]
        # e in [0, 1]: e = 0 leaves an exact copy of h (masked_lerp).
        h_new = masked_lerp(e, cand, h)  # [B, D]
        return h_new, (e > 0).to(h.dtype), m  # u: the ceiling rule

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        """``step_loop`` with the input terms of every step in one matmul before the loop (when
        the input is not masked), the recurrent weights transposed once and the scheduler's
        deviation taken once on the stacked ``m`` (fewer ops per step; the same values).

        Training on CPU in float32/64 runs the same steps in one C++ node where the optional
        kernel builds (``baselines.ops.vcrnn_train``, built before the epoch's timer starts): both
        GRU forms, the input masked or not, the ramped sharpness; it returns ``m`` (the L1 pull's
        gradient flows through it as here) and the soft mask ``e``, and equals this loop to float
        rounding, not bit for bit. The loop is the reference and the path in eval, on CUDA,
        in other dtypes, where the kernel does not build and with ``HARNESS_NO_KERNELS=1``."""
        h = self.init_state(x.shape[0], x) if state is None else state
        kernel = sequence_kernel(x, h, self.cell.weight_hh) if self.training else None
        if kernel is not None:  # the same steps in one C++ node (baselines.ops.vcrnn_train)
            c = self.cell
            weights = (self.sched_h, self.sched_x, self.sched_b, c.weight_ih, c.weight_hh, c.bias)
            hs, m_all, e = vc_sequence(
                kernel, x, h, weights, self.current_sharpness(), self.cfg.eps, self.mask_input,
                c.form == "before",
            )  # fmt: skip
            us, h = (e > 0).to(x.dtype), hs[:, -1]  # u: the ceiling rule
        else:
            weights = (self.cell.weight_hh.t(), self.sched_h.t())
            steps, masks, ms = [], [], []
            # one unbind, linear backward (see Method.step_loop)
            for x_t, p_t in zip(x.unbind(1), self._input_proj(x).unbind(1), strict=True):
                h, u, m = self._step(x_t, p_t, h, *weights)
                steps.append(h)
                masks.append(u)
                ms.append(m)
            hs, us, m_all = torch.stack(steps, 1), torch.stack(masks, 1), torch.cat(ms, 1)
        extras = {"m": m_all.mean(1), "m_dev": (m_all - self.cfg.m_target).abs().mean(1)}
        out = SeqOut(hs, us, extras=extras, state=h)
        out.aux_loss = self.aux_loss(out)
        return out

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference computing only the VC-structural part of each step: the updated units are a
        prefix ``[:k_t]`` (the soft mask decreases in i) and the masked state ``e * h`` is 0
        beyond it, so the GRU runs on rows and columns ``[:k_t]`` of the weights. For batch > 1,
        ``k_t`` is the largest over the batch (the union of prefixes) and the per-sequence ``e``
        masks the rest. Eval sharpness.

        On CPU the whole loop runs in the fused kernel (``condrnn::vcrnn_sequence``,
        ``csrc/infer/vcrnn.cpp``) at any batch size when it can be built: the same computation
        with no per-step dispatch, on weights stored by input column (``pack_vc_columns``); the
        decisions from each ``m_t`` bit for bit the dense path's, outputs to rounding.

        Elsewhere (CUDA, no kernel, ``HARNESS_NO_KERNELS=1``), a PyTorch loop with few ops per
        step: ``Thr_eps`` runs on the prefix only (beyond each sequence's prefix ``e = 0``, i.e.
        ``soft < eps``), the mask is built once at the end from each sequence's ``k``; the
        states are columns of one preallocated buffer ``[T + 1, D, B]``, the prefix written in
        place, the rest copied, on rows and columns ``[:k_t]`` of the cached unit-major weights
        (views without copies).
        """
        B, T, _ = x.shape
        D, eps = self.hidden_size, self.cfg.eps
        cell_params = (self.cell.weight_hh, self.cell.weight_ih, self.cell.bias)
        kernel = vcrnn_kernel() if on_cpu("VC-RNN's fused kernel", x) else None
        if kernel is not None:  # fused C++ loop: rows and columns [:k_t] only, no dispatch
            hh, ih = cached_pack(
                self, "_fast_cols", cell_params, lambda: pack_vc_columns(*cell_params)
            )
            sched = F.linear(x, self.sched_x, self.sched_b).view(B, T)
            xs = torch.cat([x, x.new_ones(B, T, 1)], -1)  # [B, T, V+1]
            h, u, m_all = kernel(
                hh, ih, self.sched_h.view(D), sched, xs, self.unit_index,
                float(self.cfg.sharpness_end), float(eps), self.mask_input,
                self.cell.form == "before",
            )  # fmt: skip
            extras = {"m": m_all.mean(1), "m_dev": (m_all - self.cfg.m_target).abs().mean(1)}
            out = SeqOut(h, u, extras=extras, state=h[:, -1])
            out.aux_loss = self.aux_loss(out)
            return out
        hh, ih = cached_pack(self, "_fast_gru", cell_params, lambda: pack_gru_rows(self.cell))
        # The state is kept as columns, h [D, B], so that the prefix of units is rows [:k].
        sched_x = F.linear(x, self.sched_x, self.sched_b).permute(1, 2, 0).unbind(0)  # T x [1, B]
        xs = x.permute(1, 2, 0).unbind(0)  # T x [V, B]
        xs1 = torch.cat([x, x.new_ones(B, T, 1)], -1).permute(1, 2, 0).unbind(0)  # T x [V+1, B]
        index = self.unit_index[:, None]  # [D, 1]
        buf = x.new_zeros(T + 1, D, B)
        states = buf.unbind(0)  # T + 1 x [D, B]
        ks, ms = [], []
        for t in range(T):
            h, cur = states[t], states[t + 1]
            m = torch.sigmoid(torch.addmm(sched_x[t], self.sched_h, h))  # [1, B] scheduler
            soft = torch.sigmoid(self.cfg.sharpness_end * (m * D - index))  # [D, B]
            k_b = (soft >= eps).sum(0)  # [B] each sequence's prefix (Thr_eps > 0)
            k = int(k_b.max()) if B > 1 else int(k_b)
            ks.append(k_b)
            ms.append(m[0])
            if k < D:
                cur[k:].copy_(h[k:])
            if k:
                e_k = threshold_eps(soft[:k], eps)  # [k, B]
                h_k = h[:k]
                h_bar = e_k * h_k  # 0 beyond k: only columns [:k] of W_h are read
                if self.mask_input:  # x-bar = e * x is 0 beyond k too
                    w_i, b_i = ih[:k, :, :k].reshape(3 * k, k), ih[:k, :, -1].reshape(3 * k, 1)
                    xp = torch.addmm(b_i, w_i, e_k * xs[t][:k]).view(k, 3, B)
                else:
                    xp = torch.mm(ih[:k].view(3 * k, -1), xs1[t]).view(k, 3, B)
                if self.cell.form == "before":
                    cand = _rows_before(hh[:k, :, :k], h_bar, xp)
                else:
                    hp = torch.mm(hh[:k, :, :k].reshape(3 * k, k), h_bar)  # [3k, B]
                    cand = gru_rows(hp.view(k, 3, B), xp, h_bar)  # GRU(h-bar, x-bar)
                torch.lerp(h_k, cand, e_k, out=cur[:k])  # e = 0 or 1: exact copy or candidate
        m_all = torch.stack(ms, 1)  # [B, T]
        extras = {"m": m_all.mean(1), "m_dev": (m_all - self.cfg.m_target).abs().mean(1)}
        outputs = buf[1:].permute(2, 0, 1).contiguous()  # [B, T, D]
        k_all = torch.stack(ks, 1)  # [B, T]
        mask = (self.unit_index.to(k_all.device) <= k_all[..., None]).to(x.dtype)  # [B, T, D]
        out = SeqOut(outputs, mask, extras=extras, state=outputs[:, -1])
        out.aux_loss = self.aux_loss(out)
        return out

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        """``gamma * sum_t |m_t - m_target|``, mean over the batch (``m_dev`` is the time mean)."""
        T = out.mask.shape[1]
        return self.cfg.gamma * T * out.extras["m_dev"].mean()

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[VCRNN, str]:
        """Scheduler weights 0, ``b = logit(1 - skip)``: ``m_t = 1 - skip`` at every step."""
        model = cls(input_size, hidden_size)
        q = min(max(1.0 - skip, 1e-4), 1 - 1e-4)  # target update fraction
        with torch.no_grad():
            model.sched_h.zero_()
            model.sched_x.zero_()
            model.sched_b.fill_(math.log(q / (1 - q)))
        return model.eval(), f"m_t={q:.3g}"

    @classmethod
    def fast_path_note(cls) -> str | None:
        """Whether the fast path on CPU (any batch) ran the fused C++ kernel here or the PyTorch
        fallback.

        Reads the kernel's status and never builds it: a report rendered by a process that ran
        no CPU fast path says so instead of compiling.
        """
        return vcrnn_kernel_status().fast_path_note(cls.name, "on CPU")
