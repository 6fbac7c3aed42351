"""``harness report STORE --tensorboard DIR``: a store's runs as TensorBoard HParams, read back.

Each run's folder (``DIR/<task>_<preset>/<method>/<run id>``, as ``--log-dir``) holds its knobs as
the HParams plugin's session start info, its metrics as scalars and its status as the session's
end; the event files are read back with TensorBoard's own ``EventAccumulator``.
"""

from __future__ import annotations

import json

import pytest
from builders import make_record

from harness.cli import main
from harness.persistence.records import flat_config
from harness.reporting.reports import load_records
from harness.training import tracking

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, metadata


def _store(tmp_path):
    """A store of four runs (two knobs varied, one failed) and a superseded line."""
    old = make_record(seed=0, **{"metrics.mse": 9.0})  # superseded by the rerun below
    runs = [
        make_record(seed=0, **{"metrics.mse": 0.25, "val_metrics.mse": 0.3}),
        make_record(seed=1, set={"lr": 0.001}, **{"metrics.mse": 0.5}),
        make_record(method="rnn", set={"hidden_size": 12}, **{"metrics.skip_pct": 40.0}),
        make_record(method="rnn", seed=2, status="failed", error="diverged", metrics={}),
    ]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [old, *runs]))
    return path, runs


def _read(folder):
    """A run folder's HParams (name -> value), session status and scalars (tag -> value)."""
    acc = EventAccumulator(str(folder)).Reload()
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)
    start = metadata.parse_session_start_info_plugin_data(content["_hparams_/session_start_info"])
    end = metadata.parse_session_end_info_plugin_data(content["_hparams_/session_end_info"])
    hparams = {k: getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
    scalars = {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    return hparams, end.status, scalars


def test_each_run_s_knobs_metrics_and_status_read_back(tmp_path, capsys):
    store, runs = _store(tmp_path)
    tb = tmp_path / "tb"
    assert main(["report", str(store), "--tensorboard", str(tb)]) == 0
    assert f"wrote 4 runs' HParams: tensorboard --logdir {tb}" in capsys.readouterr().out
    folders = sorted(p.parent for p in tb.rglob("events.out.tfevents.*"))
    assert folders == sorted(tracking.run_dir(tb, type("C", (), r)) for r in runs)
    read = {r["run_id"]: _read(tracking.run_dir(tb, type("C", (), r))) for r in runs}

    hp, status, scalars = read[runs[0]["run_id"]]
    assert status == api_pb2.STATUS_SUCCESS
    assert {k: hp[k] for k in tracking.WHO} == {
        "method": "gru",
        "task": "adding",
        "preset": "smoke",
        "seed": 0,
        "status": "ok",
    }
    assert hp["train.lr"] == pytest.approx(0.01) and hp["hidden_size"] == 10
    assert hp["gru_form"] == "after" and hp["tie_embeddings"] is True  # a bool stays a bool
    loaded = load_records([store])[0][1]  # as read (legacy_values fills newer knobs' defaults)
    assert set(hp) == {*tracking.WHO, *flat_config(loaded)}
    assert scalars["test/mse"] == [pytest.approx(0.25)]  # the rerun's value, not the old line's
    assert scalars["val/mse"] == [pytest.approx(0.3)]
    assert scalars["flops/effective"] == [2000.0] and scalars["params/total"] == [100.0]

    assert read[runs[1]["run_id"]][0]["train.lr"] == pytest.approx(0.001)
    assert read[runs[1]["run_id"]][2]["test/mse"] == [pytest.approx(0.5)]
    hp, status, scalars = read[runs[2]["run_id"]]
    assert (hp["method"], hp["hidden_size"], scalars["test/skip_pct"]) == ("rnn", 12, [40.0])
    hp, status, scalars = read[runs[3]["run_id"]]
    assert (hp["status"], status) == ("failed", api_pb2.STATUS_FAILURE)
    assert not any(tag.startswith("test/") for tag in scalars)  # a failed run has no test metrics


def test_values_tensorboard_cannot_hold_are_written_as_strings(tmp_path):
    rec = make_record()
    rec["config"]["method_cfg"].update(none=None, sizes=[1, 2])
    (folder,) = tracking.write_hparams([rec], tmp_path)
    hp = _read(folder)[0]
    assert (hp["none"], hp["sizes"]) == ("None", "[1, 2]")


def test_a_second_export_into_the_same_folder_is_refused_and_changes_nothing(tmp_path, capsys):
    store, _ = _store(tmp_path)
    tb = tmp_path / "tb"
    assert main(["report", str(store), "--tensorboard", str(tb)]) == 0
    before = sorted(p.relative_to(tb) for p in tb.rglob("*"))
    capsys.readouterr()
    assert main(["report", str(store), "--tensorboard", str(tb)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not empty" in err
    assert sorted(p.relative_to(tb) for p in tb.rglob("*")) == before


@pytest.mark.parametrize(
    ("where", "why"), [("store", "is an input (records)"), ("folder", "is not empty")]
)
def test_the_store_or_its_folder_is_refused(tmp_path, capsys, where, why):
    store, _ = _store(tmp_path)
    target = store if where == "store" else tmp_path
    assert main(["report", str(store), "--tensorboard", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and why in err
    assert sorted(tmp_path.iterdir()) == [store]


def test_without_tensorboard_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    store, _ = _store(tmp_path)
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    assert main(["report", str(store), "--tensorboard", str(tmp_path / "tb")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tensorboard" in err and tracking.INSTALL in err
    assert not (tmp_path / "tb").exists()


def test_a_report_flag_with_tensorboard_is_refused(tmp_path, capsys):
    store, _ = _store(tmp_path)
    argv = ["report", str(store), "--tensorboard", str(tmp_path / "tb"), "--select", "best-val"]
    assert main(argv) == 2
    assert "--select: not used with --tensorboard" in capsys.readouterr().err
    assert not (tmp_path / "tb").exists()


def test_a_malformed_line_is_left_out_and_the_exit_code_says_so(tmp_path, capsys):
    store, runs = _store(tmp_path)
    with open(store, "a") as f:
        f.write('{"schema": 1, "run_id": "broken"}\n')
    assert main(["report", str(store), "--tensorboard", str(tmp_path / "tb")]) == 2
    assert "wrote 4 runs' HParams" in capsys.readouterr().out
    assert len(list((tmp_path / "tb").rglob("events.out.tfevents.*"))) == len(runs)
