"""Example Mean: regress the mean of a sequence of uniform values, read at its last step.

Each sequence has ``T`` steps of one value ``x_t ~ U(0, 1)``; the target is their mean, scored
by MSE (the primary metric) and by the mean absolute error (``mae``, this package's metric). A
model must integrate every step: a method that skips updates loses what it skipped. The data are
a fixed function of ``data_seed``; run seeds vary the model and the shuffling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from condrnn_plugin_example.metrics import MAE
from harness.components.config import (
    MAX_SEED,
    MAX_SEQ_LEN,
    MAX_SPLIT,
    ModelConfig,
    Preset,
    TrainConfig,
    check_knobs,
    knob,
)
from harness.components.registry import register_task
from harness.components.task import Batch, Split, Splits, Task, TaskKind


@dataclass(frozen=True)
class ExampleMeanConfig:
    """The task's knobs, each with its valid range."""

    n_train: int = knob(800, ge=1, le=MAX_SPLIT)
    n_val: int = knob(100, ge=1, le=MAX_SPLIT)
    n_test: int = knob(100, ge=1, le=MAX_SPLIT)
    seq_len: int = knob(50, ge=1, le=MAX_SEQ_LEN)
    data_seed: int = knob(0, ge=0, le=MAX_SEED)

    def __post_init__(self) -> None:
        check_knobs(self, "task", "example-mean")


@register_task("example-mean")
class ExampleMean(Task):
    """The mean of a sequence's values (MSE, lower is better; MAE beside it)."""

    kind = TaskKind.REGRESSION
    readout = "last"
    primary = "mse"
    higher_is_better = False
    config_cls = ExampleMeanConfig
    presets = {
        "smoke": Preset(
            train=TrainConfig(epochs=2, batch_size=20, lr=1e-2, eval_batch_size=200),
            model=ModelConfig(hidden_size=8),
            task={"n_train": 80, "n_val": 20, "n_test": 20, "seq_len": 10},
        ),
        "quick": Preset(
            train=TrainConfig(epochs=10, batch_size=50, lr=3e-3, eval_batch_size=500),
            model=ModelConfig(hidden_size=32),
        ),
    }
    description = "mean of a sequence of U(0, 1) values, last-step regression (MSE)"

    @property
    def input_size(self) -> int:
        return 1

    @property
    def output_size(self) -> int:
        return 1

    def splits(self, seed: int) -> Splits:
        cfg = self.cfg
        n = cfg.n_train + cfg.n_val + cfg.n_test
        x = np.random.default_rng(cfg.data_seed).uniform(0.0, 1.0, size=(n, cfg.seq_len, 1))
        xs = torch.tensor(x, dtype=torch.float32)
        ys = xs.mean(1)  # [n, 1]
        a, b = cfg.n_train, cfg.n_train + cfg.n_val
        return Splits(Split(xs[:a], ys[:a]), Split(xs[a:b], ys[a:b]), Split(xs[b:], ys[b:]))

    def batch_stats(self, pred: torch.Tensor, batch: Batch) -> dict[str, tuple[float, float]]:
        stats = super().batch_stats(pred, batch)
        err = (pred.detach().float() - batch.y).abs()
        stats[MAE.name] = (err.sum().item(), err.numel())
        return stats
