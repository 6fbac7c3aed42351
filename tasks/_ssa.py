"""What the three S-SA classification tasks share: scoring, balanced splits, data rows, presets.

Paper (S-SA): Hartvigsen, Sen, Kong, Rundensteiner, "Learning to Selectively Update State Neurons
in Recurrent Networks", CIKM 2020, https://doi.org/10.1145/3340531.3412018, section 4.1; its
Tables 1-3 are ``seizures``, ``twitter-buzz`` and ``yahoo``, whose modules say how each dataset is
read and cut into windows.

Each task is a binary classification of windows: every window with the event and as many sampled
without it (``balanced_splits``), 2 logits and cross-entropy, last-step read-out, accuracy in
percent. The presets take S-SA's D = 50, Adam at 1e-3 and SA-RNN's lambda from the
task's table.

Splits: S-SA's split is by series (``balanced_splits``): the windows are shuffled into
train, validation and test with no regard to where they came from, so windows cut from one
recording land in all three. A task whose data come in natural groups can also split by group
(``group_splits``: every window of a group in one split); ``seizures`` does, with
``task.split=recording``; the other two have no group to split by (their modules say why).
``Splits.info["split"]`` records which split a run used.

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

from harness.components.config import ModelConfig, Preset, TrainConfig
from harness.components.task import Split, Splits, Task, TaskKind
from harness.data import CorruptDataError, data_root, status


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


def group_splits(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    seed: int,
    limit: int = 0,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> Splits:
    """``balanced_splits`` by group: every series of a group falls in one split.

    Per class, the groups are drawn in a random order and taken whole until the class holds as
    many series as the smaller class has (``limit`` > 0: at most ``limit // 2``; the last group
    taken may be cut short). Each class's groups are then split by ``fractions`` counted in
    groups, which is the share in series too when the groups are equal-sized (seizures: 23
    pieces each), with at least one group in validation and in test. A split whose classes came
    out unequal drops series of the larger class at random, so every split is balanced. Each
    split is shuffled. Everything is drawn from ``seed``.

    Args:
        x: ``[N, T, V]`` inputs.
        y: ``[N]`` labels in {0, 1}.
        groups: ``[N]`` the group of each series (any sortable ids); a group holds one class.
        seed: the run seed; the balancing sample and the split both depend on it.
        limit: when > 0, keep at most ``limit // 2`` series per class (at least 3); 0 keeps all.
        fractions: the (train, validation, test) shares of each class's groups; the test split
            takes what is left.

    Returns:
        Splits of float32 ``x`` and int64 ``y``; ``info`` holds the class counts and the number
        of groups in each split (``groups``).

    Raises:
        CorruptDataError: a group holding both classes, or fewer than 3 groups in a class.
    """
    rng = np.random.default_rng(seed)
    groups = np.asarray(groups)
    both = np.intersect1d(groups[y == 0], groups[y == 1])
    if len(both):
        raise CorruptDataError(f"group {both[0]} holds series of both classes: cannot split by it")
    k = min(int((y == c).sum()) for c in (0, 1))
    if limit:
        k = min(k, max(limit // 2, 3))
    parts: list[list[list[np.ndarray]]] = [[[], []], [[], []], [[], []]]  # [split][class]
    n_groups = [0, 0, 0]
    for c in (0, 1):
        idx = np.flatnonzero(y == c)
        ids, counts = np.unique(groups[idx], return_counts=True)
        members = np.split(idx[np.argsort(groups[idx], kind="stable")], np.cumsum(counts)[:-1])
        taken, total = [], 0
        for g in rng.permutation(len(ids)):
            if total >= k:
                break
            taken.append(members[g][: k - total])
            total += len(taken[-1])
        n = len(taken)
        if n < 3:
            raise CorruptDataError(
                f"too few groups to split: {n} in class {c} for {k} series (need 3: train, "
                "validation and test each take whole groups)"
            )
        n_va = max(1, round(fractions[1] * n))  # never an empty validation or test split
        n_tr = min(round(fractions[0] * n), n - n_va - 1)
        for i, segs in enumerate((taken[:n_tr], taken[n_tr : n_tr + n_va], taken[n_tr + n_va :])):
            parts[i][c].append(np.concatenate(segs))
            n_groups[i] += len(segs)
    splits = []
    for per_class in parts:
        both_classes = [np.concatenate(p) for p in per_class]
        m = min(len(c) for c in both_classes)  # equal-sized groups: nothing to drop
        kept = [
            c if len(c) == m else np.sort(rng.choice(c, m, replace=False)) for c in both_classes
        ]
        idx = rng.permutation(np.concatenate(kept))
        xs = torch.tensor(x[idx], dtype=torch.float32)
        splits.append(Split(xs, torch.tensor(y[idx], dtype=torch.int64)))
    info = {
        "n_positive": int((y == 1).sum()),
        "n_negative": int((y == 0).sum()),
        "per_class": sum(len(s) for s in splits) // 2,
        "groups": dict(zip(("train", "val", "test"), n_groups, strict=True)),
    }
    return Splits(*splits, info=info)


class SSATask(Task):
    """Base of the S-SA tasks: balanced binary classification of windows (accuracy %).

    A subclass sets ``dataset`` (its folder under the data root) and ``data_source`` (where the
    data are obtained), a ``config_cls`` with a ``max_series`` knob, and implements ``series``
    and ``found``. One whose data have natural groups gives its config a ``split`` knob
    (``series``, S-SA's, or the group's name) and implements ``groups``.
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

    def groups(self) -> np.ndarray:
        """The group of each series of ``series`` (``[N]``), for a ``split`` other than series."""
        raise NotImplementedError

    def splits(self, seed: int) -> Splits:
        x, y, info = self.series()
        split = getattr(self.cfg, "split", "series")  # S-SA's split where the task has no other
        if split == "series":
            out = balanced_splits(x, y, seed, self.cfg.max_series)
        else:
            out = group_splits(x, y, self.groups(), seed, self.cfg.max_series)
        out.info.update(info, split=split)
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
