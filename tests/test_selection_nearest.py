"""One "variant nearest a Skip %" rule (harness.components.selection.nearest_variant) behind its
three callers: ``--select val-skip-nearest`` (validation), ``run --match-skip`` and the
update-pattern figure
(test)."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from harness.cli.progress import print_match_skip
from harness.components.selection import choose, nearest_skip, parse_rule, select
from harness.planning.sweep import match_skip
from harness.reporting.patterns import matched_budget
from harness.reporting.runs import runs_frame


def rec(method, vid, seed, skip, mse=1.0, val_skip=None, val_mse=None):
    val_skip = skip if val_skip is None else val_skip
    return {
        "schema": 1,
        "run_id": f"{method}-{vid}-{seed}",
        "variant_id": f"{method}-{vid}",
        "method": method,
        "task": "adding",
        "seed": seed,
        "preset": "smoke",
        "status": "ok",
        "primary": "mse",
        "higher_is_better": False,
        "config": {"method_cfg": {"v": vid}, "model": {"hidden_size": 8}, "train": {}},
        "metrics": {"mse": mse, "skip_pct": skip},
        "val_metrics": {"mse": mse if val_mse is None else val_mse, "skip_pct": val_skip},
        "flops": {"effective": 1e4, "dense": 2e4},
        "params": {"total": 10},
    }


def records():
    """Per method, variants around a target of 50; validation and test Skip % are equal."""
    return [
        # "a": 40 and 58 (40 is nearer 50 on the mean of its seeds: 45 vs 58)
        rec("a", "1", 0, 40.0),
        rec("a", "1", 1, 50.0),
        rec("a", "2", 0, 58.0),
        rec("a", "2", 1, 58.0),
        # "b": 45 and 55 are equally near; the record order puts "2" first, the variant id "1"
        rec("b", "2", 0, 55.0),
        rec("b", "1", 0, 45.0),
        # "c": its nearer variant lacks Skip % on one seed: no candidate
        rec("c", "1", 0, 50.0),
        rec("c", "1", 1, math.nan),
        rec("c", "2", 0, 80.0),
    ]


def test_the_three_callers_pick_the_same_variants():
    recs = records()
    want = {"a": "a-1", "b": "b-1", "c": "c-2"}
    kept, why = select(recs, parse_rule("val-skip-nearest:50"))
    assert {r["method"]: r["variant_id"] for r in kept} == want
    assert {r["method"]: r["variant_id"] for r in match_skip(recs, 50.0)} == want
    target, chosen = matched_budget(runs_frame(recs), 50.0)
    assert target == 50.0 and chosen == want
    assert nearest_skip(recs, 50.0, "test") == {
        ("adding", "smoke", "a"): ("a-1", 45.0),
        ("adding", "smoke", "b"): ("b-1", 45.0),
        ("adding", "smoke", "c"): ("c-2", 80.0),
    }


def test_split_grouping_and_tie_breaking():
    recs = [rec("m", "1", 0, 10.0, val_skip=60.0), rec("m", "2", 0, 60.0, val_skip=10.0)]
    assert nearest_skip(recs, 55.0, "val", by=("method",)) == {("m",): ("m-1", 60.0)}
    assert nearest_skip(recs, 55.0, "test", by=("method",)) == {("m",): ("m-2", 60.0)}
    both = [*recs, rec("n", "1", 0, 55.0)]
    assert set(nearest_skip(both, 55.0, "test", by=())) == {()}  # one group: every record
    assert nearest_skip(both, 55.0, "test", by=())[()] == ("n-1", 55.0)
    # equally near: ``tie`` (lower first) before the variant id
    tied = [rec("m", "1", 0, 40.0, mse=2.0), rec("m", "2", 0, 60.0, mse=1.0)]
    assert nearest_skip(tied, 50.0, "test", by=())[()][0] == "m-1"
    mse = lambda runs: runs[0]["metrics"]["mse"]  # noqa: E731
    assert nearest_skip(tied, 50.0, "test", by=(), tie=mse)[()][0] == "m-2"
    assert nearest_skip([rec("m", "1", 0, math.nan)], 50.0, "test") == {}
    with pytest.raises(KeyError):
        nearest_skip(recs, 50.0, "train")


def test_validation_ties_go_to_the_better_validation_metric():
    # val-skip-nearest keeps its rule: equally near, the better validation metric wins
    tied = [rec("m", "1", 0, 40.0, val_mse=2.0), rec("m", "2", 0, 60.0, val_mse=1.0)]
    vid, why = choose({"m-1": [tied[0]], "m-2": [tied[1]]}, parse_rule("val-skip-nearest:50"))
    assert vid == "m-2" and why.startswith("val-skip-nearest:50 of 2 (val Skip % 60.0")
    # on test (no tie rule) the variant id decides
    assert match_skip(tied, 50.0)[0]["variant_id"] == "m-1"


def sparse(method, vid, seed, read, skip=0.0):
    """A record that also has an activity sparsity ``read`` (Skip % ``skip``)."""
    r = rec(method, vid, seed, skip)
    for key in ("metrics", "val_metrics"):
        r[key]["read_skip_pct"] = read
    return r


def test_an_activity_sparse_method_is_matched_on_its_activity_sparsity():
    # Skip % is 0 at every variant (Delta GRU, EGRU): the thresholds move the activity sparsity
    recs = [sparse("d", "1", 0, 55.0), sparse("d", "2", 0, 80.0), sparse("d", "3", 0, 96.0)]
    want = {"d": "d-2"}
    kept, why = select(recs, parse_rule("val-skip-nearest:76"))
    assert {r["method"]: r["variant_id"] for r in kept} == want
    assert "val activity sparsity % 80.0" in why["d-2"]
    assert {r["method"]: r["variant_id"] for r in match_skip(recs, 76.0)} == want
    assert match_skip(recs, 76.0)[0]["budget"] == "activity sparsity %"
    assert nearest_skip(recs, 90.0, "val") == {("adding", "smoke", "d"): ("d-3", 96.0)}
    # a method that skips updates is matched on Skip %, whatever else it records
    mixed = [sparse("m", "1", 0, 76.0, skip=10.0), sparse("m", "2", 0, 10.0, skip=70.0)]
    assert nearest_skip(mixed, 76.0, "val") == {("adding", "smoke", "m"): ("m-2", 70.0)}
    assert match_skip(mixed, 76.0)[0]["budget"] == "Skip %"
    # one run without an activity sparsity: the whole method is matched on Skip %
    partial = [*recs[:2], rec("d", "3", 0, 0.0)]
    assert nearest_skip(partial, 76.0, "val")[("adding", "smoke", "d")][1] == 0.0


def test_the_match_skip_table_marks_a_row_matched_on_activity_sparsity():
    recs = [sparse("d", "1", 0, 55.0), sparse("d", "2", 0, 80.0), rec("m", "1", 0, 70.0)]
    buf = io.StringIO()
    print_match_skip(match_skip(recs, 76.0, []), 76.0, [], Console(file=buf, width=200))
    text = buf.getvalue()
    assert "80.0 (activity sparsity)" in text  # d: matched on its activity sparsity
    assert "70.0" in text and "70.0 (activity sparsity)" not in text  # m: on Skip %
