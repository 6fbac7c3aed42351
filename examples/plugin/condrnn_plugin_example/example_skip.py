"""Example Skip: the ``skip`` template of ``harness new method``, shipped as a plugin package.

A binary gate per step and sequence decides whether the state updates or is copied, in the
manner of Skip RNN: Campos, Jou, Giro-i-Nieto, Torres & Chang, "Skip RNN: Learning to Skip State
Updates in Recurrent Neural Networks", ICLR 2018, https://arxiv.org/abs/1708.06834 (eqs. 2-5,
simplified as below)::

    p_t = sigmoid(w_p . h_{t-1} + b_p)                                  eq. 4  update probability
    a_t = u_{t-1} p_t + (1 - u_{t-1}) (a_{t-1} + min(p_t, 1 - a_{t-1}))  eq. 5  accumulated
    u_t = round(a_t)                                   eq. 2  binary, straight-through gradient
    h_t = u_t * cell(x_t, h_{t-1}) + (1 - u_t) * h_{t-1}                eq. 3  copy when u_t = 0
    loss += lam * sum_t u_t                            the budget, per sequence, batch mean

with ``a_0 = 1, u_0 = 0`` (the first step updates) and ``cell`` a GRU-like cell. The update
mask is ``u_t`` for every unit, so Skip % is the share of steps not updated.

Differences from the paper:
- ``p_t`` is computed at step t from ``h_{t-1}``, at every step; the paper computes it from
  ``h_t`` after an update and holds it while skipping (the same values).
- The cell is a reset-after GRU with one bias per gate; weights U(+-1/sqrt(D)), ``b_p = 1``.

Cost: an updating step runs the cell, ``3 D (V + D)`` MACs; every step runs the ``D``-MAC
projection ``w_p . h``. ``fast_forward`` (inference) runs the cell only for the sequences that
update; ``at_skip`` builds an untrained model aimed at a Skip % for ``harness bench --speedup``.

The code below the docstring is the template's, unchanged (the harness's tests check it is).
Installed (``pip install -e examples/plugin``), the package's entry point registers it:
``harness check example-skip``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.components.config import MAX_PENALTY, check_knobs, knob
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method

# (h_{t-1} [B, D], a_{t-1} [B, 1], u_{t-1} [B, 1])
State = tuple[Tensor, Tensor, Tensor]


@dataclass(frozen=True)
class ExampleSkipConfig:
    """The method's knobs: each declares its valid values (``knob``), checked before any run.

    Attributes:
        lam: weight of the budget ``lam * sum_t u_t``: the knob that sets how much it skips.
        update_bias: initial ``b_p`` (positive: every step updates early in training).
    """

    lam: float = knob(1e-4, ge=0, le=MAX_PENALTY)
    update_bias: float = knob(1.0, ge=-100, le=100)

    def __post_init__(self) -> None:
        check_knobs(self, "method", "example-skip")


@register_method("example-skip")
class ExampleSkip(Method):
    """One binary update gate per step and sequence, shared by every unit."""

    config_cls = ExampleSkipConfig
    budget_knobs = ("lam",)  # the fields that set how much it skips (reports plot them)

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        cfg: ExampleSkipConfig | None = None,
    ) -> None:
        super().__init__(input_size, hidden_size, cfg)
        D, V = self.hidden_size, self.input_size
        bound = 1.0 / math.sqrt(D)
        # the rows of the cell's three gates, [r; z; n]
        self.weight_ih = nn.Parameter(torch.empty(3 * D, V).uniform_(-bound, bound))
        self.weight_hh = nn.Parameter(torch.empty(3 * D, D).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(3 * D).uniform_(-bound, bound))
        self.w_p = nn.Parameter(torch.empty(1, D).uniform_(-bound, bound))
        self.b_p = nn.Parameter(torch.full((1,), float(self.cfg.update_bias)))

    def cost(self) -> StepCost:
        """MACs of one step: the cell's ``3 (V + D)`` per updated unit, the gate's ``D`` always."""
        D, V = self.hidden_size, self.input_size
        return StepCost(D, always=D, per_unit=3 * (V + D))

    def init_state(self, batch_size: int, ref: Tensor) -> State:
        h = ref.new_zeros(batch_size, self.hidden_size)
        a = ref.new_ones(batch_size, 1)
        return h, a, torch.zeros_like(a)  # a_0 = 1, u_0 = 0: the first step updates

    def cell(self, xp_t: Tensor, h: Tensor) -> Tensor:
        """The candidate state from the projected input ``xp_t = W x_t + b`` ``[n, 3D]``."""
        xr, xz, xn = xp_t.chunk(3, -1)
        hr, hz, hn = F.linear(h, self.weight_hh).chunk(3, -1)  # [n, D] each
        r = torch.sigmoid(xr + hr)
        z = torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return (1 - z) * n + z * h

    def decide(self, h: Tensor, a: Tensor, u_prev: Tensor) -> tuple[Tensor, Tensor]:
        """The gate of a step from the previous state: ``(a_t, u_t)``, ``[B, 1]`` each."""
        p = torch.sigmoid(F.linear(h, self.w_p, self.b_p))  # eq. N
        a = u_prev * p + (1 - u_prev) * (a + torch.minimum(p, 1 - a))  # eq. N
        u = a + (torch.round(a) - a).detach()  # eq. N: the value of round, the gradient of a
        return a, u

    def _step(self, xp_t: Tensor, state: State) -> StepOut:
        h, a, u = state
        a, u = self.decide(h, a, u)
        h_new = u * self.cell(xp_t, h) + (1 - u) * h  # eq. N: an exact copy where u = 0
        return StepOut(h_new, (h_new, a, u), u.expand(-1, self.hidden_size))

    def step(self, x_t: Tensor, state: State, t: int) -> StepOut:
        """One step: the reference ``forward`` is checked against (``Method.step_loop``)."""
        return self._step(F.linear(x_t, self.weight_ih, self.bias), state)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        """The step loop with the input projections of every step in one matmul (faster)."""
        state = self.init_state(x.shape[0], x) if state is None else state
        hs, masks = [], []
        for xp_t in F.linear(x, self.weight_ih, self.bias).unbind(1):  # [B, 3D] each
            so = self._step(xp_t, state)
            state = so.state
            hs.append(so.h)
            masks.append(so.mask)
        out = SeqOut(torch.stack(hs, 1), torch.stack(masks, 1), state=state)  # [B, T, D]
        out.aux_loss = self.aux_loss(out)
        return out

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        """The budget ``lam * sum_t u_t`` per sequence, mean over the batch (already weighted)."""
        return self.cfg.lam * out.mask[..., 0].sum(1).mean()

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference that runs the cell only for the sequences that update at a step.

        The same decisions as ``forward`` (``decide`` on the same states): equal to
        ``self.eval()(x)`` up to matmul rounding, masks exactly (``harness check``).
        """
        h, a, u = self.init_state(x.shape[0], x)
        hs, us = [], []
        for xp_t in F.linear(x, self.weight_ih, self.bias).unbind(1):
            a, u = self.decide(h, a, u)
            rows = u[:, 0].nonzero()[:, 0]  # the sequences that update
            if len(rows) == len(h):
                h = self.cell(xp_t, h)
            elif len(rows):
                h = h.index_copy(0, rows, self.cell(xp_t[rows], h[rows]))
            hs.append(h)
            us.append(u)
        mask = torch.stack(us, 1).expand(-1, -1, self.hidden_size)  # [B, T, D]
        out = SeqOut(torch.stack(hs, 1), mask, state=(h, a, u))
        out.aux_loss = self.aux_loss(out)
        return out

    @classmethod
    def at_skip(
        cls,
        input_size: int,
        hidden_size: int,
        skip: float,
        seq_len: int,
    ) -> tuple[ExampleSkip, str]:
        """An untrained model that updates every ``m = 1 / (1 - skip)`` steps.

        ``w_p = 0`` and ``b_p`` such that ``(m - 1) p < 1/2 < m p``: the same steps in every
        sequence. The weights are drawn from torch's global generator (the caller seeds it).
        """
        model = cls(input_size, hidden_size)
        m = max(1, round(1 / max(1.0 - skip, 1e-4)))
        p = 0.5 / (m - 0.5) if m > 1 else 1 - 1e-4
        with torch.no_grad():
            model.w_p.zero_()
            model.b_p.fill_(math.log(p / (1 - p)))
        return model.eval(), f"update every {m} steps"
