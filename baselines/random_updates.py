"""Random Updates: a GRU whose units update at random (fixed probability), in training and test.

Paper: the "Random Updates" baseline of S-SA, Hartvigsen et al., "Learning to Selectively Update
State Neurons in Recurrent Networks", CIKM 2020, https://doi.org/10.1145/3340531.3412018
(per-unit, per-step Bernoulli updates, "similar to Zoneout but kept at test time"; Zoneout:
Krueger et al. 2017, https://arxiv.org/abs/1606.01305). Spec: docs/methods.md 2.4::

    h~_t = GRU(h_{t-1}, x_t)                        S-SA eqs. 1-4
    u_{t,i} ~ Bernoulli(1 - p_skip), i.i.d. over units, steps and sequences
    h_t = u_t * h~_t + (1 - u_t) * h_{t-1}

Differences from the paper:
- [DECISION] docs/methods.md 1.3 / 2.3: the shared reset-after GRU cell
  (``baselines._cells.GRUWeights``), so per-unit skipping is exactly realisable and the effective
  MACs 3 k_t (D+V) are exact.
- [DECISION] docs/methods.md 2.4: the test-time RNG is fixed. In eval mode the mask comes from a
  generator seeded with ``eval_seed`` and re-seeded at step 0 of every forward (or step loop), so
  evaluating the same batch twice gives the same masks and outputs. The draws are made per batch,
  so a sequence's eval mask depends on its position in the eval batch (fixed for a fixed batch
  size and data order). Training draws from the global torch RNG (seeded by the trainer).
- S-SA does not state p_skip per run everywhere; the default 0.76 is its Seizures / Twitter value
  (0.89 Yahoo; 0.25 / 0.5 / 0.9 adding task): set it with ``--set p_skip=...``.
- The unsampled candidate is still computed by the dense forward (a masked dense implementation);
  the effective MACs charge only the sampled rows (docs/methods.md 1.2).
- ``gru_form="before"`` runs the reset-before GRU of S-SA eq. 3 on the same parameters. The
  effective (paper) MACs stay ``3 k_t (D+V)``; the exact-realizable count differs: a skipping
  unit needs no row of its own, but every updated unit's candidate reads ``r_j h_j`` of all
  units j, so the r rows of all D units are computed whenever any unit updates:
  ``1[k_t > 0] D(D+V) + 2 k_t (D+V)`` (``exact_step_macs``; docs/methods.md 2.3).
- Training on CPU (float32/64) in the reset-after form runs the sequence as one C++ autograd node
  where the optional kernel builds (``baselines.ops.masked_cell``, built before the epoch's timer
  starts): the masks of all T steps are drawn before the recurrence in one ``torch.rand`` call of
  T B D numbers, the same numbers in the same order as the per-step loop's T draws of B D (the
  same masks from the same RNG state), the candidate is computed in ``gru_step_lean``'s form
  (``lerp(n, h, z)`` for ``(1 - z) n + z h``) and the input terms by
  ``baselines.ops.library.input_terms`` (the same values; W_i's gradient summed in another
  order). It equals the per-step loop (the reference, and
  the path in eval, in the reset-before form, on CUDA, where the kernel does not build and
  with ``HARNESS_NO_KERNELS=1``) to float rounding, not bit for bit; skipped units stay exact
  copies.
- Inference (``fast_forward``) on CPU in float32/64, at any batch size, runs the op
  ``condrnn::masked_infer_sequence`` (``baselines.ops.masked_infer``): the eval masks drawn as
  the dense loop draws them (``eval_masks``, bit for bit) and kept per size (they do not depend on
  the inputs), then each step only the gate rows of the units each sequence updates. It equals
  the dense eval loop (the reference, and the path elsewhere) to float rounding, the masks bit
  for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from baselines._cells import (
    GRU_FORMS,
    GRUWeights,
    cached_pack,
    gru_exact_cost,
    gru_macs_per_unit,
    masked_update,
)
from baselines.ops.library import input_terms
from baselines.ops.masked_cell import masked_sequence, sequence_kernel
from baselines.ops.masked_infer import cached_schedule, kernel_for, kernel_note, pack_rows
from harness.components.config import MAX_SEED, check_knobs, knob
from harness.components.flops import effective_step_macs
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method


@dataclass(frozen=True)
class RandomUpdatesConfig:
    """Knobs of Random Updates.

    Attributes:
        p_skip: probability that a unit keeps its previous value at a step (S-SA: 0.76 Seizures
            and Twitter, 0.89 Yahoo, 0.25 / 0.5 / 0.9 adding). Must be in [0, 1).
        eval_seed: seed of the eval-mode mask generator, re-seeded at the start of every forward.
        gru_form: ``after`` (reset after the recurrent matmul, docs/methods.md 2.3 [DECISION]) or
            ``before`` (S-SA eq. 3).
    """

    p_skip: float = knob(0.76, ge=0, lt=1)
    eval_seed: int = knob(0, ge=0, le=MAX_SEED)
    gru_form: str = knob("after", choices=GRU_FORMS, legacy="after")  # an option since 824fa7b

    def __post_init__(self) -> None:
        check_knobs(self, "method", "random-updates")


@register_method("random-updates")
class RandomUpdates(Method):
    """GRU with i.i.d. Bernoulli(1 - p_skip) per-unit update masks; no decision network.

    The state is ``h [B, D]``. The sequence forward projects all inputs at once and then runs the
    same per-step code as ``step`` (same RNG draws in the same order, so it equals the step loop).
    """

    config_cls = RandomUpdatesConfig
    budget_knobs = ("p_skip",)

    def __init__(self, input_size: int, hidden_size: int, cfg: RandomUpdatesConfig | None = None):
        super().__init__(input_size, hidden_size, cfg)
        self.cell = GRUWeights(input_size, hidden_size, form=self.cfg.gru_form)
        self._eval_gen: torch.Generator | None = None

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=gru_macs_per_unit(V, D))  # 3 k_t (D+V), no decision network

    def exact_step_macs(self, out: SeqOut) -> Tensor | None:
        """Reset-before: ``1[k_t > 0] D(D+V) + 2 k_t (D+V)`` (every unit's r row once any unit
        updates); reset-after: None, the effective count is exact."""
        if self.cell.form == "after":
            return None
        return effective_step_macs(gru_exact_cost(self.input_size, self.hidden_size, "before"), out)

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Also builds (or loads) the masked-cell training kernel where training will run it,
        before the epoch's timer starts: ``time.train_s`` holds no compile."""
        super().on_epoch_start(epoch, num_epochs)
        if self.cell.form == "after":
            sequence_kernel(*self.parameters())  # cached: a build at most once per process

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def sample_mask(self, batch_size: int, ref: Tensor, t: int) -> Tensor:
        """``u_t [B, D]`` in {0, 1} with P(u = 1) = 1 - p_skip.

        Training: the global torch RNG. Eval: a private generator, re-seeded with ``eval_seed``
        at ``t == 0`` so every eval forward sees the same mask sequence.
        """
        gen = None
        if not self.training:
            if t == 0 or self._eval_gen is None:
                self._eval_gen = torch.Generator(device=ref.device)
                self._eval_gen.manual_seed(int(self.cfg.eval_seed))
            gen = self._eval_gen
        return self._draw(batch_size, ref, gen)

    def _draw(self, rows: int, ref: Tensor, gen: torch.Generator | None) -> Tensor:
        """``rows`` masks ``[rows, D]`` from ``gen`` (None: the global RNG)."""
        r = torch.rand(rows, self.hidden_size, generator=gen, device=ref.device, dtype=ref.dtype)
        return (r >= self.cfg.p_skip).to(ref.dtype)  # P(r >= p) = 1 - p

    def eval_masks(self, batch_size: int, steps: int, ref: Tensor) -> Tensor:
        """The masks ``u [B, steps, D]`` of an eval forward over ``steps`` steps, whatever the
        mode: the numbers its ``steps`` draws of ``[B, D]`` take from the re-seeded eval generator,
        in one draw of ``steps B`` rows (on the CPU the same numbers in the same order, so the
        same masks bit for bit, as the training kernel's draw)."""
        gen = torch.Generator(device=ref.device)
        gen.manual_seed(int(self.cfg.eval_seed))
        u = self._draw(steps * batch_size, ref, gen)  # [steps B, D]
        return u.view(steps, batch_size, -1).transpose(0, 1).contiguous()

    def _step(self, xp_t: Tensor, h: Tensor, t: int) -> StepOut:
        """One step from the projected input ``xp_t [B, 3D]``."""
        u = self.sample_mask(h.shape[0], h, t)  # [B, D]
        h_tilde = self.cell.step(xp_t, h)  # [B, D] S-SA eqs. 1-4
        h_new = masked_update(u, h_tilde, h)  # units with u = 0 are exact copies
        return StepOut(h_new, h_new, u)

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        return self._step(self.cell.input_proj(x_t), state, t)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        h = self.init_state(x.shape[0], x) if state is None else state
        cell, w = self.cell, self.cell.weight_hh
        fused = self.training and cell.form == "after"
        kernel = sequence_kernel(x, h, w) if fused else None
        if kernel is not None:  # the same steps in one C++ node (baselines.ops.masked_cell)
            B, T = x.shape[:2]
            # the per-step loop's draws: one rand call gives the same numbers in the same order
            u = self.sample_mask(T * B, h, 0).view(T, B, -1).transpose(0, 1).contiguous()
            xp = input_terms(x, cell.weight_ih, cell.bias)
            hs, _ = masked_sequence(kernel, "gru", xp, h, w, u)  # [B, T, D]
        else:
            xp = cell.input_proj(x)  # [B, T, 3D], one matmul for the whole sequence
            steps, masks = [], []
            # one unbind, linear backward (see Method.step_loop)
            for t, xp_t in enumerate(xp.unbind(1)):
                so = self._step(xp_t, h, t)
                h = so.h
                steps.append(h)
                masks.append(so.mask)
            hs, u = torch.stack(steps, 1), torch.stack(masks, 1)  # [B, T, D] each
        out = SeqOut(hs, u, state=hs[:, -1])
        out.aux_loss = self.aux_loss(out)
        return out

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference computing only the GRU rows of the units each sequence updates, by the op
        ``condrnn::masked_infer_sequence`` (``baselines.ops.masked_infer``) on CPU.

        The eval masks are the dense loop's (``eval_masks``: the same draws, bit for bit); they
        depend only on ``eval_seed``, p_skip and the call's sizes and dtype, not on the inputs, so
        they are drawn once per size and kept (as the packed weights are), and not drawn again
        while the sizes stay. Each step, every unit some sequence updates reads its three gate
        rows once and multiplies them with the states of the sequences that update it; the
        reset-before form first computes the r rows of every unit for each sequence that
        updates any (``exact_step_macs``). Off the CPU (one warning line), in another dtype,
        where the library does not build and with ``HARNESS_NO_KERNELS=1``: the dense eval loop.
        Eval semantics; equals ``eval()(x)`` to float rounding, masks bit for bit.
        """
        kernel = kernel_for("Random Updates' fused kernel", x)
        cell = self.cell
        params = (cell.weight_ih, cell.weight_hh, cell.bias)
        if kernel is None or any(p.dtype != x.dtype for p in params):
            return super().fast_forward(x)
        B, T, _ = x.shape
        w = cached_pack(self, "_fast_rows", params, lambda: pack_rows(*params))
        key = (B, T, x.dtype, x.device, self.cfg.eval_seed, self.cfg.p_skip, self.hidden_size)
        u = cached_schedule(self, "_fast_masks", key, lambda: self.eval_masks(B, T, x))
        h0 = x.new_zeros(B, self.hidden_size)
        hs, _ = kernel(w, x, h0, x.new_empty(0), u, True, cell.form == "before")
        out = SeqOut(hs, u.clone(), state=hs[:, -1])
        out.aux_loss = self.aux_loss(out)
        return out

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[RandomUpdates, str]:
        """``p_skip = skip``: every unit of every step and sequence skips with that probability,
        independently of the others (the worst case for a batch's union of updated units)."""
        model = cls(input_size, hidden_size, cls.config_cls(p_skip=float(skip)))
        return model.eval(), f"p_skip={skip:g}, independent draws"

    @classmethod
    def fast_path_note(cls) -> str | None:
        """Whether the fused kernel ran on CPU here; read without building it."""
        return kernel_note(cls.name)
