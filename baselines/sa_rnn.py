"""SA-RNN (Selective-Activation RNN): a coordinator decides, per step and per hidden unit,
whether the unit is recomputed by the GRU or copied from the previous step.

Paper: Hartvigsen, Sen, Kong & Rundensteiner, "Learning to Selectively Update State Neurons in
Recurrent Networks", CIKM 2020, https://doi.org/10.1145/3340531.3412058 (S-SA), eqs. 5-9;
authors' code: github.com/Thartvigsen/SA-RNN (``model.py``)::

    u~_t = hsig_a(w_u * h_{t-1} + W_i x_t + b_u)        eq. 5 (coordinator, before the update)
    u_t = 1[u~_t > 0.5]                                 eqs. 6, 8 (straight-through gradient)
    h_t = u_t * GRU(h_{t-1}, x_t) + (1 - u_t) * h_{t-1}  eq. 7
    loss += lam * (1/D) * sum_t sum_i u_{t,i}           eq. 9 as in the code (mean over the batch)

with the hard sigmoid ``hsig_a(v) = clip((a v + 1) / 2, 0, 1)`` of the code (the threshold at 0.5
means ``u = 1[v > 0]`` for any slope a; the slope only sets where the gradient flows).

Differences from the paper:
- [DECISION] METHODS.md 2.3: the reset-after GRU shared by all GRU-based methods (the code's GRU
  resets before the matmul); the update-gate sign is an equivalent reparametrisation.
- [DECISION] METHODS.md 2.9: the recurrent coordinator weight is a vector ``w_u`` (W_u =
  diag(w_u)); the code keeps a dense block whose off-diagonal entries stay zero only when
  ``modifyGradients`` is called.
- [DECISION] METHODS.md 2.9 / 4.5: the budget follows the code, binary decisions (STE) summed
  over time and **averaged over the D units**, ``lam * (1/D) * sum_t sum_i u_{t,i}``; the paper's
  eq. 9 sums the soft ``u~`` over units, so its lambda is a factor D larger for the same penalty.
  Lambda values are not transferable between the two normalisations. ``lam`` defaults to the
  code's 1e-3.
- Slope annealing ``a = min(5, 1 + 0.04 epoch)`` (epoch from 0) when ``anneal``; otherwise the
  code's constant 0.1.
- Initialisation as in the code's ``nn.Linear`` on ``[x; h]``: every weight and bias of the GRU
  and the coordinator U(+-1/sqrt(D+V)); ``w_u`` drawn like the diagonal of that block.
- Cost: coordinator ``D + D V`` at every step (``w_u * h`` is an elementwise product that fvcore
  does not count) plus ``3(D+V)`` per updated unit, which the reset-after GRU can realise
  exactly (METHODS.md 2.9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.cells import GRUWeights, binarize_ste, gru_macs_per_unit, hard_sigmoid, masked_update
from harness.errors import ConfigError
from harness.method import Method, SeqOut, StepCost, StepOut
from harness.registry import register_method


@dataclass(frozen=True)
class SARNNConfig:
    """Knobs of SA-RNN.

    Attributes:
        lam: weight of the budget ``lam * (1/D) * sum_t sum_i u_{t,i}`` (mean over the batch).
        anneal: anneal the hard-sigmoid slope ``a = min(5, 1 + 0.04 epoch)``; else ``a = 0.1``.
    """

    lam: float = 1e-3
    anneal: bool = True

    def __post_init__(self) -> None:
        if self.lam < 0:
            raise ConfigError(f"sa-rnn: lam must be >= 0 (got {self.lam})")


@register_method("sa-rnn")
class SARNN(Method):
    """GRU with a per-unit, per-step learned update coordinator."""

    config_cls = SARNNConfig

    def __init__(self, input_size: int, hidden_size: int, cfg: SARNNConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        D, V = self.hidden_size, self.input_size
        bound = 1.0 / math.sqrt(D + V)
        self.cell = GRUWeights(V, D, bound=bound)
        self.w_u = nn.Parameter(torch.empty(D))  # diagonal recurrent weight
        self.w_i = nn.Parameter(torch.empty(D, V))
        self.b_u = nn.Parameter(torch.empty(D))
        for p in (self.w_u, self.w_i, self.b_u):
            nn.init.uniform_(p, -bound, bound)
        self.slope = self._slope(0)

    def _slope(self, epoch: int) -> float:
        return min(5.0, 1.0 + 0.04 * epoch) if self.cfg.anneal else 0.1

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        super().on_epoch_start(epoch, num_epochs)
        self.slope = self._slope(epoch)

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, always=D + D * V, per_unit=gru_macs_per_unit(V, D), fvcore_uncounted=D)

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        h = state  # [B, D]
        v = self.w_u * h + F.linear(x_t, self.w_i, self.b_u)  # [B, D]
        u = binarize_ste(hard_sigmoid(v, self.slope), 0.5)  # [B, D] eqs. 5, 6, 8
        cand = self.cell.step(self.cell.input_proj(x_t), h)  # [B, D]
        h_new = masked_update(u, cand, h)  # [B, D] eq. 7
        return StepOut(h_new, h_new, u)

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        """Budget ``lam * (1/D) * sum_t sum_i u_{t,i}``, mean over the batch (eq. 9, code form)."""
        return self.cfg.lam * out.mask.sum((1, 2)).mean() / self.hidden_size
