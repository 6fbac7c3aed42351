"""Skip RNN (Skip-GRU): a binary gate decides, per step and for the whole state, whether the GRU
updates or copies its state; the update probability accumulates while steps are skipped.

Paper: Campos, Jou, Giró-i-Nieto, Torres & Chang, "Skip RNN: Learning to Skip State Updates in
Recurrent Neural Networks", ICLR 2018, https://arxiv.org/abs/1708.06834 (eqs. 2-5); used as a
baseline by S-SA (Hartvigsen et al., CIKM 2020, https://doi.org/10.1145/3340531.3412058)::

    u_t = round(u~_t)                                             eq. 2 (straight-through)
    h_t = u_t * GRU(h_{t-1}, x_t) + (1 - u_t) * h_{t-1}            eq. 3
    du_t = sigmoid(w_p . h_t + b_p)  if u_t = 1,  else du_{t-1}    eq. 4 (held while skipping)
    u~_{t+1} = u_t * du_t + (1 - u_t) * (u~_t + min(du_t, 1 - u~_t))   eq. 5
    loss += lam * sum_t u_t                                       budget, mean over the batch

Like the authors' code (which keeps update_prob and cum_update_prob), step t starts by forming
``du_{t-1}`` and ``u~_t`` from the previous step: the state is ``(h_{t-1}, u~_{t-1}, du_{t-2})``,
initialised to ``(h_0, 0, 1)`` so that ``u~_1 = 1``, and ``u_{t-1} = round(u~_{t-1})`` is
recomputed. So the dense computation evaluates ``w_p . h`` at all T steps, none of it dead code
(a projection after the last step would be pruned from fvcore's trace). The update mask is
``u_{t,i} = u_t`` for every unit i, so Skip % = 1 - mean_t u_t.

Differences from the paper:
- [DECISION] METHODS.md 2.3: the reset-after GRU shared by all GRU-based methods (the paper's TF
  cell resets before the matmul); gate biases r, z initialised to 1.0 and the candidate bias to 0
  as in the authors' code; weights U(+-1/sqrt(D)).
- Initialisation from the authors' code: ``b_p = 1.0`` (all steps used early in training),
  ``u~_1 = 1`` (the first step always updates), a learned initial state ``h_0 ~ N(0, 1)``.
- The budget acts on the binary ``u_t`` (its gradient passes the straight-through estimator), as
  in the code's ``compute_budget_loss``; ``lam`` defaults to 1e-7, S-SA's adding-task value
  ([DECISION] METHODS.md 2.8 reads S-SA's lambda search as {0} and 1e-10 ... 1e-1).
- Rounding sends 0.5 to 0 (half to even), like TF's round.
- Cost: ``3(D+V)`` per updated unit plus the ``D``-MAC projection ``w_p . h_t`` in an updating
  step; nothing is computed in a skipped step (METHODS.md 1.4). S-SA's FLOPs are 2x MACs, the
  Skip RNN paper's are 1x (METHODS.md 1.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines._cells import GRUWeights, gru_macs_per_unit, masked_update, round_ste
from harness.errors import ConfigError
from harness.method import Method, SeqOut, StepCost, StepOut
from harness.registry import register_method

SkipState = tuple[Tensor, Tensor, Tensor]  # (h_{t-1} [B, D], u~_{t-1} [B, 1], du_{t-2} [B, 1])


@dataclass(frozen=True)
class SkipRNNConfig:
    """Knobs of Skip-GRU.

    Attributes:
        lam: weight of the budget ``lam * sum_t u_t`` (per sequence, mean over the batch).
        update_bias: initial ``b_p`` of the update-probability projection.
    """

    lam: float = 1e-7
    update_bias: float = 1.0

    def __post_init__(self) -> None:
        if self.lam < 0:
            raise ConfigError(f"skip-rnn: lam must be >= 0 (got {self.lam})")


@register_method("skip-rnn")
class SkipRNN(Method):
    """Skip-GRU: one binary update gate per step, shared by every unit."""

    config_cls = SkipRNNConfig

    def __init__(self, input_size: int, hidden_size: int, cfg: SkipRNNConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        D, V = self.hidden_size, self.input_size
        self.cell = GRUWeights(V, D, gate_bias=1.0)
        with torch.no_grad():
            self.cell.bias[2 * D :] = 0.0  # candidate bias 0, as in the authors' code
        self.w_p = nn.Parameter(torch.empty(1, D))
        self.b_p = nn.Parameter(torch.full((1,), float(self.cfg.update_bias)))
        self.h0 = nn.Parameter(torch.randn(D))  # learned initial state
        nn.init.uniform_(self.w_p, -1.0 / D**0.5, 1.0 / D**0.5)

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=gru_macs_per_unit(V, D), per_active_step=D)

    def init_state(self, batch_size: int, ref: Tensor) -> SkipState:
        h = self.h0.to(ref.dtype).unsqueeze(0).expand(batch_size, -1)  # [B, D]
        # u~_0 = 0 (no update at t = 0) and du_{-1} = 1 give u~_1 = 1: t = 1 always updates.
        return h, ref.new_zeros(batch_size, 1), ref.new_ones(batch_size, 1)

    def step(self, x_t: Tensor, state: SkipState, t: int) -> StepOut:
        h, u_tilde_prev, du_prev = state  # [B, D], [B, 1], [B, 1]
        u_prev = round_ste(u_tilde_prev)  # [B, 1] u_{t-1}
        du = torch.sigmoid(F.linear(h, self.w_p, self.b_p))  # [B, 1] eq. 4, from h_{t-1}
        du = masked_update(u_prev, du, du_prev)  # held, not recomputed, after a skipped step
        grow = u_tilde_prev + torch.minimum(du, 1 - u_tilde_prev)  # [B, 1]
        u_tilde = masked_update(u_prev, du, grow)  # [B, 1] eq. 5
        u = round_ste(u_tilde)  # [B, 1] eq. 2
        cand = self.cell.step(self.cell.input_proj(x_t), h)  # [B, D]
        h_new = masked_update(u, cand, h)  # [B, D] eq. 3
        mask = u.expand(-1, self.hidden_size)  # [B, D], keeps the straight-through gradient
        return StepOut(h_new, (h_new, u_tilde, du), mask)

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference running the GRU and the ``w_p`` projection only for the sequences that update
        at a step (a skipped step of every sequence costs a few elementwise ops on ``[B, 1]``).
        Eval semantics; equals ``eval()(x)`` up to matmul rounding."""
        B, T, _ = x.shape
        h, u_tilde, du = self.init_state(B, x)  # [B, D], [B, 1], [B, 1]
        xs = x.unbind(1)
        hs, us = [], []
        for t in range(T):
            u_prev = torch.round(u_tilde)  # [B, 1] u_{t-1}
            rows = u_prev.view(-1).nonzero().view(-1)
            if rows.numel():  # eq. 4 only where the previous step updated
                p = torch.sigmoid(F.linear(h.index_select(0, rows), self.w_p, self.b_p))
                du = du.index_copy(0, rows, p)  # [B, 1]
            grow = u_tilde + torch.minimum(du, 1 - u_tilde)
            u_tilde = torch.where(u_prev > 0, du, grow)  # [B, 1] eq. 5
            u = torch.round(u_tilde)  # [B, 1] eq. 2
            rows = u.view(-1).nonzero().view(-1)
            if 0 < rows.numel() < B:  # eq. 3 for the updating sequences only
                h_rows, x_rows = h.index_select(0, rows), xs[t].index_select(0, rows)
                h = h.index_copy(0, rows, self.cell.step(self.cell.input_proj(x_rows), h_rows))
            elif rows.numel():
                h = self.cell.step(self.cell.input_proj(xs[t]), h)
            hs.append(h)
            us.append(u)
        mask = torch.stack(us, 1).expand(-1, -1, self.hidden_size).contiguous()  # [B, T, D]
        out = SeqOut(torch.stack(hs, 1), mask, state=(h, u_tilde, du))
        out.aux_loss = self.aux_loss(out)
        return out

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        """Budget ``lam * sum_t u_t`` per sequence, mean over the batch (binary u, STE grad)."""
        return self.cfg.lam * out.mask[..., 0].sum(1).mean()

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[SkipRNN, str]:
        """``w_p = 0`` and ``b_p`` such that the state updates every ``m = 1 / (1 - skip)`` steps,
        the same steps in every sequence."""
        model = cls(input_size, hidden_size)
        q = min(max(1.0 - skip, 1e-4), 1 - 1e-4)  # target update fraction
        m = max(1, round(1 / q))
        du = 0.5 / (m - 0.5) if m > 1 else 1 - 1e-4  # m du > 1/2 > (m - 1) du
        p = min(du, 1 - 1e-4)
        with torch.no_grad():
            model.w_p.zero_()
            model.b_p.fill_(math.log(p / (1 - p)))
        return model.eval(), f"update every {m} steps"
