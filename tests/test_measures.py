"""The measures every run takes are the registered ones: a metric that carries its computation
(``per_sequence``, ``of_metrics``) is measured on every run of every task, built-in or added by a
plugin, and the harness's own trace measures go the same way (harness.components.metrics)."""

from __future__ import annotations

import json

import pytest
from plugins import isolated_registry

from harness.components import plugins
from harness.components.metrics import METRICS

MEASURE = """
import torch

from harness.components.metrics import Metric, register_metric


def seven(m):
    return torch.full((m.batch.x.shape[0],), 7.0, dtype=torch.float64)


def units_seen(m):  # [B]: D of the first layer, every sequence
    return torch.full((m.batch.x.shape[0],), float(m.out.layers[0].outputs.shape[-1]))


register_metric(Metric("zz_seven", "Seven", group="detail", per_sequence=seven))
register_metric(Metric("zz_units", "Units", group="detail", per_sequence=units_seen))
register_metric(Metric("zz_never", "Never", group="detail", per_sequence=lambda m: None))
register_metric(Metric(
    "zz_plus_skip", "Seven + Skip %", group="detail",
    of_metrics=lambda metrics, kind: metrics["zz_seven"] + metrics["skip_pct"],
))
"""


def test_a_registered_measure_is_taken_on_every_run_of_every_task(tmp_path, harness):
    (tmp_path / "measure.py").write_text(MEASURE)
    with isolated_registry():
        plugins._loaded = False  # a new process loads the plugins afresh
        res = harness("run", "--include", "measure.py", "--tasks", "adding,synthetic",
                      "--methods", "gru,skip-rnn,ei-rehn", "--preset", "smoke", "--out", "runs",
                      "--no-report")  # fmt: skip
        assert res.returncode == 0, res.stderr
        lines = (tmp_path / "runs" / "runs.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 6 and {r["status"] for r in records} == {"ok"}
    for r in records:
        m = r["metrics"]
        assert m["zz_seven"] == 7.0
        assert m["zz_units"] == r["config"]["model"]["hidden_size"]
        assert m["zz_plus_skip"] == pytest.approx(7.0 + m["skip_pct"], abs=1e-12)
        assert "zz_never" not in m
        assert r["val_metrics"]["zz_seven"] == 7.0  # every split's evaluation takes it
    assert "zz_seven" not in METRICS  # nothing leaks into the other tests


def test_the_trace_measures_are_registered_computations():
    """Skip %, activity sparsity, depth-skip %, mean depth and the geometric mean carry their
    computation: the evaluation computes none of them by hand."""
    computed = {m.name for m in METRICS.values() if m.per_sequence or m.of_metrics}
    assert {"skip_pct", "read_skip_pct", "depth_skip_pct", "mean_depth", "geo_mean"} <= computed
