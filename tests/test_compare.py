"""The drift gate: unchanged reruns pass, a deliberately changed method fails, bad input is 2,
a changed torch or device is named."""

import json

import pytest
import torch

from harness.components import config
from harness.errors import HarnessError
from harness.reporting.compare import compare, environment_differences, markdown, parse_tolerances
from harness.training import train

CFGS = [config.resolve(m, "synthetic", 0, "smoke") for m in ("gru", "lstm")]


@pytest.fixture(scope="module")
def reference():
    return [train.run(c) for c in CFGS]


def test_unchanged_rerun_passes(reference):
    res = compare(reference, [train.run(c) for c in CFGS])
    assert res.ok and res.matched == 2 and not res.new


def test_changed_init_fails_the_gate(reference, monkeypatch):
    import baselines.lstm as lstm_mod
    from baselines._cells import LSTMWeights

    class ZeroForgetBias(LSTMWeights):  # the mutation: forget bias 0 instead of 1
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            with torch.no_grad():
                self.bias[self.hidden_size : 2 * self.hidden_size] = 0.0

    monkeypatch.setattr(lstm_mod, "LSTMWeights", ZeroForgetBias)
    res = compare(reference, [train.run(c) for c in CFGS])
    assert not res.ok
    assert {d.label.split("/")[0] for d in res.drifted} == {"lstm"}
    assert any(d.measure == "metrics.mse" for d in res.drifted)


def test_missing_and_new_runs(reference):
    other = train.run(config.resolve("rnn", "synthetic", 0, "smoke"))
    res = compare(reference, [reference[0], other])
    assert [r["method"] for r in res.missing] == ["lstm"]
    assert [r["method"] for r in res.new] == ["rnn"]
    assert not res.ok


def test_tolerances_are_per_measure(reference):
    cur = json.loads(json.dumps(reference))
    cur[0]["metrics"]["mse"] *= 1 + 5e-5  # within the default metric tolerance
    assert compare(reference, cur).ok
    cur[0]["params"]["total"] += 1  # parameter counts are exact
    assert not compare(reference, cur).ok
    cur = json.loads(json.dumps(reference))
    cur[0]["metrics"]["mse"] *= 1.01
    assert not compare(reference, cur).ok
    assert compare(reference, cur, parse_tolerances(["metrics.mse=0:0.02"])).ok
    with pytest.raises(HarnessError):
        parse_tolerances(["metrics.mse"])


def env_rec(run_id, torch_version, device, mse=1.0):
    return {
        "run_id": run_id,
        "method": "m",
        "task": "t",
        "preset": "p",
        "seed": 0,
        "status": "ok",
        "metrics": {"mse": mse},
        "env": {"torch": torch_version, "device_name": device},
    }


def test_environment_differences_are_named():
    ref = [env_rec("a", "2.13.0+cpu", "cpu (AMD EPYC 7B13)")]
    same = [env_rec("a", "2.13.0+cpu", "cpu (AMD EPYC 7B13)")]
    assert environment_differences(ref, same) == []
    res = compare(ref, same)
    assert res.environment == [] and "Environment" not in markdown(res, "ref", "cur")
    cur = [env_rec("a", "2.11.0", "NVIDIA H100 80GB HBM3")]
    lines = [
        "torch: reference 2.13.0+cpu, current 2.11.0",
        "device: reference cpu (AMD EPYC 7B13), current NVIDIA H100 80GB HBM3",
    ]
    assert environment_differences(ref, cur) == lines
    res = compare(ref, cur)
    assert res.ok and res.environment == lines  # an explanation of drift, not a failure
    md = markdown(res, "ref.jsonl", "cur.jsonl")
    assert "## Environment differs\n\n" + "".join(f"- {x}\n" for x in lines) in md
    # A record without an env counts as "unknown"; a side with several values lists them all.
    cur = [env_rec("a", "2.13.0+cpu", "cpu (x86_64)"), {**env_rec("b", "", ""), "env": {}}]
    assert environment_differences(ref, cur) == [
        "torch: reference 2.13.0+cpu, current 2.13.0+cpu / unknown",
        "device: reference cpu (AMD EPYC 7B13), current cpu (x86_64) / unknown",
    ]
