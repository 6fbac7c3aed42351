"""HSG: Highway State Gating on top of a coupled RHN.

Paper: Shoham & Permuter, "Highway State Gating for Recurrent Highway Networks: improving
information flow through time", https://arxiv.org/abs/1805.09238 (S-HSG); docs/methods.md 2.11. The
RHN (Zilly et al. 2017, https://arxiv.org/abs/1607.03474; see ``baselines/rhn.py``) runs from the
HSG state, and a sigmoid gate mixes its output with that state::

    y_t = RHN_L(s_{t-1}, x_t)
    g_t = sigmoid(W_R s_{t-1} + W_Y y_t + b_g)
    s_t = g_t * s_{t-1} + (1 - g_t) * y_t          (s_t is the output and the state)

Parameters: RHN + ``2D^2 + D``; MACs per step: RHN + ``2D^2``.

Differences from the paper:
- S-HSG's inline math was lost in extraction; the equations above are docs/methods.md 2.11's
  reconstruction from the prose (closed gate = vanilla RHN, open gate = state passed through).
- [DECISION] docs/methods.md 2.11: gate bias b_g = RHN transform bias = -2.0 (the seed's number was
  lost; "negative, so the gates start closed"). Knobs ``gate_bias``, ``transform_bias``. The
  third-party ``asahi417/LSTMCell`` @ cb49d17 (``lstm_cell/basic_rnn_cell.py``) also starts the
  HSG gate bias at its ``forget_bias``, the RHN transform bias: -2.0 by default, -2.5 in its
  ``hyperparameters/hsg.toml`` (docs/methods.md 2.11's "leaves the HSG gate bias at 0" does not hold
  at that commit).
- [DECISION] docs/methods.md 4 item 7: the RHN is fed s_{t-1} (the seed), not the previous RHN
  output y_{t-1} as in that third-party code (same cell, same numbers while the gate is closed).
- Coupled-carry RHN (docs/methods.md 2.10 [INFERRED]); weights U(+-1/sqrt(D)) (``init_bound``).
- Mask u = 1 and depth n = L for every unit: g is a soft gate inside a full update
  (docs/methods.md 1.1). Its per-sequence mean is logged as ``extras["hsg_gate_mean"]`` (S-HSG Fig.
  8 shows the histogram of g).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from baselines._highway import (
    BIAS_BOUND,
    HSG_GATE_BIAS,
    CoupledHighway,
    HighwayConfig,
    highway_mix,
    run_sequence,
    weight_bound,
)
from harness.components.config import knob
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method


@dataclass(frozen=True)
class HSGConfig(HighwayConfig):
    """RHN knobs (depth, transform_bias, init_bound) plus the HSG gate's initial bias."""

    gate_bias: float = knob(HSG_GATE_BIAS, ge=-BIAS_BOUND, le=BIAS_BOUND)


@register_method("hsg")
class HSG(Method):
    """Depth-L coupled RHN fed the gated state s_{t-1}, plus the highway state gate."""

    config_cls = HSGConfig
    has_depth = True

    def __init__(self, input_size: int, hidden_size: int, cfg: HSGConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        c, D = self.cfg, hidden_size
        bound = weight_bound(c.init_bound, D)
        self.cell = CoupledHighway(
            input_size, D, c.depth, shared=False, transform_bias=c.transform_bias, bound=bound
        )
        self.gate = nn.Linear(2 * D, D)  # [W_R, W_Y] on [s_{t-1}; y_t], bias b_g
        with torch.no_grad():
            self.gate.weight.uniform_(-bound, bound)
            self.gate.bias.fill_(c.gate_bias)

    def cost(self) -> StepCost:
        D, V, L = self.hidden_size, self.input_size, self.cfg.depth
        # RHN (2DV + 2D^2 per layer) + the gate's W_R s and W_Y y products every step
        return StepCost(
            D, always=2 * D * D, per_active_step=2 * D * V, per_layer=2 * D * D, max_depth=L
        )

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def _advance(
        self, xp_t: Tensor, s: Tensor, weights: list[tuple[Tensor, Tensor]] | None = None
    ) -> StepOut:
        y = self.cell(xp_t, s, weights=weights)  # [B, D] RHN output, started from the HSG state
        g = torch.sigmoid(self.gate(torch.cat([s, y], -1)))  # [B, D] state gate
        s = highway_mix(g, s, y)  # g * s_{t-1} + (1 - g) * y_t
        ones = torch.ones_like(s)
        return StepOut(s, s, ones, ones * self.cfg.depth, {"hsg_gate_mean": g.mean(-1)})

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        return self._advance(self.cell.input_proj(x_t), state)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        s0 = self.init_state(x.shape[0], x) if state is None else state
        weights = self.cell.layer_weights()  # split once a sequence (CoupledHighway)
        xp = self.cell.input_proj(x)  # [B, T, 2D] projected
        return run_sequence(lambda xp_t, s: self._advance(xp_t, s, weights), xp, s0)
