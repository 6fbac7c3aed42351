"""SREHN: shared-weight RHN with S-EI's elastic gate, the second ablation step of S-EI 4.1.

Paper: Park & Yoo, "Early Improving Recurrent Elastic Highway Network",
https://arxiv.org/abs/1708.04116, section 4.1 and eqs. 9-14; docs/methods.md 2.13, 2.14(a, b, e).
The SRHN layer (``baselines/srhn.py``) with the highway update replaced by the elastic one::

    alpha_t = sigmoid(W_a [h_{t-1}; x_t; 1])                         eq. 14
    alpha = softplus(alpha_hat),  beta = sigmoid(beta_hat)            eqs. 13, 12
    d^r   = max(beta + e^alpha - e^{(alpha + alpha_t) r}, 0)          eq. 11
    s^r, tau^r = tanh / sigmoid of (shared R h^{r-1} + b + W x_t 1[r=1])
    g^r   = d^r * tau^r;   h^r = g^r * s^r + (1 - g^r) * h^{r-1}      eqs. 10, 9

for r = 1..R_t with ``R_t = min(R_max, max_i(ceil(L_ti) - 1))`` (Algorithm 1's halting rule,
computed before any layer runs, on d; see below). Eq. 11 is evaluated in a form that cannot
overflow (``baselines._elastic.elastic_gate``), exact to float rounding for any alpha.
Parameters: SRHN + ``D(D+V+1) + 2D``.

Differences from the paper:
- [DECISION] docs/methods.md 2.14(e): halting checked before computing layer r (Algorithm 1 as
  printed computes one discarded layer more); the outputs are identical. ``step`` runs ``max_b R_t``
  layers of the batch; the sequence ``forward`` runs a fixed ``r_max`` layers with the rectified
  gate (layers past R_t are exact copies), so the traced dense graph is input-independent.
- Halting on d, not on g: Algorithm 1 stops at ``||g^r||_1 = 0``, this code when every
  ``d^r_i = 0``. Equal in exact arithmetic (tau = sigmoid > 0); they differ only where floats
  round tau (torch's sigmoid is exactly 0 below about -88.7 in float32, -709.8 in float64) or
  ``d * tau`` to exactly 0 for every unit of a sequence: Algorithm 1 stops there, this code runs
  on to R_t (that layer is a copy; from layer 2 on tau lacks the input term and can be > 0
  again). Kept so that R_t is known before any layer runs (mask, depth and cost trace,
  fixed-depth dense graph), and because it is what the equations give in exact arithmetic. Shown
  by tests/test_ei_rehn.py::test_halting_on_d_when_the_content_gate_underflows.
- [DECISION] docs/methods.md 2.14(g): alpha_hat = -3, beta_hat = +3, W_a bias -3 (with zeros the
  network is dead on arrival: d^1 < 0 everywhere). Other weights U(+-1/sqrt(D)); the content gate
  tau starts at bias ``gate_bias`` = 0, the same as EI-REHN's g-hat branch (S-EI gives neither;
  the elastic gate already supplies the carry bias that RHN's -2 provides).
- R_max = 10 by default (``r_max``), the synthetic data's R_max (docs/methods.md 2.14(j)).
- [DECISION] docs/methods.md 2.14(k): optional compute penalty ``lam_d * sum_{t,i} d^1`` (off).
- Training on CPU in float32/float64, where the optional C++ kernel builds
  (``baselines/ops/srehn.py``, ``csrc/srehn.cpp``): the sequence ``forward``'s steps (the local
  rate,
  the elastic gate with its depth trace, the ``r_max`` layers) run in one C++ call forward and one
  backward, one autograd node per sequence; equal to the per-step path to float rounding, not bit
  for bit (mask, depth and the layers run the same; tests/test_kernel_srehn.py). The per-step
  path is the reference and runs in eval, on CUDA (one warning line), in other dtypes, where
  the kernel does not build and with ``HARNESS_NO_KERNELS=1``.
- Coupled carry (docs/methods.md 2.10 [INFERRED]). Mask ``u = 1[d^1 > 0]``, depth
  ``n_{t,i} = #{r <= R_t : d^r_{t,i} > 0}`` (docs/methods.md 1.1, 2.14(h)).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from baselines._cells import cached_pack
from baselines._elastic import ElasticConfig, ElasticGate, ElasticHighway, elastic_layers
from baselines._highway import CoupledHighway, run_sequence, weight_bound
from baselines.ops.highway_infer import inference_kernel, pack_srehn
from baselines.ops.srehn import elastic_sequence, sequence_kernel
from harness.components.method import SeqOut, StepCost, StepOut
from harness.components.registry import register_method


@register_method("srehn")
class SREHN(ElasticHighway):
    """Shared-weight coupled RHN whose gate is scaled by the elastic gate d^r."""

    def __init__(self, input_size: int, hidden_size: int, cfg: ElasticConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        c = self.cfg
        bound = weight_bound(c.init_bound, hidden_size)
        self.elastic = ElasticGate(input_size, hidden_size, c.r_max, bound)
        self.cell = CoupledHighway(
            input_size, hidden_size, c.r_max, shared=True, transform_bias=c.gate_bias, bound=bound
        )

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        # alpha_t every step; 2DV once any unit is active; 2D^2 per executed layer (2.14(i))
        return StepCost(
            D,
            always=D * (D + V),
            per_active_step=2 * D * V,
            per_layer=2 * D * D,
            max_depth=self.cfg.r_max,
        )

    def _input_terms(self, x: Tensor) -> Tensor:
        """The input terms of a step, ``[W_a^x x + b_a, W x + b]`` ``[..., 3D]``: the local rate's
        (eq. 14) and layer 1's (with the shared bias), one matmul for every step of a sequence."""
        D = self.hidden_size
        weight = torch.cat([self.elastic.rate.weight[:, D:], self.cell.weight_x])  # [3D, V]
        return F.linear(x, weight, torch.cat([self.elastic.rate.bias, self.cell.bias[0]]))

    def _weights(self) -> tuple[Tensor, ...]:
        """What every step reads, taken once per sequence: ``alpha``, ``beta`` (eqs. 13, 12),
        ``W_a^h`` transposed, the shared recurrent weight transposed and its bias."""
        D = self.hidden_size
        alpha = F.softplus(self.elastic.alpha_hat)
        beta = torch.sigmoid(self.elastic.beta_hat)
        rate_h_t = self.elastic.rate.weight[:, :D].t()
        return alpha, beta, rate_h_t, self.cell.weight_h[0].t(), self.cell.bias[0]

    def _step(self, p_t: Tensor, h: Tensor, weights: tuple[Tensor, ...], adaptive: bool) -> StepOut:
        """One step from the input terms ``p_t`` of ``_input_terms`` and ``_weights``."""
        alpha, beta, rate_h_t, weight_t, bias = weights
        rate_x, xp_b = p_t.split((self.hidden_size, 2 * self.hidden_size), -1)
        alpha_t = torch.sigmoid(torch.addmm(rate_x, h, rate_h_t))  # eq. 14
        tr = self.elastic.trace(alpha, beta, alpha_t)  # d [B, R_max, D], n, mask [B, D], R [B]
        layers = int(tr.R.max()) if adaptive else self.cfg.r_max
        if layers > 0:
            h = elastic_layers(xp_b, h, tr.d[:, :layers], weight_t, bias)  # [B, D]
        extras = {"elastic_d1_mean": tr.d[:, 0].mean(-1)}
        return StepOut(h, h, tr.mask, tr.n, extras)

    def _advance(self, x_t: Tensor, h: Tensor, adaptive: bool) -> StepOut:
        return self._step(self._input_terms(x_t), h, self._weights(), adaptive)

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Also builds (or loads) the training kernel where training will run it, before the
        epoch's timer starts: ``time.train_s`` holds no compile."""
        super().on_epoch_start(epoch, num_epochs)
        sequence_kernel(*self.parameters())  # cached: a build at most once per process

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        """The fixed ``r_max`` layers of ``ElasticHighway.forward``, with the input terms of every
        step in one matmul and the weights read once per sequence (fewer ops per step). In
        training, where the C++ kernel runs (``baselines.ops.srehn``), the same steps in one
        node."""
        h0 = self.init_state(x.shape[0], x) if state is None else state
        weights = self._weights()
        p = self._input_terms(x)  # [B, T, 3D]
        kernel = sequence_kernel(p, h0, *weights) if self.training else None
        if kernel is not None:
            alpha, beta, rate_h_t, weight_t, bias = weights
            hs, d1, n, mask = elastic_sequence(
                kernel, p, h0, rate_h_t.t(), alpha, beta, weight_t.t(), bias, self.cfg.r_max
            )
            extras = {"elastic_d1_mean": d1.mean(-1).mean(1)}  # as run_sequence averages it
            out = SeqOut(outputs=hs, mask=mask, depth=n, extras=extras, state=hs[:, -1])
        else:
            step = lambda p_t, h: self._step(p_t, h, weights, adaptive=False)  # noqa: E731
            out = run_sequence(step, p, h0)
        self.tally_layers(self.cfg.r_max * x.shape[1], x.shape[1])
        out.aux_loss = self.aux_loss(out)
        return out

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference that runs each step's layers only up to the halting depth (Algorithm 1)
        instead of ``r_max``; the layers past it are exact copies in ``forward``, so the outputs
        are the same. Eval semantics.

        On CPU in float32/64, where the kernel library builds, the whole sequence is one call of
        the op ``condrnn::highway_infer_srehn`` (``baselines.ops.highway_infer``): each sequence
        runs its own ``R_t`` layers, and a layer only the rows of the units whose gate ``d^r`` is
        > 0 (the others are copies), from a unit-major copy of the shared weight packed once
        (``pack_srehn``, cached). Elsewhere the PyTorch step loop (the batch's ``max_b R_t``
        layers a step, every unit) runs (on another device with one warning line)."""
        B = x.shape[0]
        h0 = self.init_state(B, x)
        weights = self._weights()
        p = self._input_terms(x)  # [B, T, 3D]
        kernel = inference_kernel(x, self.cell.weight_h)
        if kernel is not None:
            alpha, beta, rate_h_t, _, bias = weights
            weight = self.cell.weight_h[0]
            wu = cached_pack(self, "_fast_srehn", (weight,), lambda: pack_srehn(weight))
            hs, n, mask, d1 = kernel.srehn(
                p.transpose(0, 1), h0, rate_h_t, alpha, beta, wu, bias, self.cfg.r_max
            )
            extras = {"elastic_d1_mean": d1.mean(1)}  # as run_sequence averages it
            out = SeqOut(outputs=hs, mask=mask, depth=n, extras=extras, state=hs[:, -1])
        else:
            step = lambda p_t, h: self._step(p_t, h, weights, adaptive=True)  # noqa: E731
            out = run_sequence(step, p, h0)
        out.aux_loss = self.aux_loss(out)
        return out
