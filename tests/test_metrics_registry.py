"""The metric registry (harness.components.metrics): every recorded measure has an entry, and
every report, figure and the drift gate take titles, directions, percentages, ranges and
tolerances from it."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.components.metrics import (
    METRICS,
    Metric,
    get_metric,
    higher_is_better,
    register_metric,
)
from harness.components.plugins import PluginError
from harness.components.registry import TASKS
from harness.components.task import Batch
from harness.reporting import compare as gate
from harness.reporting import figstyle
from harness.reporting.curves import curves_figure
from harness.reporting.figures import tradeoff_figure, variant_points
from harness.reporting.leaderboard import boards
from harness.reporting.paper import write_paper_report
from harness.reporting.runs import aggregate, runs_frame
from harness.reporting.tables import build_main_table
from harness.reporting.text import fmt_ci

ROOT = Path(__file__).resolve().parent.parent
STORES = [
    ROOT / "results" / "reference" / "smoke.jsonl",
    ROOT / "results" / "quick" / "runs.jsonl",
    *sorted((ROOT / "results" / "paper").glob("*.jsonl")),
]


def stored_records():
    for path in STORES:
        for line in path.read_text().splitlines():
            if line.strip():
                yield path.name, json.loads(line)


@pytest.mark.parametrize("path", STORES, ids=lambda p: p.name)
def test_every_measure_of_the_committed_stores_has_an_entry(path):
    assert path.exists()
    TASKS.names()  # a task registers the measures its own scoring adds when it is imported
    missing = set()
    for line in path.read_text().splitlines():
        r = json.loads(line) if line.strip() else {}
        keys = {*(r.get("metrics") or {}), *(r.get("val_metrics") or {})}
        for epoch in r.get("history") or []:
            keys |= {k.removeprefix("val_") for k in epoch if k != "epoch"}
        missing |= {k for k in keys if k not in METRICS}
    assert not missing, f"measures without a harness.components.metrics entry: {sorted(missing)}"


def fake_batch(task):
    """A batch of the task's kind with arbitrary targets, and predictions for it."""
    g = torch.Generator().manual_seed(0)
    if task.kind == "regression":
        y = torch.rand(6, 1, generator=g)
        return torch.rand(6, 1, generator=g), Batch(torch.zeros(6, 3, 1), y)
    if task.readout == "every":
        y = torch.randint(0, 5, (6, 4), generator=g)
        return torch.randn(6, 4, 5, generator=g), Batch(torch.zeros(6, 4, dtype=torch.long), y)
    y = torch.randint(0, 3, (6,), generator=g)
    return torch.randn(6, 3, generator=g), Batch(torch.zeros(6, 4, 1), y)


@pytest.mark.parametrize("name", TASKS.names())
def test_every_task_scores_only_registered_measures_in_its_direction(name):
    cls = TASKS.get(name)
    task = cls()
    pred, batch = fake_batch(task)
    scores = task.finalize(task.batch_stats(pred, batch))
    assert cls.primary in scores
    assert sorted(k for k in scores if k not in METRICS) == []
    # the record's higher_is_better and the registry's direction of the primary agree
    assert get_metric(cls.primary).higher is cls.higher_is_better
    assert higher_is_better({"primary": cls.primary, "higher_is_better": None}) is (
        cls.higher_is_better
    )


def test_register_lookup_and_checks():
    mse = METRICS.get("mse")
    assert register_metric(mse) is mse  # the same entry again: no change
    with pytest.raises(PluginError, match="metric 'mse' is registered twice: by built-in module"):
        register_metric(dataclasses.replace(METRICS.get("mse"), title="Mean squared error"))
    with pytest.raises(ValueError, match="percentage"):
        Metric("x_pct", "X %", unit="%", percent=True)  # a percentage's range is 0-100
    with pytest.raises(ValueError, match="form"):
        Metric("x", "X", form="stars")
    for bad in [(1.0, 0.0), (0.0, 0.0), (math.nan, None), (None, math.inf), (0.0,), (0.0, "1")]:
        with pytest.raises(ValueError, match="range must be"):
            Metric("x", "X", range=bad)
    unknown = get_metric("not-a-measure")
    assert unknown.title == "not-a-measure" and unknown.higher is None and not unknown.percent
    # the kind scores and the trace measures; a task adds its own (the adding task: solved)
    trace = {"skip_pct", "read_skip_pct", "depth_skip_pct", "mean_depth", "geo_mean"}
    assert trace <= set(METRICS.names())
    assert {"mse", "accuracy", "perplexity", "nll"} <= set(METRICS.names())
    assert get_metric("solved").form == "yes-no"


def test_the_notes_state_the_registered_ranges():
    # text.NOTES tells readers the CI clipping ranges; they must be the registry's
    assert get_metric("accuracy").range == (0.0, 100.0)
    assert get_metric("mse").range == (0.0, None) and get_metric("nll").range == (0.0, None)
    assert get_metric("perplexity").range == (1.0, None)


def redescribe(monkeypatch, name, **changes):
    monkeypatch.setitem(METRICS._items, name, dataclasses.replace(METRICS.get(name), **changes))


def rec(method, seed, mse, skip=50.0, flops=1e4, acc=None):
    """An ok record of an adding-like task (primary MSE)."""
    vid = f"{method}-v"
    metrics = {"mse": mse, "skip_pct": skip} if acc is None else {"accuracy": acc, "skip_pct": skip}
    return {
        "schema": 1,
        "run_id": f"{vid}-{seed}",
        "variant_id": vid,
        "method": method,
        "task": "adding" if acc is None else "seizures",
        "seed": seed,
        "preset": "smoke",
        "status": "ok",
        "primary": "mse" if acc is None else "accuracy",
        "higher_is_better": acc is not None,
        "config": {"method_cfg": {}, "model": {"hidden_size": 8}, "train": {}},
        "metrics": metrics,
        "val_metrics": dict(metrics),
        "flops": {"effective": flops, "dense": 2 * flops},
        "params": {"total": 100},
        "history": [
            {"epoch": 0, "train_loss": 1.0, f"val_{'mse' if acc is None else 'accuracy'}": 1}
        ],
    }


def board(records):
    """The leaderboard's one table of ``records``: a frame of its cells, by column title."""
    import pandas as pd

    (b,) = boards(records)
    return pd.DataFrame(b.rows, columns=[c.title for c in b.columns])


def test_the_leaderboard_reads_direction_title_and_scale_from_the_registry(monkeypatch):
    recs = [rec("a", 0, 2e-3), rec("b", 0, 1e-3)]
    df = board(recs)
    assert list(df["Method"]) == ["b", "a"]  # MSE: lower is better, ascending
    assert "MSE (×10^-3) ↓" in df.columns and "Effective FLOPs ↓" in df.columns
    redescribe(monkeypatch, "mse", higher=True, title="Squared error")
    df = board(recs)
    assert list(df["Method"]) == ["a", "b"] and "Squared error (×10^-3) ↑" in df.columns
    redescribe(monkeypatch, "flops", title="FLOPs spent", higher=None)
    assert "FLOPs spent" in board(recs).columns
    redescribe(monkeypatch, "skip_pct", title="Skipped", higher=False)
    assert "Skipped ↓" in board(recs).columns


def test_the_leaderboard_hides_detail_measures_and_scales_only_non_percentages(monkeypatch):
    recs = [rec("a", 0, 2e-3), rec("b", 0, 1e-3)]
    for r in recs:
        r["metrics"]["nll"] = 0.5
    assert not any(c.startswith("NLL") for c in board(recs).columns)  # group "detail"
    redescribe(monkeypatch, "nll", group="score")
    assert "NLL ↓" in board(recs).columns
    for r, skip in zip(recs, (0.002, 0.001), strict=True):
        r["metrics"]["skip_pct"] = skip
    assert "Skip % ↑" in board(recs).columns  # a percentage keeps its unit
    redescribe(monkeypatch, "skip_pct", percent=False, unit="", range=(None, None))
    assert "Skip % (×10^-3) ↑" in board(recs).columns


def table(records):
    agg = aggregate(runs_frame(records), ["geo_mean", "skip_pct", "accuracy", "flops", "mse"])
    primary = records[0]["primary"]
    t = build_main_table(agg, primary, higher_is_better(records[0]))
    return t.titles, t.rows


def column(titles, rows, start):
    j = next(i for i, t in enumerate(titles) if t.startswith(start))
    return [r[j] for r in rows]


def test_the_paper_table_reads_titles_and_bold_directions_from_the_registry(monkeypatch, tmp_path):
    recs = [rec("a", 0, None, 10.0, 2e4, acc=90.0), rec("b", 0, None, 60.0, 1e4, acc=80.0)]
    titles, rows = table(recs)
    assert "Effective FLOPs ↓" in titles and "Accuracy % ↑" in titles
    assert [b for _, b in column(titles, rows, "Effective FLOPs")] == [False, True]
    assert [b for _, b in column(titles, rows, "Accuracy")] == [True, False]
    redescribe(monkeypatch, "flops", higher=True, title="Work")
    titles, rows = table(recs)
    assert "Work ↑" in titles
    assert [b for _, b in column(titles, rows, "Work")] == [True, False]
    redescribe(monkeypatch, "geo_mean", title="GM")
    assert "GM ↑" in table(recs)[0]
    # the primary's direction: the registry's, not the record's flag
    redescribe(monkeypatch, "accuracy", higher=False)
    titles, rows = table(recs)
    assert "Accuracy % ↓" in titles
    assert [b for _, b in column(titles, rows, "Accuracy")] == [False, True]
    # the report writer too: the variant "best" is measured against is the lower accuracy
    recs = [rec(m, s, None, 50.0, acc=a + s) for m, a in (("a", 90.0), ("b", 80.0)) for s in (0, 1)]
    (path,) = write_paper_report(recs, ["r"], tmp_path, formats=("md",), figures=False)
    (row,) = [line for line in path.read_text().splitlines() if line.startswith("| b ")]
    assert "| best " in row


def test_the_ci_is_clipped_to_the_registered_range(monkeypatch):
    vals = [90.0, 95.0, 100.0]
    assert fmt_ci(95.0, vals, metric="accuracy") == "[82.6, 100.0]"
    redescribe(monkeypatch, "accuracy", percent=False, unit="", range=(None, None))
    assert fmt_ci(95.0, vals, metric="accuracy") == "[82.6, 107.4]"


def test_the_figures_read_percent_titles_and_directions_from_the_registry(monkeypatch):
    lo, hi = figstyle.band(np.array([99.0]), np.array([5.0]), "skip_pct")
    assert hi[0] == 100.0  # a percentage: clipped
    redescribe(monkeypatch, "skip_pct", percent=False, unit="", range=(None, None))
    lo, hi = figstyle.band(np.array([99.0]), np.array([5.0]), "skip_pct")
    assert hi[0] == 104.0
    recs = [rec("gru", s, 1e-3 * (s + 1)) for s in (0, 1)]
    recs += [rec("sa-rnn", s, 1e-3 * (s + 2), skip=70.0, flops=2e4) for s in (0, 1)]
    points = variant_points(runs_frame(recs), ["mse", "skip_pct", "flops"])
    fig = tradeoff_figure(points, "mse", False, "MSE")
    assert [ax.get_xlabel() for ax in fig.axes[:2]] == [
        "Skip % ↑ (methods that skip)",
        "Effective FLOPs per sequence ↓",
    ]
    redescribe(monkeypatch, "skip_pct", title="Skipped", higher=False)
    fig = tradeoff_figure(points, "mse", False, "MSE")
    assert fig.axes[0].get_xlabel() == "Skipped ↓ (methods that skip)"
    assert curves_figure(recs).axes[1].get_ylabel() == "val. MSE ↓"
    redescribe(monkeypatch, "mse", title="Squared error", higher=True)
    assert curves_figure(recs).axes[1].get_ylabel() == "val. Squared error ↑"


def test_the_drift_gate_takes_a_metrics_tolerance_from_the_registry(monkeypatch):
    ref = [rec("gru", 0, 1.0)]
    cur = [rec("gru", 0, 1.0 + 1e-3)]  # beyond the default 1e-6 + 1e-4 relative
    assert [d.measure for d in gate.compare(ref, cur).drifted] == ["metrics.mse"]
    redescribe(monkeypatch, "mse", tolerance=(0.0, 1e-2))
    assert gate.compare(ref, cur).ok
    # a --tol the user gives still wins over the registry's, also when less specific
    assert not gate.compare(ref, cur, {"metrics": (0.0, 0.0)}).ok
    assert gate.compare(ref, cur, {"metrics.mse": (0.0, 1e-2)}).ok
    redescribe(monkeypatch, "skip_pct", tolerance=(0.0, 0.0))
    cur[0]["metrics"]["skip_pct"] = 50.0 + 1e-9
    assert [d.measure for d in gate.compare(ref, cur).drifted] == ["metrics.skip_pct"]
    assert math.isclose(gate.DEFAULT_TOLERANCES["metrics"][1], 1e-4)
