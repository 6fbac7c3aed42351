"""Budget knobs: every method that can skip declares the config fields that set how much it skips
(``Method.budget_knobs``), and the reports plot metric and Skip % against the declared knob."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.authoring import conformance
from harness.components.registry import METHODS
from harness.reporting import figures as F
from harness.reporting.runs import runs_frame


@pytest.mark.parametrize("name", METHODS.names())
def test_a_method_that_can_skip_declares_its_budget_knobs(name):
    conformance.check_budget_knobs(name)


def test_a_method_that_skips_without_a_knob_is_named(monkeypatch):
    skipping = next(n for n in METHODS.names() if METHODS.get(n).budget_knobs)
    monkeypatch.setattr(METHODS.get(skipping), "budget_knobs", ())
    with pytest.raises(conformance.ConformanceError, match="can skip .* but declares none"):
        conformance.check_budget_knobs(skipping)
    dense = next(n for n in METHODS.names() if not conformance.can_skip(METHODS.get(n)))
    monkeypatch.setattr(METHODS.get(dense), "budget_knobs", ("no_such_field",))
    with pytest.raises(conformance.ConformanceError, match="no_such_field.* not fields"):
        conformance.check_budget_knobs(dense)


def rec(method, seed, knobs, mse, skip, hidden=8):
    vid = f"{method}-{sorted(knobs.items())}-{hidden}"
    return {
        "schema": 1,
        "run_id": f"{vid}-{seed}",
        "variant_id": vid,
        "method": method,
        "task": "adding",
        "seed": seed,
        "preset": "smoke",
        "status": "ok",
        "primary": "mse",
        "higher_is_better": False,
        "config": {"method_cfg": knobs, "model": {"hidden_size": hidden}, "train": {}},
        "metrics": {"mse": mse, "skip_pct": skip},
        "val_metrics": {"mse": mse, "skip_pct": skip},
        "flops": {"effective": 1e4, "dense": 2e4},
        "params": {"total": 10},
    }


def test_the_budget_figures_follow_the_declared_knobs(tmp_path):
    p_skip = METHODS.get("random-updates").budget_knobs[0]
    lam = METHODS.get("sa-rnn").budget_knobs[0]
    recs = [
        rec("random-updates", s, {p_skip: p}, 0.1 + p, 100 * p) for s in (0, 1) for p in (0.25, 0.9)
    ]
    recs += [
        rec("sa-rnn", s, {lam: v}, 0.1, k)
        for s in (0, 1)
        for v, k in [(0.0, 5), (1e-4, 30), (1e-2, 70)]
    ]
    recs += [rec("gru", 0, {}, 0.2, 0.0, hidden=h) for h in (8, 16)]  # no knob: no figure
    runs = runs_frame(recs)
    sweeps = F.budget_sweeps(runs)
    assert list(sweeps) == [p_skip, lam]
    assert set(sweeps[p_skip]["method"]) == {"random-updates"}
    assert sorted(sweeps[p_skip][p_skip].unique()) == [0.25, 0.9]
    out = F.report_figures(runs, "mse", False, "MSE", tmp_path / "adding_smoke")
    kinds = [paths[0].stem.split("_", 2)[2] for _, paths in out]
    assert kinds == ["tradeoff", f"budget-{p_skip.replace('_', '-')}", f"budget-{lam}"]
    captions = [c for c, _ in out]
    assert f"vs {p_skip}, the budget knob of random-updates" in captions[1]
    assert "0 left of the break" not in captions[1] and "0 left of the break" in captions[2]


def test_the_knob_axis_is_logarithmic_where_it_spans_decades():
    def frame(values):
        return pd.DataFrame(
            {
                "method": "m",
                "line": "m",
                "knob": [v for v in values for _ in (0, 1)],
                "mse": [1.0 + v for v in values for _ in (0, 1)],
                "skip_pct": [50.0 + 10 * v for v in values for _ in (0, 1)],
            }
        )

    fig = F.budget_figure(frame([0.25, 0.5, 0.9]), "knob", "mse", "MSE", False)
    assert [ax.get_xscale() for ax in fig.axes[:2]] == ["linear", "linear"]
    assert fig.axes[-1].get_xlabel() == "knob"  # under the lower panel
    fig = F.budget_figure(frame([0.0, 1e-4, 1e-2]), "knob", "mse", "MSE", False)
    assert fig.axes[-1].get_xscale() == "log" and fig.axes[-1].get_xlabel() == "knob"
    assert [t.get_text() for t in fig.axes[-1].get_xticklabels()][0] == "0"
