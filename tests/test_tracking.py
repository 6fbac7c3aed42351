"""``harness run --log-dir``: TensorBoard event files per run (harness.training.tracking)."""

from __future__ import annotations

import sys

import pytest

from harness.cli import main
from harness.training import tracking

RUN = ["run", "--tasks", "synthetic", "--methods", "rnn", "--preset", "smoke", "--no-report"]


def test_without_tensorboard_one_line_and_exit_2_before_any_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    out = tmp_path / "r.jsonl"
    assert main([*RUN, "--out", str(out), "--log-dir", str(tmp_path / "tb")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'condrnn-harness[tensorboard]'" in err
    assert not out.exists() and not (tmp_path / "tb").exists()  # nothing ran


def test_an_unwritable_log_dir_is_refused_before_any_run(tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = tmp_path / "r.jsonl"
    assert main([*RUN, "--out", str(out), "--log-dir", str(blocker / "tb")]) == 2
    assert "--log-dir" in capsys.readouterr().err and not out.exists()


def test_no_tensorboard_import_without_log_dir(tmp_path):
    if "torch.utils.tensorboard" in sys.modules:
        pytest.skip("another test of this process imported it already")
    assert main([*RUN, "--set", "train.epochs=1", "--out", str(tmp_path / "r.jsonl")]) == 0
    assert "torch.utils.tensorboard" not in sys.modules  # the writer's module


def test_log_dir_writes_per_epoch_and_test_scalars_per_run(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = tmp_path / "tb"
    argv = [*RUN, "--set", "train.epochs=3", "--seeds", "0,1", "--out", str(tmp_path / "r.jsonl")]
    assert main([*argv, "--log-dir", str(tb)]) == 0
    runs = sorted(p for p in (tb / "synthetic_smoke" / "rnn").iterdir())
    assert len(runs) == 2  # one directory per run (run id)
    acc = EventAccumulator(str(runs[0])).Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "val/mse", "test/mse", "test/skip_pct"} <= tags
    assert [e.step for e in acc.Scalars("train/loss")] == [0, 1, 2]
    assert [e.step for e in acc.Scalars("val/mse")] == [0, 1, 2]
    assert "config/text_summary" in acc.Tags()["tensors"]


def test_logger_writes_history_rows(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from harness.components import config

    cfg = config.resolve("rnn", "synthetic", 3, "smoke")
    log = tracking.TensorBoardLogger(tmp_path, cfg)
    log(0, {"epoch": 0, "train_loss": 2.0, "val_mse": 1.5})
    log(1, {"epoch": 1, "train_loss": 1.0, "val_mse": float("nan"), "note": "x"})
    log.finish({"status": "failed", "error": "diverged", "best_epoch": -1})
    acc = EventAccumulator(str(tracking.run_dir(tmp_path, cfg))).Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(0, 2.0), (1, 1.0)]
    assert "error/text_summary" in acc.Tags()["tensors"]
    log.close()  # closing twice is harmless
