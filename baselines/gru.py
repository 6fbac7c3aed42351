"""GRU: the fully updating gated recurrent unit, the main baseline of S-SA.

Paper: Cho et al. 2014, "Learning Phrase Representations using RNN Encoder-Decoder",
https://arxiv.org/abs/1406.1078; equations as restated in S-SA (Hartvigsen et al., CIKM 2020,
https://doi.org/10.1145/3340531.3412018) eqs. 1-4.

Differences from the paper:
- [DECISION] docs/methods.md 2.3: the reset gate is applied after the recurrent matmul
  (``r * (W_hn h)``, PyTorch/cuDNN form), so per-unit skipping in the GRU-based methods is exactly
  realisable; one bias per gate (3D(D+V+1) parameters).
- The update gate follows PyTorch's sign (``h' = (1 - z) n + z h``); S-SA writes ``z`` for our
  ``1 - z``. Equivalent reparametrisation.
- Initialisation U(+-1/sqrt(D)) for weights and biases (PyTorch's nn.GRU default).
- ``gru_form="before"`` runs the paper's own reset-before candidate ``tanh(W_in x + b_n +
  W_hn (r * h))`` on the same parameters (no fused kernel: the sequence forward is the step
  loop). Its cost is the same, ``3D(D+V)`` per step: every unit updates, so the r rows of all
  units, needed by every candidate in this form, are computed anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from baselines._cells import GRU_FORMS, GRUWeights, gru_macs_per_unit
from harness.components.config import check_knobs, knob
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method


@dataclass(frozen=True)
class GRUConfig:
    """Knobs of the dense GRU.

    Attributes:
        gru_form: ``after`` (reset after the recurrent matmul, docs/methods.md 2.3 [DECISION]) or
            ``before`` (S-SA eq. 3 and the SA-RNN / Skip RNN authors' code).
    """

    gru_form: str = knob("after", choices=GRU_FORMS, legacy="after")  # an option since 824fa7b

    def __post_init__(self) -> None:
        check_knobs(self, "method", "gru")


@register_method("gru")
class GRU(Method):
    """Dense GRU; the reset-after sequence forward runs torch's fused kernel on the same
    weights, the reset-before one the step loop."""

    config_cls = GRUConfig

    def __init__(self, input_size: int, hidden_size: int, cfg: GRUConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        self.cell = GRUWeights(input_size, hidden_size, form=self.cfg.gru_form)

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=gru_macs_per_unit(V, D))  # 3D(D+V) per step, either form

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        h = self.cell.step(self.cell.input_proj(x_t), state)
        return StepOut(h, h, torch.ones_like(h))

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        h = self.init_state(x.shape[0], x) if state is None else state
        if self.cell.form == "after":
            out, hn = self.cell.fused(x, h)
            return SeqOut(out, torch.ones_like(out), state=hn)
        xp = self.cell.input_proj(x)  # [B, T, 3D], one matmul for the whole sequence
        hs = []
        for xp_t in xp.unbind(1):  # one unbind, linear backward (see Method.step_loop)
            h = self.cell.step(xp_t, h)
            hs.append(h)
        out = torch.stack(hs, 1)  # [B, T, D]
        return SeqOut(out, torch.ones_like(out), state=h)
