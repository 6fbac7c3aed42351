"""Pieces shared by the highway family (RHN, HSG, SRHN, SREHN, EI-REHN), written once.

- ``CoupledHighway``: the RHN layer stack with a coupled carry gate (docs/methods.md 2.10),
  per-layer or shared (SRHN, 2.12) weights; the input enters only at layer 1. With an elastic gate
  ``d`` it runs the SREHN update ``g^r = d^r * tau^r`` (2.13).
- ``ElasticGate``: S-EI's local rate ``alpha_t`` (eq. 14) and elastic gate ``d^r`` (eqs. 11-13) for
  every layer at once, plus the depth trace: ``n_{t,i} = #{r : d^r_{t,i} > 0}``, mask
  ``u = 1[d^1 > 0]`` and ``R_t = max_i n_{t,i}`` (docs/methods.md 1.1, 2.14(e, h)). ``elastic_gate``
  evaluates eq. 11 without overflow, exact to float rounding for any alpha; with gradients it is
  one autograd node whose backward is written out (``_ElasticGate``).
- ``run_sequence``: the step loop over a precomputed sequence, stacked like ``Method.step_loop``.
- The initialisation constants ([DECISION]s of docs/methods.md 2.10, 2.11, 2.14(g)).

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
from torch.autograd.function import once_differentiable

from harness.config import MAX_LAYERS, MAX_PENALTY, check_knobs, knob
from harness.method import Method, SeqOut, StepCost, StepOut

TRANSFORM_BIAS = -2.0  # RHN transform-gate bias, rhn_train.py PTB value (docs/methods.md 2.10)
HSG_GATE_BIAS = -2.0  # [DECISION] docs/methods.md 2.11: the seed's value was lost; closed at start
ALPHA_HAT_INIT = -3.0  # [DECISION] docs/methods.md 2.14(g): alpha = softplus(-3) = 0.049
BETA_HAT_INIT = 3.0  # beta = sigmoid(3) = 0.953
RATE_BIAS_INIT = -3.0  # bias of W_a: alpha_t ~ sigmoid(-3) = 0.047 -> d^1 ~ 0.90, depth ~ 7


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


@dataclass(frozen=True)
class ElasticConfig:
    """Knobs of the elastic-gate methods (SREHN, EI-REHN).

    Attributes:
        r_max: R_max, the most highway layers per step (and the dense depth).
        gate_bias: initial bias of the content gate (SREHN's tau, EI-REHN's g-hat branch).
        lam_d: weight of the optional compute penalty ``lam_d * sum_{t,i} d^1`` (0: off).
        init_bound: weights ~ U(+-init_bound); 0 means 1/sqrt(D).
    """

    r_max: int = knob(10, ge=1, le=MAX_LAYERS)
    gate_bias: float = knob(0.0, ge=-BIAS_BOUND, le=BIAS_BOUND)
    lam_d: float = knob(0.0, ge=0, le=MAX_PENALTY)
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

    def transform(self, r: int, h: Tensor, xp: Tensor | None) -> tuple[Tensor, Tensor]:
        """Layer ``r`` (0-based) candidate ``s`` and transform gate ``tau``, each ``[B, D]``."""
        k = 0 if self.shared else r
        a = F.linear(h, self.weight_h[k], self.bias[k])  # [B, 2D]
        if xp is not None:
            a = a + xp  # the input enters at the first layer only
        s, tau = a.chunk(2, -1)
        return torch.tanh(s), torch.sigmoid(tau)  # the RHN layer, S-EI eqs. 6-8

    def forward(self, xp: Tensor, h: Tensor, d: Tensor | None = None) -> Tensor:
        """Run the stack from ``h [B, D]`` with the projected input ``xp [B, 2D]``.

        Without ``d``: ``depth`` RHN layers, ``g = tau``. With an elastic gate ``d [B, R, D]``:
        R layers with ``g^r = d^r * tau^r`` (SREHN, docs/methods.md 2.13).
        """
        layers = self.depth if d is None else d.shape[1]
        for r in range(layers):
            s, tau = self.transform(r, h, xp if r == 0 else None)
            g = tau if d is None else d[:, r] * tau  # [B, D]
            h = highway_mix(g, s, h)  # coupled carry c = 1 - tau; S-EI eq. 9 when elastic
        return h


def elastic_layers(xp_b: Tensor, h: Tensor, d: Tensor, weight_t: Tensor, bias: Tensor) -> Tensor:
    """``CoupledHighway.forward`` with an elastic gate and shared weights, in 6 ops per layer
    instead of 12, for the training loop (a step is bound by per-op dispatch at the paper sizes):
    ``weight_t = weight_h[0].t()`` and ``bias = bias[0]`` taken once per sequence, the input term
    and the bias of layer 1 added once (``xp_b = W x_t + b``), ``addmm`` and ``lerp`` for
    ``g * s + (1 - g) * h`` (an exact copy where g = 0). The same equations, equal to rounding.

    Args:
        xp_b: ``[W_H; W_T] x_t + b`` ``[B, 2D]``, layer 1's pre-activation less ``R h``.
        h: ``h_{t-1}`` ``[B, D]``.
        d: the elastic gate of the layers to run, ``[B, R, D]``.
        weight_t: the shared recurrent weight, transposed, ``[D, 2D]``.
        bias: the shared bias ``[2D]``.
    """
    for r, d_r in enumerate(d.unbind(1)):
        s, tau = torch.addmm(xp_b if r == 0 else bias, h, weight_t).chunk(2, -1)
        h = torch.lerp(h, torch.tanh(s), d_r * torch.sigmoid(tau))  # S-EI eqs. 10, 9
    return h


@dataclass
class ElasticTrace:
    """The elastic gate of one step: ``d [B, R_max, D]``, per-unit depth ``n [B, D]`` (float),
    update mask ``u = 1[d^1 > 0]`` ``[B, D]`` and executed depth ``R [B]`` (long)."""

    d: Tensor
    n: Tensor
    mask: Tensor
    R: Tensor


class ElasticGate(nn.Module):
    """S-EI's elastic gate: ``W_a`` on ``[h; x; 1]`` (D(D+V+1)) and the learned ``alpha_hat``,
    ``beta_hat`` (2D), initialised per docs/methods.md 2.14(g) so that the network starts alive.

    Args:
        input_size: V.
        hidden_size: D.
        r_max: R_max.
        bound: weights of W_a ~ U(+-bound).
    """

    def __init__(self, input_size: int, hidden_size: int, r_max: int, bound: float) -> None:
        super().__init__()
        D = hidden_size
        self.r_max = r_max
        self.rate = nn.Linear(D + input_size, D)
        self.alpha_hat = nn.Parameter(torch.full((D,), ALPHA_HAT_INIT))
        self.beta_hat = nn.Parameter(torch.full((D,), BETA_HAT_INIT))
        with torch.no_grad():
            self.rate.weight.uniform_(-bound, bound)
            self.rate.bias.fill_(RATE_BIAS_INIT)
        self.register_buffer("steps", torch.arange(1, r_max + 1).float(), persistent=False)

    def rates(self, h: Tensor, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``alpha [D]``, ``beta [D]`` and the local rate ``alpha_t [B, D]`` (eqs. 13, 12, 14)."""
        alpha = F.softplus(self.alpha_hat)  # eq. 13
        beta = torch.sigmoid(self.beta_hat)  # eq. 12
        alpha_t = torch.sigmoid(self.rate(torch.cat([h, x], -1)))  # eq. 14
        return alpha, beta, alpha_t

    def forward(self, h: Tensor, x: Tensor) -> ElasticTrace:
        """The gate of every layer ``r = 1..R_max`` and its depth trace, from ``h_{t-1}, x_t``."""
        return self.trace(*self.rates(h, x))

    def trace(self, alpha: Tensor, beta: Tensor, alpha_t: Tensor) -> ElasticTrace:
        """The gate of every layer and its depth trace from the rates of ``rates``."""
        d = elastic_gate(alpha, beta, alpha_t[:, None, :], self.steps[:, None])  # [B, R_max, D]
        # d decreases in r, so the layers with d > 0 are a prefix: n counts them (1.1, 2.14(h)).
        n = (d.detach() > 0).sum(1)  # [B, D]
        R = n.amax(-1)  # [B] = min(R_max, max_i(ceil(L_ti) - 1))
        return ElasticTrace(d, n.to(d.dtype), (n > 0).to(d.dtype), R)


def elastic_gate(alpha: Tensor, beta: Tensor, alpha_t: Tensor, r: Tensor) -> Tensor:
    """S-EI eq. 11, ``d^r = max(beta + e^alpha - e^{(alpha + alpha_t) r}, 0)``, for any alpha.

    Written as ``d = beta - e^q`` with ``q = ln(e^{(alpha + alpha_t) r} - e^alpha)
    = (alpha + alpha_t) r + ln(1 - e^{-u})`` and ``u = alpha (r - 1) + alpha_t r >= 0``, so nothing
    overflows: the direct form's ``e^alpha - e^{(alpha + alpha_t) r}`` is inf - inf (NaN) in float32
    once alpha > 88, and an exponent cap leaves d > 0 at every layer for alpha > the cap. Where
    ``q >= 0``, ``e^q >= 1 > beta`` and d is 0 whatever q is, so q is capped at 0 there (value and
    gradient unchanged). ``u = 0`` (alpha_t, and alpha for r > 1, rounded to 0) gives ``d = beta``
    exactly, with no gradient through u (``1 - e^{-u}`` has an infinite log-derivative there).

    With gradients, one autograd node (``_ElasticGate``) whose backward is written out: about 12
    kernels instead of autograd's 25 for the 15 ops (the gate runs at every step).

    Args:
        alpha: ``softplus(alpha_hat)`` (eq. 13), broadcastable against the others.
        beta: ``sigmoid(beta_hat)`` (eq. 12).
        alpha_t: the local rate (eq. 14).
        r: the layer numbers (1-based, float).

    Returns:
        d, broadcast over the four inputs.
    """
    grad = alpha.requires_grad or beta.requires_grad or alpha_t.requires_grad
    if grad and torch.is_grad_enabled() and not torch.jit.is_tracing():
        return _ElasticGate.apply(alpha, beta, alpha_t, r)
    return _gate(alpha, beta, alpha_t, r)[0]


def _gate(alpha: Tensor, beta: Tensor, alpha_t: Tensor, r: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``elastic_gate``'s value d, with ``m = 1 - e^{-u}`` (1 - e^{-1} where u = 0) and ``e^q``."""
    u = alpha * (r - 1) + alpha_t * r  # the exponent minus alpha, without the cancellation
    pos = u > 0
    m = -torch.expm1(-torch.where(pos, u, 1.0))  # 1 - e^{-u}
    q = (alpha + alpha_t) * r + torch.where(pos, torch.log(m), -math.inf)
    e = q.clamp(max=0.0).exp()
    return torch.relu(beta - e), m, e  # eq. 11


class _ElasticGate(torch.autograd.Function):
    """``elastic_gate`` with its derivatives written out. Where d > 0 (so q < 0): ``dd/dbeta = 1``,
    ``dd/dq = -e^q``, and through ``ln(1 - e^{-u})``, ``dq/dalpha_t = r / m``, ``dq/dalpha =
    1 + (r - 1) / m`` (``m = 1 - e^{-u}``); where d = 0 no gradient; where u = 0, ``e^q = 0``."""

    @staticmethod
    def forward(ctx, alpha, beta, alpha_t, r):
        d, m, e = _gate(alpha, beta, alpha_t, r)
        ctx.save_for_backward(r, d, m, e)
        ctx.shapes = alpha.shape, beta.shape, alpha_t.shape
        return d

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_d):
        r, d, m, e = ctx.saved_tensors
        alpha_shape, beta_shape, alpha_t_shape = ctx.shapes
        grad_d = torch.where(d > 0, grad_d, 0.0)  # the rectifier (0, not 0 * inf, where d = 0)
        dq = torch.mul(e, grad_d).neg_()
        du = dq / m  # dq (1 + dln(1 - e^{-u})/du) = dq / m; 0 where u = 0, as e^q = 0 there
        grad_alpha = dq.sum_to_size(alpha_shape) + (du * (r - 1)).sum_to_size(alpha_shape)
        return grad_alpha, grad_d.sum_to_size(beta_shape), (du * r).sum_to_size(alpha_t_shape), None


def active_limit(alpha: Tensor, beta: Tensor, alpha_t: Tensor) -> Tensor:
    """``L_{t,i} = ln(beta + e^alpha) / (alpha + alpha_t)``: unit i is active at layer r iff
    ``r < L_{t,i}`` (docs/methods.md 2.14(b)); ``R_t = min(R_max, max_i(ceil(L_ti) - 1))``. The log
    is taken as ``logaddexp``, finite for any alpha."""
    return torch.logaddexp(alpha, beta.log()) / (alpha + alpha_t)


def elastic_penalty(out: SeqOut, lam_d: float, key: str = "elastic_d1_mean") -> Tensor | None:
    """``lam_d * sum_{t,i} d^1_{t,i}`` averaged over the batch ([DECISION] docs/methods.md 2.14(k)),
    from the per-sequence mean of d^1 the elastic methods put in ``extras[key]``; None when off."""
    if lam_d <= 0:
        return None
    T, D = out.outputs.shape[1:]
    return lam_d * (out.extras[key] * (T * D)).mean()


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

    def _advance(self, xp_t: Tensor, h: Tensor) -> StepOut:
        h = self.cell(xp_t, h)  # [B, D] = h^L
        return StepOut(h, h, torch.ones_like(h), torch.full_like(h, float(self.cfg.depth)))

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        return self._advance(self.cell.input_proj(x_t), state)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        h0 = self.init_state(x.shape[0], x) if state is None else state
        return run_sequence(self._advance, self.cell.input_proj(x), h0)  # [B, T, 2D] projected


class ElasticHighway(Method):
    """Base of SREHN and EI-REHN. Subclasses implement ``_advance(x_t, h, adaptive)``: with
    ``adaptive`` it runs max over the batch of R_t layers (Algorithm 1, halting checked before each
    layer); without, the fixed ``r_max`` layers, which give the same h_t because the rectified
    gate makes every later layer a copy (docs/methods.md 2.14(e)) and keep the traced graph static.

    R_t counts the layers with some ``d^r_i > 0``; Algorithm 1 stops at ``||g^r||_1 = 0`` with
    ``g^r = d^r * g-hat^r``. The two agree because ``g-hat = sigmoid(.) > 0``, unless float
    arithmetic rounds g-hat (torch's sigmoid gives exactly 0 below about -88.7 in float32, -709.8
    in float64) or ``d * g-hat`` to exactly 0 for every unit: Algorithm 1 would stop there, this
    code runs on (that layer is a copy; a later one may have g-hat > 0 again). See the methods'
    "Differences".

    ``train_diagnostics`` gives the mean number of layers the training forwards ran per step
    (``tally_layers``): ``r_max`` on the fixed path, fewer where a subclass trains adaptively."""

    config_cls = ElasticConfig
    budget_knobs = ("lam_d",)  # the compute penalty on d^1 (off at 0)
    has_depth = True
    _layers_run = 0  # highway layers run by the training forwards (tally_layers)
    _steps_run = 0

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def _advance(self, x_t: Tensor, h: Tensor, adaptive: bool) -> StepOut:
        raise NotImplementedError

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        return self._advance(x_t, state, adaptive=True)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        h0 = self.init_state(x.shape[0], x) if state is None else state
        out = run_sequence(lambda x_t, h: self._advance(x_t, h, adaptive=False), x, h0)
        self.tally_layers(self.cfg.r_max * x.shape[1], x.shape[1])
        out.aux_loss = self.aux_loss(out)
        return out

    def tally_layers(self, layers: int, steps: int) -> None:
        """Count the highway layers a training forward ran over ``steps`` steps (``forward``s in
        eval mode or without grad are not counted)."""
        if self.training and torch.is_grad_enabled():
            self._layers_run += layers
            self._steps_run += steps

    def train_diagnostics(self) -> dict[str, float]:
        """``train_layers_per_step``: the mean number of highway layers the training forwards ran
        per step (``max_b R_t`` where training skips the layers past it, else ``r_max``)."""
        if not self._steps_run:
            return {}
        return {"train_layers_per_step": self._layers_run / self._steps_run}

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        return elastic_penalty(out, self.cfg.lam_d)  # docs/methods.md 2.14(k), off when lam_d = 0
