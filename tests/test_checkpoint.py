"""A run stopped in the middle goes on from its checkpoint and records what it would have recorded
uninterrupted (harness.training.checkpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.components import config
from harness.executors import RunOptions, run_one
from harness.persistence.store import Store
from harness.training import checkpoint, train

# What a resumed run must give exactly as the uninterrupted one.
SAME = ("status", "best_epoch", "epochs_run", "history", "metrics", "val_metrics", "macs",
        "diagnostics", "trace", "events", "run_id", "config")  # fmt: skip


class Stop(KeyboardInterrupt):
    """The interrupt a stopped sweep sees (Ctrl-C, SIGTERM), raised after an epoch."""


def _stop_after(epoch: int):
    def callback(e: int, row: dict) -> None:
        if e == epoch:
            raise Stop

    return callback


def _cfg(method: str, task: str = "adding", **over: str) -> config.RunConfig:
    return config.resolve(method, task, 3, "smoke", {"epochs": "5", **over})


@pytest.mark.parametrize(
    ("method", "task", "over"),
    [
        ("gru", "adding", {}),
        ("sa-rnn", "adding", {}),  # an annealed slope: the epoch's schedule
        ("random-updates", "synthetic", {}),  # draws its masks from torch's random state
        ("ei-rehn", "synthetic", {}),  # the training-depth tally (train_state)
        # the patience count goes on too: at lr 1e-12 the parameters do not move (float32), no
        # epoch improves on the first, and patience 3 stops it after epoch 3
        ("gru", "adding", {"patience": "3", "lr": "1e-12"}),
    ],
)
def test_a_resumed_run_records_what_the_uninterrupted_one_does(
    tmp_path: Path, method: str, task: str, over: dict[str, str]
) -> None:
    cfg = _cfg(method, task, **over)
    whole = train.run(cfg)
    folder = tmp_path / "s.jsonl.checkpoints"
    with pytest.raises(Stop):  # stopped in epoch 2's callback: the checkpoint is epoch 1's
        train.run(cfg, None, "cpu", [_stop_after(2)], str(folder), 0.0)
    (saved,) = folder.iterdir()
    assert saved.name == f"{cfg.run_id}.pt"
    started = torch.load(saved, weights_only=False)["meta"]["start"]
    assert isinstance(started, str)  # the stopped process's start, kept in the checkpoint
    again = train.run(cfg, None, "cpu", [], str(folder), 0.0)
    for key in SAME:
        assert again.get(key) == whole.get(key), key
    if over.get("patience") == "3":
        assert whole["epochs_run"] == 4
    assert again["time"]["start"] == started  # the run's own start, not the resumption's
    (resumed,) = again["time"]["resumed"]
    assert resumed["epoch"] == 2
    assert "resumed" not in whole["time"]
    assert not folder.exists()  # removed with the last checkpoint once the run is recorded


def test_stopped_twice_it_keeps_its_first_start_and_both_resumptions(tmp_path: Path) -> None:
    cfg = _cfg("gru")
    whole = train.run(cfg)
    folder = str(tmp_path / "c")
    with pytest.raises(Stop):
        train.run(cfg, None, "cpu", [_stop_after(1)], folder, 0.0)
    assert checkpoint.Checkpointer(folder, cfg.run_id, {}, 0).path.exists()
    with pytest.raises(Stop):
        train.run(cfg, None, "cpu", [_stop_after(3)], folder, 0.0)
    again = train.run(cfg, None, "cpu", [], folder, 0.0)
    assert [r["epoch"] for r in again["time"]["resumed"]] == [1, 3]
    assert again["history"] == whole["history"] and again["metrics"] == whole["metrics"]


def test_a_checkpoint_of_other_code_or_another_run_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _cfg("gru")
    folder = str(tmp_path / "c")
    with pytest.raises(Stop):
        train.run(cfg, None, "cpu", [_stop_after(2)], folder, 0.0)
    monkeypatch.setattr(train, "method_code", lambda m: "0123456789abcdef")
    again = train.run(cfg, None, "cpu", [], folder, 0.0)
    assert "resumed" not in again["time"]
    assert "other code" in capsys.readouterr().err
    # a checkpoint file that is not one (or another run's, copied under this name) neither
    ck = checkpoint.Checkpointer(folder, cfg.run_id, {}, 0)
    ck.path.parent.mkdir(parents=True, exist_ok=True)
    ck.path.write_bytes(b"not a checkpoint")
    again = train.run(cfg, None, "cpu", [], folder, 0.0)
    assert "resumed" not in again["time"] and "unreadable" in capsys.readouterr().err
    assert not ck.path.exists()


def test_saved_at_most_every_every_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saves: list[int] = []
    real = checkpoint.Checkpointer.save

    def save(self, state):
        saves.append(state["epoch"])
        return real(self, state)

    monkeypatch.setattr(checkpoint.Checkpointer, "save", save)
    cfg = _cfg("gru")
    train.run(cfg, None, "cpu", [], str(tmp_path / "a"), 0.0)
    assert saves == [0, 1, 2, 3]  # every epoch but the last
    saves.clear()
    train.run(cfg, None, "cpu", [], str(tmp_path / "b"), 3600.0)
    assert saves == []  # a short run never saves


def test_a_checkpoint_that_cannot_be_written_costs_only_the_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _cfg("gru")
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder would be")
    rec = train.run(cfg, None, "cpu", [], str(blocker / "c"), 0.0)
    assert rec["status"] == "ok"
    err = capsys.readouterr().err
    assert err.count("cannot write the checkpoint") == 1  # once, not every epoch


def test_the_sweep_options_carry_the_checkpoint_folder(tmp_path: Path) -> None:
    """``run_one`` (every executor's run) keeps checkpoints where ``RunOptions`` says."""
    cfg = _cfg("gru")
    folder = tmp_path / "s.jsonl.checkpoints"
    opts = RunOptions(checkpoint_dir=str(folder), checkpoint_every_s=0.0)
    with pytest.raises(Stop):
        run_one(cfg.to_dict(), opts, (_stop_after(2),))
    assert (folder / f"{cfg.run_id}.pt").exists()
    rec = run_one(cfg.to_dict(), opts)
    assert rec["time"]["resumed"][0]["epoch"] == 2 and not folder.exists()
    assert Store(tmp_path / "s.jsonl").checkpoints_path == folder
