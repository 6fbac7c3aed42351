"""A record says what happened while its run trained (``events``): an overflowing gradient norm
clipped in float64, a training-loss spike, the non-finite value that ended it."""

from __future__ import annotations

import torch

from harness.components import config
from harness.training import events, train
from harness.training.train import descend


def test_descend_says_when_it_clipped_an_overflowing_norm_in_float64():
    coef = torch.tensor([1e20, -2e20, 3e20])
    p = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([p], lr=1.0)
    assert descend((p * coef).sum(), opt, [p], clip=1.0) > 1e20
    q = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([q], lr=1.0)
    assert descend((q * torch.ones(3)).sum(), opt, [q], clip=1.0) is None  # finite: nothing


def _run(monkeypatch, descend_returns=None, loss_scale=None):
    """A smoke GRU run on adding whose descend / loss are altered from epoch 1 on."""
    cfg = config.resolve("gru", "adding", 0, "smoke", {"train.epochs": "3"})
    real_build, real_descend = train.build, train.descend
    epoch = {"now": 0}

    def build(cfg, data_dir=None):
        task, model = real_build(cfg, data_dir)
        real_start, real_loss = model.on_epoch_start, task.loss
        model.on_epoch_start = lambda e, n: (epoch.update(now=e), real_start(e, n))
        if loss_scale is not None:
            task.loss = lambda pred, b: real_loss(pred, b) * (loss_scale if epoch["now"] else 1)
        return task, model

    def fake_descend(total, opt, params, clip):
        out = real_descend(total, opt, params, clip)
        return descend_returns if epoch["now"] == 1 else out

    monkeypatch.setattr(train, "build", build)
    monkeypatch.setattr(train, "descend", fake_descend)
    return train.run(cfg)


def test_an_overflow_clipped_in_float64_is_an_event_of_its_epoch(monkeypatch):
    rec = _run(monkeypatch, descend_returns=1.2e22)
    assert rec["status"] == "ok"
    (ev,) = rec["events"]
    assert ev["epoch"] == 1 and ev["kind"] == "grad_overflow_clipped"
    assert "largest 1.2e+22 (float64), clipped to 1" in ev["detail"]


def test_a_training_loss_spike_is_an_event_of_its_epoch(monkeypatch):
    rec = _run(monkeypatch, loss_scale=100.0)
    spikes = [e for e in rec["events"] if e["kind"] == "loss_spike"]
    assert spikes and spikes[0]["epoch"] == 1, rec["events"]
    assert events.derive_events(rec) is rec["events"]


def test_the_non_finite_loss_that_ends_a_run_is_its_last_event(monkeypatch):
    rec = _run(monkeypatch, loss_scale=float("nan"))
    assert rec["status"] == "failed" and "non-finite loss" in rec["error"]
    assert rec["events"][-1]["kind"] == "non_finite_loss" and rec["events"][-1]["epoch"] == 1


def test_a_record_from_before_events_shows_its_spikes_from_the_history():
    rec = {"history": [{"epoch": e, "train_loss": x} for e, x in enumerate([1.0, 0.1, 0.2, 1.5])]}
    (ev,) = events.derive_events(rec)
    assert ev["epoch"] == 3 and ev["kind"] == "loss_spike"
    assert "15x its best (0.1, epoch 1)" in ev["detail"] and "recorded history" in ev["detail"]
    assert events.derive_events({"history": [{"epoch": 0, "train_loss": 1.0}]}) == []
