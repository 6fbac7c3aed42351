"""Typed all the way (issue 51): a config is validated once, where it is resolved, and crosses to
its worker as it was; the training loop's state is one object a checkpoint keeps whole; a
divergence is told apart by its exception's type."""

from __future__ import annotations

import copy
from dataclasses import fields, replace

import pytest
import torch

from harness.components import config, knobs
from harness.errors import DivergedError, NonFiniteLoss, allocation_failure
from harness.executors import RunOptions, run_one
from harness.training import checkpoint, train

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


def test_the_loop_state_goes_through_a_checkpoint_whole(tmp_path):
    cfg = config.resolve("gru", "adding", 0, "smoke", TINY)
    task, model = train.build(cfg)
    opt, gen = torch.optim.Adam(model.parameters()), torch.Generator().manual_seed(1)
    loop = checkpoint.TrainState(
        epoch=4,
        history=[{"epoch": 4, "train_loss": 0.5, "val_mse": 0.25}],
        best_loss=(0.5, 4),
        stale=2,
        best_val=0.25,
        best_epoch=3,
        best_state=copy.deepcopy(model.state_dict()),
        best_metrics={"mse": 0.25},
        train_s=1.5,
        events=[{"epoch": 2, "kind": "loss_spike", "detail": "training loss 9"}],
    )
    defaults = checkpoint.TrainState()
    assert all(getattr(loop, f.name) != getattr(defaults, f.name) for f in fields(loop))
    saver = checkpoint.Checkpointer(tmp_path, cfg.run_id, {}, 0.0)
    assert saver.save(checkpoint.training_state(loop, model, opt, gen, "cpu"))
    back = checkpoint.restore_training(saver.load(), model, opt, gen)
    assert isinstance(back, checkpoint.TrainState)
    assert back.best_state.keys() == loop.best_state.keys()
    assert all(torch.equal(back.best_state[k], v) for k, v in loop.best_state.items())
    assert replace(back, best_state=None) == replace(loop, best_state=None)


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        # a gradient whose message speaks of the loss, a loss whose message does not
        (DivergedError("non-finite gradient norm (inf), the loss was 3.0"), "non_finite_gradient"),
        (NonFiniteLoss("nan"), "non_finite_loss"),
    ],
)
def test_a_divergence_is_told_apart_by_its_type(monkeypatch, raised, kind):
    def descend(*args, **kwargs):
        raise raised

    monkeypatch.setattr(train, "descend", descend)
    cfg = config.resolve("gru", "adding", 0, "smoke", TINY)
    rec = train.run(cfg)
    assert rec["status"] == "failed" and rec["error"] == f"diverged: {raised} at epoch 0, batch 0"
    assert [e["kind"] for e in rec["events"]] == [kind]
    task, model = train.build(cfg)
    with pytest.raises(DivergedError) as info:  # it leaves train_model with its type
        train.train_model(cfg, task, model, task.splits(0), torch.device("cpu"))
    assert type(info.value) is type(raised)


def test_an_allocation_failure_is_told_by_its_type_where_torch_gives_one():
    assert allocation_failure(torch.OutOfMemoryError("Tried to allocate 2.00 GiB")) == ""
    assert allocation_failure(MemoryError()) == ""
    cpu = RuntimeError(
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 2147483648"
    )
    assert allocation_failure(cpu) == ""  # no "bytes": the size is not said
    assert allocation_failure(RuntimeError(f"{cpu} bytes")) == "; it asked for 2.0 GiB"
    assert allocation_failure(RuntimeError("a shape out of range")) is None
