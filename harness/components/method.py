"""The method interface: every RNN in the benchmark is a ``Method``.

A method maps a batch of sequences ``x [B, T, V]`` to a ``SeqOut``: the outputs, the binary update
mask (docs/methods.md 1.1), optionally the per-unit depth (highway family), an auxiliary loss
(budget penalties, already weighted) and per-sequence diagnostics. Its ``cost(V)`` states the
analytic multiply-accumulate counts of its cell as a ``StepCost``; the harness does the sums
(``harness.components.flops``). One convention everywhere: 1 MAC = 2 FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from harness.errors import ConfigError


@dataclass
class SeqOut:
    """What a method returns for a batch of sequences.

    Attributes:
        outputs: hidden outputs, ``[B, T, D]``.
        mask: update mask u, ``[B, T, D]``, values in {0, 1}: 1 where a unit got a newly computed
            value (soft updates ceiled). May carry a straight-through gradient.
        depth: micro-steps that changed each unit, ``[B, T, D]`` (depth-adaptive methods), or None.
        aux_loss: scalar auxiliary loss (budget penalty), already weighted by the method's lambda.
        extras: per-sequence diagnostics ``{name: [B]}`` averaged over the test set into records.
        state: the final recurrent state (for carrying state across windows), or None.
        reads: column mask ``[B, T, V + D]``, values in {0, 1}: 1 where step t reads input
            feature v (the first V) or the previous state of unit j (the last D), i.e. uses that
            column of the weight matrices; 0 where an activity-sparse method (Delta GRU, EGRU)
            skips it. None: every column is read (every method that skips rows, not columns).
    """

    outputs: Tensor
    mask: Tensor
    depth: Tensor | None = None
    aux_loss: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)
    state: Any = None
    reads: Tensor | None = None


@dataclass
class StepOut:
    """One step: new output ``h [B, D]``, state, mask and depth ``[B, D]``, reads ``[B, V + D]``."""

    h: Tensor
    state: Any
    mask: Tensor
    depth: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)
    reads: Tensor | None = None


@dataclass(frozen=True)
class StepCost:
    """Analytic MACs of one step of a cell with hidden size D (docs/methods.md 1.2, 1.4).

    Effective MACs of step t, with ``k_t`` updated units and executed depth ``R_t``::

        always + per_unit * k_t + per_active_step * 1[k_t > 0] + per_layer * R_t

    Dense MACs are the same with every unit updated and ``R_t = max_depth``.

    Attributes:
        hidden_size: D.
        always: decision network run at every step (SA-RNN coordinator, VC scheduler, alpha_t).
        per_unit: one row of every gate matrix, input and recurrent part, per updated unit.
        per_active_step: charged once in a step where any unit updates (e.g. SkipRNN's Delta-u
            projection; the highway input projections).
        per_layer: charged per executed micro-step (highway layer).
        max_depth: the depth of the dense computation (R_max or L); 1 for one-layer cells.
        fvcore_uncounted: MACs per dense step that are elementwise products (diagonal weights),
            which the analytic model charges but fvcore does not count.
    """

    hidden_size: int
    always: int = 0
    per_unit: int = 0
    per_active_step: int = 0
    per_layer: int = 0
    max_depth: int = 1
    fvcore_uncounted: int = 0

    def dense_step(self) -> int:
        """MACs of one step with every unit updated at full depth."""
        return (
            self.always
            + self.per_unit * self.hidden_size
            + self.per_active_step
            + self.per_layer * self.max_depth
        )


@dataclass(frozen=True)
class NoConfig:
    """Config of a method with no knobs beyond the hidden size."""


class Method(nn.Module):
    """Base class of every registered method.

    Subclasses set ``config_cls`` (a frozen dataclass of their knobs), implement ``cost`` and either
    ``init_state`` + ``step`` (then ``forward`` is the step loop) or their own ``forward``.

    Args:
        input_size: V.
        hidden_size: D.
        cfg: an instance of ``config_cls`` (defaults when None).
    """

    name: ClassVar[str] = "?"
    config_cls: ClassVar[type] = NoConfig
    has_depth: ClassVar[bool] = False
    # The torch fused cell (its ``torch.nn`` class name: "GRU", "LSTM" or "RNN") whose
    # same-sized model ``harness bench`` times this method against: the dense cell it computes.
    fused_cell: ClassVar[str] = "GRU"
    # True: the method reads the time of each sample. The model then calls its forward with the
    # keyword ``times=`` (``[B, T]`` float, or None where the task gives none: steps at equal
    # spacing), and its step loop passes ``time=`` (``[B]``) to ``step``. Methods that leave it
    # False never receive times; they see the samples one step apart.
    uses_times: ClassVar[bool] = False
    # The config fields that set how much the method skips, the main one first (the weight of a
    # budget penalty, a skip probability, a threshold): the reports plot metric and Skip % against
    # each one a sweep varies. A method that never skips declares none.
    budget_knobs: ClassVar[tuple[str, ...]] = ()
    every_part: ClassVar[bool] = False  # a sweep file's part names the methods it runs
    # How the training step runs it (``harness.training.train.Fitting``); None: its model,
    # trained over epochs by the harness's loop (``harness.training.train.ModelFit``).
    fitting: ClassVar[Any] = None

    def __init__(self, input_size: int, hidden_size: int, cfg: Any = None) -> None:
        super().__init__()
        if int(input_size) <= 0 or int(hidden_size) <= 0:
            raise ConfigError(
                f"{self.name}: input_size and hidden_size must be positive "
                f"(got {input_size}, {hidden_size})"
            )
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.cfg = cfg if cfg is not None else self.config_cls()
        self.epoch = 0

    # --- compute trace -------------------------------------------------------------------------
    def cost(self) -> StepCost:
        """Analytic per-step MACs (paper-effective accounting, docs/methods.md 1.2)."""
        raise NotImplementedError

    def exact_step_macs(self, out: SeqOut) -> Tensor | None:
        """Per-step MACs ``[B, T]`` that a sparse implementation could realise.

        Defined where it differs from the paper-effective count (docs/methods.md 1.2 item 3); None
        when they agree.
        """
        return None

    # --- recurrence ----------------------------------------------------------------------------
    def init_state(self, batch_size: int, ref: Tensor) -> Any:
        """Initial state for a batch (``ref`` gives device and dtype)."""
        raise NotImplementedError

    def step(self, x_t: Tensor, state: Any, t: int) -> StepOut:
        """One step: ``x_t [B, V]``, state -> StepOut.

        A method that sets ``uses_times`` also takes ``time: Tensor | None = None`` (``[B]``).
        """
        raise NotImplementedError

    def forward(self, x: Tensor, lengths: Tensor | None = None, state: Any = None) -> SeqOut:
        """Sequence forward ``x [B, T, V] -> SeqOut``; by default the step loop.

        A method that sets ``uses_times`` adds a keyword ``times: Tensor | None = None``
        (``[B, T]``) and passes it on to ``step_loop``.
        """
        return self.step_loop(x, state)

    def step_loop(self, x: Tensor, state: Any = None, times: Tensor | None = None) -> SeqOut:
        """Run ``step`` over time and stack the results; the reference for fast paths.

        Args:
            x: inputs ``[B, T, V]``.
            state: the initial state (None: ``init_state``).
            times: sample times ``[B, T]``, only for methods that set ``uses_times``; step t
                then gets its own times, ``[B]``, as ``time``. None: ``step`` is called
                without it.
        """
        if state is None:
            state = self.init_state(x.shape[0], x)
        hs, masks, depths, reads = [], [], [], []
        extras: dict[str, list[Tensor]] = {}
        step_times = [None] * x.shape[1] if times is None else times.unbind(1)
        # One unbind for the whole sequence: reading step t by indexing a tensor that requires
        # grad records a whole-sequence select per step, and backward becomes quadratic in T.
        for t, (x_t, time_t) in enumerate(zip(x.unbind(1), step_times, strict=True)):
            if time_t is None:
                so = self.step(x_t, state, t)
            else:
                so = self.step(x_t, state, t, time=time_t)
            state = so.state
            hs.append(so.h)
            masks.append(so.mask)
            if so.depth is not None:
                depths.append(so.depth)
            if so.reads is not None:
                reads.append(so.reads)
            for k, v in so.extras.items():
                extras.setdefault(k, []).append(v)
        out = SeqOut(
            outputs=torch.stack(hs, 1),
            mask=torch.stack(masks, 1),
            depth=torch.stack(depths, 1) if depths else None,
            extras={k: torch.stack(v, 1).mean(1) for k, v in extras.items()},
            state=state,
            reads=torch.stack(reads, 1) if reads else None,
        )
        out.aux_loss = self.aux_loss(out)
        return out

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        """Weighted budget penalty from a finished sequence pass (None: no penalty)."""
        return None

    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference-only forward that really skips the work the mask marks as skipped.

        It has eval semantics and no autograd, and serves to measure realised speedups
        (``harness.bench.speedup``). It returns the same outputs and mask as ``self.eval()(x)``
        up to matmul rounding. This default IS that dense masked forward (training mode restored
        afterwards); skipping methods override it and ``tests/test_fast_paths.py`` checks them
        against it.
        """
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                return self(x)
        finally:
            self.train(was_training)

    def compile_step(self) -> None:
        """Train with the per-step function compiled by ``torch.compile`` (``train.compile``).

        Methods whose training cost is many tiny operations per step (a deep recurrence of small
        layers) override it: they replace the function their training forward calls at each step by
        its compiled form, so the outputs are the same equations with the float operations fused.
        Eval passes and ``step`` stay eager. The default has no compiled form.
        """
        raise ConfigError(f"{self.name}: train.compile is not available for this method")

    @classmethod
    def compiles(cls) -> bool:
        """Whether the method overrides ``compile_step`` (``train.compile`` is allowed)."""
        return cls.compile_step is not Method.compile_step

    # --- measurement hooks ---------------------------------------------------------------------
    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[Method, str]:
        """An untrained model for measuring ``fast_forward`` at a chosen Skip %.

        Methods with a real fast path override this (``harness.bench.speedup`` measures the
        methods that do); the caller seeds torch's global generator first, so a hook must draw
        its random numbers from it, in a fixed order.

        Args:
            input_size: V.
            hidden_size: D.
            skip: the target Skip % / 100 (for depth-adaptive methods, the depth-skip fraction).
            seq_len: T of the sequences it will be run on (for schedules fixed in time).

        Returns:
            The model in eval mode, with its decision parameters set to aim at ``skip`` on inputs
            ``x ~ N(0, I)``, and a one-line description of that setting.
        """
        raise NotImplementedError(f"{cls.name} has no fast inference path to set a skip for")

    @classmethod
    def fast_path_note(cls) -> str | None:
        """One sentence for the speedup report about how this method's fast path runs here.

        For example, whether an optional compiled kernel is in use; None when there is nothing
        to say.
        """
        return None

    # --- trainer hooks -------------------------------------------------------------------------
    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Called by the trainer before each epoch (0-based), before the epoch's timer starts.

        Annealing schedules live here, and the building of what a training step needs (a compiled
        kernel), which is then not counted as training time.
        """
        self.epoch = epoch

    def train_diagnostics(self) -> dict[str, float]:
        """Measures of the training passes so far, recorded with a run's diagnostics.

        For example how many layers a depth-adaptive method really ran per step in training
        (``harness.training.train`` adds them to the record). Default: none.
        """
        return {}

    def train_state(self) -> dict[str, Any]:
        """What ``train_diagnostics`` counts that is not a parameter or buffer.

        Plain Python numbers, saved with a run's checkpoint (``harness.training.checkpoint``) so
        that a resumed run records the same diagnostics. A method that keeps such tallies returns
        them here and restores them in ``load_train_state``. Default: none.
        """
        return {}

    def load_train_state(self, state: dict[str, Any]) -> None:
        """Restore what ``train_state`` returned. Default: nothing to restore."""
