"""Skip RNN (Skip-GRU): a binary gate decides, per step and for the whole state, whether the GRU
updates or copies its state; the update probability accumulates while steps are skipped.

Paper: Campos, Jou, Giró-i-Nieto, Torres & Chang, "Skip RNN: Learning to Skip State Updates in
Recurrent Neural Networks", ICLR 2018, https://arxiv.org/abs/1708.06834 (eqs. 2-5); used as a
baseline by S-SA (Hartvigsen et al., CIKM 2020, https://doi.org/10.1145/3340531.3412018)::

    u_t = round(u~_t)                                             eq. 2 (straight-through)
    h_t = u_t * GRU(h_{t-1}, x_t) + (1 - u_t) * h_{t-1}            eq. 3
    du_t = sigmoid(w_p . h_t + b_p)  if u_t = 1,  else du_{t-1}    eq. 4 (held while skipping)
    u~_{t+1} = u_t * du_t + (1 - u_t) * (u~_t + min(du_t, 1 - u~_t))   eq. 5
    loss += lam * sum_t u_t                                       budget, mean over the batch

What is computed is the authors' SkipGRUCell (imatge-upc/skiprnn-2017-telecombcn @ 63f93a5,
``src/rnn_cells/skip_rnn_cells.py``), which gives the same values as eqs. 2-5 but other derivatives
under the straight-through estimator. It keeps ``update_prob`` ``P`` and ``cum_update_prob`` ``C``
(initially 1 and 0) and at step t computes::

    h~_t = GRU(h_{t-1}, x_t)                       candidate, before the skip gate
    p_t  = sigmoid(w_p . h~_t + b_p)               from the candidate, not from h_t
    u~_t = C_{t-1} + min(P_{t-1}, 1 - C_{t-1})     so u~_1 = 1
    u_t  = round(u~_t)                             STE: d u_t / d u~_t = 1
    h_t  = u_t * h~_t + (1 - u_t) * h_{t-1}
    P_t  = u_t * p_t + (1 - u_t) * P_{t-1}
    C_t  = u_t * 0 + (1 - u_t) * u~_t

Values equal eqs. 2-5; derivatives do not, since the straight-through estimator differentiates
through the binary u, where the two recurrences are different functions of u that agree only at
u in {0, 1}. Eq. 5 with eq. 4's hold (``du = u * sigmoid(.) + (1 - u) * du_prev``) and the code's
``C_{t-1} = (1 - u) * u~_{t-1}``, ``P_{t-1} = u * p + (1 - u) * P_{t-2}`` give, for
``u~_{t-1} = 0.7``, ``p = 0.6``, ``P_{t-2} = 0.9``, the same ``u~_t = 0.6`` but
``d u~_t / d u~_{t-1}`` = -0.7 (eq. 5) and -1.0 (code). And eq. 4 reads ``h_t``, which depends on
``u_t``, where the code reads ``h~_t``, which does not. This module follows the code. Tested in
``tests/test_skip_rnn.py`` against a float64 transcription of SkipGRUCell and
``compute_budget_loss`` given the same weights: outputs, masks (``state_gate``), the budget and
the gradient of every parameter agree to 1e-12 in both GRU forms (``test_matches_authors_cell``,
``test_matches_authors_cell_where_the_min_ties``); the values of eqs. 2-5 read literally are
matched too, and their gradients are checked to differ
(``test_values_follow_the_paper_gradients_the_code``).

One rearrangement, with the same graph: ``p_t`` is evaluated at the start of step t + 1 (the state
carries ``h~_t`` and ``u_t``), so the dense trace evaluates ``w_p`` at every one of the T steps and
none of it is dead code (the code's ``p_T`` reaches only the final state, no output or loss, and a
projection after the last step would be pruned from fvcore's trace). Step 1 projects the initial
state with ``u_0 = 0``, which adds exactly nothing. The update mask is ``u_{t,i} = u_t`` for every
unit i, so Skip % = 1 - mean_t u_t.

Training on CPU (float32/64) runs the whole sequence as one C++ autograd node where the optional
kernel builds (``baselines.ops.skip_gru``, ``csrc/skip_gru.cpp``, built before the epoch's timer
starts), in both GRU forms: ``_step``'s graph over all T steps, forward and backward, with the
candidate computed at every step as here (a skipped step's is read by u's straight-through
gradient), the code's derivatives (through u into the mask, the budget, h_t and C; TF's Minimum
at a tie) and the gradient of a carried state. It equals the per-step ``_step`` loop (the
reference, and the path in eval, on CUDA, where the kernel does not build and with
``HARNESS_NO_KERNELS=1``) to float rounding, not bit for bit (p's dot product is summed in
another order, so only a u~ within rounding of 0.5 could round the other way): the same masks,
Skip % and budget (tests/test_kernel_skip_gru.py).

Differences from the authors' code:
- [DECISION] docs/methods.md 2.3: by default (``gru_form="after"``) the reset-after GRU shared by
  all GRU-based methods; the authors' TF cell resets before the matmul (``gru_form="before"``, the
  same computation as the code, tested). Gate biases r, z initialised to 1.0 and the candidate
  bias to 0 as in the code.
- Initialisation: GRU weights and ``w_p`` ~ U(+-1/sqrt(D)), the project's one GRU initialisation.
  The code's kernels use TF's default Glorot-uniform (``tf.get_variable`` without an
  initializer): U(+-sqrt(6/(V+3D))) for the r, z kernel ``[V+D, 2D]``, U(+-sqrt(6/(V+2D))) for
  the candidate kernel ``[V+D, D]`` and U(+-sqrt(6/(D+1))) for ``w_p``. Kept as is (changing it
  would move every number for no fidelity gain in what is computed). As in the code: ``b_p = 1.0``
  (``update_bias``: all steps used early in training), ``P_0 = 1, C_0 = 0`` (the first step always
  updates), a learned initial state ``h_0 ~ N(0, 1)``.
- ``lam`` defaults to 1e-7, S-SA's adding-task value ([DECISION] docs/methods.md 2.8 reads S-SA's
  lambda search as {0} and 1e-10 ... 1e-1); the code's ``cost_per_sample`` defaults to 0. The budget
  itself is the code's ``compute_budget_loss``: ``lam * sum_t u_t`` on the binary gate (STE
  gradient), per sequence, mean over the batch (value and gradients tested).
- Stacking (``num_layers > 1``) gives independent Skip-GRU layers, each with its own gate; the
  code's MultiSkipGRUCell shares one gate computed from the top layer (docs/methods.md 2.8
  pitfalls). One layer is the same.
- Not differences: rounding sends 0.5 to 0 (half to even), like TF's round; at a tie of the min the
  gradient goes to ``P`` alone, like TF's Minimum gradient (torch.minimum would split it).
- Cost: a step that updates updates all D units, so its cost is the full GRU, ``3D(D+V)`` MACs,
  in both GRU forms (per unit ``3(D+V)``; the reset-before form's cross-unit dependence of the
  candidate on every ``r_j`` costs nothing extra when all units update), plus the ``D``-MAC
  projection ``w_p . h~_t``; nothing is computed in a skipped step (docs/methods.md 1.4). The code
  computes everything at every step (dense TF graph). S-SA's FLOPs are 2x MACs, the Skip RNN
  paper's are 1x (docs/methods.md 1.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines._cells import (
    GRU_FORMS,
    GRUWeights,
    cached_pack,
    gru_macs_per_unit,
    masked_lerp,
    round_ste,
)
from baselines._highway import run_sequence
from baselines.ops.inference import column_panels, fast_path_note, panel_width
from baselines.ops.library import input_terms, on_cpu
from baselines.ops.skip_gru import sequence_kernel, skip_sequence
from baselines.ops.skip_rnn_infer import (
    fused_dtype,
    skip_rnn_infer_kernel,
    skip_rnn_infer_kernel_status,
)
from harness.components.config import MAX_PENALTY, check_knobs, knob
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method

# (h_{t-1} [B, D], h~_{t-1} [B, D], u_{t-1} [B, 1], P_{t-2} [B, 1], C_{t-1} [B, 1]): the step
# before's candidate and gate wait for the projection p_{t-1} that forms P_{t-1}.
SkipState = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]


def _tf_min(a: Tensor, b: Tensor) -> Tensor:
    """``min(a, b)`` whose gradient goes to ``a`` alone at a tie, as TF's Minimum (torch.minimum
    splits it)."""
    return torch.where(a <= b, a, b)


@dataclass(frozen=True)
class SkipRNNConfig:
    """Knobs of Skip-GRU.

    Attributes:
        lam: weight of the budget ``lam * sum_t u_t`` (per sequence, mean over the batch).
        update_bias: initial ``b_p`` of the update-probability projection.
        gru_form: ``"after"`` (reset-after GRU, docs/methods.md 2.3 [DECISION]) or ``"before"`` (the
            authors' TF cell); same parameters and cost.
    """

    lam: float = knob(1e-7, ge=0, le=MAX_PENALTY)
    update_bias: float = knob(1.0, ge=-100, le=100)  # sigmoid(+-100): saturated in float32
    gru_form: str = knob("after", choices=GRU_FORMS, legacy="after")  # an option since 824fa7b

    def __post_init__(self) -> None:
        check_knobs(self, "method", "skip-rnn")


@register_method("skip-rnn")
class SkipRNN(Method):
    """Skip-GRU: one binary update gate per step, shared by every unit."""

    config_cls = SkipRNNConfig
    budget_knobs = ("lam",)  # the budget weight

    def __init__(self, input_size: int, hidden_size: int, cfg: SkipRNNConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        D, V = self.hidden_size, self.input_size
        self.cell = GRUWeights(V, D, gate_bias=1.0, form=self.cfg.gru_form)
        with torch.no_grad():
            self.cell.bias[2 * D :] = 0.0  # candidate bias 0, as in the authors' code
        self.w_p = nn.Parameter(torch.empty(1, D))
        self.b_p = nn.Parameter(torch.full((1,), float(self.cfg.update_bias)))
        self.h0 = nn.Parameter(torch.randn(D))  # learned initial state
        nn.init.uniform_(self.w_p, -1.0 / D**0.5, 1.0 / D**0.5)

    def cost(self) -> StepCost:
        """Full GRU plus the ``D``-MAC projection in an updating step, in both GRU forms (all units
        update together, so the reset-before candidate needs nothing the full step lacks)."""
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=gru_macs_per_unit(V, D), per_active_step=D)

    def init_state(self, batch_size: int, ref: Tensor) -> SkipState:
        h = self.h0.to(ref.dtype).unsqueeze(0).expand(batch_size, -1)  # [B, D]
        zero, one = ref.new_zeros(batch_size, 1), ref.new_ones(batch_size, 1)
        # u_0 = 0 keeps P_0 = P_{-1} = 1 whatever h~_0 is; with C_0 = 0 it gives u~_1 = 1.
        return h, h, zero, one, zero

    def step(self, x_t: Tensor, state: SkipState, t: int) -> StepOut:
        return self._step(self.cell.input_proj(x_t), state, self.cell.weight_hh.t())

    def _step(self, xp_t: Tensor, state: SkipState, weight_hh_t: Tensor) -> StepOut:
        """One step from the projected input ``xp_t = W_i x_t + b [B, 3D]`` (``weight_hh_t``:
        the recurrent weight transposed once per sequence, ``GRUWeights.train_step``)."""
        h, cand_prev, u_prev, up_prev, cum = state
        p = torch.sigmoid(F.linear(cand_prev, self.w_p, self.b_p))  # [B, 1] p_{t-1}, from h~_{t-1}
        up = masked_lerp(u_prev, p, up_prev)  # [B, 1] P_{t-1}
        u_tilde = cum + _tf_min(up, 1 - cum)  # [B, 1]
        u = round_ste(u_tilde)  # [B, 1]
        cand = self.cell.train_step(xp_t, h, weight_hh_t)  # [B, D] h~_t
        h_new = masked_lerp(u, cand, h)  # [B, D]
        cum_new = (1 - u) * u_tilde  # C_t; the code's extra ``u * 0`` has no value or gradient
        mask = u.expand(-1, self.hidden_size)  # [B, D], keeps the straight-through gradient
        return StepOut(h_new, (h_new, cand, u, up, cum_new), mask)

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Also builds (or loads) the Skip-GRU training kernel where training will run it,
        before the epoch's timer starts: ``time.train_s`` holds no compile."""
        super().on_epoch_start(epoch, num_epochs)
        sequence_kernel(*self.parameters())  # cached: a build at most once per process

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        """``step_loop`` with the input projection of every step in one matmul before the loop
        and the recurrent weight transposed once (fewer ops per step; the same values). In
        training on CPU, where the kernel builds, the same steps run as one C++ node
        (``baselines.ops.skip_gru``), equal to this loop to float rounding."""
        state = self.init_state(x.shape[0], x) if state is None else state
        cell, w = self.cell, self.cell.weight_hh
        kernel = sequence_kernel(x, *state, w, self.w_p) if self.training else None
        if kernel is not None:  # the same steps in one C++ node (baselines.ops.skip_gru)
            xp = input_terms(x, cell.weight_ih, cell.bias)
            hs, mask, state = skip_sequence(kernel, cell.form, xp, state, w, self.w_p, self.b_p)
            out = SeqOut(hs, mask, state=state)
        else:
            w_t = w.t()
            out = run_sequence(lambda xp_t, s: self._step(xp_t, s, w_t), cell.input_proj(x), state)
        out.aux_loss = self.aux_loss(out)
        return out

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference running the GRU and the ``w_p`` projection only for the sequences that update
        at a step; a step that no sequence updates costs no tensor op at all.
        Eval semantics; equals ``eval()(x)`` up to matmul rounding. Where the previous step
        updated, ``h~_{t-1} = h_{t-1}``, so the projection reads ``h``; elsewhere ``P`` is held.

        On the CPU, where the kernel library builds, the whole sequence runs in one call of the
        op ``condrnn::skip_rnn_infer_sequence`` (``_fused_forward``). Elsewhere (one warning off
        the CPU) this PyTorch loop, its reference: the decisions (``P``, ``C``, ``u~``, ``u``,
        vectors of B) run in NumPy in the tensor's dtype: the same IEEE operations as torch's
        elementwise ones (add, subtract, minimum, round half to even), so the same values bit for
        bit, at a fraction of a torch op's dispatch cost. The input projections of every step are
        one matmul before the loop and the recurrent weight is transposed once
        (``GRUWeights.train_step``)."""
        B, T, _ = x.shape
        h, _, _, _, _ = self.init_state(B, x)
        fused = on_cpu("Skip RNN's fused kernel", x) and fused_dtype(x, self.w_p)
        kernel = skip_rnn_infer_kernel() if fused else None
        if kernel is not None:
            return self._fused_forward(kernel, x, h)
        dt = torch.empty(0, dtype=x.dtype).numpy().dtype
        up, cum = np.ones(B, dt), np.zeros(B, dt)  # P_0 = 1, C_0 = 0
        xps = self.cell.input_proj(x).unbind(1)  # T x [B, 3D]
        w_t = self.cell.weight_hh.t()
        prev = np.zeros(0, np.int64)  # the sequences that updated at the previous step
        hs, us = [], np.zeros((T, B), dt)
        for t in range(T):
            if prev.size:  # p_{t-1} only where step t - 1 updated
                rows = h if prev.size == B else h[torch.from_numpy(prev).to(x.device)]
                p = torch.sigmoid(F.linear(rows, self.w_p, self.b_p))  # [n, 1]
                up[prev] = p.view(-1).cpu().numpy()
            u_tilde = cum + np.minimum(up, dt.type(1) - cum)
            u = np.rint(u_tilde)  # [B] round half to even, as torch.round
            cum = np.where(u > 0, dt.type(0), u_tilde)
            us[t] = u
            prev = np.flatnonzero(u)
            if 0 < prev.size < B:  # the GRU for the updating sequences only
                rows = torch.from_numpy(prev).to(x.device)
                h_rows, xp_rows = h.index_select(0, rows), xps[t].index_select(0, rows)
                h = h.index_copy(0, rows, self.cell.train_step(xp_rows, h_rows, w_t))
            elif prev.size:
                h = self.cell.train_step(xps[t], h, w_t)
            hs.append(h)
        u_last = torch.from_numpy(us[-1].copy()).to(x.device)[:, None]  # [B, 1]
        mask = torch.from_numpy(us.T.copy()).to(x.device)  # [B, T]
        mask = mask[:, :, None].expand(-1, -1, self.hidden_size).contiguous()  # [B, T, D]
        state = tuple(torch.from_numpy(v).to(x.device)[:, None] for v in (up, cum))
        # h stands in for h~_T: they differ only where u_T = 0, where h~_T is never read.
        out = SeqOut(torch.stack(hs, 1), mask, state=(h, h, u_last, *state))
        out.aux_loss = self.aux_loss(out)
        return out

    def _fused_forward(self, kernel: Any, x: Tensor, h0: Tensor) -> SeqOut:
        """``fast_forward`` by the op (``baselines.ops.skip_rnn_infer``): the GRU of the updating
        sequences only, gathered, with ``W_ih^T`` and ``W_hh^T`` transposed once (cached)."""
        cell, D = self.cell, self.hidden_size
        params = (cell.weight_ih, cell.weight_hh)
        wi, wh = cached_pack(self, "_fast_skip", params, self._pack)
        before = cell.form == "before"
        w_p, panel = self.w_p.view(-1), panel_width(wh.dtype, D)
        args = (x, h0.contiguous(), wi, wh, cell.bias, w_p, self.b_p, panel, before)
        hs, u, up, cum = kernel(*args)
        mask = u[:, :, None].expand(-1, -1, D).contiguous()  # [B, T, D]
        # h stands in for h~_T: they differ only where u_T = 0, where h~_T is never read.
        h = hs[:, -1]
        out = SeqOut(hs, mask, state=(h, h, u[:, -1:], up[:, None], cum[:, None]))
        out.aux_loss = self.aux_loss(out)
        return out

    def _pack(self) -> tuple[Tensor, Tensor]:
        """``W_ih^T [V, 3D]``, contiguous, and ``W_hh^T``, gate by gate (``[D, D]`` each), as
        column panels (``column_panels``, ``panel_width``): what the kernel's products read
        contiguously."""
        D = self.hidden_size
        w = self.cell.weight_hh
        panel = panel_width(w.dtype, D)
        gates = [column_panels(w[g * D : (g + 1) * D].t(), panel) for g in range(3)]
        return self.cell.weight_ih.t().contiguous(), torch.cat(gates)

    @classmethod
    def fast_path_note(cls) -> str | None:
        """Whether the fast path ran the fused C++ kernel here (on CPU) or the PyTorch fallback;
        reads the kernel's status and never builds it."""
        return fast_path_note(skip_rnn_infer_kernel_status(), cls.name)

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        """Budget ``lam * sum_t u_t`` per sequence, mean over the batch, on the binary u with its
        straight-through gradient: the code's ``compute_budget_loss``."""
        return self.cfg.lam * out.mask[..., 0].sum(1).mean()

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[SkipRNN, str]:
        """``w_p = 0`` and ``b_p`` such that the state updates every ``m = 1 / (1 - skip)`` steps,
        the same steps in every sequence."""
        model = cls(input_size, hidden_size)
        q = min(max(1.0 - skip, 1e-4), 1 - 1e-4)  # target update fraction
        m = max(1, round(1 / q))
        du = 0.5 / (m - 0.5) if m > 1 else 1 - 1e-4  # m du > 1/2 > (m - 1) du
        p = min(du, 1 - 1e-4)
        with torch.no_grad():
            model.w_p.zero_()
            model.b_p.fill_(math.log(p / (1 - p)))
        return model.eval(), f"update every {m} steps"
