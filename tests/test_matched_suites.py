"""The S-SA suites at matched budgets: every skipping method searched over its own budget knob.

``tasks/suites/ssa_table{1,2,3}_matched.toml`` give each method that can skip a grid over one of
the budget knobs its class declares (``Method.budget_knobs``, read from the registry here, not
from a list of names), hold every run of the table's own suite, and list in a dry run the runs
their grids make, for both data splits of seizures.
"""

from __future__ import annotations

import math
import re

import pytest
import tomllib
from test_seizures import write_bonn

from harness import api
from harness.cli import main
from harness.cli.common import parse_seeds
from harness.components.registry import METHODS
from harness.planning import suites

MATCHED = {f"ssa-table{i}-matched": f"ssa-table{i}" for i in (1, 2, 3)}
ACTIVITY_SPARSE = {"delta-gru", "egru"}  # skip no update: their thresholds set reads, not Skip %


def configs(name: str, seeds: list[int] | None = None) -> list:
    """Every resolved run config of the shipped suite ``name`` (its own seeds by default)."""
    sweep = suites.load(suites.suite_path(name))
    blocks = suites.plan(sweep, "all", sweep.options.get("tasks", "all"), {}, {}, set())
    seeds = parse_seeds(sweep.options["seeds"]) if seeds is None else seeds
    return api.resolve_configs(api.SweepSpec([api.Block(*b) for b in blocks], seeds, "paper"))


def toml_run_count(name: str) -> int:
    """The runs a suite file makes, counted from its TOML alone: per part, its methods times the
    product of its grid's lengths (the file's grid, key by key under the part's), times the
    seeds."""
    data = tomllib.loads(suites.suite_path(name).read_text())
    total = 0
    for part in data["part"]:
        grid = {**data.get("grid", {}), **part.get("grid", {})}
        total += len(part["methods"]) * math.prod(len(v) for v in grid.values())
    return total * len(parse_seeds(data["seeds"]))


@pytest.mark.parametrize("name", sorted(MATCHED))
def test_every_skipping_method_has_a_grid_over_its_own_budget_knob(name):
    sweep = suites.load(suites.suite_path(name))
    assert sweep.description and sweep.options["select"].startswith("val-skip-nearest:")
    by_method: dict[str, list] = {}
    for c in configs(name, [0]):
        by_method.setdefault(c.method, []).append(c.method_cfg)
    skipping = {m for m in by_method if METHODS.get(m).budget_knobs}
    # every method of the table's own suite, and the activity-sparse methods, are here
    assert {c.method for c in configs(MATCHED[name], [0])} | ACTIVITY_SPARSE <= set(by_method)
    assert skipping >= ACTIVITY_SPARSE | {"sa-rnn", "skip-rnn", "vc-rnn", "random-updates"}
    for method in skipping:
        knobs = METHODS.get(method).budget_knobs
        values = {k: {getattr(cfg, k) for cfg in by_method[method]} for k in knobs}
        # three targets (50, 76, 90 %) need at least three settings of one budget knob
        assert max(len(v) for v in values.values()) >= 3, (name, method, values)


@pytest.mark.parametrize("name", sorted(MATCHED))
def test_a_matched_suite_holds_every_run_of_its_table(name):
    # each grid keeps the table suite's value of its knob: the committed runs resume here
    table = {c.run_id for c in configs(MATCHED[name], [0])}
    matched = [c.run_id for c in configs(name, [0])]
    assert table <= set(matched) and len(set(matched)) == len(matched)


def dry_run_count(capsys, *args: str) -> int:
    capsys.readouterr()
    assert main(["run", *args, "--dry-run"]) == 0
    err = capsys.readouterr().err
    (count,) = re.findall(r"^(\d+) runs: 0 already recorded", err, re.M)
    return int(count)


def test_the_seizures_dry_run_lists_every_run_of_both_splits(tmp_path, capsys):
    write_bonn(tmp_path)  # generated Bonn files: the dry run checks the data it would read
    base = ["--suite", "ssa-table1-matched", "--data-dir", str(tmp_path), "--allow-unverified-data"]
    want = toml_run_count("ssa-table1-matched")
    assert want == 70 * 3 * 10  # 70 budget settings x 3 learning rates x 10 seeds
    assert dry_run_count(capsys, *base, "--out", str(tmp_path / "series")) == want
    rec = ["--set", "task.split=recording", "--out", str(tmp_path / "recording")]
    assert dry_run_count(capsys, *base, *rec) == want
    assert not (tmp_path / "series").exists()  # a dry run writes nothing
