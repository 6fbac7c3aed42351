"""Seizures: the UCI CSV and Bonn layouts, S-SA's preprocessing, balance, errors, real counts."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from harness.data import DataError, data_root, status_rows
from harness.errors import ConfigError
from harness.registry import TASKS
from harness.task import Batch
from tasks import seizures
from tasks.seizures import Seizures, SeizuresConfig, preprocess

SETS = {"Z": 5, "O": 4, "N": 3, "F": 2, "S": 1}  # UCI labels


def write_bonn(root, files_per_set=2, seed=0):
    """Bonn layout: ``bonn_eeg/<set>/<set>NNN.txt`` (N uses .TXT), 4,097 integers, CRLF."""
    rng = np.random.default_rng(seed)
    for name in SETS:
        d = root / "epileptic_seizure" / "bonn_eeg" / name
        d.mkdir(parents=True, exist_ok=True)
        for i in range(1, files_per_set + 1):
            v = rng.normal(0, 300 if name == "S" else 50, 4097).astype(int) + 7
            ext = ".TXT" if name == "N" else ".txt"
            (d / f"{name}{i:03d}{ext}").write_bytes("".join(f"{a}\r\n" for a in v).encode())


def write_csv_from_bonn(root, name="data.csv", id_header=""):
    """The UCI CSV cut from the generated Bonn files, rows shuffled, ids like ``X3.V1.12``."""
    rows = []
    for s, label in SETS.items():
        for f in sorted((root / "epileptic_seizure" / "bonn_eeg" / s).iterdir()):
            v = [int(a) for a in f.read_text().split()]
            for k in range(23):
                rows.append([f"X{k + 1}.V1.{len(rows)}", *v[k * 178 : (k + 1) * 178], label])
    np.random.default_rng(1).shuffle(rows)
    with open(root / "epileptic_seizure" / name, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([id_header, *(f"X{k}" for k in range(1, 179)), "y"])
        w.writerows(rows)


def test_registered():
    assert TASKS.get("seizures") is Seizures
    t = Seizures()
    assert (t.kind, t.readout, t.primary, t.input_size, t.output_size) == (
        "classification", "last", "accuracy", 1, 2
    )  # fmt: skip
    assert Seizures.preset("paper").model.hidden_size == 50


def test_preprocess_centres_and_averages_chunks():
    x = np.arange(178, dtype=float)[None]  # one series 0..177, mean 88.5
    out = preprocess(x, 10)
    assert out.shape == (1, 17, 1)  # the trailing 8 samples are dropped
    assert np.allclose(out[0, :, 0], 10 * np.arange(17) + 4.5 - 88.5)
    # scale=series: the same, divided by the centred series' std (amplitude removed)
    scaled = preprocess(np.vstack([x, 7 * x]), 10, "series")
    assert np.allclose(scaled[0, :, 0], out[0, :, 0] / x.std()) and np.allclose(*scaled)
    with pytest.raises(ConfigError, match="scale='z' is out of range .*one of none, series"):
        SeizuresConfig(scale="z")


def test_bonn_layout(tmp_path):
    write_bonn(tmp_path)
    task = Seizures(data_dir=str(tmp_path))
    s = task.splits(0)
    assert s.info["source"].startswith("bonn-eeg") and s.info["series"] == 5 * 2 * 23
    assert s.info["n_positive"] == 46 and s.info["per_class"] == 46
    assert [len(s.train), len(s.val), len(s.test)] == [74, 10, 8]
    for sp in (s.train, s.val, s.test):
        assert sp.x.shape[1:] == (17, 1) and sp.x.dtype == torch.float32
        assert sp.y.dtype == torch.int64 and 2 * int(sp.y.sum()) == len(sp)  # balanced
    st = task.data_status()
    assert st["status"] == "found" and "46 seizure" in st["detail"]


def test_csv_layout_gives_the_same_series(tmp_path):
    write_bonn(tmp_path)
    write_csv_from_bonn(tmp_path, "Epileptic Seizure Recognition.csv", id_header="Unnamed")
    x_csv, y_csv, src = Seizures(data_dir=str(tmp_path)).raw()
    assert src.startswith("uci-csv")
    x_bonn, y_bonn, src = Seizures(SeizuresConfig(source="bonn"), data_dir=str(tmp_path)).raw()
    assert src.startswith("bonn-eeg")
    order_csv, order_bonn = np.lexsort(x_csv.T[::-1]), np.lexsort(x_bonn.T[::-1])
    assert np.array_equal(x_csv[order_csv], x_bonn[order_bonn])
    assert np.array_equal(y_csv[order_csv], y_bonn[order_bonn])
    s = Seizures(data_dir=str(tmp_path)).splits(0)
    assert s.info["source"].startswith("uci-csv") and len(s.train) == 74


def test_splits_depend_on_the_seed_only(tmp_path):
    write_bonn(tmp_path)
    task = Seizures(data_dir=str(tmp_path))
    a, b, c = task.splits(0), task.splits(0), task.splits(1)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.y, b.test.y)
    assert not torch.equal(a.train.x, c.train.x)
    small = Seizures(SeizuresConfig(max_series=40), data_dir=str(tmp_path)).splits(0)
    assert len(small.train) + len(small.val) + len(small.test) == 40


def test_missing_data(tmp_path):
    task = Seizures(data_dir=str(tmp_path))
    with pytest.raises(DataError) as e:
        task.splits(0)
    msg = str(e.value)
    assert "\n" not in msg and "data.csv" in msg and "bonn_eeg" in msg and "https://" in msg
    assert task.data_status()["status"] == "missing"
    write_bonn(tmp_path)
    with pytest.raises(DataError, match="data.csv.*archive.ics.uci.edu"):
        Seizures(SeizuresConfig(source="csv"), data_dir=str(tmp_path)).splits(0)


def test_corrupt_files(tmp_path):
    write_bonn(tmp_path)
    bad = tmp_path / "epileptic_seizure" / "bonn_eeg" / "F" / "F001.txt"
    bad.write_text("1\r\n2\r\n")
    task = Seizures(data_dir=str(tmp_path))
    with pytest.raises(DataError, match="corrupt data file .*F001.txt"):
        task.splits(0)
    assert task.data_status()["status"] == "corrupt"
    (tmp_path / "epileptic_seizure" / "data.csv").write_text("id,A,B\nx,1,2\n")
    with pytest.raises(DataError, match="corrupt data file .*data.csv"):
        task.splits(0)


def test_generated_bonn_fails_checksum(tmp_path):
    write_bonn(tmp_path)
    (row,) = status_rows(tmp_path, verify=True, tasks=["seizures"])
    assert row["status"] == "checksum mismatch" and "bonn_eeg" in row["detail"]


def test_perfect_predictor_scores_100(tmp_path):
    write_bonn(tmp_path)
    task = Seizures(data_dir=str(tmp_path))
    test = task.splits(0).test
    pred = 50.0 * torch.nn.functional.one_hot(test.y, 2).float()  # [N, 2]
    out = task.finalize(task.batch_stats(pred, Batch(test.x, test.y)))
    assert out["accuracy"] == 100.0


def test_real_data_counts():
    root = data_root()
    if not (root / "epileptic_seizure").is_dir():
        pytest.skip(f"seizure data absent under {root} (set HARNESS_DATA_DIR)")
    x, y, _ = Seizures().raw()
    assert x.shape == (11_500, 178) and (y == 1).sum() == 2_300
    s = Seizures().splits(0)
    assert len(s.train) + len(s.val) + len(s.test) == 4_600
    assert [len(s.train), len(s.val), len(s.test)] == [3_680, 460, 460]
    assert s.train.x.shape[1:] == (17, 1) and 2 * int(s.test.y.sum()) == len(s.test)


def test_the_shipped_bonn_file_sums_make_the_published_digest():
    # the per-file sums only name the files that differ; the digest stays the data identity
    from harness.data import manifest_digest, read_sums

    sums = read_sums(seizures.BONN_FILE_SUMS)
    assert len(sums) == 500
    assert {rel.split("/")[1] for rel in sums} == set(seizures.BONN_SETS)
    assert manifest_digest(sums) == seizures.BONN_SHA256["bonn_eeg/*/*"]
