"""Tests of the HAR task: loaders on generated files in both layouts, the cache, clear DataErrors,
splits (determinism, subject separation), and the real data when present (skipped otherwise)."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.components import config
from harness.components.registry import TASKS
from harness.components.task import Batch
from harness.errors import ConfigError, DataError
from tasks import _har_data as har_data
from tasks import har
from tasks._har_data import CHANNELS
from tasks.har import HAR, HARConfig

# --- generated files ------------------------------------------------------------------------------


def write_uci(root: Path, train=(1, 3, 5, 6), test=(2, 4), per: int = 6) -> Path:
    """A small UCI HAR tree; x[i, t, c] = 100 * subject + c + t / 256 so tests can decode it."""
    folder = root / "uci_har" / "UCI HAR Dataset"
    for split, subs in (("train", train), ("test", test)):
        subj = np.repeat(subs, per)
        sig = folder / split / "Inertial Signals"
        sig.mkdir(parents=True)
        for c, ch in enumerate(CHANNELS):
            vals = 100.0 * subj[:, None] + c + np.arange(128)[None] / 256
            np.savetxt(sig / f"{ch}_{split}.txt", vals, fmt="%.7e")
        np.savetxt(folder / split / f"y_{split}.txt", np.arange(len(subj)) % 6 + 1, fmt="%d")
        np.savetxt(folder / split / f"subject_{split}.txt", subj, fmt="%d")
    gzip_file(folder / "train" / "Inertial Signals" / "total_acc_z_train.txt")  # NAME.gz form
    return folder


def gzip_file(p: Path) -> None:
    p.with_name(p.name + ".gz").write_bytes(gzip.compress(p.read_bytes()))
    p.unlink()


def write_hapt(root: Path, n: int = 700) -> Path:
    """Two 14 s recordings (user 1 train, user 2 test): acc = gravity on x + a 2 Hz wave on y."""
    raw = root / "hapt" / "RawData"
    raw.mkdir(parents=True)
    t = np.arange(n) / 50.0
    for e, u in ((1, 1), (2, 2)):
        acc = np.stack([np.ones(n), 0.1 * np.sin(2 * np.pi * 2 * t), np.zeros(n)], 1)
        gyro = np.stack([0.5 * np.sin(2 * np.pi * t)] * 3, 1)
        np.savetxt(raw / f"acc_exp{e:02d}_user{u:02d}.txt", acc, fmt="%.8e")
        np.savetxt(raw / f"gyro_exp{e:02d}_user{u:02d}.txt", gyro, fmt="%.8e")
    gzip_file(raw / "acc_exp02_user02.txt")
    # 300 samples: 3 windows; a transition (7) and a 127-sample segment: none; 256: 3; 395: 5
    labels = [(1, 1, 5, 1, 300), (1, 1, 7, 301, 400), (1, 1, 1, 401, 527)]
    labels += [(2, 2, 6, 50, 305), (2, 2, 2, 306, 700)]
    np.savetxt(raw / "labels.txt", np.array(labels), fmt="%d")
    return root / "hapt"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def task(root: Path, **kw) -> HAR:
    return HAR(HARConfig(**kw), data_dir=str(root))


# --- generated-data tests -------------------------------------------------------------------------


def test_registered_and_config_checked():
    assert TASKS.get("har") is HAR
    t = HAR()
    assert (t.input_size, t.output_size, t.kind, t.readout, t.primary) == (
        9,
        6,
        "classification",
        "last",
        "accuracy",
    )
    for bad in ({"source": "kaggle"}, {"val_subjects": 0}, {"val_subjects": 21}, {"max_val": -1}):
        with pytest.raises(ConfigError):
            HARConfig(**bad)


def test_presets_resolve_and_keep_128_steps():
    for preset in ("smoke", "quick", "paper"):
        cfg = config.resolve("gru", "har", 0, preset)
        assert cfg.model.num_layers == 2
    paper = config.resolve("gru", "har", 0, "paper")
    assert (paper.train.lr, paper.train.batch_size, paper.train.epochs) == (0.0025, 200, 100)
    assert paper.model.hidden_size == 32 and paper.task_cfg.max_train == 0
    smoke = config.resolve("gru", "har", 0, "smoke", {"data_seed": "1"})
    assert (smoke.task_cfg.max_train, smoke.task_cfg.data_seed) == (200, 1)


def test_uci_layout_loader(tmp_path, cache):
    write_uci(tmp_path)
    sp = task(tmp_path, val_subjects=1).splits(0)
    assert sp.info["source"] == "uci-har" and sp.info["cache"] == "built"
    for split, n in ((sp.train, 18), (sp.val, 6), (sp.test, 12)):
        assert split.x.shape == (n, 128, 9) and split.x.dtype == torch.float32
        assert split.y.shape == (n,) and split.y.dtype == torch.int64
        assert 0 <= split.y.min() and split.y.max() <= 5
        subj = torch.round(split.x[:, 0, 0] / 100)  # decode the generator's values
        expect = 100 * subj[:, None, None] + torch.arange(9) + torch.arange(128)[:, None] / 256
        torch.testing.assert_close(split.x, expect.float())  # channel and step order kept
    assert sp.test.y.tolist() == [i % 6 for i in range(12)]  # y_test 1..6 -> 0..5, in row order
    st = task(tmp_path).data_status()
    assert (st["status"], st["source"], st["dataset"]) == ("found", har_data.UCI_URL, "har")


def test_subjects_never_shared_and_splits_deterministic(tmp_path, cache):
    write_uci(tmp_path, train=(1, 3, 5, 6, 7, 8), per=4)
    seen = set()
    for seed in range(4):
        a = task(tmp_path, val_subjects=2, data_seed=seed).splits(0)
        b = task(tmp_path, val_subjects=2, data_seed=seed).splits(1)  # run seed: no effect
        for x, y in ((a.train, b.train), (a.val, b.val), (a.test, b.test)):
            assert torch.equal(x.x, y.x) and torch.equal(x.y, y.y)
        subj = {
            k: set(torch.round(s.x[:, 0, 0] / 100).int().tolist())
            for k, s in (("train", a.train), ("val", a.val), ("test", a.test))
        }
        assert not subj["train"] & subj["val"] and not (subj["train"] | subj["val"]) & subj["test"]
        assert subj["test"] == {2, 4} and len(subj["val"]) == 2
        assert {k: set(v) for k, v in a.info["subjects"].items()} == subj
        seen.add(tuple(sorted(subj["val"])))
    assert len(seen) > 1  # data_seed changes the validation subjects


def test_subsets_are_capped(tmp_path, cache):
    write_uci(tmp_path)
    sp = task(tmp_path, val_subjects=1, max_train=5, max_val=3, max_test=4).splits(0)
    assert (len(sp.train), len(sp.val), len(sp.test)) == (5, 3, 4)
    assert sp.info["windows"] == {"train": 5, "val": 3, "test": 4}


def test_hapt_rebuild_on_generated_recordings(tmp_path, cache):
    folder = write_hapt(tmp_path)
    a = har_data.rebuild_hapt(folder)
    assert a["x_train"].shape == (3, 128, 9) and a["x_test"].shape == (8, 128, 9)
    assert a["y_train"].tolist() == [5] * 3 and a["y_test"].tolist() == [6] * 3 + [2] * 5
    assert set(a["s_train"]) == {1} and set(a["s_test"]) == {2}
    x = a["x_test"].astype(np.float64)
    assert np.abs(np.diff(x[..., 6:] - x[..., :3], axis=1)).max() < 1e-3  # gravity: slow only
    np.testing.assert_allclose(x[..., 6], 1.0, atol=1e-3)  # total acc keeps gravity (g)
    np.testing.assert_allclose(x[..., 0], 0.0, atol=1e-3)  # body acc: gravity removed
    t = (np.arange(700) / 50.0)[305 + 64 * np.arange(5)[:, None] + np.arange(128)]  # 2nd segment
    np.testing.assert_allclose(x[3:, :, 1], 0.1 * np.sin(2 * np.pi * 2 * t), atol=0.01)
    np.testing.assert_allclose(x[3:, :, 4], 0.5 * np.sin(2 * np.pi * t), atol=0.01)  # gyro rad/s
    sp = task(tmp_path, source="hapt", val_subjects=1).load()[1]
    assert sp["source"] == "hapt-rebuilt"


def test_cache_hit_skips_the_rebuild(tmp_path, cache, monkeypatch):
    write_hapt(tmp_path)
    t = task(tmp_path)
    first, info = t.load()
    assert info["cache"] == "built" and list((cache / "condrnn-harness" / "har").glob("*.npz"))
    monkeypatch.setattr(har, "rebuild_hapt", lambda folder: pytest.fail("rebuilt on a cache hit"))
    again, info = t.load()
    assert info["cache"] == "hit"
    assert all(np.array_equal(first[k], again[k]) for k in first)
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    labels = tmp_path / "hapt" / "RawData" / "labels.txt"
    labels.write_text(labels.read_text().replace("2 2 6 50 305", "2 2 6 51 305"))
    assert t.load()[1]["cache"] == "built"  # a changed source file is a new cache key


def test_missing_data_is_one_clear_error(tmp_path, cache):
    with pytest.raises(DataError) as e:
        task(tmp_path).splits(0)
    msg = str(e.value)
    assert "\n" not in msg and "labels.txt" in msg and "Inertial Signals" in msg
    assert har_data.UCI_URL in msg and har_data.HAPT_URL in msg
    assert msg.count("missing data file") == 2
    assert task(tmp_path).data_status()["status"] == "missing"
    write_hapt(tmp_path)
    (tmp_path / "hapt" / "RawData" / "gyro_exp02_user02.txt").unlink()
    with pytest.raises(DataError, match=r"gyro_exp02_user02\.txt.*" + re.escape(har_data.HAPT_URL)):
        task(tmp_path).splits(0)
    st = task(tmp_path).data_status()
    assert st["status"] == "missing" and "gyro_exp02_user02" in st["detail"]
    with pytest.raises(DataError, match=r"body_acc_x_train\.txt.*" + re.escape(har_data.UCI_URL)):
        task(tmp_path, source="uci").splits(0)


@pytest.mark.parametrize(
    "damage, match",
    [
        ("text", r"corrupt data file .*body_gyro_y_train\.txt: .*nan\?"),
        ("columns", r"body_gyro_y_train\.txt: expected 128"),
        ("rows", r"body_gyro_y_train\.txt: 23 rows"),
        ("gzip", r"corrupt data file .*total_acc_z_train\.txt\.gz"),
    ],
)
def test_corrupt_uci_files(tmp_path, cache, damage, match):
    folder = write_uci(tmp_path)
    p = folder / "train" / "Inertial Signals" / "body_gyro_y_train.txt"
    lines = p.read_text().splitlines()
    if damage == "text":
        lines[3] = lines[3].replace(lines[3].split()[5], "nan?", 1)
    elif damage == "columns":
        lines[3] = " ".join(lines[3].split()[:-1])
    elif damage == "rows":
        lines = lines[:-1]
    else:
        gz = p.with_name("total_acc_z_train.txt.gz")
        gz.write_bytes(gz.read_bytes()[:-20])
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=match):
        task(tmp_path, val_subjects=1).splits(0)


def test_corrupt_hapt_files(tmp_path, cache):
    raw = write_hapt(tmp_path) / "RawData"
    st = task(tmp_path).data_status(verify=True)
    assert st["status"] == "checksum mismatch", st
    gz = raw / "acc_exp02_user02.txt.gz"
    gz.write_bytes(gz.read_bytes()[:100])
    with pytest.raises(DataError, match=r"corrupt data file .*acc_exp02_user02\.txt\.gz"):
        task(tmp_path).splits(0)
    p = raw / "gyro_exp01_user01.txt"
    p.write_text("\n".join(p.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(DataError, match=r"gyro_exp01_user01\.txt: 699 rows"):
        har_data.rebuild_hapt(raw.parent)
    (raw / "labels.txt").write_text("1 1 5 1 x\n")
    st = task(tmp_path).data_status()
    assert st["status"] == "corrupt" and "labels.txt" in st["detail"]


def test_perfect_predictor_scores_100(tmp_path, cache):
    write_uci(tmp_path)
    t = task(tmp_path, val_subjects=1)
    test = t.splits(0).test
    stats: dict[str, tuple[float, float]] = {}
    for batch in test.batches(5):
        logits = 10.0 * F.one_hot(batch.y, 6).float()  # [B, 6]
        for k, (s, c) in t.batch_stats(logits, batch).items():
            stats[k] = (stats.get(k, (0.0, 0.0))[0] + s, stats.get(k, (0.0, 0.0))[1] + c)
    assert t.finalize(stats)["accuracy"] == 100.0
    wrong = Batch(test.x, test.y)
    assert (
        t.finalize(t.batch_stats(10.0 * F.one_hot((test.y + 1) % 6, 6).float(), wrong))["accuracy"]
        == 0.0
    )


# --- the real data (HARNESS_DATA_DIR) -------------------------------------------------------------

ROOT = Path(os.environ.get("HARNESS_DATA_DIR", "/nonexistent"))
real = pytest.mark.skipif(
    not (ROOT / "hapt" / "RawData").is_dir()
    and not (ROOT / "uci_har" / "UCI HAR Dataset" / "train" / "Inertial Signals").is_dir(),
    reason=f"HAR data not found under HARNESS_DATA_DIR={ROOT}",
)


@pytest.fixture(scope="session")
def real_cache(tmp_path_factory):
    """One rebuild per test session, in a temporary cache directory."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("har-cache")))
        arrays, info = HAR().load()
        yield arrays, info


@real
def test_real_window_counts_and_units(real_cache):
    a, info = real_cache
    n_train, n_test = len(a["y_train"]), len(a["y_test"])
    assert abs(n_train / 7352 - 1) < 0.02 and abs(n_test / 2947 - 1) < 0.02, (n_train, n_test)
    if info["source"] == "hapt-rebuilt":  # walking windows equal UCI HAR's (PROVENANCE.md)
        assert (n_train, n_test) == (7415, 2996)
        assert np.bincount(a["y_train"])[1:3].tolist() == [1226, 1073]
    x = a["x_train"][::7].astype(np.float64)
    assert abs(np.linalg.norm(x[..., 6:], axis=-1).mean() - 1.0) < 0.05  # total acc in g
    assert np.abs(x[..., :3].mean((0, 1))).max() < 0.02  # body acc without gravity
    assert 0.05 < x[..., 3:6].std() < 2.0  # gyro in rad/s


@real
def test_real_subject_split_matches_uci_har(real_cache):
    a, _ = real_cache
    uci = ROOT / "uci_har" / "UCI HAR Dataset"
    for split in ("train", "test"):
        p = uci / split / f"subject_{split}.txt"
        if p.is_file():  # UCI HAR's own subject lists, independent of the task's constants
            assert set(a[f"s_{split}"]) == set(np.loadtxt(p, dtype=int))
    assert not set(a["s_train"]) & set(a["s_test"])


@real
def test_real_cache_hit_and_smoke_splits(real_cache, monkeypatch):
    _, info = real_cache
    monkeypatch.setattr(har, "rebuild_hapt", lambda folder: pytest.fail("rebuilt on a cache hit"))
    monkeypatch.setattr(har, "load_uci", lambda folder: pytest.fail("re-parsed on a cache hit"))
    cfg = config.resolve("gru", "har", 0, "smoke")
    sp, sp2 = HAR(cfg.task_cfg).splits(0), HAR(cfg.task_cfg).splits(0)
    assert sp.info["cache"] == "hit" and sp.info["source"] == info["source"]
    assert (len(sp.train), len(sp.val), len(sp.test)) == (200, 100, 100)
    assert sp.train.x.shape == (200, 128, 9) and sp.train.y.dtype == torch.int64
    assert torch.equal(sp.train.x, sp2.train.x) and torch.equal(sp.val.y, sp2.val.y)
    s = sp.info["subjects"]
    assert not set(s["train"]) & set(s["val"]) and not set(s["train"] + s["val"]) & set(s["test"])
    assert set(s["test"]) <= set(har_data.TEST_SUBJECTS)


@real
def test_real_data_status_verifies(real_cache):
    st = HAR().data_status(verify=True)
    assert st["status"] == "found" and st["dataset"] == "har" and st["source"].startswith("https")
    assert st["source"] == har_data.UCI_URL or "sha256 verified" in st["detail"]


def test_reading_the_hapt_labels_does_not_import_pandas(tmp_path):
    """``labels.txt`` is read by every process of a sweep that plans or trains HAR (its file
    list): numpy reads it, so pandas (0.1 s to import) is not imported for it."""
    import subprocess
    import sys

    write_hapt(tmp_path)
    code = (
        "import sys\nfrom pathlib import Path\nimport tasks._har_data as h\n"
        f"n = len(h.hapt_labels(Path({str(tmp_path / 'hapt')!r})))\n"
        "print(n, 'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[1] == "False" and int(out.stdout.split()[0]) > 0
