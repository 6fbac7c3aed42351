"""Generic tests, parametrized over every registered method (a new method is tested without
editing this file). The properties are ``harness.authoring.conformance``'s checks, the ones
``harness check
NAME`` runs, so a failure here reads as it does there."""

import importlib
import pkgutil

import pytest
import torch
from plugins import registration_problems

import baselines
from harness.authoring import conformance
from harness.components import config
from harness.components.method import Method
from harness.components.registry import METHODS

NAMES = METHODS.names()
V, D, B, T = 3, 10, 2, 6


def make(name: str, input_size: int = V, hidden_size: int = D) -> Method:
    torch.manual_seed(0)
    return METHODS.get(name)(input_size, hidden_size)


def test_every_file_registers_its_own_key():
    assert registration_problems("baselines", "METHODS") == []


def test_registry_modules_import_cleanly():
    for mod in pkgutil.iter_modules(baselines.__path__):
        importlib.import_module(f"baselines.{mod.name}")


@pytest.mark.parametrize("name", NAMES)
def test_shapes_and_mask_values(name):
    conformance.check_shapes(name)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter(name):
    conformance.check_gradients(name)


@pytest.mark.parametrize("name", NAMES)
def test_config_declares_its_knobs_and_serialises(name):
    conformance.check_config(name)


# Methods whose sequence forward is its own implementation (fused kernel, vectorised schedule,
# precomputed projections). Where ``forward`` IS the step loop, comparing the two would compare
# a function with itself; those methods are checked by their literal reference tests instead.
OWN_FORWARD = [n for n in NAMES if METHODS.get(n).forward is not Method.forward]


def test_some_methods_have_their_own_forward():
    assert OWN_FORWARD and set(OWN_FORWARD) <= set(NAMES)


@pytest.mark.parametrize("name", OWN_FORWARD)
def test_forward_equals_step_loop(name):
    conformance.check_forward(name)


def test_step_loop_stacks_the_column_reads():
    from harness.components.method import StepOut

    class Toy(Method):  # reads input 0 always, the other columns where the state is positive
        def init_state(self, batch, x):
            return torch.zeros(batch, self.hidden_size)

        def step(self, x_t, state, t):
            h = state + x_t[:, :1]
            cols = torch.cat([torch.ones_like(x_t[:, :1]), torch.zeros_like(x_t[:, 1:])], 1)
            reads = torch.cat([cols, (state > 0).float()], 1)
            return StepOut(h, h, torch.ones_like(h), reads=reads)

    out = Toy(2, 3).step_loop(torch.ones(1, 2, 2))
    assert out.reads.tolist() == [[[1, 0, 0, 0, 0], [1, 0, 1, 1, 1]]]
    assert make(NAMES[0]).step_loop(torch.randn(B, T, V)).reads is None


@pytest.mark.parametrize("name", NAMES)
def test_dense_cost_matches_fvcore_and_flopcounter(name):
    conformance.check_cost(name)


@pytest.mark.parametrize("name", NAMES)
def test_effective_equals_dense_when_nothing_is_skipped(name):
    conformance.check_effective(name)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_outputs(name):
    conformance.check_determinism(name)


@pytest.mark.parametrize("name", NAMES)
def test_smoke_training_loss_decreases(name):
    conformance.check_training(name)


def test_a_method_whose_forward_is_the_step_loop_is_not_compared_with_itself(monkeypatch):
    monkeypatch.setattr(METHODS.get(NAMES[0]), "forward", Method.forward)
    with pytest.raises(conformance.NotApplicable, match="forward is the step loop"):
        conformance.check_forward(NAMES[0])


def test_nonpositive_hidden_size_is_a_config_error():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError):
        METHODS.get("gru")(3, 0)
    with pytest.raises(ConfigError):
        config.resolve("gru", "adding", 0, "smoke", {"hidden_size": "-4"})
