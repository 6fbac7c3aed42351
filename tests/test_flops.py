"""FLOP accounting: fvcore handles for fused ops, S-SA's FLOP rule, effective MACs from masks."""

import pytest
import torch
from reference import assert_dense_counts

from harness.components.flops import effective_step_macs, fvcore_macs, sequence_macs, torch_flops
from harness.components.method import SeqOut, StepCost
from harness.components.registry import METHODS


@pytest.mark.parametrize("op,gates", [("gru", 3), ("lstm", 4), ("rnn_tanh", 1)])
def test_fvcore_handles_count_fused_multilayer_rnns(op, gates):
    mod = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM, "rnn_tanh": torch.nn.RNN}[op]
    B, T, V, D = 2, 5, 3, 4
    net = mod(V, D, num_layers=2, batch_first=True)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            out = self.net(x)[0]
            return type("O", (), {"outputs": out})()

    total, unsupported = fvcore_macs(Wrap(), torch.randn(B, T, V))
    assert total == B * T * gates * D * ((V + D) + (D + D))
    assert not unsupported
    assert torch_flops(Wrap(), torch.randn(B, T, V)) == 2 * total


# docs/methods.md P1.6: FLOPs = 2 T [(1 - Skip) G + C], G = 3D(D+V) for the GRU, C = 0.
@pytest.mark.parametrize(
    "T,V,D,reported,unit",
    [
        (17, 1, 50, 25.7, 1e4),
        (15, 77, 50, 56.9, 1e4),
        (25, 1, 50, 37.9, 1e4),
        (500, 2, 128, 49.7, 1e6),
    ],
)
def test_gru_flops_reproduce_s_sa_rule(T, V, D, reported, unit):
    gru = METHODS.get("gru")(V, D).eval()
    out = gru(torch.randn(1, T, V))
    flops = 2 * float(sequence_macs(gru, out)["effective"][0])
    assert flops == 2 * T * 3 * D * (D + V)
    assert flops / unit == pytest.approx(reported, rel=0.02)  # within S-SA's rounding


def test_effective_macs_on_a_hand_built_trace():
    cost = StepCost(
        hidden_size=4, always=10, per_unit=3, per_active_step=7, per_layer=5, max_depth=3
    )
    mask = torch.tensor([[[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]], dtype=torch.float)
    depth = torch.tensor([[[2, 1, 0, 0], [0, 0, 0, 0], [3, 3, 3, 3]]], dtype=torch.float)
    steps = effective_step_macs(cost, SeqOut(torch.zeros(1, 3, 4), mask, depth))
    assert steps.tolist() == [[10 + 6 + 7 + 10, 10, 10 + 12 + 7 + 15]]
    assert cost.dense_step() == 10 + 12 + 7 + 15


def _gru_form_methods() -> list[str]:
    import dataclasses

    return [
        n
        for n, cls in METHODS.items()
        if "gru_form" in {f.name for f in dataclasses.fields(cls.config_cls)}
    ]


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("name", _gru_form_methods())
def test_gru_forms_dense_cost_matches_fvcore_and_flopcounter(name, form):
    """In either GRU form the dense path executes the analytic dense MACs (``3D(D+V)`` for the
    cell either way), counted by fvcore and by FlopCounterMode; with every unit updated the
    exact count equals the dense one too."""
    B, T, V, D = 2, 6, 3, 10
    cls = METHODS.get(name)
    torch.manual_seed(0)
    m = cls(V, D, cls.config_cls(gru_form=form)).eval()
    x = torch.randn(B, T, V)
    assert_dense_counts(m, x)
    full = sequence_macs(m, SeqOut(torch.zeros(B, T, D), torch.ones(B, T, D)))
    assert torch.equal(full["exact"], full["dense"])
