"""The drift gate: unchanged reruns pass, a deliberately changed method fails, bad input is 2."""

import json

import pytest
import torch

from harness import config, train
from harness.reporting.compare import compare, parse_tolerances
from harness.errors import HarnessError

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
