"""SRHN: shared-weight Recurrent Highway Network, the first ablation step of S-EI section 4.1.

Paper: Park & Yoo, "Early Improving Recurrent Elastic Highway Network",
https://arxiv.org/abs/1708.04116, section 4.1 (SRHN); METHODS.md 2.12. An RHN (Zilly et al. 2017,
https://arxiv.org/abs/1607.03474) whose L layers share one set of recurrent weights and biases;
the input enters only at r = 1. From ``h^0 = h_{t-1}``, for r = 1..L::

    s^r   = tanh(W_H x_t 1[r=1] + R_H h^{r-1} + b_H)
    tau^r = sigmoid(W_T x_t 1[r=1] + R_T h^{r-1} + b_T)
    h^r   = tau^r * s^r + (1 - tau^r) * h^{r-1}

and ``h_t = h^L``. Parameters ``2DV + 2D^2 + 2D`` (independent of L); MACs as RHN,
``2DV + 2L D^2`` per step.

Differences from the paper:
- Coupled carry gate, as in the RHN baseline (METHODS.md 2.10 [INFERRED]).
- Transform-gate bias -2.0 (RHN reference value, ``transform_bias``); other biases 0; weights
  U(+-1/sqrt(D)) (``init_bound`` sets another bound). S-EI states neither.
- Default depth L = 5 (S-EI sweeps L = 1..6; ``depth`` knob).
- Mask u = 1 and depth n = L for every unit (METHODS.md 1.1).
"""

from __future__ import annotations

import torch
from torch import Tensor

from harness.highway import CoupledHighway, HighwayConfig, run_sequence, weight_bound
from harness.method import Method, SeqOut, StepCost, StepOut
from harness.registry import register_method


@register_method("srhn")
class SRHN(Method):
    """Depth-L coupled RHN with one weight set shared by all layers."""

    config_cls = HighwayConfig
    has_depth = True

    def __init__(self, input_size: int, hidden_size: int, cfg: HighwayConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        c = self.cfg
        self.cell = CoupledHighway(
            input_size,
            hidden_size,
            c.depth,
            shared=True,
            transform_bias=c.transform_bias,
            bound=weight_bound(c.init_bound, hidden_size),
        )

    def cost(self) -> StepCost:
        D, V, L = self.hidden_size, self.input_size, self.cfg.depth
        # the same MACs as RHN: 2DV once per step + 2D^2 per layer
        return StepCost(D, per_active_step=2 * D * V, per_layer=2 * D * D, max_depth=L)

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def _advance(self, xp_t: Tensor, h: Tensor) -> StepOut:
        h = self.cell(xp_t, h)  # [B, D] = h^L
        return StepOut(h, h, torch.ones_like(h), torch.full_like(h, float(self.cfg.depth)))

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        return self._advance(self.cell.input_proj(x_t), state)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        h0 = self.init_state(x.shape[0], x) if state is None else state
        return run_sequence(self._advance, self.cell.input_proj(x), h0)  # [B, T, 2D] projected
