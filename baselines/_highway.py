"""Pieces shared by the highway family (RHN, HSG, SRHN, SREHN, EI-REHN), written once; the
elastic gate and the base of SREHN and EI-REHN are in ``baselines._elastic``.

- ``CoupledHighway``: the RHN layer stack with a coupled carry gate (docs/methods.md 2.10),
  per-layer or shared (SRHN, 2.12) weights; the input enters only at layer 1. With an elastic gate
  ``d`` it runs the SREHN update ``g^r = d^r * tau^r`` (2.13).
- ``run_sequence``: the step loop over a precomputed sequence, stacked like ``Method.step_loop``.
- The initialisation constants ([DECISION]s of docs/methods.md 2.10, 2.11).

Every ``r``-loop here runs a fixed number of layers unless told otherwise; a rectified gate of 0
turns a layer into an exact copy (``0 * s + 1 * h == h``), so running more layers than ``R_t``
changes nothing (docs/methods.md 2.14(e)).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.components.config import MAX_LAYERS, check_knobs, knob
from harness.components.method import Method, SeqOut, StepCost, StepOut

TRANSFORM_BIAS = -2.0  # RHN transform-gate bias, rhn_train.py PTB value (docs/methods.md 2.10)
HSG_GATE_BIAS = -2.0  # [DECISION] docs/methods.md 2.11: the seed's value was lost; closed at start


# Highway gate biases and weight bounds: wide enough to close a gate exactly (sigmoid(-1e4) is 0
# even in float64; the tests close HSG's gate so), small enough to stay finite in float32.
BIAS_BOUND = 1e4
INIT_BOUND_MAX = 100.0


@dataclass(frozen=True)
class HighwayConfig:
    """Knobs of the fixed-depth highway methods (RHN, SRHN).

    Attributes:
        depth: L, highway layers per step.
        transform_bias: initial bias of the transform gate tau (carry-biased when negative).
        init_bound: weights ~ U(+-init_bound); 0 means 1/sqrt(D) (PyTorch's default scale).
            The RHN reference code draws its weights and its candidate biases b_H from
            U(+-0.04); 0.04 here sets the weights only (b_H starts at 0, see ``CoupledHighway``).
    """

    depth: int = knob(5, ge=1, le=MAX_LAYERS)
    transform_bias: float = knob(TRANSFORM_BIAS, ge=-BIAS_BOUND, le=BIAS_BOUND)
    init_bound: float = knob(0.0, ge=0, le=INIT_BOUND_MAX)

    def __post_init__(self) -> None:
        check_knobs(self, "method")


def weight_bound(init_bound: float, hidden_size: int) -> float:
    """The uniform init bound: ``init_bound``, or 1/sqrt(D) when it is 0."""
    return init_bound if init_bound > 0 else 1.0 / math.sqrt(hidden_size)


def highway_mix(g: Tensor, s: Tensor, h: Tensor) -> Tensor:
    """``g * s + (1 - g) * h``: the RHN update with coupled carry ``c = 1 - g`` (S-EI eqs. 6-8) and
    the elastic update (S-EI eq. 9); an exact copy of h where g = 0."""
    return g * s + (1 - g) * h


class CoupledHighway(nn.Module):
    """RHN layer stack with coupled carry: ``weight_x [2D, V]`` (s and tau input weights, layer 1
    only), ``weight_h [L', 2D, D]`` and ``bias [L', 2D]`` with L' = depth, or 1 when ``shared``.
    Parameters: ``2DV + 2L'D^2 + 2L'D`` (docs/methods.md 2.10, 2.12).

    Args:
        input_size: V.
        hidden_size: D.
        depth: L (layers run by ``forward`` when no elastic gate is given).
        shared: one set of recurrent weights for every layer (SRHN).
        transform_bias: initial bias of tau.
        bound: weights ~ U(+-bound).

    Biases: tau's ``b_T = transform_bias``; the candidate's ``b_H`` start at 0. The reference
    (jzilly/RecurrentHighwayNetworks @ 9ab03a3) draws b_H from U(+-init_scale) like its weights:
    ``rhn.py`` leaves them to the variable scope's uniform initializer, ``theano_rhn.py`` sets
    ``init_other_bias = 'uniform'``. To match it, redraw ``bias[:, :D]`` after construction; the
    default stays 0 so that recorded numbers do not move.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        depth: int,
        shared: bool = False,
        transform_bias: float = TRANSFORM_BIAS,
        bound: float | None = None,
    ) -> None:
        super().__init__()
        D, V = hidden_size, input_size
        self.depth, self.shared = depth, shared
        n = 1 if shared else depth
        b = 1.0 / math.sqrt(D) if bound is None else bound
        self.weight_x = nn.Parameter(torch.empty(2 * D, V).uniform_(-b, b))
        self.weight_h = nn.Parameter(torch.empty(n, 2 * D, D).uniform_(-b, b))
        self.bias = nn.Parameter(torch.zeros(n, 2 * D))
        with torch.no_grad():
            self.bias[:, D:] = transform_bias  # rows D.. are the transform gate tau

    def input_proj(self, x: Tensor) -> Tensor:
        """``[W_H; W_T] x``: ``[..., V] -> [..., 2D]`` (no bias; each layer adds its own)."""
        return F.linear(x, self.weight_x)

    def layer_weights(self) -> list[tuple[Tensor, Tensor]]:
        """Each layer's ``(weight [2D, D], bias [2D])``, split once: a sequence's forward takes
        them here and passes them to every step. Indexing the stacked parameters at every layer
        of every step instead (``weight_h[r]``) gives each index its own backward node, which
        allocates a zero tensor the size of the whole stack and adds the slice's gradient into
        it: at D 830 and depth 10, three quarters of a training step went to filling those
        zeros (``unbind`` has one backward node a sequence)."""
        return list(zip(self.weight_h.unbind(0), self.bias.unbind(0), strict=True))

    def transform(
        self,
        r: int,
        h: Tensor,
        xp: Tensor | None,
        weights: list[tuple[Tensor, Tensor]] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Layer ``r`` (0-based) candidate ``s`` and transform gate ``tau``, each ``[B, D]``;
        ``weights``: ``layer_weights()``, taken once per sequence (None: indexed here)."""
        k = 0 if self.shared else r
        w, b = weights[k] if weights is not None else (self.weight_h[k], self.bias[k])
        a = F.linear(h, w, b)  # [B, 2D]
        if xp is not None:
            a = a + xp  # the input enters at the first layer only
        s, tau = a.chunk(2, -1)
        return torch.tanh(s), torch.sigmoid(tau)  # the RHN layer, S-EI eqs. 6-8

    def forward(
        self,
        xp: Tensor,
        h: Tensor,
        d: Tensor | None = None,
        weights: list[tuple[Tensor, Tensor]] | None = None,
    ) -> Tensor:
        """Run the stack from ``h [B, D]`` with the projected input ``xp [B, 2D]``.

        Without ``d``: ``depth`` RHN layers, ``g = tau``. With an elastic gate ``d [B, R, D]``:
        R layers with ``g^r = d^r * tau^r`` (SREHN, docs/methods.md 2.13). ``weights``: the
        layers' weights split once per sequence (``layer_weights``), None to index them here.
        """
        gates = [None] * self.depth if d is None else d.unbind(1)  # one node, not one a layer
        for r, d_r in enumerate(gates):
            s, tau = self.transform(r, h, xp if r == 0 else None, weights)
            g = tau if d_r is None else d_r * tau  # [B, D]
            h = highway_mix(g, s, h)  # coupled carry c = 1 - tau; S-EI eq. 9 when elastic
        return h


def run_sequence(step_fn: Callable[[Tensor, Any], StepOut], xs: Tensor, state: Any) -> SeqOut:
    """Apply ``step_fn(x_t, state)`` over time and stack as ``Method.step_loop`` does
    (extras averaged over time); the caller sets ``aux_loss``."""
    hs, masks, depths = [], [], []
    extras: dict[str, list[Tensor]] = {}
    for x_t in xs.unbind(1):  # one unbind, linear backward (see Method.step_loop)
        so = step_fn(x_t, state)
        state = so.state
        hs.append(so.h)
        masks.append(so.mask)
        depths.append(so.depth)
        for k, v in so.extras.items():
            extras.setdefault(k, []).append(v)
    return SeqOut(
        outputs=torch.stack(hs, 1),
        mask=torch.stack(masks, 1),
        depth=torch.stack(depths, 1) if depths and depths[0] is not None else None,
        extras={k: torch.stack(v, 1).mean(1) for k, v in extras.items()},
        state=state,
    )


class FixedDepthHighway(Method):
    """Base of RHN and SRHN: a coupled highway stack of ``depth`` layers run in full at every step
    (mask 1, depth L everywhere). Subclasses set ``shared`` (one weight set for all layers)."""

    config_cls = HighwayConfig
    has_depth = True
    shared: ClassVar[bool] = False

    def __init__(self, input_size: int, hidden_size: int, cfg: HighwayConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        c = self.cfg
        self.cell = CoupledHighway(
            input_size,
            hidden_size,
            c.depth,
            shared=self.shared,
            transform_bias=c.transform_bias,
            bound=weight_bound(c.init_bound, hidden_size),
        )

    def cost(self) -> StepCost:
        D, V, L = self.hidden_size, self.input_size, self.cfg.depth
        # 2DV (input rows of s and tau, layer 1) + 2D^2 per layer = 2D(D+V) + 2(L-1)D^2
        return StepCost(D, per_active_step=2 * D * V, per_layer=2 * D * D, max_depth=L)

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def _advance(
        self, xp_t: Tensor, h: Tensor, weights: list[tuple[Tensor, Tensor]] | None = None
    ) -> StepOut:
        h = self.cell(xp_t, h, weights=weights)  # [B, D] = h^L
        return StepOut(h, h, torch.ones_like(h), torch.full_like(h, float(self.cfg.depth)))

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        return self._advance(self.cell.input_proj(x_t), state)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        h0 = self.init_state(x.shape[0], x) if state is None else state
        weights = self.cell.layer_weights()  # split once a sequence (see layer_weights)
        xp = self.cell.input_proj(x)  # [B, T, 2D] projected
        return run_sequence(lambda xp_t, h: self._advance(xp_t, h, weights), xp, h0)
