"""Yahoo S5 A1: file layout, numeric file order, length-25 windows, balance and errors (the data
are not shipped, so everything runs on generated files in the archive's format)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.components.registry import TASKS
from harness.components.task import Batch
from harness.data import DataError, data_root, status_rows
from tasks.yahoo import Yahoo, YahooConfig

ARCHIVE = "ydata-labeled-time-series-anomalies-v1_0/A1Benchmark"


def write_a1(root, n_files=11, length=60, sub=ARCHIVE, header=True, seed=0):
    """``real_1.csv`` ... with ``timestamp,value,is_anomaly``; file k's values are ``k + 0.001 i``
    and it has one anomaly at a random point (none in real_3)."""
    rng = np.random.default_rng(seed)
    d = root / "yahoo_s5" / sub
    d.mkdir(parents=True, exist_ok=True)
    for k in range(1, n_files + 1):
        a = np.zeros(length, dtype=int)
        if k != 3:
            a[rng.integers(length)] = 1
        lines = [f"{i + 1},{k + 0.001 * i:.3f},{a[i]}" for i in range(length)]
        head = ["timestamp,value,is_anomaly"] if header else []
        (d / f"real_{k}.csv").write_text("\n".join(head + lines) + "\n")
    return d


def test_registered():
    assert TASKS.get("yahoo") is Yahoo
    t = Yahoo()
    assert (t.kind, t.readout, t.input_size, t.output_size) == ("classification", "last", 1, 2)


def test_numeric_file_order_and_windows(tmp_path):
    write_a1(tmp_path)
    x, y, d, n = Yahoo(data_dir=str(tmp_path)).windows()
    assert n == 11 and d.name == "A1Benchmark"
    assert x.shape == (11 * 60 // 25, 25, 1)  # 660 points -> 26 windows, remainder dropped
    flat = x.reshape(-1)
    # real_1, real_2, ..., real_10, real_11 (numeric, not lexicographic: real_10 after real_9)
    assert np.allclose(flat[::60], np.arange(1, 12))
    assert set(np.unique(y)) <= {0, 1} and y.sum() >= 1


def test_window_label_is_any_anomaly(tmp_path):
    d = write_a1(tmp_path, n_files=2, length=50)
    for k in (1, 2):
        rows = [f"{i + 1},{i}.5,{int(k == 2 and i == 7)}" for i in range(50)]
        (d / f"real_{k}.csv").write_text("timestamp,value,is_anomaly\n" + "\n".join(rows) + "\n")
    _, y, _, _ = Yahoo(data_dir=str(tmp_path)).windows()
    assert y.tolist() == [0, 0, 1, 0]  # point 7 of real_2 is point 57 overall


def test_splits_balanced_and_seeded(tmp_path):
    write_a1(tmp_path, n_files=40, length=50)
    task = Yahoo(data_dir=str(tmp_path))
    a, b, c = task.splits(0), task.splits(0), task.splits(2)
    k = a.info["per_class"]
    assert k == a.info["n_positive"] and len(a.train) + len(a.val) + len(a.test) == 2 * k
    for sp in (a.train, a.val, a.test):
        assert sp.x.shape[1:] == (25, 1) and sp.x.dtype == torch.float32
        assert sp.y.dtype == torch.int64 and 2 * int(sp.y.sum()) == len(sp)
    assert torch.equal(a.train.x, b.train.x) and not torch.equal(a.train.x, c.train.x)
    assert a.info["files"] == 40 and a.info["windows"] == 80


def test_layout_without_header_in_short_folder(tmp_path):
    write_a1(tmp_path, sub="A1Benchmark", header=False)
    s = Yahoo(YahooConfig(max_series=6), data_dir=str(tmp_path)).splits(0)
    assert len(s.train) + len(s.val) + len(s.test) == 6


def test_missing_and_corrupt(tmp_path):
    task = Yahoo(data_dir=str(tmp_path))
    with pytest.raises(DataError) as e:
        task.splits(0)
    msg = str(e.value)
    assert "\n" not in msg and "real_N.csv" in msg and "webscope" in msg
    assert task.data_status()["status"] == "missing"
    d = write_a1(tmp_path)
    (d / "real_5.csv").write_text("timestamp,value,is_anomaly\n1,2.0,3\n")
    with pytest.raises(DataError, match="corrupt data file .*real_5.csv"):
        task.splits(0)
    assert task.data_status()["status"] == "corrupt"
    (d / "real_5.csv").write_text("timestamp,value,is_anomaly\n1,abc,0\n")
    with pytest.raises(DataError, match="real_5.csv"):
        task.splits(0)


def test_checksums_of_a_different_copy_mismatch(tmp_path):
    write_a1(tmp_path)
    (row,) = status_rows(tmp_path, tasks=["yahoo"])
    assert row["status"] == "found" and row["path"].endswith("A1Benchmark")
    (row,) = status_rows(tmp_path, verify=True, tasks=["yahoo"])
    assert row["status"] == "checksum mismatch" and "real_*" in row["detail"]


def test_perfect_predictor_scores_100(tmp_path):
    write_a1(tmp_path, n_files=40, length=50)
    task = Yahoo(data_dir=str(tmp_path))
    tr = task.splits(0).train
    pred = 50.0 * torch.nn.functional.one_hot(tr.y, 2).float()
    assert task.finalize(task.batch_stats(pred, Batch(tr.x, tr.y)))["accuracy"] == 100.0


def test_real_data_counts():
    task = Yahoo()
    if task.data_status()["status"] != "found":
        pytest.skip(f"Yahoo S5 absent under {data_root()} (not redistributable)")
    x, y, _, n = task.windows()
    assert n == 67 and len(x) == 3_794 and int(y.sum()) == 209
    s = task.splits(0)
    assert len(s.train) + len(s.val) + len(s.test) == 418
