"""Synthetic sequence regression of the EI-REHN paper (S-EI, Algorithm 2).

Paper: Park & Yoo, "Early Improving Recurrent Elastic Highway Network",
https://arxiv.org/abs/1708.04116, section 4.1 and Algorithm 2.

Each sequence: ``h_0 ~ U[-1, 1]^2``; at step t, ``R_t = round((R_max - 1) * ||h_{t-1}||^2) + 1``;
apply ``R_t`` times ``h <- tanh(Rot(theta) h + n)``, ``n ~ N(0, sigma^2 I)``; emit
``x_t = (R_t / R_max) * [tanh(h1 + h2), tanh(h1 - h2)]``. The model reads ``x_1..x_{T-1}`` and
predicts ``x_{t+1}`` at every step (2-d output, MSE).

Differences from the paper:
- Noise: "N(0, 0.1 x I)" is read as standard deviation 0.1 (``noise_std``); as a variance the
  reported MSEs (~0.5e-3) would be unreachable (docs/methods.md P2.0 pitfall b).
- R_t is not clipped to R_max by default (the algorithm as printed lets it reach 19,
  docs/methods.md P2.0 pitfall a); ``clip_depth=true`` clips it.
- The data are a fixed function of ``data_seed`` (the same for every run seed, so seeds vary only
  the model, as S-EI's 5 restarts did).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from harness.config import ModelConfig, Preset, TrainConfig
from harness.errors import ConfigError
from harness.registry import register_task
from harness.task import Split, Splits, Task


@dataclass(frozen=True)
class SyntheticConfig:
    n_train: int = 8000
    n_val: int = 1000
    n_test: int = 1000
    seq_len: int = 21
    r_max: int = 10
    theta: float = math.pi / 6
    noise_std: float = 0.1
    clip_depth: bool = False
    data_seed: int = 0

    def __post_init__(self) -> None:
        if min(self.n_train, self.n_val, self.n_test) <= 0 or self.seq_len < 2 or self.r_max < 1:
            raise ConfigError("synthetic: split sizes must be positive, seq_len >= 2, r_max >= 1")


def generate(
    n: int, cfg: SyntheticConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 for ``n`` sequences at once: returns ``x [n, T, 2]`` and depths ``R [n, T]``."""
    c, s = math.cos(cfg.theta), math.sin(cfg.theta)
    rot = np.array([[c, -s], [s, c]])
    h = rng.uniform(-1.0, 1.0, size=(n, 2))
    xs = np.empty((n, cfg.seq_len, 2))
    rs = np.empty((n, cfg.seq_len), dtype=np.int64)
    for t in range(cfg.seq_len):
        R = np.rint((cfg.r_max - 1) * (h**2).sum(1)).astype(np.int64) + 1
        if cfg.clip_depth:
            R = np.minimum(R, cfg.r_max)
        for r in range(int(R.max())):
            active = (r < R)[:, None]
            noise = rng.normal(0.0, cfg.noise_std, size=(n, 2))
            h = np.where(active, np.tanh(h @ rot.T + noise), h)
        xs[:, t, 0] = np.tanh(h[:, 0] + h[:, 1])
        xs[:, t, 1] = np.tanh(h[:, 0] - h[:, 1])
        xs[:, t] *= (R / cfg.r_max)[:, None]
        rs[:, t] = R
    return xs, rs


def _presets() -> dict[str, Preset]:
    # S-EI section 4.1: Adam 0.01, batch 20, 100 epochs; D per model from Table 1 (largest size).
    paper_sizes = {"rnn": 40, "lstm": 20, "rhn": 20, "ei-rehn": 20, "srhn": 20, "srehn": 20}
    return {
        "smoke": Preset(
            train=TrainConfig(epochs=2, batch_size=20, lr=0.01, eval_batch_size=500),
            model=ModelConfig(hidden_size=10),
            task={"n_train": 120, "n_val": 40, "n_test": 40},
        ),
        "quick": Preset(
            train=TrainConfig(epochs=10, batch_size=20, lr=0.01, eval_batch_size=500),
            model=ModelConfig(hidden_size=20),
            task={"n_train": 2000, "n_val": 250, "n_test": 250},
        ),
        "paper": Preset(
            train=TrainConfig(epochs=100, batch_size=20, lr=0.01, eval_batch_size=1000),
            model=ModelConfig(hidden_size=20),
            methods={m: {"hidden_size": d} for m, d in paper_sizes.items()},
        ),
    }


@register_task("synthetic")
class Synthetic(Task):
    """Next-step 2-d regression on S-EI's Algorithm 2 sequences (MSE, lower is better)."""

    kind = "regression"
    readout = "every"
    primary = "mse"
    higher_is_better = False
    config_cls = SyntheticConfig
    presets = _presets()
    description = "S-EI Algorithm 2 sequences, next-step 2-d regression (MSE)"

    @property
    def input_size(self) -> int:
        return 2

    @property
    def output_size(self) -> int:
        return 2

    def splits(self, seed: int) -> Splits:
        cfg = self.cfg
        n = cfg.n_train + cfg.n_val + cfg.n_test
        xs, rs = generate(n, cfg, np.random.default_rng(cfg.data_seed))
        x = torch.tensor(xs, dtype=torch.float32)
        parts, start = [], 0
        for size in (cfg.n_train, cfg.n_val, cfg.n_test):
            seg = x[start : start + size]
            parts.append(Split(seg[:, :-1], seg[:, 1:]))
            start += size
        return Splits(*parts, info={"mean_depth": float(rs.mean()), "max_depth": int(rs.max())})
