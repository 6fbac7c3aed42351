"""The adding problem, as set up in S-SA (Table 4).

Papers: Hochreiter & Schmidhuber 1997 (the task); S-SA (Hartvigsen et al., CIKM 2020,
https://doi.org/10.1145/3340531.3412018) section 4.3 for this version; "solved" from Skip RNN
(Campos et al., ICLR 2018, https://arxiv.org/abs/1708.06834).

Each sequence has ``T`` steps of ``[value, marker]`` with ``value ~ U(0, 1)`` and exactly two
markers at distinct uniformly random positions; the target is the sum of the two marked values,
read from the last step, scored by MSE. ``solved`` is 1 when the test MSE is at most 1/100 of the
target variance (Skip RNN's definition; S-SA does not define it).

Differences from the paper:
- S-SA does not give the number of sequences; we use 10,000 (80/10/10) in the paper preset.
- The data are a fixed function of ``data_seed``; run seeds vary the model and shuffling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from harness.components.config import (
    MAX_SEED,
    MAX_SEQ_LEN,
    MAX_SPLIT,
    ModelConfig,
    Preset,
    TrainConfig,
    check_data_steps,
    check_knobs,
    knob,
)
from harness.components.metrics import Metric, register_metric
from harness.components.registry import register_task
from harness.components.task import Batch, Split, Splits, Task, TaskKind


@dataclass(frozen=True)
class AddingConfig:
    n_train: int = knob(8000, ge=1, le=MAX_SPLIT)
    n_val: int = knob(1000, ge=1, le=MAX_SPLIT)
    n_test: int = knob(1000, ge=1, le=MAX_SPLIT)
    seq_len: int = knob(500, ge=2, le=MAX_SEQ_LEN)  # two distinct marked positions
    data_seed: int = knob(0, ge=0, le=MAX_SEED)

    def __post_init__(self) -> None:
        check_knobs(self, "task", "adding")
        n = self.n_train + self.n_val + self.n_test
        check_data_steps("adding", "(n_train + n_val + n_test) * seq_len", n * self.seq_len)


def generate(n: int, seq_len: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``x [n, T, 2]`` (value, marker) and targets ``y [n, 1]``."""
    values = rng.uniform(0.0, 1.0, size=(n, seq_len))
    idx = np.argsort(rng.random((n, seq_len)), axis=1)[:, :2]  # two distinct positions
    markers = np.zeros((n, seq_len))
    np.put_along_axis(markers, idx, 1.0, axis=1)
    y = (values * markers).sum(1, keepdims=True)
    return np.stack([values, markers], -1), y


def _presets() -> dict[str, Preset]:
    return {
        "smoke": Preset(
            train=TrainConfig(epochs=2, batch_size=20, lr=1e-2, eval_batch_size=500),
            model=ModelConfig(hidden_size=10),
            task={"n_train": 160, "n_val": 40, "n_test": 40, "seq_len": 20},
        ),
        "quick": Preset(
            train=TrainConfig(epochs=15, batch_size=50, lr=3e-3, eval_batch_size=500),
            model=ModelConfig(hidden_size=50),
            task={"n_train": 4000, "n_val": 500, "n_test": 500, "seq_len": 50},
        ),
        # S-SA Table 4: T = 500, D = 128, Adam (lr searched; 1e-3 here); epochs/batch unstated.
        "paper": Preset(
            train=TrainConfig(epochs=50, batch_size=256, lr=1e-3, eval_batch_size=1000),
            model=ModelConfig(hidden_size=128),
            # 10 modules do not divide 128; S-SA did not run Clockwork on this task.
            methods={"clockwork-rnn": {"num_modules": 8}},
        ),
    }


# 1 when the test MSE is at most 1/100 of the target variance (``finalize``); over seeds a table
# prints Yes, No or how many of them solved it
SOLVED = register_metric(Metric("solved", "Solved", range=(0.0, 1.0), form="yes-no"))


@register_task("adding")
class Adding(Task):
    """Sum of the two marked values of a sequence (MSE, lower is better)."""

    kind = TaskKind.REGRESSION
    readout = "last"
    primary = "mse"
    higher_is_better = False
    config_cls = AddingConfig
    presets = _presets()
    description = "adding problem (S-SA Table 4 version), last-step regression (MSE)"
    reference_notes = {
        "ref:mean": "the constant predictor: the training targets' mean (about 1), whose MSE is "
        "the variance of a sum of two U(0, 1) values, 1/6 = 0.167, the plateau a model sits at "
        "until it learns which values are marked; solved is an MSE of at most 1/100 of it",
    }

    @property
    def input_size(self) -> int:
        return 2

    @property
    def output_size(self) -> int:
        return 1

    def splits(self, seed: int) -> Splits:
        cfg = self.cfg
        n = cfg.n_train + cfg.n_val + cfg.n_test
        xs, ys = generate(n, cfg.seq_len, np.random.default_rng(cfg.data_seed))
        x, y = torch.tensor(xs, dtype=torch.float32), torch.tensor(ys, dtype=torch.float32)
        a, b = cfg.n_train, cfg.n_train + cfg.n_val
        return Splits(Split(x[:a], y[:a]), Split(x[a:b], y[a:b]), Split(x[b:], y[b:]))

    def marked_steps(self, x: torch.Tensor) -> list[int]:
        """The two marked positions (marker channel 1)."""
        return torch.nonzero(x[:, 1] > 0.5).flatten().tolist()

    def batch_stats(self, pred: torch.Tensor, batch: Batch) -> dict[str, tuple[float, float]]:
        stats = super().batch_stats(pred, batch)
        y = batch.y.float()
        stats["y_mean"] = (y.sum().item(), y.numel())
        stats["y_sq"] = (y.pow(2).sum().item(), y.numel())
        return stats

    def finalize(self, stats: dict[str, tuple[float, float]]) -> dict[str, float]:
        out = super().finalize(stats)
        var = out.pop("y_sq") - out.pop("y_mean") ** 2
        out["solved"] = float(out["mse"] <= var / 100.0)
        return out
