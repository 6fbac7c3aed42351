"""RHN: Recurrent Highway Network with a coupled carry gate, depth L per time step.

Paper: Zilly, Srivastava, Koutnik & Schmidhuber, "Recurrent Highway Networks", ICML 2017,
https://arxiv.org/abs/1607.03474; equations as restated in S-EI (Park & Yoo,
https://arxiv.org/abs/1708.04116) eqs. 6-8 and METHODS.md 2.10. Starting from ``h^0 = h_{t-1}``,
for r = 1..L::

    s^r   = tanh(W_H x_t 1[r=1] + R_H^r h^{r-1} + b_H^r)
    tau^r = sigmoid(W_T x_t 1[r=1] + R_T^r h^{r-1} + b_T^r)
    h^r   = tau^r * s^r + (1 - tau^r) * h^{r-1}          (coupled carry c^r = 1 - tau^r)

and ``h_t = h^L``. Parameters ``2DV + 2LD^2 + 2LD``; MACs per step ``2DV + 2L D^2``.

Differences from the paper:
- [INFERRED] METHODS.md 2.10 / PAPER_RESULTS.md 2.6: coupled carry gate (2D gate rows, as the
  reference RHNCell and every S-EI parameter count); S-EI eq. 8 prints a separate carry gate.
- Transform-gate bias -2.0 (``rhn_train.py`` PTB value; ``transform_bias`` knob); other biases 0.
- Weights U(+-1/sqrt(D)) (PyTorch's default scale) where the reference uses U(+-0.04)
  (``init_bound=0.04`` reproduces it). No variational dropout inside the cell.
- Default depth L = 5, the depth S-EI's Table 1 counts imply ([INFERRED]).
- Mask u = 1 and depth n = L for every unit (METHODS.md 1.1): Skip % = depth-skip % = 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from harness.highway import CoupledHighway, HighwayConfig, run_sequence, weight_bound
from harness.method import Method, SeqOut, StepCost, StepOut
from harness.registry import register_method


@register_method("rhn")
class RHN(Method):
    """Depth-L coupled RHN; every step runs all L layers."""

    config_cls = HighwayConfig
    has_depth = True

    def __init__(self, input_size: int, hidden_size: int, cfg: HighwayConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        c = self.cfg
        self.cell = CoupledHighway(
            input_size,
            hidden_size,
            c.depth,
            shared=False,
            transform_bias=c.transform_bias,
            bound=weight_bound(c.init_bound, hidden_size),
        )

    def cost(self) -> StepCost:
        D, V, L = self.hidden_size, self.input_size, self.cfg.depth
        # 2DV (input rows of s and tau, layer 1) + 2D^2 per layer = 2D(D+V) + 2(L-1)D^2
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
