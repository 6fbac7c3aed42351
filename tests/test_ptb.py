"""PTB: tokenisation, vocabulary, BPTT windows, errors, scoring, and counts on the real files."""

from __future__ import annotations

import gzip

import pytest
import torch

from harness.components.registry import TASKS
from harness.components.task import Batch
from harness.data import DataError, data_root, status_rows
from tasks.ptb import PTB, PTBConfig

TRAIN = " the cat sat\n the dog <unk> sat\n a cat\n"
VALID = " the dog\n a <unk>\n"
TEST = " cat sat the\n"


def write_ptb(root, train=TRAIN, valid=VALID, test=TEST):
    d = root / "ptb"
    d.mkdir(parents=True, exist_ok=True)
    with gzip.open(d / "ptb.train.txt.gz", "wt") as f:  # stored compressed, as shipped
        f.write(train)
    (d / "ptb.valid.txt").write_text(valid)
    (d / "ptb.test.txt").write_text(test)
    return d


def test_registered():
    assert TASKS.get("ptb") is PTB
    assert PTB.kind == "lm" and PTB.readout == "every" and PTB.primary == "perplexity"
    assert not PTB.higher_is_better and set(PTB.presets) == {"smoke", "quick", "paper"}
    paper = PTB.preset("paper")
    assert paper.model.hidden_size == 256 and paper.model.embed_size == 256


def test_tokens_vocab_and_windows(tmp_path):
    write_ptb(tmp_path)
    task = PTB(PTBConfig(bptt=3), data_dir=str(tmp_path))
    c = task.corpus()
    # words + one <eos> per line; ids by train frequency, ties alphabetical
    assert c.words == ["<eos>", "cat", "sat", "the", "<unk>", "a", "dog"]
    assert task.input_size == task.output_size == 7 and task.token_input
    assert [len(c.ids[s]) for s in ("train", "val", "test")] == [12, 6, 4]
    s = task.splits(seed=0)
    assert s.train.x.shape == s.train.y.shape == (3, 3)  # (12 - 1) // 3 windows
    assert s.train.x.dtype == s.train.y.dtype == torch.int64
    flat = torch.tensor(c.ids["train"])
    assert torch.equal(s.train.x.reshape(-1), flat[:9])
    assert torch.equal(s.train.y.reshape(-1), flat[1:10])  # next token, windows consecutive
    assert s.val.x.shape == (1, 3) and s.test.x.shape == (1, 3)
    assert s.info["train_tokens"] == 12 and s.info["train_scored"] == 9
    assert s.info["vocab_size"] == 7


def test_splits_fixed_and_max_tokens(tmp_path):
    write_ptb(tmp_path)
    a = PTB(PTBConfig(bptt=2), data_dir=str(tmp_path)).splits(0)
    b = PTB(PTBConfig(bptt=2), data_dir=str(tmp_path)).splits(7)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.y, b.test.y)
    small = PTB(PTBConfig(bptt=2, max_tokens=5), data_dir=str(tmp_path)).splits(0)
    assert small.train.x.shape == (2, 2) and torch.equal(small.train.x, a.train.x[:2])


def test_out_of_vocabulary_word(tmp_path):
    write_ptb(tmp_path, valid=" the zebra\n")
    ids = PTB(data_dir=str(tmp_path)).corpus().ids["val"].tolist()
    assert ids[1] == PTB(data_dir=str(tmp_path)).corpus().words.index("<unk>")
    write_ptb(tmp_path / "no_unk", train=" a b\n", valid=" a zebra\n")
    with pytest.raises(DataError, match="zebra"):
        PTB(data_dir=str(tmp_path / "no_unk")).corpus()


def test_missing_file_clear_error_and_status(tmp_path):
    d = write_ptb(tmp_path)
    (d / "ptb.test.txt").unlink()
    task = PTB(data_dir=str(tmp_path))
    with pytest.raises(DataError) as e:
        task.splits(0)
    msg = str(e.value)
    assert "\n" not in msg and "ptb.test.txt" in msg and "simple-examples.tgz" in msg
    st = task.data_status()
    assert st["status"] == "missing" and "ptb.test.txt" in st["detail"]


def test_corrupt_gzip(tmp_path):
    d = write_ptb(tmp_path)
    (d / "ptb.train.txt.gz").write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    task = PTB(data_dir=str(tmp_path))
    with pytest.raises(DataError, match="corrupt data file .*ptb.train.txt.gz"):
        task.splits(0)
    assert task.data_status()["status"] == "corrupt"


def test_perfect_predictor_has_perplexity_one(tmp_path):
    write_ptb(tmp_path)
    task = PTB(PTBConfig(bptt=3), data_dir=str(tmp_path))
    split = task.splits(0).train
    pred = 100.0 * torch.nn.functional.one_hot(split.y, task.output_size).float()  # [N, T, V]
    stats = task.batch_stats(pred, Batch(split.x, split.y))
    assert stats["nll"][1] == split.y.numel()
    assert task.finalize(stats)["perplexity"] == pytest.approx(1.0)
    uniform = task.finalize(task.batch_stats(torch.zeros_like(pred), Batch(split.x, split.y)))
    assert uniform["perplexity"] == pytest.approx(task.output_size)


def _real():
    root = data_root()
    if not (root / "ptb").is_dir():
        pytest.skip(f"PTB absent under {root} (set HARNESS_DATA_DIR)")
    return PTB()


def test_real_counts():
    task = _real()
    c = task.corpus()
    assert [len(c.ids[s]) for s in ("train", "val", "test")] == [929_589, 73_760, 82_430]
    assert len(c.words) == task.input_size == 10_000
    s = task.splits(0)
    assert s.train.x.shape == ((929_589 - 1) // 35, 35)
    assert s.test.y.numel() == s.info["test_scored"] > 82_430 - 35
    (row,) = status_rows(tasks=["ptb"])
    assert row["status"] == "found" and "929,589" in row["detail"]


def test_real_smoke_preset_is_small():
    task = _real()
    cfg = PTBConfig(**PTB.preset("smoke").task)
    s = PTB(cfg, data_dir=task.data_dir).splits(0)
    assert s.train.y.numel() <= cfg.max_tokens and len(s.train) > 10


def test_the_parsed_corpus_is_read_from_disk_by_a_later_process_and_parsed_again_on_change(
    tmp_path, monkeypatch
):
    """A sweep's planning and each of its worker processes ask for the corpus: the first parse
    is kept on disk, so another process (here: the in-memory copy forgotten) reads it back
    instead of parsing; a changed file is parsed again."""
    import harness.data
    import tasks.ptb as ptb

    write_ptb(tmp_path)
    first = PTB(data_dir=str(tmp_path)).corpus()
    assert first.words[:3] == ["<eos>", "cat", "sat"] and type(first.words[0]) is str
    monkeypatch.setattr(harness.data, "_DISK", {})  # a new process
    monkeypatch.setattr(ptb, "parse", lambda paths: pytest.fail("parsed again"))
    again = PTB(data_dir=str(tmp_path)).corpus()
    assert again.words == first.words and type(again.words[0]) is str
    assert all((again.ids[s] == first.ids[s]).all() for s in ("train", "val", "test"))
    monkeypatch.undo()
    (tmp_path / "ptb" / "ptb.test.txt").write_text(" dog dog\n")
    assert PTB(data_dir=str(tmp_path)).corpus().ids["test"].tolist() == [6, 6, 0]  # dog dog <eos>
