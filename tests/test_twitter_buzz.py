"""TwitterBuzz: the UCI Buzz file layout, S-SA's preprocessing, balance and errors (the data are
not shipped, so everything runs on generated files in the official layout)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from harness.components.registry import TASKS
from harness.components.task import Batch
from harness.data import DataError, data_root
from tasks.twitter_buzz import FILES, TwitterBuzz, TwitterBuzzConfig, preprocess

ROWS = 5 * 15 * 20  # 20 windows of 15 steps of 5 rows


def make_rows(n=ROWS, buzz_windows=(1, 4, 6, 11, 17), seed=0):
    """``[n, 78]``: 77 count features, then a 0/1 label set on one row of each buzz window."""
    rng = np.random.default_rng(seed)
    x = rng.poisson(3.0, size=(n, 77)).astype(float)
    y = np.zeros(n)
    for w in buzz_windows:
        y[w * 75 + rng.integers(75)] = 1
    return np.column_stack([x, y])


def write(root, rows, rel=FILES["absolute"], gz=False, header=False):
    path = root / "buzz_twitter" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(f"{v:g}" for v in r) for r in rows]
    if header:
        lines.insert(0, ",".join([f"f{i}" for i in range(77)] + ["buzz"]))
    text = "\n".join(lines) + "\n"
    if gz:
        with gzip.open(path.with_name(path.name + ".gz"), "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def test_registered():
    assert TASKS.get("twitter-buzz") is TwitterBuzz
    t = TwitterBuzz()
    assert (t.kind, t.readout, t.input_size, t.output_size) == ("classification", "last", 77, 2)
    assert t.higher_is_better and t.primary == "accuracy"


def test_preprocess_means_centres_and_pools_labels():
    rows = make_rows(buzz_windows=(2,))
    x, y = preprocess(rows[:, :-1], rows[:, -1].astype(int), 5, 15)
    assert x.shape == (20, 15, 77) and y.tolist() == [int(i == 2) for i in range(20)]
    means = rows[:, :-1].reshape(-1, 5, 77).mean(1)
    assert np.allclose(x.reshape(-1, 77), means - means.mean(0))
    assert np.allclose(x.reshape(-1, 77).mean(0), 0.0)
    # leftover rows that do not fill a step or a window are dropped
    x2, _ = preprocess(rows[: ROWS - 3, :-1], rows[: ROWS - 3, -1].astype(int), 5, 15)
    assert x2.shape == (19, 15, 77)


def test_official_layout(tmp_path):
    write(tmp_path, make_rows())
    task = TwitterBuzz(data_dir=str(tmp_path))
    s = task.splits(0)
    assert s.info["windows"] == 20 and s.info["n_positive"] == 5 and s.info["per_class"] == 5
    assert [len(s.train), len(s.val), len(s.test)] == [6, 2, 2]  # never an empty split
    for sp in (s.train, s.val, s.test):
        assert sp.x.shape[1:] == (15, 77) and sp.x.dtype == torch.float32
        assert sp.y.dtype == torch.int64 and 2 * int(sp.y.sum()) == len(sp)
    assert task.data_status()["status"] == "found"


def test_gz_header_relative_labeling_and_flat_name(tmp_path):
    write(tmp_path / "a", make_rows(), gz=True, header=True)
    assert TwitterBuzz(data_dir=str(tmp_path / "a")).splits(0).info["n_positive"] == 5
    write(tmp_path / "b", make_rows(), rel=FILES["relative-1000"])
    cfg = TwitterBuzzConfig(labeling="relative-1000")
    assert TwitterBuzz(cfg, data_dir=str(tmp_path / "b")).splits(0).info["windows"] == 20
    write(tmp_path / "c", make_rows(), rel="Twitter-Absolute-Sigma-500.data")
    assert TwitterBuzz(data_dir=str(tmp_path / "c")).splits(0).info["windows"] == 20


def test_splits_depend_on_the_seed(tmp_path):
    write(tmp_path, make_rows(n=5 * 15 * 60, buzz_windows=range(0, 60, 3)))
    task = TwitterBuzz(data_dir=str(tmp_path))
    a, b, c = task.splits(0), task.splits(0), task.splits(1)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.val.y, b.val.y)
    assert not torch.equal(a.train.x, c.train.x)
    assert [len(a.train), len(a.val), len(a.test)] == [32, 4, 4]


def test_missing_and_corrupt(tmp_path):
    task = TwitterBuzz(data_dir=str(tmp_path))
    with pytest.raises(DataError) as e:
        task.splits(0)
    msg = str(e.value)
    assert "\n" not in msg and "Twitter-Absolute-Sigma-500.data" in msg and "uci.edu" in msg
    assert task.data_status()["status"] == "missing"
    rows = make_rows()
    write(tmp_path, rows[:, 1:])  # 76 features + label
    with pytest.raises(DataError, match="corrupt data file .*77 features"):
        task.splits(0)
    assert task.data_status()["status"] == "corrupt"
    rows[3, -1] = 2.0
    write(tmp_path, rows)
    with pytest.raises(DataError, match="0/1 label"):
        task.splits(0)


def test_perfect_predictor_scores_100(tmp_path):
    write(tmp_path, make_rows())
    task = TwitterBuzz(data_dir=str(tmp_path))
    tr = task.splits(0).train
    pred = 50.0 * torch.nn.functional.one_hot(tr.y, 2).float()
    assert task.finalize(task.batch_stats(pred, Batch(tr.x, tr.y)))["accuracy"] == 100.0


def test_real_data_if_present():
    task = TwitterBuzz()
    if task.data_status()["status"] != "found":
        pytest.skip(f"Buzz (Twitter) data absent under {data_root()} (not shipped)")
    s = task.splits(0)
    assert s.train.x.shape[1:] == (15, 77)
    assert 2 * s.info["per_class"] == len(s.train) + len(s.val) + len(s.test)
