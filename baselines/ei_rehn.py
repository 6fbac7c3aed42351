"""EI-REHN: Early Improving Recurrent Elastic Highway Network (depth-adaptive highway RNN).

Paper: Park & Yoo, "Early Improving Recurrent Elastic Highway Network",
https://arxiv.org/abs/1708.04116 (S-EI), eqs. 9-22 and Algorithm 1; docs/methods.md 2.14. Per step,
from ``h^0 = h_{t-1}`` and learned ``s^0, g^0, z^0``, for r = 1..R_t::

    alpha_t = sigmoid(W_a [h_{t-1}; x_t; 1])                                     eq. 14
    d^r    = max(beta + e^alpha - e^{(alpha + alpha_t) r}, 0)                    eq. 11
    z^r    = tanh(W_zh s^{r-1} + W_zg g^{r-1} + W_zz z^{r-1} + b_z)              eq. 18
    w^r_B  = P_B z^r;  gbar^r_B = sigmoid(Pbar_B z^r + bbar_B)                    eqs. 19-21
    a^r_B  = gbar * (W^{r-1}_B h^{r-1}) + (1 - gbar) * (w^r_B * h^{r-1}) + W_xB x_t 1[r=1] + b_B
    s^r = tanh(a^r_s);  g^r = sigmoid(a^r_g)                                     eq. 22
    W^r_B  = W^{r-1}_B + diag(w^r_B)                                             eq. 17
    gate = d^r * g^r                                                             eq. 10
    h^r = gate * s^r + (1 - gate) * h^{r-1}                                      eq. 9

with ``alpha = softplus(alpha_hat)`` (eq. 13), ``beta = sigmoid(beta_hat)`` (eq. 12) and branches B
in {s, g}. ``R_t = min(R_max, max_i(ceil(L_ti) - 1))``, ``L_ti = ln(beta_i + e^alpha_i)/(alpha_i +
alpha_ti)``: the layers where some ``d^r_i > 0``, which is Algorithm 1's "while ||g^r||_1 > 0 and
r <= R_max" as long as g-hat > 0 (see below). Eq. 11 is evaluated in a form that cannot overflow
(``baselines._elastic.elastic_gate``), exact to float rounding for any alpha.
Parameters (docs/methods.md 2.14(f)):
``D(D+V+1) + 2D + 2[D^2 + DV + D + 2D D_z + D] + [2D D_z + D_z^2 + D_z] + [2D + D_z]``.
With a linear read-out this gives S-EI Table 1's three counts (807 / 1732 / 2862) exactly; Table
2's HAR counts (8102 / 12126 / 16950) only with a further +10 D that this structure does not
explain or include (every HAR model of Table 2 carries it; docs/methods.md P2.6).

Differences from the paper:
- [DECISION] docs/methods.md 2.14(f): s^0, g^0, z^0 (undefined in the paper) are learned vectors;
  D_z = ceil(D/2) ([INFERRED] from Tables 1-2; ``dz`` knob, 0 = ceil(D/2)).
- [DECISION] docs/methods.md 4 item 6: W^r accumulated additively (eq. 17) with eq. 22's gated mix
  applied at use. Computed as ``gbar * (W^0 h) + (gbar * sum_{k<r} w^k + (1 - gbar) * w^r) * h``:
  one D x D product and one diagonal (elementwise) product per branch and layer.
- [DECISION] docs/methods.md 2.14(e): halting checked before computing layer r (Algorithm 1 as
  printed computes one discarded layer more); identical outputs. ``step`` and training run the
  batch's ``max_b R_t`` layers (training: at least one in a sequence's first step, so that every
  parameter gets a gradient, 0 if nothing ran); the sequence ``forward`` in eval runs a fixed
  ``r_max`` layers with the rectified gate (layers past R_t are exact copies of h, and every
  gradient through them is multiplied by d = 0), so the traced dense graph is input-independent.
- Training computes the same equations in another form (``baselines/ops/ei_rehn_stack.py``: a step's
  layers as one autograd node with the derivatives written out, the input terms of all steps in
  one matmul; docs/methods.md 2.14, "Training at the cost of the layers run"): equal to the eager
  equations to float rounding, not bit for bit. Where the C++ kernel builds, a whole step (local
  rate, gate, depth trace, layers) is one C++ call (``baselines/ops/ei_rehn_stack.py``); the Python
  step is the reference, and ``train_fused_kernel`` in the diagnostics says which one ran.
  The Python step reads the batch's depth on the host (``int(tr.R.max())``, one sync per step:
  how many layers run depends on it); the kernel is CPU-only, so on CUDA that is the path.
- Halting on d, not on g: Algorithm 1 stops at ``||g^r||_1 = 0``, this code when every
  ``d^r_i = 0``. Equal in exact arithmetic (g-hat = sigmoid > 0); they differ only where floats
  round g-hat (torch's sigmoid is exactly 0 below about -88.7 in float32, -709.8 in float64) or
  ``d * g-hat`` to exactly 0 for every unit of a sequence: Algorithm 1 stops there, this code
  runs on to R_t (that layer is a copy; a later one can have g-hat > 0 again). Kept so that R_t
  is known before any layer runs (mask, depth and cost trace, fixed-depth dense graph), and
  because it is what the equations give in exact arithmetic. Shown by
  tests/test_ei_rehn.py::test_halting_on_d_when_the_content_gate_underflows.
- [DECISION] docs/methods.md 2.14(g): alpha_hat = -3, beta_hat = +3, W_a bias -3 (zeros leave the
  network dead: d^1 = -0.80 < 0 for every unit). Other weights U(+-1/sqrt(D)) (``init_bound``),
  b_s, bbar 0, b_g = ``gate_bias`` (0); the learned initial vectors start at 0.
- R_max = 10 by default (``r_max``; docs/methods.md 2.14(j): 10 synthetic, 5 HAR, 2-5 PTB).
- [DECISION] docs/methods.md 2.14(k): optional compute penalty ``lam_d * sum_{t,i} d^1`` (off).
- Mask ``u = 1[d^1 > 0]``, depth ``n_{t,i} = #{r <= R_t : d^r_{t,i} > 0}`` (docs/methods.md
  2.14(h)). MACs are layer-level (2.14(i)); a per-unit count is not realisable, since the
  hypernetwork reads all of s^r and g^r.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines._elastic import ElasticConfig, ElasticGate, ElasticHighway
from baselines._highway import highway_mix, run_sequence, weight_bound
from baselines.ops.ei_rehn_stack import fused_step, stack_layers, step_kernel
from baselines.ops.highway_infer import inference_kernel
from baselines.ops.library import input_terms
from harness.components.config import MAX_WIDTH, knob
from harness.components.method import SeqOut, StepCost, StepOut
from harness.components.registry import register_method


@dataclass(frozen=True)
class EIREHNConfig(ElasticConfig):
    """Elastic knobs (r_max, gate_bias, lam_d, init_bound) plus the hypernetwork size D_z."""

    dz: int = knob(0, ge=0, le=MAX_WIDTH)  # 0: ceil(D / 2)


@register_method("ei-rehn")
class EIREHN(ElasticHighway):
    """Elastic highway layers with hypernetwork-generated diagonal weights."""

    config_cls = EIREHNConfig
    _compiled = False  # compile_step ran: training takes the compiled fixed-depth path
    _fused_steps = 0  # steps of the training forwards run by the fused C++ step (fused_step)

    def __init__(self, input_size: int, hidden_size: int, cfg: EIREHNConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        c, D, V = self.cfg, hidden_size, input_size
        self.dz = Dz = c.dz or math.ceil(D / 2)
        b = weight_bound(c.init_bound, D)
        self.elastic = ElasticGate(V, D, c.r_max, b)  # W_a, alpha_hat, beta_hat
        # Branches stacked as rows [s; g]; P rows [P_s; P_g; Pbar_s; Pbar_g].
        self.weight_x = nn.Parameter(torch.empty(2 * D, V).uniform_(-b, b))  # W_x,B
        self.weight0 = nn.Parameter(torch.empty(2 * D, D).uniform_(-b, b))  # W^0_B
        self.bias = nn.Parameter(torch.cat([torch.zeros(D), torch.full((D,), c.gate_bias)]))
        self.proj = nn.Parameter(torch.empty(4 * D, Dz).uniform_(-b, b))  # P_B, Pbar_B
        self.mix_bias = nn.Parameter(torch.zeros(2 * D))  # bbar_B
        self.hyper = nn.Linear(2 * D + Dz, Dz)  # [W_zh, W_zg, W_zz], b_z
        with torch.no_grad():
            self.hyper.weight.uniform_(-b, b)
            self.hyper.bias.uniform_(-b, b)
        self.s0 = nn.Parameter(torch.zeros(D))
        self.g0 = nn.Parameter(torch.zeros(D))
        self.z0 = nn.Parameter(torch.zeros(Dz))

    def cost(self) -> StepCost:
        D, V, Dz, R = self.hidden_size, self.input_size, self.dz, self.cfg.r_max
        # per layer: two W^0 h products, P and Pbar projections, hypernetwork, two diagonal products
        layer = 2 * D * D + 6 * D * Dz + Dz * Dz + 2 * D
        return StepCost(
            D,
            always=D * (D + V),  # alpha_t
            per_active_step=2 * D * V,  # input terms of s^1 and g^1
            per_layer=layer,
            max_depth=R,
            fvcore_uncounted=2 * D * R,
        )

    def _advance(self, x_t: Tensor, h: Tensor, adaptive: bool) -> StepOut:
        tr = self.elastic(h, x_t)  # d [B, R_max, D], n [B, D], mask [B, D], R [B]
        if adaptive:
            h = self._layers(x_t, h, tr.d, int(tr.R.max()))
        else:
            h = self._fixed_layers(x_t, h, tr.d)
        extras = {"elastic_d1_mean": tr.d[:, 0].mean(-1)}
        return StepOut(h, h, tr.mask, tr.n, extras)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        """Training (train mode, grad enabled, not ``compile_step``): each step runs only the
        batch's ``max_b R_t`` layers, as one autograd node (``stack_layers``). The further layers
        of the fixed path are copies of h whose every gradient is multiplied by d = 0, so outputs,
        trace and gradients are the same, to float rounding. Otherwise ``ElasticHighway.forward``:
        the fixed ``r_max`` layers, the input-independent dense graph fvcore and FlopCounterMode
        count."""
        if self.training and torch.is_grad_enabled() and not self._compiled:
            return self._train_forward(x, state)
        return super().forward(x, lengths, state)

    def _train_forward(self, x: Tensor, state: Tensor | None) -> SeqOut:
        """``forward`` in training: ``max_b R_t`` layers per step (``stack_layers``), with what
        every step reads taken once per sequence: the input terms of every step in one matmul
        (``W_a``'s and ``W_x``'s, with their biases), alpha and beta (eqs. 13, 12)."""
        h0 = self.init_state(x.shape[0], x) if state is None else state
        D, gate = self.hidden_size, self.elastic
        weight = torch.cat([gate.rate.weight[:, D:], self.weight_x])  # [3D, V]
        terms = F.linear(x, weight, torch.cat([gate.rate.bias, self.bias]))  # [B, T, 3D]
        alpha, beta = F.softplus(gate.alpha_hat), torch.sigmoid(gate.beta_hat)
        rate_h = gate.rate.weight[:, :D]
        rate_h_t = rate_h.t()
        init = torch.cat([self.s0, self.g0, self.z0])
        hyper = (self.hyper.weight, self.hyper.bias)
        weights = (self.weight0, self.bias, self.proj, self.mix_bias, *hyper, init)
        kernel = step_kernel(terms, h0, rate_h, alpha, beta, *weights)
        ran = 0

        def fused(p_t: Tensor, h: Tensor) -> StepOut:  # the same step in one C++ node
            nonlocal ran
            h, d1, n, mask, layers = fused_step(
                kernel, ran == 0, p_t, h, rate_h, alpha, beta, gate.r_max, weights
            )
            ran += layers
            return StepOut(h, h, mask, n, {"elastic_d1_mean": d1.mean(-1)})

        def step(p_t: Tensor, h: Tensor) -> StepOut:
            nonlocal ran
            rate_x, bx = p_t.split((D, 2 * D), -1)
            alpha_t = torch.sigmoid(torch.addmm(rate_x, h, rate_h_t))  # eq. 14
            tr = gate.trace(alpha, beta, alpha_t)  # d [B, R_max, D], n, mask [B, D], R [B]
            # One layer (a copy) where no layer has run yet, so that every parameter gets a
            # gradient (0 if nothing ran) as on the fixed path: Adam steps a parameter whose
            # gradient is 0 (momentum) and skips one whose gradient is None.
            layers = max(int(tr.R.max()), int(ran == 0))
            ran += layers
            h = stack_layers(h, tr.d[:, :layers], bx, *weights)
            return StepOut(h, h, tr.mask, tr.n, {"elastic_d1_mean": tr.d[:, 0].mean(-1)})

        out = run_sequence(step if kernel is None else fused, terms, h0)
        self.tally_layers(ran, x.shape[1])
        self._fused_steps += 0 if kernel is None else x.shape[1]
        out.aux_loss = self.aux_loss(out)
        return out

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Also builds (or loads) the fused C++ step where training will run it, before the
        epoch's timer starts: ``time.train_s`` holds no compile (the first build of the kernel
        library, every kernel at once, takes about a minute)."""
        super().on_epoch_start(epoch, num_epochs)
        if not self._compiled:
            step_kernel(*self.parameters())  # cached: a build at most once per process

    def train_diagnostics(self) -> dict[str, float]:
        """``ElasticHighway``'s and ``train_fused_kernel``: the fraction of the training forwards'
        steps that the fused C++ step ran (1.0: all of them, 0.0: the Python path throughout)."""
        out = super().train_diagnostics()
        if self._steps_run:
            out["train_fused_kernel"] = self._fused_steps / self._steps_run
        return out

    def train_state(self) -> dict[str, int]:
        return {**super().train_state(), "fused_steps": self._fused_steps}

    def load_train_state(self, state: dict[str, int]) -> None:
        super().load_train_state(state)
        self._fused_steps = state.get("fused_steps", 0)  # a checkpoint from before the tally

    def _layers(self, x_t: Tensor, h: Tensor, d: Tensor, layers: int) -> Tensor:
        """The highway layers 1..``layers`` of one step under the gate ``d`` (eqs. 17-22, 9-10)."""
        B, D = h.shape
        if layers > 0:
            xp = F.linear(x_t, self.weight_x).view(B, 2, D)  # W_x,B x_t, layer 1 only
            s, g, z = self.s0.expand(B, D), self.g0.expand(B, D), self.z0.expand(B, self.dz)
            acc = h.new_zeros(B, 2, D)  # sum_{k<r} w^k_B, so W^{r-1}_B = W^0_B + diag(acc)
            bias, mix_bias = self.bias.view(2, D), self.mix_bias.view(2, D)
            for r in range(layers):
                z = torch.tanh(self.hyper(torch.cat([s, g, z], -1)))  # eq. 18 [B, Dz]
                w, m = F.linear(z, self.proj).view(B, 4, D).split(2, 1)  # [B, 2, D] each
                gbar = torch.sigmoid(m + mix_bias)  # eqs. 19-21
                diag = gbar * acc + (1 - gbar) * w  # eqs. 17, 22 folded into one diagonal
                a = gbar * F.linear(h, self.weight0).view(B, 2, D) + diag * h[:, None] + bias
                if r == 0:
                    a = a + xp
                s, g = torch.tanh(a[:, 0]), torch.sigmoid(a[:, 1])  # eq. 22
                h = highway_mix(d[:, r] * g, s, h)  # eqs. 10, 9
                acc = acc + w  # eq. 17
        return h

    def _fixed_layers(self, x_t: Tensor, h: Tensor, d: Tensor) -> Tensor:
        """``_layers`` at ``r_max`` layers, as the sequence ``forward`` runs them."""
        return self._layers(x_t, h, d, self.cfg.r_max)

    def compile_step(self) -> None:
        """Train with the fixed-depth layer stack of a step (``_fixed_layers``, the ``r_max``
        layers ``ElasticHighway.forward`` runs) compiled by ``torch.compile`` (``train.compile``)
        in place of the eager ``max_b R_t`` layers of ``stack_layers``.

        One graph for every step: the layers past ``max_b R_t`` are run too (copies of h; a graph
        per depth would compile again for every depth the batches reach). Against the eager
        Python step, a HAR training step took about four fifths of its time, a synthetic one about
        the same; against the fused C++ step (``baselines.ops.ei_rehn_stack``), eager is now the
        faster (HAR, back to back: 453-478 ms eager, 700-750 ms compiled; docs/methods.md 2.14).
        Eval passes (no grad) and the adaptive ``step``
        stay eager. The outputs are the same equations; the float rounding differs.

        The elastic gate (eqs. 11-14) stays eager: inductor's vectorised CPU code computes
        ``expm1(x)`` as ``exp(x) - 1`` (torch 2.13; pytorch/pytorch#189803), which in float32 is
        0 for |x| below about 6e-8 and loses most digits below 1e-6, so eq. 11's
        ``ln(1 - e^{-u})`` was -inf for a unit whose local rate was that small and its gradient
        non-finite (a synthetic run diverged so); eager ``expm1`` is exact there.
        """
        eager = self._fixed_layers
        fixed = torch.compile(eager)

        def layers(x_t: Tensor, h: Tensor, d: Tensor) -> Tensor:
            return fixed(x_t, h, d) if torch.is_grad_enabled() else eager(x_t, h, d)

        self._fixed_layers = layers
        self._compiled = True

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference that stops each step at the halting depth (Algorithm 1) instead of running
        ``r_max`` layers; the skipped layers are exact copies in ``forward``, so the outputs are
        the same. Eval semantics.

        On CPU in float32/64, where the kernel library builds, the whole sequence is one call of
        the op ``condrnn::highway_infer_ei_rehn`` (``baselines.ops.highway_infer``): each
        sequence runs its own ``R_t`` layers (not the batch's deepest), layer 1's hypernetwork
        output (the same at every step: it reads the learned ``s^0, g^0, z^0``) computed once,
        no per-step dispatch. Elsewhere the PyTorch step loop below (``max_b R_t`` layers a
        step), the reference, runs (on another device with one warning line)."""
        kernel = inference_kernel(x, self.weight0)
        if kernel is not None:
            return self._kernel_forward(kernel, x)
        h0 = self.init_state(x.shape[0], x)
        out = run_sequence(lambda x_t, h: self._advance(x_t, h, adaptive=True), x, h0)
        out.aux_loss = self.aux_loss(out)
        return out

    def _kernel_forward(self, kernel: Any, x: Tensor) -> SeqOut:
        """``fast_forward`` by the op: the input terms of every step in one matmul (``W_a``'s
        with its bias, ``W_x``'s without: the layer adds ``b``), the weights as transposed views
        (the op's matmuls read them in place: nothing to pack)."""
        B, D = x.shape[0], self.hidden_size
        gate = self.elastic
        weight = torch.cat([gate.rate.weight[:, D:], self.weight_x])  # [3D, V]
        bias = torch.cat([gate.rate.bias, gate.rate.bias.new_zeros(2 * D)])
        p = input_terms(x, weight, bias)  # [T, B, 3D]
        alpha, beta = F.softplus(gate.alpha_hat), torch.sigmoid(gate.beta_hat)
        init = torch.cat([self.s0, self.g0, self.z0])
        hs, n, mask, d1 = kernel.ei_rehn(
            p,
            self.init_state(B, x),
            gate.rate.weight[:, :D].t(),
            alpha,
            beta,
            self.weight0.t(),
            self.bias,
            self.proj.t(),
            self.mix_bias,
            self.hyper.weight.t(),
            self.hyper.bias,
            init,
            self.cfg.r_max,
        )
        extras = {"elastic_d1_mean": d1.mean(1)}  # as run_sequence averages it
        out = SeqOut(outputs=hs, mask=mask, depth=n, extras=extras, state=hs[:, -1])
        out.aux_loss = self.aux_loss(out)
        return out
