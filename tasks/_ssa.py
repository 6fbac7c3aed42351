"""What the three S-SA classification tasks share: scoring, balanced splits, data rows, presets.

Paper (S-SA): Hartvigsen, Sen, Kong, Rundensteiner, "Learning to Selectively Update State Neurons
in Recurrent Networks", CIKM 2020, https://doi.org/10.1145/3340531.3412018, section 4.1; its
Tables 1-3 are ``seizures``, ``twitter-buzz`` and ``yahoo``, whose modules say how each dataset is
read and cut into windows.

Each task is a binary classification of windows: every window with the event and as many sampled
without it (``balanced_splits``), 2 logits and cross-entropy, last-step read-out, accuracy in
percent. The presets take S-SA's D = 50, Adam at 1e-3 and SA-RNN's lambda from the
task's table.

Differences from the paper (all three tasks):
- Cross-entropy over 2 logits stands in for S-SA's binary cross-entropy (an equivalent loss).
- The balancing sample and the stratified 80/10/10 split are drawn from the run seed (so train,
  validation and test are each balanced).
- Epochs (50) and batch size (32) of the paper preset are [INFERRED]; S-SA states neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.config import ModelConfig, Preset, TrainConfig
from harness.data import CorruptDataError, data_root, status
from harness.task import Split, Splits, Task, TaskKind


def ssa_presets(smoke_series: int, quick_epochs: int, lam: float) -> dict[str, Preset]:
    """The smoke, quick and paper presets of an S-SA task.

    Args:
        smoke_series: the balanced series the smoke preset keeps (``max_series``).
        quick_epochs: epochs of the quick preset.
        lam: SA-RNN's budget weight lambda from the task's table in S-SA.
    """
    return {
        "smoke": Preset(
            train=TrainConfig(epochs=2, batch_size=32, lr=1e-2, eval_batch_size=500),
            model=ModelConfig(hidden_size=10),
            task={"max_series": smoke_series},
        ),
        "quick": Preset(
            train=TrainConfig(epochs=quick_epochs, batch_size=32, lr=1e-3, eval_batch_size=500),
            model=ModelConfig(hidden_size=50),
            methods={"sa-rnn": {"lam": lam}},
        ),
        # S-SA section 4.1: D = 50, Adam 1e-3, SA-RNN's lambda from the task's table.
        "paper": Preset(
            train=TrainConfig(epochs=50, batch_size=32, lr=1e-3, eval_batch_size=500),
            model=ModelConfig(hidden_size=50),
            methods={"sa-rnn": {"lam": lam}},
        ),
    }


def balanced_splits(
    x: np.ndarray,
    y: np.ndarray,
    seed: int,
    limit: int = 0,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> Splits:
    """Balance a binary dataset and split it (80/10/10 by default), all drawn from ``seed``.

    Every series of the smaller class is kept and as many of the larger class are sampled
    without replacement; each class is then split by ``fractions`` (stratified, so every split is
    balanced) and each split shuffled. ``limit`` > 0 keeps at most that many series (half per
    class) for smoke runs.

    Args:
        x: ``[N, T, V]`` inputs.
        y: ``[N]`` labels in {0, 1}.
        seed: the run seed; the balancing sample and the split both depend on it.
        limit: when > 0, keep at most ``limit // 2`` series per class (at least 3); 0 keeps all.
        fractions: the (train, validation, test) shares of each class; the test split takes
            what is left, and validation and test get at least one series each.

    Returns:
        Splits of float32 ``x`` and int64 ``y``, with class counts in ``info``.
    """
    rng = np.random.default_rng(seed)
    by_class = [rng.permutation(np.flatnonzero(y == c)) for c in (0, 1)]
    k = min(len(c) for c in by_class)
    if k < 3:
        raise CorruptDataError(f"too few series to split: {k} in the smaller class (need 3)")
    if limit:
        k = min(k, max(limit // 2, 3))
    parts: list[list[np.ndarray]] = [[], [], []]
    for idx in by_class:
        idx = idx[:k]
        n_va = max(1, round(fractions[1] * k))  # never an empty validation or test split
        n_tr = min(round(fractions[0] * k), k - n_va - 1)
        for i, seg in enumerate((idx[:n_tr], idx[n_tr : n_tr + n_va], idx[n_tr + n_va :])):
            parts[i].append(seg)
    splits = []
    for segs in parts:
        idx = rng.permutation(np.concatenate(segs))
        xs = torch.tensor(x[idx], dtype=torch.float32)
        splits.append(Split(xs, torch.tensor(y[idx], dtype=torch.int64)))
    info = {"n_positive": int((y == 1).sum()), "n_negative": int((y == 0).sum()), "per_class": k}
    return Splits(*splits, info=info)


class SSATask(Task):
    """Base of the S-SA tasks: balanced binary classification of windows (accuracy %).

    A subclass sets ``dataset`` (its folder under the data root) and ``data_source`` (where the
    data are obtained), a ``config_cls`` with a ``max_series`` knob, and implements ``series``
    and ``found``.
    """

    kind = TaskKind.CLASSIFICATION
    readout = "last"
    primary = "accuracy"
    higher_is_better = True
    dataset: ClassVar[str] = ""
    data_source: ClassVar[str] = ""

    @property
    def folder(self) -> Path:
        return data_root(self.data_dir) / self.dataset

    @property
    def output_size(self) -> int:
        return 2

    def series(self) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """Windows ``[N, T, V]``, their 0/1 labels ``[N]`` and facts for ``Splits.info``."""
        raise NotImplementedError

    def found(self) -> tuple[str, dict[str, Any]]:
        """Read the data: the status row's detail line and the fields that identify the data
        (``sha256`` for published sums, else ``files`` for their content digest)."""
        raise NotImplementedError

    def splits(self, seed: int) -> Splits:
        x, y, info = self.series()
        out = balanced_splits(x, y, seed, self.cfg.max_series)
        out.info.update(info)
        return out

    def data_status(self) -> dict[str, Any]:
        identity: dict[str, Any] = {}

        def check() -> str:
            detail, fields = self.found()
            identity.update(fields)
            return detail

        row = status(self.dataset, self.folder, self.data_source, check)
        row.update(identity)
        return row
