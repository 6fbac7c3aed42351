"""The data layer: root resolution, NAME/NAME.gz, clear errors, checksums, cache, status rows;
importing it does not import torch."""

from __future__ import annotations

import gzip
import os

import pytest

from harness import data
from harness.components.registry import TASKS
from harness.data import (
    CorruptDataError,
    DataError,
    MissingDataError,
    cached,
    content_sha256,
    find_file,
    manifest_digest,
    read_text,
    status_rows,
    verify_sha256,
)

REAL_DATA_TASKS = {"ptb", "seizures", "twitter-buzz", "yahoo"}


def test_root_resolution_order(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_DATA_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert data.data_root(tmp_path / "arg") == tmp_path / "arg"
    assert data.data_root() == tmp_path / "env"
    monkeypatch.delenv("HARNESS_DATA_DIR")
    assert data.data_root() == tmp_path / "cache" / "condrnn-harness" / "data"


def test_plain_and_gz_read_alike(tmp_path):
    (tmp_path / "a.txt").write_text("one two\n")
    with gzip.open(tmp_path / "b.txt.gz", "wt") as f:
        f.write("one two\n")
    assert find_file(tmp_path / "b.txt") == tmp_path / "b.txt.gz"
    assert read_text(tmp_path / "a.txt") == read_text(tmp_path / "b.txt") == "one two\n"
    assert content_sha256(tmp_path / "a.txt") == content_sha256(tmp_path / "b.txt.gz")


def test_missing_file_is_one_clear_line(tmp_path):
    with pytest.raises(MissingDataError) as e:
        read_text(tmp_path / "nope.txt", source="https://example.org/get")
    msg = str(e.value)
    assert "\n" not in msg and "nope.txt" in msg and "https://example.org/get" in msg
    assert isinstance(e.value, DataError)


def test_corrupt_gzip_is_corrupt_error(tmp_path):
    (tmp_path / "c.txt.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(CorruptDataError, match="c.txt.gz"):
        read_text(tmp_path / "c.txt")
    with pytest.raises(CorruptDataError):
        content_sha256(tmp_path / "c.txt.gz")


def test_verify_single_files_and_manifests(tmp_path):
    (tmp_path / "d").mkdir()
    for i in range(3):
        (tmp_path / "d" / f"f{i}.txt").write_text(f"{i}\n")
    with gzip.open(tmp_path / "g.txt.gz", "wt") as f:
        f.write("gz\n")
    sums = {f"d/f{i}.txt": content_sha256(tmp_path / "d" / f"f{i}.txt") for i in range(3)}
    known = {"d/*": manifest_digest(sums), "g.txt": content_sha256(tmp_path / "g.txt.gz")}
    assert verify_sha256(tmp_path, known) == ("found", "sha256 verified for 4 files")
    (tmp_path / "d" / "f1.txt").write_text("changed\n")
    st, detail = verify_sha256(tmp_path, known)
    assert st == "checksum mismatch" and "d/*" in detail
    st, detail = verify_sha256(tmp_path, {"absent.txt": "0" * 64})
    assert st == "checksum mismatch" and "absent.txt (absent)" in detail
    # a manifest does not depend on whether its files are stored compressed
    (tmp_path / "e").mkdir()
    with gzip.open(tmp_path / "e" / "h.txt.gz", "wt") as f:
        f.write("h\n")
    (tmp_path / "h.txt").write_text("h\n")
    digest = manifest_digest({"e/h.txt": content_sha256(tmp_path / "h.txt")})
    assert verify_sha256(tmp_path, {"e/*": digest})[0] == "found"


def test_cache_reloads_when_a_file_changes(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("1")
    calls = []
    load = lambda: calls.append(1) or read_text(p)  # noqa: E731
    assert cached("t", [p], load) == cached("t", [p], load) == "1"
    assert len(calls) == 1
    p.write_text("22")
    os.utime(p, ns=(1, 1))
    assert cached("t", [p], load) == "22" and len(calls) == 2


def test_status_rows_on_an_empty_root(tmp_path):
    rows = status_rows(tmp_path)
    names = {r["task"] for r in rows}
    assert REAL_DATA_TASKS <= names
    assert not names & {"synthetic", "adding"}  # generated tasks have no data rows
    for r in rows:
        assert set(r) == {"task", "dataset", "status", "path", "source", "detail"}
        assert r["status"] == "missing", r
        assert r["path"].startswith(str(tmp_path)) and r["source"].startswith("http")
        assert "\n" not in r["detail"]
    assert [r["task"] for r in status_rows(tmp_path, tasks=["yahoo"])] == ["yahoo"]


def test_status_rows_verify_flags_a_changed_file(tmp_path):
    d = tmp_path / "ptb"
    d.mkdir()
    for name in ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"):
        (d / name).write_text(" a b <unk>\n b a\n")
    (row,) = status_rows(tmp_path, tasks=["ptb"])
    assert row["status"] == "found"
    (row,) = status_rows(tmp_path, verify=True, tasks=["ptb"])
    assert row["status"] == "checksum mismatch" and "ptb.train.txt" in row["detail"]
    (d / "ptb.valid.txt.gz").write_bytes(b"not gzip")
    (d / "ptb.valid.txt").unlink()
    (row,) = status_rows(tmp_path, verify=True, tasks=["ptb"])
    assert row["status"] == "corrupt" and "ptb.valid.txt.gz" in row["detail"]


def test_status_rows_verify_real_data():
    root = data.data_root()
    if not (root / "ptb").is_dir() or not (root / "epileptic_seizure").is_dir():
        pytest.skip(f"real data absent under {root} (set HARNESS_DATA_DIR)")
    rows = {r["task"]: r for r in status_rows(verify=True, tasks=["ptb", "seizures"])}
    assert rows["ptb"]["status"] == "found", rows["ptb"]
    assert "verified for 3 files" in rows["ptb"]["detail"]
    assert rows["seizures"]["status"] == "found", rows["seizures"]
    assert "verified for 500 files" in rows["seizures"]["detail"]


def test_every_real_data_task_is_registered():
    assert REAL_DATA_TASKS <= set(TASKS.names())


def test_importing_the_data_modules_does_not_import_torch():
    import subprocess
    import sys

    probe = (
        "import sys, harness.data, harness.data.files, harness.data.sums, harness.data.fetch; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_disk_cached_arrays_are_kept_in_memory_under_the_files_stat(tmp_path, monkeypatch):
    """A later call for the same files (a sweep's next run of the task) hashes no file and reads
    no entry: it gets the same read-only arrays, "hit"; a file written since is a new key."""
    import numpy as np

    p = tmp_path / "x.txt"
    p.write_text("1")
    builds = []

    def build():
        builds.append(1)
        return {"a": np.arange(3) * int(p.read_text())}

    arrays, how = data.disk_cached("t", "k", [p], build)
    assert how == "built" and not arrays["a"].flags.writeable
    monkeypatch.setattr(data, "sha256", lambda path: pytest.fail("hashed again"))
    again, how = data.disk_cached("t", "k", [p], build)
    assert how == "hit" and again is arrays and len(builds) == 1
    monkeypatch.undo()
    p.write_text("2")
    changed, how = data.disk_cached("t", "k", [p], build)
    assert how == "built" and changed["a"].tolist() == [0, 2, 4] and len(builds) == 2
