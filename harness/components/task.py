"""The task interface: a task owns its data, its loss and its scoring.

The loss and the metrics come from its ``kind``; metrics are accumulated as (sum, count) pairs
over batches (``batch_stats``, ``finalize``), so a test set never sits in memory as logits.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.components.config import Preset
from harness.errors import ConfigError


class TaskKind(str, Enum):
    """What a task predicts; it selects the loss and the metrics. A ``str``: prints as its value."""

    CLASSIFICATION = "classification"  # one label per sequence: cross-entropy, nll, accuracy
    REGRESSION = "regression"  # real targets: mean squared error
    LM = "lm"  # a token per step: cross-entropy, nll, perplexity

    def __str__(self) -> str:
        return self.value


def check_kind(owner: str, kind: object) -> TaskKind:
    """``kind`` when it is a ``TaskKind``; otherwise a ConfigError naming the task ``owner``."""
    if isinstance(kind, TaskKind):
        return kind
    valid = {k.value: k.name for k in TaskKind}
    if kind is None:
        raise ConfigError(f"Task {owner} declares no kind; kinds: {', '.join(valid)}")
    hint = f" (write TaskKind.{valid[kind]})" if isinstance(kind, str) and kind in valid else ""
    raise ConfigError(
        f"Task {owner} declares kind {kind!r}, which is not a "
        f"harness.components.task.TaskKind{hint}; "
        f"kinds: {', '.join(valid)}"
    )


@dataclass
class Batch:
    """A batch: ``x [B, T, V]`` (or token ids ``[B, T]``), ``y``, lengths, times (``Split``)."""

    x: Tensor
    y: Tensor
    lengths: Tensor | None = None
    times: Tensor | None = None

    def to(self, device: torch.device | str) -> Batch:
        """A copy of the batch with its tensors on ``device``."""
        tensors = (self.x, self.y, self.lengths, self.times)
        return Batch(*(None if t is None else t.to(device) for t in tensors))


@dataclass
class Split:
    """One split held as tensors; ``y`` is ``[N]`` (labels), ``[N, O]`` or ``[N, T, ...]``.

    Attributes:
        x: inputs, ``[N, T, V]`` or token ids ``[N, T]``, shorter sequences padded at the end.
        lengths: true length of each sequence, ``[N]``; None when all have length T.
        times: the time of each sample, ``[N, T]`` (non-decreasing, in the task's unit); None:
            equal steps. Only methods that set ``Method.uses_times`` get them.
    """

    x: Tensor
    y: Tensor
    lengths: Tensor | None = None
    times: Tensor | None = None

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y):
            raise ValueError(f"x and y differ in length ({len(self.x)} vs {len(self.y)})")
        if self.times is not None and tuple(self.times.shape) != tuple(self.x.shape[:2]):
            raise ValueError(
                f"times must be [N, T] = {tuple(self.x.shape[:2])} (got {tuple(self.times.shape)})"
            )

    def __len__(self) -> int:
        return len(self.x)

    def batches(
        self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None
    ) -> Iterator[Batch]:
        """Yield batches; shuffled with ``generator`` when ``shuffle``."""
        n = len(self)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        for i in range(0, n, batch_size):
            idx = order[i : i + batch_size]
            tensors = (self.x, self.y, self.lengths, self.times)
            yield Batch(*(None if t is None else t[idx] for t in tensors))


@dataclass
class Splits:
    """Train/validation/test splits plus facts worth recording (e.g. which data source)."""

    train: Split
    val: Split
    test: Split
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NoTaskConfig:
    """Config of a task with no knobs."""


class Task:
    """Base class of every registered task (``cfg`` of ``config_cls``; real data in ``data_dir``).

    Subclasses set the class attributes and implement ``splits``, ``input_size``, ``output_size``
    and ``presets``. A class whose ``kind`` is not a ``TaskKind`` is refused where it is defined.
    ``reference_notes``: what a reference predictor (``ref:NAME``) is on this task, a sentence.
    """

    name: ClassVar[str] = "?"
    kind: ClassVar[TaskKind]
    readout: ClassVar[str] = "last"
    primary: ClassVar[str] = "mse"
    higher_is_better: ClassVar[bool] = False
    config_cls: ClassVar[type] = NoTaskConfig
    presets: ClassVar[dict[str, Preset]] = {}
    description: ClassVar[str] = ""
    reference_notes: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_kind(cls.__qualname__, getattr(cls, "kind", None))

    def __init__(self, cfg: Any = None, data_dir: str | None = None) -> None:
        self.cfg = cfg if cfg is not None else self.config_cls()
        self.data_dir = data_dir

    @classmethod
    def preset(cls, name: str) -> Preset:
        """The task's settings for a preset."""
        try:
            return cls.presets[name]
        except KeyError:
            raise ConfigError(
                f"Task '{cls.name}' has no preset '{name}'. Available: {', '.join(cls.presets)}"
            ) from None

    # --- shapes --------------------------------------------------------------------------------
    @property
    def input_size(self) -> int:
        """V for float inputs; the vocabulary size for token inputs."""
        raise NotImplementedError

    @property
    def output_size(self) -> int:
        """Classes, regression targets, or vocabulary size."""
        raise NotImplementedError

    @property
    def token_input(self) -> bool:
        """True when inputs are token ids (the wrapper adds an embedding)."""
        return self.kind is TaskKind.LM

    def splits(self, seed: int) -> Splits:
        """Deterministic train/val/test splits for ``seed``."""
        raise NotImplementedError

    def marked_steps(self, x: Tensor) -> list[int]:
        """Steps of one sequence ``x [T, V]`` a figure marks on its update pattern (none)."""
        return []

    def data_status(self) -> dict[str, Any] | None:
        """Real data: where it was looked for, ``{"status": "found"|"missing"|"corrupt", ...}``."""
        return None

    def fetch(self, fetcher: Any) -> str | None:
        """Download the published data with a ``harness.data.Fetcher``; one line saying what."""
        return None

    # --- scoring -------------------------------------------------------------------------------
    def loss(self, pred: Tensor, batch: Batch) -> Tensor:
        """Mean training loss of a batch: MSE, or cross-entropy over every label, by the kind."""
        if check_kind(type(self).__qualname__, self.kind) is TaskKind.REGRESSION:
            return F.mse_loss(pred, batch.y)
        return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), batch.y.reshape(-1))

    def batch_stats(self, pred: Tensor, batch: Batch) -> dict[str, tuple[float, float]]:
        """``{metric: (sum, count)}`` contributions of a batch, by the kind (ConfigError: none)."""
        kind = check_kind(type(self).__qualname__, self.kind)
        pred = pred.detach().float()
        if kind is TaskKind.REGRESSION:
            se = (pred - batch.y).pow(2)
            return {"mse": (se.sum().item(), se.numel())}
        flat, y = pred.reshape(-1, pred.shape[-1]), batch.y.reshape(-1)
        nll = F.cross_entropy(flat, y, reduction="sum").item()
        if kind is TaskKind.LM:
            return {"nll": (nll, y.numel())}
        correct = (flat.argmax(-1) == y).sum().item()
        return {"nll": (nll, y.numel()), "accuracy": (100.0 * correct, y.numel())}

    def finalize(self, stats: dict[str, tuple[float, float]]) -> dict[str, float]:
        """Turn accumulated (sum, count) pairs into metric values."""
        out = {k: s / c if c else float("nan") for k, (s, c) in stats.items()}
        if self.kind is TaskKind.LM and "nll" in out:
            out["perplexity"] = math.exp(min(out["nll"], 50.0))
        return out
