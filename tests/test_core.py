"""Registry, config overrides, records store, metrics."""

import json
import math
from pathlib import Path

import pytest
import torch
from builders import make_record

from harness.components import config
from harness.components.metrics import depth_stats, geometric_mean, mean_std, skip_fraction
from harness.components.registry import METHODS, TASKS, UnknownNameError
from harness.errors import ConfigError, RecordError
from harness.persistence.records import latest
from harness.persistence.store import Store


def test_unknown_name_suggests_close_matches():
    with pytest.raises(UnknownNameError) as e:
        METHODS.get("gur")
    msg = str(e.value)
    assert "Unknown method 'gur'" in msg and "Did you mean: gru" in msg and "Available:" in msg


def test_resolve_globs_and_all():
    assert METHODS.resolve("all") == METHODS.names()
    assert METHODS.resolve("gru,lstm,gru") == ["gru", "lstm"]
    assert "synthetic" in TASKS.resolve("syn*")
    with pytest.raises(UnknownNameError):
        TASKS.resolve("nope*")


def test_overrides_are_typed_and_validated():
    rc = config.resolve(
        "gru", "adding", 3, "smoke", {"train.lr": "0.5", "hidden_size": "12", "seq_len": "30"}
    )
    assert rc.train.lr == 0.5 and rc.model.hidden_size == 12 and rc.task_cfg.seq_len == 30
    assert isinstance(rc.model.hidden_size, int)
    with pytest.raises(ConfigError, match="Unknown key 'bogus'"):
        config.resolve("gru", "adding", 0, "smoke", {"bogus": "1"})
    with pytest.raises(
        ConfigError, match="Unknown key 'train.hidden_size'"
    ):  # model's, not train's
        config.resolve("gru", "adding", 0, "smoke", {"train.hidden_size": "12"})
    with pytest.raises(ConfigError, match="Unknown config section 'nope' in 'nope.lr'"):
        config.resolve("gru", "adding", 0, "smoke", {"nope.lr": "0.5"})
    with pytest.raises(ConfigError, match="expects an integer"):
        config.resolve("gru", "adding", 0, "smoke", {"hidden_size": "1.5"})
    with pytest.raises(ConfigError, match="expects a number"):
        config.resolve("gru", "adding", 0, "smoke", {"lr": "fast"})
    with pytest.raises(
        ConfigError, match=r"hidden_size=0 is out of range: expected an integer in \[1, "
    ):
        config.resolve("gru", "adding", 0, "smoke", {"hidden_size": "0"})
    with pytest.raises(ConfigError, match="Unknown preset"):
        config.resolve("gru", "adding", 0, "huge")
    with pytest.raises(ConfigError, match="key=value"):
        config.parse_set(["lr"])


def test_run_id_is_a_hash_of_the_resolved_config():
    a = config.resolve("gru", "adding", 0, "smoke")
    b = config.resolve("gru", "adding", 0, "smoke", {"lr": str(a.train.lr)})
    c = config.resolve("gru", "adding", 1, "smoke")
    assert a.run_id == b.run_id and a.run_id != c.run_id and a.variant_id == c.variant_id
    assert config.from_dict(json.loads(json.dumps(a.to_dict()))).run_id == a.run_id


def test_train_compile_is_its_own_variant_and_leaves_eager_run_ids_alone():
    eager = config.resolve("ei-rehn", "synthetic", 0, "smoke")
    # eager configs hash as they did before the field existed (the committed records keep their ids)
    assert "compile" not in eager.to_dict()["train"]
    ref = Path(__file__).resolve().parents[1] / "results" / "reference" / "smoke.jsonl"
    lines = ref.read_text().splitlines()
    recorded = {(r["method"], r["task"], r["seed"]): r["run_id"] for r in map(json.loads, lines)}
    assert recorded[("ei-rehn", "synthetic", 0)] == eager.run_id
    compiled = config.resolve("ei-rehn", "synthetic", 0, "smoke", {"train.compile": "true"})
    assert compiled.train.compile and compiled.to_dict()["train"]["compile"] is True
    assert compiled.variant_id != eager.variant_id
    assert config.from_dict(json.loads(json.dumps(compiled.to_dict()))).run_id == compiled.run_id
    with pytest.raises(ConfigError, match="those with one: ei-rehn"):
        config.resolve("gru", "synthetic", 0, "smoke", {"compile": "true"})


def test_preset_per_method_overrides_apply():
    rc = config.resolve("rnn", "synthetic", 0, "paper")
    assert rc.model.hidden_size == 40  # S-EI Table 1's largest RNN
    assert config.resolve("gru", "synthetic", 0, "paper").model.hidden_size == 20


def _rec(run_id, status="ok", **kw):
    return make_record(run_id=run_id, status=status, **kw)


def test_store_appends_resumes_and_reports_malformed_lines(tmp_path):
    s = Store(tmp_path / "r" / "runs.jsonl")
    s.append(_rec("a", metrics={"mse": float("nan")}))
    with open(s.path, "a") as f:
        f.write('{"truncated": tr')  # a writer killed mid-line
    s.append(_rec("b"))
    recs, problems = s.read()
    assert [r["run_id"] for r in recs] == ["a", "b"]
    assert recs[0]["metrics"]["mse"] is None  # NaN stored as strict JSON null
    assert len(problems) == 1 and ":2: malformed record" in problems[0]
    assert {r["run_id"] for r in recs} == {"a", "b"}
    s.append(_rec("a", status="failed"))
    assert [r["status"] for r in latest(s.read()[0]) if r["run_id"] == "a"] == ["failed"]
    lines = s.path.read_text().splitlines()
    assert len(lines) == 4, "nothing recorded is ever rewritten or dropped"


def test_store_rejects_unwritable_location(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RecordError, match="cannot write results"):
        Store(blocker / "sub" / "runs.jsonl").check_writable()


def test_skip_fraction_hand_computed():
    mask = torch.zeros(2, 4, 5)
    mask[0, :, :] = 1  # all updated -> 0 % skip
    mask[1, 0, :2] = 1  # 2 of 20 updates -> 90 % skip
    torch.testing.assert_close(skip_fraction(mask), torch.tensor([0.0, 0.9]))
    # padded steps are excluded: sequence 1 has true length 1 -> 2 of 5 updated -> 60 %
    torch.testing.assert_close(skip_fraction(mask, torch.tensor([4, 1])), torch.tensor([0.0, 0.6]))


def test_depth_stats_hand_computed():
    depth = torch.tensor([[[2.0, 1.0], [0.0, 0.0]]])  # T=2, D=2, R_max=2
    st = depth_stats(depth, 2)
    torch.testing.assert_close(st["depth_skip"], torch.tensor([1 - 3 / 8]))
    torch.testing.assert_close(st["mean_depth"], torch.tensor([1.0]))


def test_geometric_mean_and_mean_std():
    assert geometric_mean(81.6, 76.0) == pytest.approx(78.75, abs=0.01)  # S-SA Table 1 SA-RNN
    assert geometric_mean(84.7, 0.0) == 0.0
    m, s = mean_std([1.0, 3.0])
    assert m == 2.0 and s == pytest.approx(math.sqrt(2))
    assert mean_std([5.0]) == (5.0, 0.0)
