"""``torch.compile`` sees through the kernels: one method per op family, compiled whole, trains
(forward and backward) through its ops inside the compiled graph, with the outputs and gradients
of the eager model, and with no graph break but those documented (``GRAPH_BREAKS``).

Dynamo and AOT autograd trace the ops through their fake implementations and registered
backwards (``backend="aot_eager"``: the graphs run as traced, so the comparison is exact up to
the kernels' own rounding); one method is also compiled by the default backend, inductor, which
generates code for everything around the op.
"""

from __future__ import annotations

import pytest
import torch
from kernel_support import built

from baselines.ops.masked_cell import masked_cell_kernel
from harness.authoring import conformance

pytestmark = pytest.mark.kernel

V, D, B, T = conformance.V, conformance.D, conformance.B, conformance.T

# The method compiled for each op family (training), and the family's forward op.
TRAINING = {
    "clockwork-rnn": "masked_cell_forward",
    "phased-lstm": "phased_gate_forward",
    "skip-rnn": "skip_gru_forward",
    "sa-rnn": "sarnn_train_forward",
    "vc-rnn": "vcrnn_train_forward",
    "delta-gru": "delta_gru_seq_forward",
    "egru": "egru_forward",
    "srehn": "srehn_forward",
    "ei-rehn": "ei_rehn_stack_step_forward",
}
# The methods whose compiled training step has graph breaks, and why (docs/methods.md says the
# same). EI-REHN runs the batch's depth, max_b R_t layers, a data-dependent count that its whole
# step op returns (its fake implementation: an unbacked size): dynamo ends the graph at the op
# and runs it eagerly, between the graphs before and after.
GRAPH_BREAKS = {"ei-rehn": "the step op's data-dependent layer count"}


@pytest.fixture
def ops():
    yield from built(masked_cell_kernel)


class Recorder:
    """A ``torch.compile`` backend that keeps the ops of every graph dynamo hands it, then runs
    the graph through AOT autograd (``aot_eager``)."""

    def __init__(self) -> None:
        self.graphs = 0
        self.ops: set[str] = set()

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        for node in gm.graph.nodes:
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                self.ops.add(node.target.name())
        from torch._dynamo.backends.debugging import aot_eager

        return aot_eager(gm, example_inputs)


def train_step(model, x):
    torch.manual_seed(1)
    out = model(x)
    loss = out.outputs.pow(2).sum() + (0 if out.aux_loss is None else out.aux_loss)
    loss.backward()
    return out.outputs.detach()


@pytest.mark.parametrize("name", list(TRAINING))
def test_a_compiled_training_step_runs_the_ops_and_matches_eager(ops, name):
    torch._dynamo.reset()
    eager = conformance._make(name).double().train()
    compiled_model = conformance._make(name).double().train()
    x = torch.randn(B, T, V, dtype=torch.float64)
    want = train_step(eager, x)
    recorder = Recorder()
    got = train_step(torch.compile(compiled_model, backend=recorder), x)
    torch.testing.assert_close(got, want)
    for (pname, p), q in zip(compiled_model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=pname)
    breaks = recorder.graphs - 1
    if name in GRAPH_BREAKS:  # the op runs between the graphs
        assert breaks >= 1 and f"condrnn::{TRAINING[name]}" not in recorder.ops
    else:
        assert f"condrnn::{TRAINING[name]}" in recorder.ops, sorted(recorder.ops)
        assert breaks == 0, f"{name}: {breaks} graph breaks"


def test_inductor_compiles_a_method_around_its_op(ops):
    """The default backend generates code for everything around the op and calls the op."""
    torch._dynamo.reset()
    eager = conformance._make("clockwork-rnn").train()
    compiled_model = conformance._make("clockwork-rnn").train()
    x = torch.randn(B, T, V)
    want = train_step(eager, x)
    got = train_step(torch.compile(compiled_model), x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for p, q in zip(compiled_model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
