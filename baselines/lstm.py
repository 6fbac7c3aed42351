"""LSTM without peepholes, a baseline of S-EI (and the cell inside Phased LSTM).

Paper: Hochreiter & Schmidhuber 1997, "Long Short-Term Memory",
https://doi.org/10.1162/neco.1997.9.8.1735; equations as in S-EI (Park & Yoo,
https://arxiv.org/abs/1708.04116) eqs. 3-5.

Differences from the paper:
- [DECISION] docs/methods.md 2.2: forget-gate bias initialised to 1 (TF BasicLSTMCell's default,
  which S-EI used); no peepholes ([INFERRED] from S-EI's parameter counts, 4D(D+V+1) per layer).
- Weights U(+-1/sqrt(D)) (PyTorch's nn.LSTM default); S-EI used TensorFlow defaults.
"""

from __future__ import annotations

import torch
from torch import Tensor

from baselines._cells import LSTMWeights
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method


@register_method("lstm")
class LSTM(Method):
    """Dense LSTM; the sequence forward runs torch's fused kernel on the same weights."""

    fused_cell = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, cfg=None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        self.cell = LSTMWeights(input_size, hidden_size, forget_bias=1.0)

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=4 * (D + V))  # 4D(D+V) per step

    def init_state(self, batch_size: int, ref: Tensor) -> tuple[Tensor, Tensor]:
        z = ref.new_zeros(batch_size, self.hidden_size)
        return z, z

    def step(self, x_t: Tensor, state: tuple[Tensor, Tensor], t: int) -> StepOut:
        h, c = self.cell.step(self.cell.input_proj(x_t), *state)
        return StepOut(h, (h, c), torch.ones_like(h))

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        h0, c0 = self.init_state(x.shape[0], x) if state is None else state
        out, hn, cn = self.cell.fused(x, h0, c0)
        return SeqOut(out, torch.ones_like(out), state=(hn, cn))
