"""The conformance checks (``harness.authoring.conformance``, ``harness check``) fail where they
should.

Each check is run on a method made by the scaffold and then broken in the one way the check
guards against: the failure must name the property and show the numbers. The checks passing on
every registered method is what tests/test_methods.py, test_fast_paths.py and
test_budget_knobs.py assert.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from plugins import isolated_registry

from harness.authoring import conformance
from harness.authoring.conformance import ConformanceError
from harness.authoring.scaffold import new_method
from harness.components.method import StepCost
from harness.components.plugins import include
from harness.components.registry import METHODS, UnknownNameError
from harness.errors import ConfigError


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance")
    for kind in ("dense", "skip"):
        new_method(f"conf-{kind}", kind, out)
    return out


@pytest.fixture(autouse=True)
def _methods(folder):
    with isolated_registry():
        include([folder])
        yield


def cls(name: str = "conf-dense") -> type:
    return METHODS.get(name)


def fails(check, name: str, *pieces: str) -> str:
    """Run ``check`` on ``name``: it must fail, its message holding each of ``pieces``."""
    with pytest.raises(ConformanceError) as err:
        check(name)
    message = str(err.value)
    assert message.startswith(conformance.CHECKS[_id(check)][0] + ": "), message
    for piece in pieces:
        assert piece in message, message
    assert "\n" not in message
    return message


def _id(check) -> str:
    return next(i for i, (_, fn) in conformance.CHECKS.items() if fn is check)


def test_fresh_templates_pass_every_check():
    for name in ("conf-dense", "conf-skip"):
        results = conformance.run_checks(name)
        assert [r.id for r in results] == list(conformance.CHECKS)
        assert not [r.line() for r in results if r.status == "fail"]


def test_cost_names_both_counts(monkeypatch):
    monkeypatch.setattr(cls(), "cost", lambda self: StepCost(self.hidden_size, per_unit=40))
    fails(
        conformance.check_cost,
        "conf-dense",
        "fvcore counts 4680 MACs, cost() gives (dense_step() 400 - fvcore_uncounted 0) x T 6 x B 2 "
        "= 4800",
    )


def test_forward_names_the_largest_difference(monkeypatch):
    forward = cls().forward

    def off(self, x, lengths=None, state=None):
        out = forward(self, x, lengths, state)
        out.outputs = out.outputs + torch.where(torch.arange(10) == 7, 1e-3, 0.0)
        return out

    monkeypatch.setattr(cls(), "forward", off)
    fails(
        conformance.check_forward,
        "conf-dense",
        "train: outputs differ at 12 of 120 places",
        "largest at (",
        ", 7): ",
        "(rtol 1e-05, atol 1e-06)",
    )


def test_shapes_name_a_mask_value_outside_0_1(monkeypatch):
    step = cls().step

    def half(self, x_t, state, t):
        out = step(self, x_t, state, t)
        out.mask = out.mask * 0.5
        return out

    monkeypatch.setattr(cls(), "step", half)
    monkeypatch.setattr(
        cls(), "forward", lambda self, x, lengths=None, state=None: self.step_loop(x)
    )
    fails(conformance.check_shapes, "conf-dense", "train: mask values [0.5] outside {0, 1}")


def test_gradients_name_the_parameter(monkeypatch):
    init = cls().__init__

    def with_unused(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.unused = torch.nn.Parameter(torch.zeros(3))

    monkeypatch.setattr(cls(), "__init__", with_unused)
    fails(conformance.check_gradients, "conf-dense", "no gradient reaches unused [3]")


def test_determinism_names_the_outputs(monkeypatch):
    forward = cls().forward

    def noisy(self, x, lengths=None, state=None):
        out = forward(self, x, lengths, state)
        out.outputs = out.outputs + 1e-3 * torch.rand_like(out.outputs)
        return out

    monkeypatch.setattr(cls(), "forward", noisy)
    fails(
        conformance.check_determinism,
        "conf-dense",
        "outputs of two models built after the same seed differ at 120 of 120 places",
    )


def test_config_names_a_field_without_bounds(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Loose:
        init_scale: float = 1.0

    monkeypatch.setattr(cls(), "config_cls", Loose)
    fails(conformance.check_config, "conf-dense", "Loose.init_scale declares no bounds")


def test_fast_path_names_the_regime_and_the_mask(monkeypatch):
    fast = cls("conf-skip").fast_forward

    def never_skips(self, x):
        out = fast(self, x)
        out.mask = torch.ones_like(out.mask)
        return out

    monkeypatch.setattr(cls("conf-skip"), "fast_forward", never_skips)
    fails(
        conformance.check_fast_path,
        "conf-skip",
        "at_skip(0.5), batch 1, float64: masks differ at 200 of 400 places",
    )


def test_fast_path_names_weights_packed_before_an_optimizer_step(monkeypatch):
    fast = cls("conf-skip").fast_forward

    def cached(self, x):  # packs the recurrent weight once and never again
        if not hasattr(self, "_packed"):
            self._packed = self.weight_hh.detach().clone()
        live = self.weight_hh.detach().clone()
        with torch.no_grad():
            self.weight_hh.copy_(self._packed)
        try:
            return fast(self, x)
        finally:
            with torch.no_grad():
                self.weight_hh.copy_(live)

    monkeypatch.setattr(cls("conf-skip"), "fast_forward", cached)
    fails(conformance.check_fast_path, "conf-skip", "after an optimizer step: ")


def test_at_skip_names_the_target_it_misses(monkeypatch):
    at_skip = cls("conf-skip").at_skip.__func__
    monkeypatch.setattr(
        cls("conf-skip"), "at_skip", classmethod(lambda c, v, d, skip, t: at_skip(c, v, d, 0, t))
    )
    fails(
        conformance.check_at_skip,
        "conf-skip",
        "target 0.5 (V 4, D 40, T 40, batch 3): "
        "skipped 0.000 (update every 1 steps), 0.12 or more off",
    )


def test_budget_knobs_name_the_missing_declaration(monkeypatch):
    monkeypatch.setattr(cls("conf-skip"), "budget_knobs", ())
    fails(conformance.check_budget_knobs, "conf-skip", "it can skip")
    monkeypatch.setattr(cls(), "budget_knobs", ("init_scale",))
    fails(conformance.check_budget_knobs, "conf-dense", "never skips", "('init_scale',)")


def test_training_names_the_losses_and_a_failed_run(monkeypatch):
    from harness.training import train

    run = train.run

    def flat(cfg, *args, **kwargs):
        rec = run(cfg, *args, **kwargs)
        rec["history"] = [{**h, "train_loss": 0.25} for h in rec["history"]]
        return rec

    monkeypatch.setattr(train, "run", flat)
    fails(
        conformance.check_training,
        "conf-dense",
        "training loss on adding per epoch 0.25, 0.25, 0.25, 0.25: the last is not below the first",
    )
    monkeypatch.setattr(train, "run", run)
    forward = cls().forward

    def diverges(self, x, lengths=None, state=None):
        out = forward(self, x, lengths, state)
        out.outputs = out.outputs * float("nan")
        return out

    monkeypatch.setattr(cls(), "forward", diverges)
    fails(conformance.check_training, "conf-dense", "the run on adding failed: diverged: ")


def test_effective_names_both_counts(monkeypatch):
    cost = StepCost(10, per_unit=39, per_layer=5, max_depth=3)  # no depth output: R_t = 1
    monkeypatch.setattr(cls(), "cost", lambda self: cost)
    fails(
        conformance.check_effective,
        "conf-dense",
        "effective [2370.0, 2370.0], dense "
        "[2430.0, 2430.0] per sequence; dense_step() 405 x T 6 = 2430",
    )


def test_run_checks_turns_a_crash_into_a_failure_with_its_place(monkeypatch):
    def broken(self):
        raise NotImplementedError("cost model to do")

    monkeypatch.setattr(cls(), "cost", broken)
    (result,) = conformance.run_checks("conf-dense", only=["cost"])
    assert result.status == "fail"
    assert result.detail.startswith("raised NotImplementedError: cost model to do (")
    assert "test_conformance.py:" in result.detail
    assert result.line().startswith("FAIL  cost() == fvcore == FlopCounterMode (dense MACs): ")


def test_run_checks_refuses_unknown_names():
    with pytest.raises(UnknownNameError, match="Did you mean: conf-dense"):
        conformance.run_checks("conf-dens")
    with pytest.raises(ConfigError, match="unknown check 'speed'; checks: config, shapes"):
        conformance.run_checks("conf-dense", only=["speed"])


def test_harness_check_prints_one_line_per_property(harness, folder, monkeypatch):
    res = harness("check", "conf-skip", "--include", str(folder), "--only", "cost,at-skip")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"conf-skip (--include {folder / 'conf_skip.py'})"
    assert lines[1].startswith("PASS  cost() == fvcore == FlopCounterMode (dense MACs): 400 MACs")
    assert lines[2] == "PASS  at_skip reaches its target: 0 -> 0.000, 0.5 -> 0.500, 0.9 -> 0.900"
    assert lines[3:] == ["2 passed, 0 failed, 0 skipped"]
    res = harness("check", "gru", "--only", "at-skip")
    assert res.returncode == 0 and "SKIP  at_skip reaches its target: no at_skip" in res.stdout
    monkeypatch.setattr(cls(), "cost", lambda self: StepCost(self.hidden_size, per_unit=1))
    res = harness("check", "conf-dense", "--only", "cost,shapes")
    assert res.returncode == 1
    assert "FAIL  cost() == fvcore == FlopCounterMode (dense MACs): fvcore counts" in res.stdout
    assert res.stdout.splitlines()[-1] == "1 passed, 1 failed, 0 skipped"


@pytest.mark.parametrize(
    "args, message",
    [
        (["conf-skp"], "error: Unknown method 'conf-skp'. Did you mean: conf-skip"),
        (["gru", "--only", "speed"], "error: unknown check 'speed'; checks: config,"),
        (["gru", "--task", "adings"], "error: Unknown task 'adings'. Did you mean: adding?"),
    ],
)
def test_harness_check_bad_input_is_one_line_exit_2(harness, args, message):
    code, out, err = harness("check", *args)
    assert code == 2 and err.startswith(message) and err.count("\n") == 1
