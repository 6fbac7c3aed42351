"""Typed all the way (issue 51): a config is validated once, where it is resolved, and crosses to
its worker as it was; the training loop's state is one object a checkpoint keeps whole; a
divergence is told apart by its exception's type."""

from __future__ import annotations

import pytest

from harness import config, knobs
from harness.executors import RunOptions, run_one

TINY = {"epochs": "2", "max_train_batches": "2"}


def _refuse(*args, **kwargs):
    raise AssertionError("a config that crossed to its worker was validated again")


@pytest.mark.parametrize(("method", "over"), [("gru", TINY), ("ref:mean", {})])
def test_a_config_crosses_to_its_worker_without_being_validated_again(monkeypatch, method, over):
    cfg = config.resolve(method, "adding", 0, "smoke", over)  # validated here, in the driver
    monkeypatch.setattr(knobs, "check_knob", _refuse)  # check_knobs, every __post_init__
    monkeypatch.setattr(config, "check_knob", _refuse)  # build_config, apply_overrides
    rec = run_one(cfg.to_dict(), RunOptions())
    assert rec["status"] == "ok", rec.get("error")
    assert rec["run_id"] == cfg.run_id and rec["config"] == cfg.to_dict()
    assert config.from_dict(cfg.to_dict()) == cfg
