"""Generic tests, parametrized over every registered method (a new method is tested without
editing this file)."""

import importlib
import pkgutil

import pytest
import torch
from plugins import registration_problems
from reference import assert_dense_counts

import baselines
from harness import config, train
from harness.flops import sequence_macs
from harness.method import Method, SeqOut
from harness.registry import METHODS

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
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_shapes_and_mask_values(name, mode):
    m = make(name).train(mode == "train")
    out = m(torch.randn(B, T, V))
    assert isinstance(out, SeqOut)
    assert out.outputs.shape == (B, T, D)
    assert out.mask.shape == (B, T, D)
    assert set(out.mask.detach().unique().tolist()) <= {0.0, 1.0}
    if m.has_depth:
        assert out.depth is not None and out.depth.shape == (B, T, D)
        assert (out.depth >= 0).all() and (out.depth <= m.cost().max_depth).all()
    if out.aux_loss is not None:
        assert out.aux_loss.dim() == 0


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter(name):
    m = make(name).train()
    out = m(torch.randn(4, 8, V))
    loss = (out.outputs**2).sum() + (0 if out.aux_loss is None else out.aux_loss)
    loss.backward()
    for pname, p in m.named_parameters():
        assert p.grad is not None, f"no gradient reaches {pname}"
        assert torch.isfinite(p.grad).all(), f"non-finite gradient in {pname}"
        assert p.grad.abs().sum() > 0, f"zero gradient in {pname}"


# Methods whose sequence forward is its own implementation (fused kernel, vectorised schedule,
# precomputed projections). Where ``forward`` IS the step loop, comparing the two would compare
# a function with itself; those methods are checked by their literal reference tests instead.
OWN_FORWARD = [n for n in NAMES if METHODS.get(n).forward is not Method.forward]


def test_some_methods_have_their_own_forward():
    assert OWN_FORWARD and set(OWN_FORWARD) <= set(NAMES)


@pytest.mark.parametrize("name", OWN_FORWARD)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_forward_equals_step_loop(name, mode):
    m = make(name).train(mode == "train")
    x = torch.randn(B, T, V)
    torch.manual_seed(1)
    fast = m(x)
    torch.manual_seed(1)
    ref = m.step_loop(x)
    torch.testing.assert_close(fast.outputs, ref.outputs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.mask, ref.mask)
    if fast.depth is not None:
        torch.testing.assert_close(fast.depth, ref.depth)
    if fast.reads is not None or ref.reads is not None:
        torch.testing.assert_close(fast.reads, ref.reads)


def test_step_loop_stacks_the_column_reads():
    from harness.method import StepOut

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
    m = make(name).eval()
    x = torch.randn(B, T, V)
    assert_dense_counts(m, x)


@pytest.mark.parametrize("name", NAMES)
def test_effective_equals_dense_when_nothing_is_skipped(name):
    m = make(name)
    cost = m.cost()
    full = SeqOut(
        outputs=torch.zeros(B, T, D),
        mask=torch.ones(B, T, D),
        depth=torch.full((B, T, D), float(cost.max_depth)) if m.has_depth else None,
    )
    macs = sequence_macs(m, full)
    torch.testing.assert_close(macs["effective"], macs["dense"])
    assert float(macs["dense"][0]) == cost.dense_step() * T


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_outputs(name):
    x = torch.randn(B, T, V)
    a, b = make(name).eval(), make(name).eval()
    torch.testing.assert_close(a(x).outputs, b(x).outputs, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_smoke_training_loss_decreases(name):
    cfg = config.resolve(name, "synthetic", 0, "smoke", {"epochs": "4", "hidden_size": "10"})
    rec = train.run(cfg)
    assert rec["status"] == "ok", rec.get("error")
    losses = [h["train_loss"] for h in rec["history"]]
    assert losses[-1] < losses[0], losses
    again = train.run(cfg)
    assert again["metrics"] == rec["metrics"], "same config and seed must give the same metrics"


def test_nonpositive_hidden_size_is_a_config_error():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError):
        METHODS.get("gru")(3, 0)
    with pytest.raises(ConfigError):
        config.resolve("gru", "adding", 0, "smoke", {"hidden_size": "-4"})
