"""The elastic half of the highway family (SREHN, EI-REHN), written once.

- ``ElasticConfig``: the knobs of the elastic-gate methods.
- ``ElasticGate``: S-EI's local rate ``alpha_t`` (eq. 14) and elastic gate ``d^r`` (eqs. 11-13) for
  every layer at once, plus the depth trace: ``n_{t,i} = #{r : d^r_{t,i} > 0}``, mask
  ``u = 1[d^1 > 0]`` and ``R_t = max_i n_{t,i}`` (docs/methods.md 1.1, 2.14(e, h)). ``elastic_gate``
  evaluates eq. 11 without overflow, exact to float rounding for any alpha; with gradients it is
  one autograd node whose backward is written out (``_ElasticGate``). EI-REHN's training step and
  SREHN's training sequence run the same gate, forward and backward, in C++ fused with their local
  rate, depth trace and layers (``baselines.ops.ei_rehn_stack``, ``baselines.ops.srehn``) where the
  kernels build; this Python code is the reference they are tested against
  (tests/test_kernels.py, tests/test_kernel_srehn.py) and the path everywhere else (eval, no
  kernel).
- ``elastic_layers``: SREHN's shared-weight stack under an elastic gate, in few ops per layer.
- ``ElasticHighway``: the base of SREHN and EI-REHN (fixed-depth ``forward``, adaptive ``step``,
  the compute penalty, the training-depth tally).
- The initialisation constants of the gate ([DECISION]s of docs/methods.md 2.14(g)).

The coupled highway stack, ``run_sequence`` and the shared bounds live in ``baselines._highway``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from baselines._highway import BIAS_BOUND, INIT_BOUND_MAX, run_sequence
from harness.components.config import MAX_LAYERS, MAX_PENALTY, check_knobs, knob
from harness.components.method import Method, SeqOut, StepOut

ALPHA_HAT_INIT = -3.0  # [DECISION] docs/methods.md 2.14(g): alpha = softplus(-3) = 0.049
BETA_HAT_INIT = 3.0  # beta = sigmoid(3) = 0.953
RATE_BIAS_INIT = -3.0  # bias of W_a: alpha_t ~ sigmoid(-3) = 0.047 -> d^1 ~ 0.90, depth ~ 7


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
    kernels instead of autograd's 25 for the 15 ops (the gate runs at every step). The reference of
    the C++ gate in EI-REHN's fused training step (``csrc/ei_rehn_stack.cpp``, ``gate_forward`` and
    ``gate_backward``: these ops and this backward, ATen's expm1, log and exp, equal to float
    rounding; d bit for bit in the tests).

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


def elastic_penalty(out: SeqOut, lam_d: float, key: str = "elastic_d1_mean") -> Tensor | None:
    """``lam_d * sum_{t,i} d^1_{t,i}`` averaged over the batch ([DECISION] docs/methods.md 2.14(k)),
    from the per-sequence mean of d^1 the elastic methods put in ``extras[key]``; None when off."""
    if lam_d <= 0:
        return None
    T, D = out.outputs.shape[1:]
    return lam_d * (out.extras[key] * (T * D)).mean()


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

    def train_state(self) -> dict[str, int]:
        """The training-depth tally (a resumed run records the whole run's)."""
        return {"layers_run": self._layers_run, "steps_run": self._steps_run}

    def load_train_state(self, state: dict[str, int]) -> None:
        self._layers_run, self._steps_run = state["layers_run"], state["steps_run"]

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        return elastic_penalty(out, self.cfg.lam_d)  # docs/methods.md 2.14(k), off when lam_d = 0

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[ElasticHighway, str]:
        """``W_a`` weights 0 and its bias such that every unit halts at depth
        ``R = round((1 - skip) R_max)`` (at least 1); the skip aimed at is the depth-skip fraction
        (the unit Skip % of these methods is 0)."""
        model = cls(input_size, hidden_size)
        q = min(max(1.0 - skip, 1e-4), 1 - 1e-4)  # target fraction of the depth executed
        r_max = model.cfg.r_max
        R = min(r_max, max(1, round(q * r_max)))
        gate = model.elastic
        with torch.no_grad():
            alpha = F.softplus(gate.alpha_hat).mean().item()
            beta = torch.sigmoid(gate.beta_hat).mean().item()
            rate = math.log(beta + math.exp(alpha)) / (R + 0.5) - alpha  # L = R + 0.5 (2.14(b))
            p = min(max(rate, 1e-6), 1 - 1e-6)
            gate.rate.weight.zero_()
            gate.rate.bias.fill_(math.log(p / (1 - p)))
        return model.eval(), f"depth {R} of {r_max}"
