"""Data that is not the published data never becomes a record: `harness run` verifies the data
(sums cached per file), keys runs by the data's identity, refuses or skips data it cannot use;
`harness data verify` shows the checksum result; listings are not cut when piped."""

from __future__ import annotations

import json

import tasks.ptb
from harness import data
from harness.cli import main
from harness.components import config
from harness.data import attach_identity, content_sha256, verify_sha256
from harness.data import sums as data_sums

RUN = ["--methods", "gru", "--preset", "smoke", "--no-report"]
WORDS = "the cat sat on a dog <unk> and".split()


def write_ptb(root, valid_extra=""):
    """A toy PTB folder (long enough for smoke windows) and its content sums."""
    d = root / "ptb"
    d.mkdir(parents=True, exist_ok=True)
    line = lambda i: " " + " ".join(WORDS[(i + k) % 8] for k in range(7)) + "\n"  # noqa: E731
    texts = {
        "ptb.train.txt": "".join(line(i) for i in range(40)),
        "ptb.valid.txt": "".join(line(i) for i in range(8)) + valid_extra,
        "ptb.test.txt": "".join(line(i + 3) for i in range(8)),
    }
    for name, text in texts.items():
        (d / name).write_text(text)
    return {name: content_sha256(d / name) for name in texts}


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sums_are_cached_per_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    sums = write_ptb(tmp_path)
    calls = []
    real = data_sums.content_sha256
    monkeypatch.setattr(data_sums, "content_sha256", lambda p: calls.append(p) or real(p))
    assert verify_sha256(tmp_path / "ptb", sums)[0] == "found"
    assert (
        len(calls) == 3 and (tmp_path / "cache" / "condrnn-harness" / "sha256-cache.json").is_file()
    )
    data_sums._SUM_CACHES.clear()  # a new process reads the cache file
    assert verify_sha256(tmp_path / "ptb", sums)[0] == "found"
    assert len(calls) == 3  # nothing read again
    (tmp_path / "ptb" / "ptb.test.txt").write_text(" changed\n")
    st, detail = verify_sha256(tmp_path / "ptb", sums)
    assert st == "checksum mismatch" and "ptb.test.txt" in detail and len(calls) == 4


def test_run_refuses_data_that_differ_and_keys_records_by_the_data(tmp_path, capsys, monkeypatch):
    sums = write_ptb(tmp_path)
    monkeypatch.setattr(tasks.ptb, "SHA256", {**sums, "ptb.valid.txt": "0" * 64})
    out = tmp_path / "r.jsonl"
    args = ["run", "--tasks", "ptb", "--data-dir", str(tmp_path), "--out", str(out), *RUN]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "ptb.valid.txt" in err and "--allow-unverified" in err
    assert not out.exists() or not out.read_text()  # nothing ran

    assert main([*args, "--allow-unverified-data"]) == 0
    (unverified,) = records(out)
    assert unverified["status"] == "ok" and unverified["data"]["verified"] is False
    assert unverified["config"]["data"]["digest"] == data.manifest_digest(sums)

    monkeypatch.setattr(tasks.ptb, "SHA256", sums)  # now these are the published data
    capsys.readouterr()
    assert main(args) == 0
    assert "0 already recorded" in capsys.readouterr().err  # the unverified run does not count
    first, verified = records(out)
    assert verified["data"]["verified"] is True and verified["run_id"] != first["run_id"]
    assert verified["variant_id"] != first["variant_id"]


def test_generated_tasks_keep_their_run_ids(tmp_path, monkeypatch):
    sums = write_ptb(tmp_path)
    monkeypatch.setattr(tasks.ptb, "SHA256", sums)
    adding = config.resolve("gru", "adding", 0, "smoke")
    ptb = config.resolve("gru", "ptb", 0, "smoke")
    (adding2, ptb2), notes = attach_identity([adding, ptb], str(tmp_path))
    assert adding2 == adding and "data" not in adding2.to_dict() and not notes
    assert ptb2.data == config.DataIdentity(data.manifest_digest(sums), True)
    assert ptb2.run_id != ptb.run_id
    assert config.from_dict(ptb2.to_dict()) == ptb2  # what workers and records rebuild


def test_named_task_without_data_is_an_error_a_glob_skips_it(tmp_path, capsys):
    empty, out = str(tmp_path / "empty"), str(tmp_path / "r.jsonl")
    assert main(["run", "--tasks", "ptb", "--data-dir", empty, "--out", out, *RUN]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "ptb.train.txt" in err and "data fetch ptb" in err
    args = ["run", "--tasks", "pt*,adding", "--data-dir", empty, "--out", out, *RUN]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.rstrip().splitlines()[-1].startswith("skipped task 'ptb': missing data file")
    assert [r["task"] for r in records(tmp_path / "r.jsonl")] == ["adding"]


def test_data_verify_shows_the_checksum_result_and_nothing_is_cut(tmp_path, capsys, monkeypatch):
    root = tmp_path / ("a-long-folder-name-that-a-narrow-table-would-cut-" * 2)
    sums = write_ptb(root)
    monkeypatch.setattr(tasks.ptb, "SHA256", sums)
    assert main(["data", "list", "ptb", "--data-dir", str(root)]) == 0
    listed = capsys.readouterr().out
    assert str(root / "ptb") in listed and tasks.ptb.SOURCE in listed  # whole, on one line
    assert "verified" not in listed
    assert main(["data", "verify", "--tasks", "ptb", "--data-dir", str(root)]) == 0
    assert "sha256 verified for 3 files" in capsys.readouterr().out
    (root / "ptb" / "ptb.test.txt").write_text(" changed\n")
    assert main(["data", "verify", "--tasks", "ptb", "--data-dir", str(root)]) == 2
    captured = capsys.readouterr()
    assert "sha256 differs for ptb.test.txt" in captured.out
    assert "checksum mismatch" in captured.out and "ptb.test.txt" in captured.err


def test_list_shows_whole_descriptions(capsys):
    assert main(["list", "methods"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "sa-rnn" in ln)
    assert line.rstrip().endswith("copied from the previous step.")


def test_unverifiable_data_run_with_a_note(tmp_path, monkeypatch):
    """Data without published sums (e.g. a user's UCI CSV) run, recorded as unverified."""
    write_ptb(tmp_path)
    monkeypatch.setattr(tasks.ptb, "SHA256", {})
    monkeypatch.setattr(
        tasks.ptb.PTB,
        "data_status",
        lambda self: data.status("ptb", self.folder, "", lambda: "ok", files=["ptb.*.txt"]),
    )
    (cfg,), notes = attach_identity([config.resolve("gru", "ptb", 0, "smoke")], str(tmp_path))
    assert cfg.data.verified is False and "no published checksums" in notes[0]
