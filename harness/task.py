"""The task interface: a task owns its data, its loss and its scoring.

A task declares its ``kind`` (classification, regression, lm), its read-out (``last`` step or
``every`` step), its primary metric and direction, its knobs (``config_cls``) and its presets.
``splits(seed)`` returns train/val/test ``Split``s of tensors; the loss and the metrics come from
the kind, so tasks only override them when they score differently.

Metrics are accumulated as (sum, count) pairs over batches (``batch_stats``) and turned into
numbers once at the end (``finalize``), so a test set never has to sit in memory as logits.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.config import Preset
from harness.errors import ConfigError

KINDS = ("classification", "regression", "lm")


@dataclass
class Batch:
    """A batch: ``x [B, T, V]`` (float) or ``[B, T]`` (token ids), targets ``y``, true lengths.

    ``times [B, T]`` (float), when not None, is the time of each sample in the task's time unit
    (see ``Split``).
    """

    x: Tensor
    y: Tensor
    lengths: Tensor | None = None
    times: Tensor | None = None

    def to(self, device: torch.device | str) -> Batch:
        """A copy of the batch with its tensors on ``device``."""
        return Batch(
            self.x.to(device),
            self.y.to(device),
            None if self.lengths is None else self.lengths.to(device),
            None if self.times is None else self.times.to(device),
        )


@dataclass
class Split:
    """One split held as tensors; ``y`` is ``[N]`` (labels), ``[N, O]`` or ``[N, T, ...]``.

    Attributes:
        x: inputs, ``[N, T, V]`` or token ids ``[N, T]``; sequences shorter than T are padded at
            the end.
        y: targets.
        lengths: true length of each sequence, ``[N]``; None when all have length T.
        times: the time of each sample, ``[N, T]`` (float, non-decreasing along T, in the task's
            time unit); None when the samples are at equal steps. The model passes them only to
            methods that set ``Method.uses_times``.
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
            lengths = None if self.lengths is None else self.lengths[idx]
            times = None if self.times is None else self.times[idx]
            yield Batch(self.x[idx], self.y[idx], lengths, times)


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
    """Base class of every registered task.

    Subclasses set the class attributes and implement ``splits``, ``input_size``, ``output_size``
    and ``presets``.

    Args:
        cfg: an instance of ``config_cls``.
        data_dir: where real-data tasks look for their files (see ``harness.data``).
    """

    name: ClassVar[str] = "?"
    kind: ClassVar[str] = "regression"
    readout: ClassVar[str] = "last"
    primary: ClassVar[str] = "mse"
    higher_is_better: ClassVar[bool] = False
    config_cls: ClassVar[type] = NoTaskConfig
    presets: ClassVar[dict[str, Preset]] = {}
    description: ClassVar[str] = ""

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
        return self.kind == "lm"

    def splits(self, seed: int) -> Splits:
        """Deterministic train/val/test splits for ``seed``."""
        raise NotImplementedError

    def marked_steps(self, x: Tensor) -> list[int]:
        """Steps of one input sequence that figures mark on its update pattern (default none).

        Args:
            x: one sequence's inputs, ``[T, input_size]`` (token ids ``[T]``).

        Returns:
            The step indices to mark, e.g. where the target's inputs are.
        """
        return []

    def data_status(self) -> dict[str, Any] | None:
        """For real-data tasks, where the data was looked for and whether it is usable.

        The dict holds ``{"status": "found"|"missing"|"corrupt", ...}``; None for generated
        tasks.
        """
        return None

    def fetch(self, fetcher: Any) -> str | None:
        """Download the task's published data into the data root (``harness data fetch``).

        Args:
            fetcher: a ``harness.data.Fetcher`` (downloads, verifies, installs).

        Returns:
            One line saying what was installed; None for generated tasks.

        Raises:
            DataError: the data cannot be downloaded (e.g. a licence forbids it: the message says
                how to obtain them) or do not match the published checksums.
        """
        return None

    # --- scoring -------------------------------------------------------------------------------
    def loss(self, pred: Tensor, batch: Batch) -> Tensor:
        """Mean training loss of a batch (from the kind)."""
        if self.kind == "regression":
            return F.mse_loss(pred, batch.y)
        return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), batch.y.reshape(-1))

    def batch_stats(self, pred: Tensor, batch: Batch) -> dict[str, tuple[float, float]]:
        """``{metric: (sum, count)}`` contributions of a batch."""
        pred = pred.detach().float()
        if self.kind == "regression":
            se = (pred - batch.y).pow(2)
            return {"mse": (se.sum().item(), se.numel())}
        flat, y = pred.reshape(-1, pred.shape[-1]), batch.y.reshape(-1)
        nll = F.cross_entropy(flat, y, reduction="sum").item()
        if self.kind == "lm":
            return {"nll": (nll, y.numel())}
        correct = (flat.argmax(-1) == y).sum().item()
        return {"nll": (nll, y.numel()), "accuracy": (100.0 * correct, y.numel())}

    def finalize(self, stats: dict[str, tuple[float, float]]) -> dict[str, float]:
        """Turn accumulated (sum, count) pairs into metric values."""
        out = {k: s / c if c else float("nan") for k, (s, c) in stats.items()}
        if self.kind == "lm" and "nll" in out:
            out["perplexity"] = math.exp(min(out["nll"], 50.0))
        return out
