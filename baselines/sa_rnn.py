"""SA-RNN (Selective-Activation RNN): a coordinator decides, per step and per hidden unit,
whether the unit is recomputed by the GRU or copied from the previous step.

Paper: Hartvigsen, Sen, Kong & Rundensteiner, "Learning to Selectively Update State Neurons in
Recurrent Networks", CIKM 2020, https://doi.org/10.1145/3340531.3412018 (S-SA), eqs. 5-9;
authors' code: github.com/Thartvigsen/SA-RNN (``model.py``)::

    u~_t = hsig_a(w_u * h_{t-1} + W_i x_t + b_u)        eq. 5 (coordinator, before the update)
    u_t = 1[u~_t > 0.5]                                 eqs. 6, 8 (straight-through gradient)
    h_t = u_t * GRU(h_{t-1}, x_t) + (1 - u_t) * h_{t-1}  eq. 7
    loss += lam * (1/D) * sum_t sum_i u_{t,i}           eq. 9 as in the code (mean over the batch)

with the hard sigmoid ``hsig_a(v) = clip((a v + 1) / 2, 0, 1)`` of the code (the threshold at 0.5
means ``u = 1[v > 0]`` for any slope a; the slope only sets where the gradient flows).

Differences from the paper:
- [DECISION] docs/methods.md 2.3: by default (``gru_form="after"``) the reset-after GRU shared by
  all GRU-based methods; S-SA eq. 3, like the code, resets before the matmul
  (``gru_form="before"``).
- The update gate has the code's (and PyTorch's) sign, ``h~ = (1 - z) n + z h``; S-SA eq. 4
  writes ``z`` for this ``1 - z``. An equivalent reparametrisation, and no difference from the
  code.
- [DECISION] docs/methods.md 2.9 / 4.5: the budget follows the code, binary decisions (STE) summed
  over time and **averaged over the D units**, ``lam * (1/D) * sum_t sum_i u_{t,i}``; the paper's
  eq. 9 sums the soft ``u~`` over units, so its lambda is a factor D larger for the same penalty.
  Lambda values are not transferable between the two normalisations. ``lam`` defaults to the
  code's 1e-3.
- The hard sigmoid and the slope annealing ``a = min(5, 1 + 0.04 epoch)`` (epoch from 0) when
  ``anneal``, else the constant 0.1, are the code's (the paper defines neither).

Differences from the authors' code (Thartvigsen/SA-RNN @ f2dcb13, ``model.py``); with
``gru_form="before"`` and the same weights, outputs, masks, budget and gradients equal a
transcription of it to float64 rounding (``tests/test_sa_rnn.py``):
- ``GRUCell`` resets before the matmul; the default here resets after it (above).
- [DECISION] docs/methods.md 2.9: the recurrent coordinator weight is a vector ``w_u`` (W_u =
  diag(w_u)); the code keeps a dense block ``fc1`` on ``[h; x]`` whose off-diagonal entries stay
  zero only when ``modifyGradients`` is called after every backward pass (its example script
  never calls it). ``w_u``'s gradient is the diagonal of ``fc1``'s after ``modifyGradients``.
- The code's slope table is a float32 tensor indexed by epoch (so at most ``nepoch`` epochs);
  here a Python float at any epoch. The decisions do not depend on the slope; the gradients
  differ in the 8th digit at the epochs whose slope float32 does not hold exactly (1.04, ...).
- The code binarises with ``round`` (half to even), this module with ``> 0.5``: the same
  decisions (``round(0.5) = 0``) and the same identity backward.
- Initialisation: the same distributions (``nn.Linear``'s U(+-1/sqrt(D+V)) for every weight and
  bias of the GRU and the coordinator, ``w_u`` drawn like the diagonal of that block), drawn in
  another order, so one seed gives other weights.
- The coordinator is ``w_u * h + W_i x + b_u`` here, one matmul with zero off-diagonal entries
  in the code; the budget is ``lam * mean_batch(sum_{t,i} u) / D`` here, ``lam *
  mean_{batch, units}(sum_t u)`` in the code: equal values, summed in another order.
- Layout ``[B, T, V]`` (the code's is ``[T, B, V]``); ``h_0 = 0`` as in the code unless a state
  is carried over from a previous window; the read-out ``out`` on the last state and the task
  loss belong to the harness's model and task, not to this module.
- The code computes every unit and masks (no saving in time); so does ``forward`` here, while
  ``fast_forward`` (inference) computes only what the updated units need.

Training kernel: in training on CPU in float32/64 (either GRU form), where the optional C++ kernel
builds (``baselines.ops.sarnn_train``, ``csrc/sarnn_train.cpp``), ``forward`` runs the whole
sequence,
forward and backward, in one autograd node: the coordinator, the GRU candidate and the mix with
the straight-through gradient of the per-step loop (through the hard sigmoid, zero where it
clips). It equals the per-step loop to float rounding, not bit for bit (the same masks); the loop
is the reference and runs in eval, on CUDA, where the kernel does not build and with
``HARNESS_NO_KERNELS=1``.

Cost (MACs per step, docs/methods.md 2.9): coordinator ``D + D V`` at every step (``w_u * h`` is an
elementwise product that fvcore does not count, ``fvcore_uncounted``) plus the paper-effective
``3(D+V)`` per updated unit, in either GRU form (``cost``). What a sparse step realises
(``exact_step_macs``): with the reset-after GRU the same, each unit's gates read only its own
rows; with the reset-before GRU every updated unit's candidate reads ``r_j h_j`` of all units j,
so a skipping unit still needs its r row (``D + V``) whenever any unit updates, and only the
updated units need their z and n rows: ``D + DV + 1[k_t > 0] D(D+V) + 2 k_t (D+V)``. The fast
path computes exactly those rows in both forms.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines._cells import (
    GRU_FORMS,
    GRUWeights,
    binarize_ste,
    cached_pack,
    gru_exact_cost,
    gru_macs_per_unit,
    gru_rows,
    hard_sigmoid,
    masked_lerp,
    pack_gru_rows,
)
from baselines._highway import run_sequence
from baselines.ops.library import input_terms, on_cpu
from baselines.ops.sarnn import sarnn_kernel, sarnn_kernel_status
from baselines.ops.sarnn_train import sarnn_sequence, sequence_kernel
from harness.components.config import MAX_PENALTY, check_knobs, knob
from harness.components.flops import effective_step_macs
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method


@dataclass(frozen=True)
class SARNNConfig:
    """Knobs of SA-RNN.

    Attributes:
        lam: weight of the budget ``lam * (1/D) * sum_t sum_i u_{t,i}`` (mean over the batch).
        anneal: anneal the hard-sigmoid slope ``a = min(5, 1 + 0.04 epoch)``; else ``a = 0.1``.
        gru_form: ``after`` (reset after the recurrent matmul, docs/methods.md 2.3 [DECISION]) or
            ``before`` (S-SA eq. 3 and the authors' ``GRUCell``).
    """

    lam: float = knob(1e-3, ge=0, le=MAX_PENALTY)
    anneal: bool = True
    gru_form: str = knob("after", choices=GRU_FORMS, legacy="after")  # an option since 824fa7b

    def __post_init__(self) -> None:
        check_knobs(self, "method", "sa-rnn")


@register_method("sa-rnn")
class SARNN(Method):
    """GRU with a per-unit, per-step learned update coordinator."""

    config_cls = SARNNConfig
    budget_knobs = ("lam",)  # the budget weight

    def __init__(self, input_size: int, hidden_size: int, cfg: SARNNConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        D, V = self.hidden_size, self.input_size
        bound = 1.0 / math.sqrt(D + V)
        self.cell = GRUWeights(V, D, bound=bound, form=self.cfg.gru_form)
        self.w_u = nn.Parameter(torch.empty(D))  # diagonal recurrent weight
        self.w_i = nn.Parameter(torch.empty(D, V))
        self.b_u = nn.Parameter(torch.empty(D))
        for p in (self.w_u, self.w_i, self.b_u):
            nn.init.uniform_(p, -bound, bound)
        self.slope = self._slope(0)

    def _slope(self, epoch: int) -> float:
        return min(5.0, 1.0 + 0.04 * epoch) if self.cfg.anneal else 0.1

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Sets the epoch's slope; also builds (or loads) the training kernel where training will
        run it, before the epoch's timer starts: ``time.train_s`` holds no compile."""
        super().on_epoch_start(epoch, num_epochs)
        self.slope = self._slope(epoch)
        sequence_kernel(*self.parameters())  # cached: a build at most once per process

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, always=D + D * V, per_unit=gru_macs_per_unit(V, D), fvcore_uncounted=D)

    def exact_step_macs(self, out: SeqOut) -> Tensor | None:
        """Reset-before: ``D + DV + 1[k_t > 0] D(D+V) + 2 k_t (D+V)`` (every unit's r row once
        any unit updates); reset-after: None, the effective count is exact."""
        if self.cell.form == "after":
            return None
        D, V = self.hidden_size, self.input_size
        return effective_step_macs(gru_exact_cost(V, D, "before", always=D + D * V), out)

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        return self._step(self._input_proj(x_t), state, self.cell.weight_hh.t())

    def _input_proj(self, x: Tensor, linear=F.linear) -> Tensor:
        """``[W_i x + b, W_u x + b_u]``, the GRU's and the coordinator's input terms, ``[..., 4D]``:
        one matmul (``linear``) for every step of a sequence."""
        weight = torch.cat([self.cell.weight_ih, self.w_i])  # [4D, V]
        return linear(x, weight, torch.cat([self.cell.bias, self.b_u]))

    def _step(self, xp_t: Tensor, h: Tensor, weight_hh_t: Tensor) -> StepOut:
        """One step from ``xp_t = [W_i x_t + b, W_u x_t + b_u] [B, 4D]`` (``weight_hh_t``: the
        recurrent weight transposed once per sequence, ``GRUWeights.train_step``)."""
        D = self.hidden_size
        xp_gru, coord_x = xp_t.split((3 * D, D), -1)
        v = torch.addcmul(coord_x, self.w_u, h)  # [B, D] w_u * h + W_i x + b_u
        u = binarize_ste(hard_sigmoid(v, self.slope), 0.5)  # [B, D] eqs. 5, 6, 8
        cand = self.cell.train_step(xp_gru, h, weight_hh_t)  # [B, D]
        h_new = masked_lerp(u, cand, h)  # [B, D] eq. 7
        return StepOut(h_new, h_new, u)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        """``step_loop`` with the input terms of every step (GRU and coordinator) in one matmul
        before the loop and the recurrent weight transposed once (fewer ops per step).

        In training on CPU the training kernel runs the same steps instead, where it builds (the
        module's docstring: "Training kernel").
        """
        state = self.init_state(x.shape[0], x) if state is None else state
        w = self.cell.weight_hh
        kernel = sequence_kernel(x, state, w) if self.training else None
        if kernel is not None:  # the whole sequence in C++, forward and backward
            xp = self._input_proj(x, functools.partial(input_terms, time_major=False))
            before = self.cell.form == "before"
            hs, u = sarnn_sequence(kernel, xp, state, w, self.w_u, self.slope, before)
            out = SeqOut(hs, u, state=hs[:, -1])
        else:
            w_t = w.t()
            out = run_sequence(lambda xp_t, h: self._step(xp_t, h, w_t), self._input_proj(x), state)
        out.aux_loss = self.aux_loss(out)
        return out

    def _pack(self) -> tuple[Tensor, ...]:
        """Unit-major GRU weights ``hh, ih``, the rows a step gathers for its updated units
        (all three gates; z and n only in the reset-before form, whose r rows are computed for
        every unit) and reusable buffers for them (first-touch page faults of a fresh buffer at
        every call would cost more than the gather itself)."""
        hh, ih = pack_gru_rows(self.cell)
        src_h, src_i = (hh, ih) if self.cell.form == "after" else (hh[:, 1:], ih[:, 1:])
        src_h, src_i = src_h.contiguous(), src_i.contiguous()
        return hh, ih, src_h, src_i, torch.empty_like(src_h), torch.empty_like(src_i)

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference computing only the GRU rows of units that some sequence of the batch updates.

        The cell is repacked once (cached) unit-major, so a unit's three gate rows are adjacent:
        each step gathers the updated units' rows into a preallocated buffer with one
        ``index_select`` and runs two small matmuls. For batch > 1 the rows are the union over
        the batch (one vectorised gather; per-sequence loops, measured at B = 32 with
        independent decisions, were no faster than the dense step). Gathering a row costs about
        two row-products at batch 1, so above ``k = D B / (B + 2)`` units (a third of them at
        batch 1) the step multiplies all rows in place instead.
        At batch 1 on CPU the whole loop runs in the fused kernel (the op
        ``condrnn::sarnn_sequence``) when it can be built (same computation, no gather copies, no
        per-step dispatch).
        With the reset-before GRU a step with any update first computes the r rows of all units
        (every candidate reads ``r * h``), then the z and n rows of the updated ones only.
        Eval semantics; equals ``eval()(x)`` up to matmul rounding.
        """
        B, T, _ = x.shape
        D = self.hidden_size
        before = self.cell.form == "before"
        cell_params = (self.cell.weight_hh, self.cell.weight_ih, self.cell.bias)
        hh, ih, src_h, src_i, buf_h, buf_i = cached_pack(self, "_fast_gru", cell_params, self._pack)
        kernel = sarnn_kernel() if B == 1 and on_cpu("SA-RNN's fused kernel", x) else None
        if kernel is not None:  # fused C++ loop: reads only the needed rows, once
            coord = F.linear(x[0], self.w_i, self.b_u)  # [T, D]
            xs = torch.cat([x[0], x.new_ones(T, 1)], -1)  # [T, V+1]
            h0 = x.new_zeros(D)
            h, u = kernel(hh, ih, self.w_u, coord, xs, h0, float(self.slope), before)
            out = SeqOut(h[None], u[None], state=h[None, -1])
            out.aux_loss = self.aux_loss(out)
            return out
        every = torch.arange(D, device=x.device)
        # The state is kept as columns, h [D, B]: units are rows, gathered and copied contiguously.
        coord_x = F.linear(x, self.w_i, self.b_u).permute(1, 2, 0).unbind(0)  # T x [D, B]
        xs = torch.cat([x, x.new_ones(B, T, 1)], -1).permute(1, 2, 0).unbind(0)  # T x [V+1, B]
        w_u = self.w_u[:, None]  # [D, 1]
        h = x.new_zeros(D, B)
        hs, us = [], []
        for t in range(T):
            u = update_decision(w_u * h + coord_x[t], self.slope)  # [D, B] bool, eqs. 5, 6
            us.append(u)
            idx = (u[:, 0] if B == 1 else u.any(1)).nonzero().view(-1)  # [k] units to compute
            k = idx.numel()
            if k:
                if k * (B + 2) <= D * B:  # gathering a row ~ 2 row-products at B = 1
                    w_h = torch.index_select(src_h, 0, idx, out=buf_h[:k])  # [k, gates, D]
                    w_i = torch.index_select(src_i, 0, idx, out=buf_i[:k])  # [k, gates, V+1]
                else:
                    idx, w_h, w_i = every, src_h, src_i
                h_rows = h.index_select(0, idx)  # [k, B]
                xp = torch.mm(w_i.view(-1, w_i.shape[-1]), xs[t]).view(-1, w_i.shape[1], B)
                if before:  # every candidate reads r * h of all units: all r rows first
                    r = torch.sigmoid(torch.mm(ih[:, 0], xs[t]) + torch.mm(hh[:, 0], h))  # [D, B]
                    xz, xn = xp.unbind(1)  # the gathered rows are z and n only
                    z = torch.sigmoid(xz + torch.mm(w_h[:, 0], h))  # [k, B]
                    n = torch.tanh(xn + torch.mm(w_h[:, 1], r * h))  # reset before the matmul
                    new = torch.lerp(n, h_rows, z)  # (1 - z) n + z h
                else:
                    hp = torch.mm(w_h.view(-1, D), h).view(-1, 3, B)  # [k, 3, B] gates r, z, n
                    new = gru_rows(hp, xp, h_rows)  # [k, B]
                if B > 1 or idx is every:  # some computed rows are copies for some sequences
                    new = torch.where(u.index_select(0, idx), new, h_rows)  # eq. 7
                h = h.index_copy(0, idx, new)
            hs.append(h)
        outputs = torch.stack(hs).permute(2, 0, 1).contiguous()  # [B, T, D]
        mask = torch.stack(us).permute(2, 0, 1).to(x.dtype, memory_format=torch.contiguous_format)
        out = SeqOut(outputs, mask, state=outputs[:, -1])
        out.aux_loss = self.aux_loss(out)
        return out

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        """Budget ``lam * (1/D) * sum_t sum_i u_{t,i}``, mean over the batch (eq. 9, code form)."""
        return self.cfg.lam * out.mask.sum((1, 2)).mean() / self.hidden_size

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[SARNN, str]:
        """``W_i ~ N(0, 1/V)``, ``w_u = 0``, ``b_u = Phi^-1(1 - skip)``: with ``x ~ N(0, I)`` each
        decision is an independent coin per unit, step and sequence (the worst case for batch > 1,
        whose fast path computes the union of the sequences' updated units)."""
        model = cls(input_size, hidden_size)
        q = min(max(1.0 - skip, 1e-4), 1 - 1e-4)  # target update fraction
        with torch.no_grad():
            model.w_i.normal_(0.0, 1.0 / math.sqrt(input_size))
            model.w_u.zero_()
            b = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(q)).item()
            model.b_u.fill_(b)
        return model.eval(), f"b_u={b:.3g}, independent decisions"

    @classmethod
    def fast_path_note(cls) -> str | None:
        """Whether batch 1 on CPU ran the fused C++ kernel here or the PyTorch fallback.

        Reads the kernel's status and never builds it: a report rendered by a process that ran
        no batch-1 CPU fast path says so instead of compiling.
        """
        return sarnn_kernel_status().fast_path_note(cls.name)


def update_decision(v: Tensor, slope: float) -> Tensor:
    """``hard_sigmoid(v, slope) > 0.5`` in two ops, bit for bit: ``clip((a v + 1) / 2) > 0.5`` iff
    ``fl(fl(a v) + 1) > 1`` iff ``fl(a v) > eps / 2`` (round half to even; eps of v's dtype)."""
    return slope * v > torch.finfo(v.dtype).eps / 2
