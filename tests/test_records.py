"""The run record has one home (``harness.persistence.records``): built, written, read, migrated."""

import json
import re
from pathlib import Path

import pytest
import torch
from builders import make_record

from harness.components import config
from harness.components.config import legacy_values
from harness.persistence import records
from harness.persistence.records import RecordProblem, from_json, migrate, to_json
from harness.persistence.trace import pack_depth, pack_mask, unpack_depth, unpack_mask

ROOT = Path(__file__).resolve().parents[1]


def test_a_record_round_trips_as_one_strict_json_line():
    rec = make_record(**{"metrics.mse": float("nan")})
    line = to_json(rec)
    assert "\n" not in line and "NaN" not in line
    back = from_json(line, legacy_values)
    assert back["metrics"]["mse"] is None  # not finite: stored as null
    assert back["config"]["train"].pop("compile") is False  # read complete (migrate)
    assert {k: v for k, v in back.items() if k != "metrics"} == {
        k: v for k, v in rec.items() if k != "metrics"
    }


@pytest.mark.parametrize(
    "line,why",
    [
        ('{"schema": 1, "run_', "Unterminated string"),
        ('{"schema": NaN}', "NaN is not a JSON value"),
        ("[1, 2]", "not a record: an array"),
    ],
)
def test_an_unusable_line_says_why(line, why):
    with pytest.raises(RecordProblem, match=re.escape(why)):
        from_json(line)


def test_make_record_is_a_real_runs_record():
    rec = make_record(method="sa-rnn", set={"lam": "0.01"})
    cfg = config.resolve("sa-rnn", "adding", 0, "smoke", {"lam": "0.01"})
    assert rec["run_id"] == cfg.run_id and rec["variant_id"] == cfg.variant_id
    assert records.validate(rec) == []


def _older(rec, section, field):
    """``rec`` as a harness from before ``section.field`` existed would have written it."""
    old = json.loads(to_json(rec))
    del old["config"][section][field]
    old["run_id"], old["variant_id"] = records.identity(old["config"])
    return old


@pytest.mark.parametrize(
    "method,task,section,field",
    [
        ("gru", "adding", "method_cfg", "gru_form"),  # added 2026-11-23 (824fa7b)
        ("sa-rnn", "adding", "method_cfg", "gru_form"),
        ("gru", "seizures", "task_cfg", "scale"),  # added 2026-11-23 (76f0e60)
    ],
)
def test_a_record_of_each_older_schema_reads_as_todays_variant(method, task, section, field):
    today = make_record(method=method, task=task)
    old = _older(today, section, field)
    assert old["run_id"] != today["run_id"]  # as written, another variant of the same setting
    back = from_json(json.dumps(old), legacy_values)
    assert back["run_id"] == today["run_id"] and back["variant_id"] == today["variant_id"]
    assert back["written_run_id"] == old["run_id"]
    assert back["config"][section][field] == today["config"][section][field]
    assert "written_run_id" not in json.loads(to_json(back))  # the reader's note is not stored


def test_compile_added_later_keeps_every_id():
    # train.compile is left out of the ids while False: filling it changes nothing
    rec = make_record()
    assert "compile" not in rec["config"]["train"]
    back = migrate(json.loads(to_json(rec)), legacy_values)
    assert back["run_id"] == rec["run_id"] and "written_run_id" not in back


def test_split_added_later_keeps_every_id():
    # task.split is left out of the ids at series (S-SA's split, the only one before it existed)
    today = make_record(method="gru", task="seizures")
    assert today["config"]["task_cfg"]["split"] == "series"  # the record keeps it
    old = json.loads(to_json(today))
    del old["config"]["task_cfg"]["split"]
    assert records.identity(old["config"]) == (today["run_id"], today["variant_id"])
    back = from_json(json.dumps(old), legacy_values)
    assert back["run_id"] == today["run_id"] and "written_run_id" not in back
    assert back["config"]["task_cfg"]["split"] == "series"
    other = config.resolve("gru", "seizures", 0, "smoke", {"task.split": "recording"})
    assert other.run_id != today["run_id"] and other.to_dict()["task_cfg"]["split"] == "recording"


def test_every_committed_record_migrates_to_a_complete_config():
    # each field added since records exist declares its legacy value (knob(legacy=...))
    for path in [*ROOT.glob("results/**/*.jsonl")]:
        for line in path.read_text().splitlines():
            rec = from_json(line, legacy_values)
            if rec.get("kind", "run") != "run":
                continue
            want = config.resolve(rec["method"], rec["task"], 0, "smoke").to_dict()
            sections = ("model", "method_cfg", "task_cfg")  # a reference's run has no model
            for sec in [s for s in sections if s in want or s in rec["config"]]:
                assert set(rec["config"][sec]) == set(want[sec]), (path, rec["run_id"], sec)


def test_records_are_written_by_records_only():
    # no other module of the harness builds a run record's dict (timing records are the bench's)
    for path in (ROOT / "harness").rglob("*.py"):
        if path.name in ("records.py",) or path.parent.name == "bench":
            continue
        assert '"schema":' not in path.read_text() and "schema=" not in path.read_text(), path


def test_masks_and_depths_pack_and_unpack():
    mask = (torch.arange(12 * 6).reshape(12, 6) % 3 == 0).float()
    assert unpack_mask(pack_mask(mask), 6) == mask.int().tolist()
    depth = torch.randint(0, 36, (5, 7))
    assert (unpack_depth(pack_depth(depth)) == depth.numpy()).all()
    assert pack_mask(mask.numpy()) == pack_mask(mask)  # arrays too, without torch


def test_failed_records_carry_one_line():
    cfg = config.resolve("gru", "adding", 0, "smoke")
    rec = records.finish_failed(records.start_record(cfg, None), "boom\n  at line 3")
    assert rec["error"] == "boom at line 3" and records.validate(rec) == []
    lost = records.failed_record(cfg.to_dict(), "worker died", None)
    assert lost["run_id"] == cfg.run_id and records.validate(lost) == []
