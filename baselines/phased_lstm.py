"""Phased LSTM: an LSTM whose units update only while a per-unit periodic time gate is open.

Paper: Neil, Pfeiffer, Liu, "Phased LSTM: Accelerating Recurrent Network Training for Long or
Event-based Sequences", NeurIPS 2016, https://arxiv.org/abs/1610.09513; a baseline of S-SA
(Hartvigsen et al., CIKM 2020). Spec: docs/methods.md 2.6. Unit i has a period P_i, a shift s_i and
an open ratio r_on,i (all trainable); with timestamp tau_t::

    phi_{t,i} = ((tau_t - s_i) mod P_i) / P_i                                      eq. 6
    k_{t,i} = 2 phi / r_on  if phi < r_on / 2;  2 - 2 phi / r_on  if phi < r_on;  alpha phi  else
                                                                                  eq. 7
    (h~_t, c~_t) = LSTM(x_t, h_{t-1}, c_{t-1})                                     eqs. 8, 10
    c_t = k_t * c~_t + (1 - k_t) * c_{t-1}                                         eq. 9
    h_t = k_t * h~_t + (1 - k_t) * h_{t-1}                                         eq. 11

Update mask u = 1[k > 0] (the ceiling rule, docs/methods.md 1.1). In eval the leak alpha is 0, so
units outside their open phase are exact copies; in training the leak makes u = 1 almost everywhere.

Differences from the paper:
- [DECISION] docs/methods.md 2.6: tau_t = t, the integer step index, where the task gives no
  timestamps (S-SA gives none). The clock is part of the state ``(h, c, clock [B])``, so a state
  carried across windows keeps counting.
- Where the task gives sample times (``uses_times``: the model passes ``times [B, T]``, e.g. the
  frequency-discrimination task's times in ms), tau_t is the given time, as in the paper, and
  periods and shifts are in the task's time unit; the clock still counts steps. Times
  0, 1, 2, ... give exactly the outputs of no times.
- [DECISION] docs/methods.md 2.6: r_on = 0.3 at initialisation (S-SA's 69-70% Skip implies it; the
  paper's tasks used 0.05), P = exp(U(ln 2, ln 20)), s ~ U(0, P), all three trainable; leak
  alpha = 1e-3 in training and 0 in eval (as the Theano original's deterministic mode).
- [DECISION] docs/methods.md 2.2: the LSTM cell has no peepholes and a forget-gate bias of 1
  (``baselines._cells.LSTMWeights``, U(+-1/sqrt(D)) weights); the paper's code has peepholes.
- docs/methods.md 2.6 pitfall: periods below 2 steps alias with integer timestamps, so the forward
  uses P clamped to >= ``min_period`` (2) and r_on clamped to [1e-3, 1]; the stored parameters are
  not changed (a clamped value gets no gradient through the clamp).
- The shift enters as ``tau - s`` as in the paper and TF contrib (the Theano / PyTorch code use
  ``tau + s``; equivalent since s is learned). phi is computed in float64, so long clocks keep
  their phase.
- MACs: 4 k_t (D+V) (each unit's gates use only its own rows); the O(D) time gate is not charged.
- Training on CPU (float32/64) runs the sequence as one C++ autograd node where the optional
  kernel builds (``baselines.ops.masked_cell``, built before the epoch's timer starts): k
  ``[B, T, D]`` is computed first, as on the per-step path (by ``baselines.ops.phased_gate``'s
  kernel
  where it builds: ``time_gate``'s values exactly, its gradients to float rounding), the kernel
  runs eqs. 8-11 over all steps and returns k's gradient, so P, s and r_on learn as there. Where
  every sequence of the batch has the same clock and no sample times are given (training from a
  zero state), k is computed once for the batch, ``[1, T, D]``: the same values, its gradient
  summed over the batch in another order; the input terms are ``input_terms``'s (the same values,
  W_i's gradient summed in another order). It equals the per-step ``_step`` loop (the reference,
  and the path in eval, on CUDA, where the kernel does not build and with
  ``HARNESS_NO_KERNELS=1``) to float rounding, not bit for bit; closed units (k = 0) stay exact
  copies.
- Inference (``fast_forward``) on CPU in float32/64, at any batch size, runs the op
  ``condrnn::masked_infer_sequence`` (``baselines.ops.masked_infer``): k from ``time_gate`` in
  eval (leak 0, clock 0: one gate for the batch, kept while P, s and r_on stay), then each step
  only the rows of the open units (k > 0). With the leak 0 a closed unit is an exact copy in the
  dense loop, so the skip realised is the mask's Skip %. It equals the dense eval loop (the
  reference, and the path elsewhere) to float rounding, the masks bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from baselines._cells import LSTMWeights, cached_pack
from baselines.ops.library import input_terms
from baselines.ops.masked_cell import masked_sequence, sequence_kernel
from baselines.ops.masked_infer import cached_schedule, kernel_for, kernel_note, pack_rows
from baselines.ops.phased_gate import gate_kernel, time_gate_sequence
from harness.components.config import check_knobs, knob
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method
from harness.errors import ConfigError

_R_ON_MIN = 1e-3
# Periods are float32 parameters: up to a million steps (or ms) they keep 1/16-step resolution.
_MAX_PERIOD = 1e6


def timestamps(clock: Tensor, steps: int, times: Tensor | None = None) -> Tensor:
    """tau ``[B, steps]`` in float64: ``clock + 0..steps-1``, or the sample ``times`` given."""
    if times is None:
        return (clock[:, None] + torch.arange(steps, device=clock.device)).double()
    return times.double()


@dataclass(frozen=True)
class PhasedLSTMConfig:
    """Knobs of Phased LSTM.

    Attributes:
        r_on: initial open ratio of every unit, in (0, 1] (trainable).
        period_low: periods are initialised as exp(U(ln period_low, ln period_high)) steps (in
            the task's time unit where it gives sample times).
        period_high: see ``period_low``.
        leak: alpha, the closed-phase slope in training (eval always uses 0).
        min_period: the forward clamps periods to at least this many steps.
    """

    r_on: float = knob(0.3, ge=_R_ON_MIN, le=1)
    period_low: float = knob(2.0, gt=0, le=_MAX_PERIOD)
    period_high: float = knob(20.0, gt=0, le=_MAX_PERIOD)
    leak: float = knob(1e-3, ge=0, lt=1)
    min_period: float = knob(2.0, gt=0, le=_MAX_PERIOD)

    def __post_init__(self) -> None:
        check_knobs(self, "method", "phased-lstm")
        if not self.min_period <= self.period_low <= self.period_high:
            raise ConfigError(
                "phased-lstm: need min_period <= period_low <= period_high (got "
                f"min_period={self.min_period:g}, period_low={self.period_low:g}, "
                f"period_high={self.period_high:g})"
            )


@register_method("phased-lstm")
class PhasedLSTM(Method):
    """Phased LSTM; state ``(h [B, D], c [B, D], clock [B] int64)``, mask u = 1[k > 0]."""

    config_cls = PhasedLSTMConfig
    budget_knobs = ("r_on",)  # the open ratio of the time gate
    fused_cell = "LSTM"
    uses_times = True

    def __init__(self, input_size: int, hidden_size: int, cfg: PhasedLSTMConfig | None = None):
        super().__init__(input_size, hidden_size, cfg)
        D, c = self.hidden_size, self.cfg
        self.cell = LSTMWeights(input_size, hidden_size, forget_bias=1.0)
        lo, hi = math.log(c.period_low), math.log(c.period_high)
        period = torch.empty(D).uniform_(lo, hi).exp()  # [D]
        self.period = nn.Parameter(period)
        self.shift = nn.Parameter(torch.rand(D) * period)  # s ~ U(0, P)
        self.r_on = nn.Parameter(torch.full((D,), float(c.r_on)))

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=4 * (D + V))  # 4 k_t (D+V); time gate O(D), not charged

    def leak(self) -> float:
        """alpha: the configured leak in training, 0 in eval (so closed units are exact copies)."""
        return float(self.cfg.leak) if self.training else 0.0

    def time_gate(self, clock: Tensor, steps: int, times: Tensor | None = None) -> Tensor:
        """Openness ``k [B, steps, D]`` at timestamps ``tau = clock + 0..steps-1``.

        Args:
            clock: steps taken so far, ``[B]``.
            steps: how many steps.
            times: the timestamps themselves, ``[B, steps]``; None: count from ``clock``.
        """
        tau = timestamps(clock, steps, times)  # [B, steps], float64
        P = self.period.clamp(min=self.cfg.min_period)  # [D]
        r = self.r_on.clamp(_R_ON_MIN, 1.0)  # [D]
        phi = torch.remainder(tau[..., None] - self.shift.double(), P.double())  # [B, steps, D]
        phi = (phi / P.double()).to(P.dtype)  # eq. 6
        rising = 2 * phi / r
        open_k = torch.where(phi < r / 2, rising, 2 - rising)
        return torch.where(phi < r, open_k, self.leak() * phi)  # eq. 7

    def _train_gate(self, clock: Tensor, steps: int, times: Tensor | None) -> Tensor:
        """``time_gate``'s values for the training step on the kernel path, computed once for the
        batch where every sequence has the same clock and no sample times are given (``[1,
        steps, D]``, expanded), and by ``baselines.ops.phased_gate``'s kernel where it builds."""
        B = clock.shape[0]
        # where no clock can be read (the meta device), or reading one would end a compiled
        # graph (torch.compile), a gate per sequence: the same values and shape
        blind = clock.device.type == "meta" or torch.compiler.is_compiling()
        shared = times is None and not blind and bool((clock == clock[0]).all())
        clock = clock[:1] if shared else clock
        params = (self.period, self.shift, self.r_on)
        gate = gate_kernel(*params)
        if gate is None:
            k = self.time_gate(clock, steps, times)
        else:
            knobs = (self.cfg.min_period, _R_ON_MIN, self.leak())
            k = time_gate_sequence(gate, timestamps(clock, steps, times), *params, *knobs)
        return k.expand(B, -1, -1) if shared else k

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Also builds (or loads) the masked-cell training kernel where training will run it,
        before the epoch's timer starts: ``time.train_s`` holds no compile."""
        super().on_epoch_start(epoch, num_epochs)
        if sequence_kernel(*self.parameters()) is not None:  # cached: built once per process
            gate_kernel(*self.parameters())

    def init_state(self, batch_size: int, ref: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        z = ref.new_zeros(batch_size, self.hidden_size)
        return z, z, torch.zeros(batch_size, dtype=torch.long, device=ref.device)

    def _step(
        self, xp_t: Tensor, h: Tensor, c: Tensor, k: Tensor, weight_hh_t: Tensor
    ) -> tuple[Tensor, Tensor]:
        """One step from the projected input ``xp_t [B, 4D]``; ``weight_hh_t`` is the recurrent
        weight transposed once per sequence. ``LSTMWeights.step`` and the two mixes in 12 ops
        instead of 22 (``addmm``, ``addcmul``, ``lerp``): a training step at the paper sizes is
        bound by per-op dispatch. The same equations, equal to rounding."""
        i, f, g, o = torch.addmm(xp_t, h, weight_hh_t).chunk(4, -1)  # [B, D] each
        c_tilde = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), torch.tanh(g))  # eq. 8
        h_tilde = torch.sigmoid(o) * torch.tanh(c_tilde)  # eq. 10
        # eqs. 9, 11: k c~ + (1 - k) c; lerp gives an exact copy where k = 0
        return torch.lerp(h, h_tilde, k), torch.lerp(c, c_tilde, k)

    def step(
        self, x_t: Tensor, state: tuple[Tensor, Tensor, Tensor], t: int, time: Tensor | None = None
    ) -> StepOut:
        h, c, clock = state
        k = self.time_gate(clock, 1, None if time is None else time[:, None])[:, 0]  # [B, D]
        h, c = self._step(self.cell.input_proj(x_t), h, c, k, self.cell.weight_hh.t())
        return StepOut(h, (h, c, clock + 1), (k > 0).to(h.dtype))

    def forward(
        self, x: Tensor, lengths: Tensor | None = None, state=None, times: Tensor | None = None
    ) -> SeqOut:
        B, T = x.shape[:2]
        h, c, clock = self.init_state(B, x) if state is None else state
        cell, w = self.cell, self.cell.weight_hh
        kernel = sequence_kernel(x, h, c, w) if self.training else None
        if kernel is not None:  # the same steps in one C++ node (baselines.ops.masked_cell)
            k = self._train_gate(clock, T, times)
            xp = input_terms(x, cell.weight_ih, cell.bias)
            hs, c = masked_sequence(kernel, "lstm", xp, h, w, k, c)
        else:
            k = self.time_gate(clock, T, times)  # [B, T, D], input-independent
            xp = cell.input_proj(x)  # [B, T, 4D]
            w_t, steps = w.t(), []
            # one unbind, linear backward (see Method.step_loop)
            for xp_t, k_t in zip(xp.unbind(1), k.unbind(1), strict=True):
                h, c = self._step(xp_t, h, c, k_t, w_t)
                steps.append(h)
            hs = torch.stack(steps, 1)
        out = SeqOut(hs, (k > 0).to(x.dtype), state=(hs[:, -1], c, clock + T))
        out.aux_loss = self.aux_loss(out)
        return out

    def _eval_gate(self, steps: int) -> Tensor:
        """``time_gate`` in eval (leak 0) from clock 0, ``k [1, steps, D]``, whatever the mode."""
        was_training = self.training
        self.eval()
        try:
            return self.time_gate(torch.zeros(1, dtype=torch.long), steps)
        finally:
            self.train(was_training)

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference computing only the LSTM rows of the open units, by the op
        ``condrnn::masked_infer_sequence`` (``baselines.ops.masked_infer``) on CPU.

        In eval the leak is 0, so a closed unit (k = 0) is an exact copy of its h and c in the
        dense loop: those are the units skipped, and the share skipped is the mask's Skip %.
        Every unit with k > 0, however small, is computed (and mixed, ``lerp(h, h~, k)``). The
        gate starts from clock 0 for every sequence, so the batch shares it (``k [1, T, D]``); it
        depends on P, s, r_on and T only, not on the inputs, so it is computed once by
        ``time_gate`` (its values exactly) and kept while those stay (as the packed weights
        are). Each step, every open unit reads its four gate rows once and multiplies them with
        the states of the whole batch (from batch 12 one product of the open units' rows with the
        batch's states). Off the CPU (one warning line), in another dtype, where the library
        does not build and with ``HARNESS_NO_KERNELS=1``: the dense eval loop. Eval semantics;
        equals ``eval()(x)`` to float rounding, masks bit for bit.
        """
        kernel = kernel_for("Phased LSTM's fused kernel", x)
        cell = self.cell
        params = (cell.weight_ih, cell.weight_hh, cell.bias)
        gate_params = (self.period, self.shift, self.r_on)
        if kernel is None or any(p.dtype != x.dtype for p in params + gate_params):
            return super().fast_forward(x)
        B, T, _ = x.shape
        w = cached_pack(self, "_fast_rows", params, lambda: pack_rows(*params))
        versions = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in gate_params)
        key = (T, self.cfg.min_period, versions)
        k = cached_schedule(self, "_fast_gate", key, lambda: self._eval_gate(T))  # [1, T, D]
        h0 = x.new_zeros(B, self.hidden_size)
        hs, c = kernel(w, x, h0, h0, k, True, False)
        mask = (k > 0).to(x.dtype).expand(B, -1, -1).contiguous()
        clock = torch.full((B,), T, dtype=torch.long, device=x.device)
        out = SeqOut(hs, mask, state=(hs[:, -1], c, clock))
        out.aux_loss = self.aux_loss(out)
        return out

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[PhasedLSTM, str]:
        """``r_on = 1 - skip`` for every unit, periods and shifts at their initialisation
        (P = exp(U(ln 2, ln 20)), s ~ U(0, P)): each (unit, step) is open with probability r_on
        over the shifts, so the expected Skip % is the target; the whole batch shares the gate."""
        r = min(max(1.0 - float(skip), _R_ON_MIN), 1.0)
        model = cls(input_size, hidden_size, cls.config_cls(r_on=r))
        return model.eval(), f"r_on={r:.3g}, P=exp(U(ln 2, ln 20)), s~U(0, P)"

    @classmethod
    def fast_path_note(cls) -> str | None:
        """Whether the fused kernel ran on CPU here; read without building it."""
        return kernel_note(cls.name)
