"""The training loops of the skipping methods in fewer autograd ops per step (issue 12, part 2;
EI-REHN's and the elastic gate's hand-written backwards, issue 32).

At the paper sizes a training step is bound by per-op dispatch, so these loops use shorter forms
of the shared equations (``addmm``, ``addcmul``, ``lerp``, projections and transposes taken once
per sequence). Here: each short form equals the literal one in float64, values and gradients; a
mask of 0 still copies bit for bit; and the autograd graph grows by at most a fixed number of
nodes per step, so a longer form cannot come back unnoticed. (Each method's own test file checks
it against its authors' code.)
"""

from __future__ import annotations

import pytest
import torch

from baselines._cells import gru_step, gru_step_lean, masked_lerp, masked_update
from baselines._elastic import elastic_layers
from baselines._highway import CoupledHighway
from harness.components.registry import METHODS

# Autograd nodes added by one more step of a training forward (V = 3, D = 4); the literal forms
# before issue 12 added 35, 30, 37, 21 and 157. SREHN's and EI-REHN's elastic gate is one node
# (issue 32; SREHN added 82 before), and EI-REHN's highway layers are one node per step (it added
# 361 before: 10 layers of about 35).
NODES_PER_STEP = {
    "skip-rnn": 21,
    "sa-rnn": 17,
    "vc-rnn": 20,
    "phased-lstm": 12,
    "srehn": 67,
    "ei-rehn": 7,
    "clockwork-rnn": 3,  # addmm, tanh, lerp (7 before: linear, add, tanh and masked_update's 4)
}
HIDDEN = {"clockwork-rnn": 10}  # D a multiple of its 10 modules


def _grads(out: torch.Tensor, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    weights = torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype).view_as(out)
    return torch.autograd.grad((out * weights).sum(), inputs)


def test_lean_gru_step_equals_the_literal_one():
    g = torch.Generator().manual_seed(0)
    B, D = 5, 4
    xp = torch.randn(B, 3 * D, dtype=torch.float64, generator=g, requires_grad=True)
    h = torch.randn(B, D, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(3 * D, D, dtype=torch.float64, generator=g, requires_grad=True)
    ref, lean = gru_step(xp, h, w), gru_step_lean(xp, h, w.t())
    torch.testing.assert_close(lean, ref, rtol=0, atol=1e-14)
    for a, b in zip(_grads(lean, [xp, h, w]), _grads(ref, [xp, h, w]), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-14)


@pytest.mark.parametrize("soft", [False, True])
def test_masked_lerp_equals_masked_update_and_copies_exactly(soft):
    g = torch.Generator().manual_seed(1)
    new = torch.randn(6, 4, dtype=torch.float64, generator=g, requires_grad=True)
    old = torch.randn(6, 4, dtype=torch.float64, generator=g, requires_grad=True)
    u = (torch.rand(6, 4, dtype=torch.float64, generator=g) > 0.5).double()
    if soft:  # VC-RNN's soft mask: some entries strictly between 0 and 1
        u = u * torch.rand(6, 4, dtype=torch.float64, generator=g).clamp(min=0.5)
    u.requires_grad_()
    ref, lean = masked_update(u, new, old), masked_lerp(u, new, old)
    torch.testing.assert_close(lean, ref, rtol=0, atol=1e-15)
    assert torch.equal(lean[u == 0], old[u == 0]) and torch.equal(lean[u == 1], new[u == 1])
    for a, b in zip(_grads(lean, [u, new, old]), _grads(ref, [u, new, old]), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-15)


def test_elastic_layers_equal_the_coupled_highway_stack():
    torch.manual_seed(2)
    B, V, D, R = 3, 2, 4, 5
    cell = CoupledHighway(V, D, R, shared=True, transform_bias=-1.0).double()
    with torch.no_grad():
        cell.bias.normal_()
    x = torch.randn(B, V, dtype=torch.float64)
    h = torch.randn(B, D, dtype=torch.float64, requires_grad=True)
    d = torch.rand(B, R, D, dtype=torch.float64).mul(1.2).sub(0.2).clamp(min=0).requires_grad_()
    ref = cell(cell.input_proj(x), h, d)
    xp_b = cell.input_proj(x) + cell.bias[0]
    lean = elastic_layers(xp_b, h, d, cell.weight_h[0].t(), cell.bias[0])
    torch.testing.assert_close(lean, ref, rtol=0, atol=1e-14)
    inputs = [h, d, cell.weight_x, cell.weight_h, cell.bias]
    for a, b in zip(_grads(lean, inputs), _grads(ref, inputs), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-14)


def _graph(t: torch.Tensor) -> set:
    """The autograd nodes behind ``t``."""
    seen, stack = set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is not None and fn not in seen:
            seen.add(fn)
            stack.extend(nxt for nxt, _ in fn.next_functions)
    return seen


def _graph_nodes(t: torch.Tensor) -> int:
    return len(_graph(t))


@pytest.mark.parametrize("name", sorted(NODES_PER_STEP))
def test_autograd_nodes_per_training_step(name):
    torch.manual_seed(0)
    m = METHODS.get(name)(3, HIDDEN.get(name, 4)).train()
    counts = []
    for T in (4, 5):
        out = m(torch.randn(2, T, 3))
        loss = out.outputs.sum() + (0 if out.aux_loss is None else out.aux_loss)
        counts.append(_graph_nodes(loss))
    assert counts[1] - counts[0] <= NODES_PER_STEP[name]


def _node_names(t: torch.Tensor) -> list[str]:
    return [type(fn).__name__ for fn in _graph(t)]


@pytest.mark.parametrize("name", ["rhn", "hsg", "srhn", "srehn"])
def test_stacked_layer_weights_are_split_once_a_sequence_not_indexed_each_step(name):
    """A highway stack's per-layer weights come from one ``unbind`` a sequence: indexing the
    stacked parameter at every layer of every step adds a backward node each that fills a zero
    tensor the size of the whole stack (at D 830, depth 10, three quarters of a training
    step), so no select of a parameter is left in the training graph."""
    torch.manual_seed(0)
    m = METHODS.get(name)(3, 4).train()
    selects = []
    for T in (4, 5):
        out = m(torch.randn(2, T, 3))
        names = _node_names(out.outputs.sum() + (0 if out.aux_loss is None else out.aux_loss))
        selects.append(sum(n.startswith("SelectBackward") for n in names))
    assert selects[0] == selects[1] <= 3, selects  # a few a sequence, none a step or layer
