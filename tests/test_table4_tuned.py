"""S-SA Table 4 tuned, in two suites: step 1 (``ssa-table4-lr``) tries three learning rates on
seed 0; step 2 (``ssa-table4-tuned``) runs each method at the rate step 1's committed records
chose on validation, on seeds 0-2, its seed-0 runs being step 1's."""

from __future__ import annotations

import json
from pathlib import Path

from test_matched_suites import configs

STEP1_RECORDS = Path(__file__).resolve().parents[1] / "results" / "paper" / "adding_tuned.jsonl"


def test_step_2_runs_each_method_at_the_rate_step_1_chose_on_validation():
    step1 = {c.run_id: c for c in configs("ssa-table4-lr")}
    step2 = configs("ssa-table4-tuned")
    assert {c.seed for c in step2} == {0, 1, 2}
    # step 1's budget and methods, one rate each
    assert {(c.method, c.train.epochs, c.train.patience) for c in step2} == {
        (c.method, c.train.epochs, c.train.patience) for c in step1.values()
    }
    assert {c.train.epochs for c in step2} == {200} and {c.train.patience for c in step2} == {30}
    # seed 0 of step 2 is step 1's run at that rate: recorded once, not run again
    seed0 = [c for c in step2 if c.seed == 0]
    assert len(seed0) == len({c.method for c in step2}) and all(c.run_id in step1 for c in seed0)
    # the rate is the one with the lowest validation MSE among step 1's finished runs
    best: dict[str, tuple[float, float]] = {}
    for line in STEP1_RECORDS.read_text().splitlines():
        r = json.loads(line)
        if r["run_id"] in step1 and r["status"] == "ok":
            mse, lr = r["val_metrics"]["mse"], step1[r["run_id"]].train.lr
            best[r["method"]] = min(best.get(r["method"], (mse, lr)), (mse, lr))
    assert {c.method: c.train.lr for c in seed0} == {c.method: best[c.method][1] for c in seed0}
