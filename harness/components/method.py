"""The method interface: every RNN in the benchmark is a ``Method`` (1 MAC = 2 FLOPs everywhere).

A method maps ``x [B, T, V]`` to a ``SeqOut``; ``cost()`` states its cell's analytic MACs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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
        reads: column mask ``[B, T, V + D]``: 1 where step t reads input feature v (the first
            V) or unit j's previous state (the last D); 0 where an activity-sparse method skips
            it. None: every column is read.
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


@contextlib.contextmanager
def evaluating(module: nn.Module) -> Iterator[None]:
    """Run the block with ``module`` in eval mode, then give it back its training mode."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


@dataclass(frozen=True)
class NoConfig:
    """Config of a method with no knobs beyond the hidden size."""


class Method(nn.Module):
    """Base class of every registered method (V inputs, D units, ``cfg`` of ``config_cls``).

    Subclasses set ``config_cls`` (a frozen dataclass of their knobs), implement ``cost`` and either
    ``init_state`` + ``step`` (then ``forward`` is the step loop) or their own ``forward``.
    """

    name: ClassVar[str] = "?"
    config_cls: ClassVar[type] = NoConfig
    has_depth: ClassVar[bool] = False
    # The torch fused cell ("GRU", "LSTM" or "RNN") ``harness bench`` times it against.
    fused_cell: ClassVar[str] = "GRU"
    # True: its forward gets ``times=`` (``[B, T]`` or None: equal steps), ``step`` gets ``time=``.
    uses_times: ClassVar[bool] = False
    # The config fields that set how much it skips, the main one first (reports plot against them).
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
        """Per-step MACs ``[B, T]`` a sparse implementation could realise; None: the paper's."""
        return None

    # --- recurrence ----------------------------------------------------------------------------
    def init_state(self, batch_size: int, ref: Tensor) -> Any:
        """Initial state for a batch (``ref`` gives device and dtype)."""
        raise NotImplementedError

    def step(self, x_t: Tensor, state: Any, t: int) -> StepOut:
        """One step: ``x_t [B, V]``, state -> StepOut (and ``time=`` with ``uses_times``)."""
        raise NotImplementedError

    def forward(self, x: Tensor, lengths: Tensor | None = None, state: Any = None) -> SeqOut:
        """Sequence forward ``x [B, T, V] -> SeqOut``: the step loop (with ``times`` if asked)."""
        return self.step_loop(x, state)

    def step_loop(self, x: Tensor, state: Any = None, times: Tensor | None = None) -> SeqOut:
        """Run ``step`` over time and stack the results (the fast paths' reference); ``times``."""
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

        The same outputs and mask as ``self.eval()(x)`` under no_grad, up to matmul rounding: this
        default IS that dense masked forward (``tests/test_fast_paths.py`` holds overrides to it).
        """
        with evaluating(self), torch.no_grad():
            return self(x)

    def compile_step(self) -> None:
        """Train with the per-step function compiled by ``torch.compile`` (``train.compile``).

        An override replaces the function its training forward calls at each step by its compiled
        form (the same equations, fused); eval passes and ``step`` stay eager.
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
        """An untrained model for measuring ``fast_forward`` at a chosen Skip %, and its setting.

        Methods with a real fast path override this. The caller seeds torch's global generator:
        draw from it, in a fixed order. ``skip``: the target Skip % / 100 (depth-adaptive: the
        depth-skip fraction) on ``x ~ N(0, I)`` of length ``seq_len``; the model in eval mode.
        """
        raise NotImplementedError(f"{cls.name} has no fast inference path to set a skip for")

    @classmethod
    def fast_path_note(cls) -> str | None:
        """One sentence for the speedup report on how its fast path runs here (a kernel?)."""
        return None

    # --- trainer hooks -------------------------------------------------------------------------
    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Called before each epoch (0-based) and its timer: annealing, building a kernel."""
        self.epoch = epoch

    def train_diagnostics(self) -> dict[str, float]:
        """Measures of the training passes so far (layers run per step), recorded with a run."""
        return {}

    def train_state(self) -> dict[str, Any]:
        """What ``train_diagnostics`` counts that is not a parameter or buffer (plain numbers).

        Kept in a run's checkpoint, restored by ``load_train_state``: a resumed run records them.
        """
        return {}

    def load_train_state(self, state: dict[str, Any]) -> None:
        """Restore what ``train_state`` returned. Default: nothing to restore."""
