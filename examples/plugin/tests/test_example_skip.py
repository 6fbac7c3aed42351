"""The example plugin's method through the harness's generic checks (the package installed)."""

import pytest

from harness.authoring import conformance
from harness.components.registry import METHODS, method_source


def test_the_entry_point_registers_the_method():
    assert "example-skip" in METHODS
    assert method_source("example-skip") == {
        "kind": "entry-point",
        "package": "condrnn-plugin-example",
        "version": "0.1.0",
    }


@pytest.mark.parametrize("check", list(conformance.CHECKS))
def test_generic_check(check):
    (result,) = conformance.run_checks("example-skip", only=[check])
    assert result.status != "fail", result.line()


def test_every_kind_the_package_declares_comes_from_it():
    from harness.cli.listing import KINDS
    from harness.components.plugins import source_of

    declared = {
        "methods": "example-skip",
        "tasks": "example-mean",
        "metrics": "mae",
        "references": "ref:example-median",
    }
    for kind, name in declared.items():
        assert source_of(KINDS[kind].get(name)) == method_source("example-skip")


def test_the_packages_measure_is_taken_on_every_run_of_a_built_in_task(tmp_path, monkeypatch):
    """``saturated_pct`` carries its computation: a run of a built-in task and method records it
    (a share of outputs, in percent) beside the harness's own measures."""
    import json

    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    args = ["run", "--tasks", "adding", "--methods", "gru", "--preset", "smoke"]
    assert main([*args, "--out", "runs", "--no-report"]) == 0
    (record,) = [json.loads(line) for line in (tmp_path / "runs" / "runs.jsonl").open()]
    for split in ("metrics", "val_metrics"):
        assert 0.0 <= record[split]["saturated_pct"] <= 100.0
