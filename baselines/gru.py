"""GRU: the fully updating gated recurrent unit, the main baseline of S-SA.

Paper: Cho et al. 2014, "Learning Phrase Representations using RNN Encoder-Decoder",
https://arxiv.org/abs/1406.1078; equations as restated in S-SA (Hartvigsen et al., CIKM 2020,
https://doi.org/10.1145/3340531.3412058) eqs. 1-4.

Differences from the paper:
- [DECISION] METHODS.md 2.3: the reset gate is applied after the recurrent matmul
  (``r * (W_hn h)``, PyTorch/cuDNN form), so per-unit skipping in the GRU-based methods is exactly
  realisable; one bias per gate (3D(D+V+1) parameters).
- The update gate follows PyTorch's sign (``h' = (1 - z) n + z h``); S-SA writes ``z`` for our
  ``1 - z``. Equivalent reparametrisation.
- Initialisation U(+-1/sqrt(D)) for weights and biases (PyTorch's nn.GRU default).
"""

from __future__ import annotations

import torch
from torch import Tensor

from baselines._cells import GRUWeights, gru_macs_per_unit
from harness.method import Method, SeqOut, StepCost, StepOut
from harness.registry import register_method


@register_method("gru")
class GRU(Method):
    """Dense GRU; the sequence forward runs torch's fused kernel on the same weights."""

    def __init__(self, input_size: int, hidden_size: int, cfg=None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        self.cell = GRUWeights(input_size, hidden_size)

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=gru_macs_per_unit(V, D))  # 3D(D+V) per step

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        h = self.cell.step(self.cell.input_proj(x_t), state)
        return StepOut(h, h, torch.ones_like(h))

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        h0 = self.init_state(x.shape[0], x) if state is None else state
        out, hn = self.cell.fused(x, h0)
        return SeqOut(out, torch.ones_like(out), state=hn)
