"""Training cost linear in the sequence length, checked on the autograd graph (no timing).

Reading step t of a sequence tensor that requires grad as ``x[:, t]`` makes autograd record a
select (or slice) of the whole ``[B, T, ...]`` tensor at every step; in backward each of those
allocates and fills a zero tensor the size of the whole sequence, so backward costs O(T^2). A
per-step loop must iterate over ``x.unbind(1)`` (one node for the whole sequence) or project per
step. The test counts the graph's selects and slices that take one step out of a tensor whose
time dimension is the whole sequence: that count must not grow with T.
"""

from __future__ import annotations

import pytest
import torch

from harness.components import config
from harness.components.registry import METHODS
from harness.data import MissingDataError
from harness.training import train

NAMES = METHODS.names()
V, D, B = 3, 10, 2
STEP_OPS = ("SelectBackward0", "SliceBackward0")


def per_step_reads(root: torch.Tensor, T: int) -> int:
    """Select/slice nodes in ``root``'s graph that read along a time dimension of length T."""
    seen, stack, count = set(), [root.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name() in STEP_OPS:
            sizes = tuple(node._saved_self_sym_sizes)
            dim = node._saved_dim % len(sizes)
            count += sizes[dim] == T and dim == 1
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return count


def graph_root(out) -> torch.Tensor:
    total = out.outputs.sum()
    return total if out.aux_loss is None else total + out.aux_loss


@pytest.mark.parametrize("name", NAMES)
def test_no_per_step_read_of_a_whole_sequence(name):
    counts = []
    for T in (8, 16):
        torch.manual_seed(0)
        m = METHODS.get(name)(V, D).train()
        x = torch.randn(B, T, V, requires_grad=True)  # as under an embedding or a lower layer
        counts.append(per_step_reads(graph_root(m(x)), T))
    assert counts[0] == counts[1], f"{name}: {counts} per-step reads at T = 8, 16"


@pytest.mark.parametrize("task,length_key", [("adding", "seq_len"), ("ptb", "bptt")])
def test_the_stacked_model_reads_no_step_of_a_whole_sequence(task, length_key):
    """Two layers (the second's input requires grad) and an embedding (PTB), as the harness
    builds them, for every method: still no per-step read of a whole sequence."""
    for name in NAMES:
        counts = []
        for T in (8, 16):
            cfg = config.resolve(name, task, 0, "smoke", {"num_layers": "2", length_key: str(T)})
            try:
                t, model = train.build(cfg)
                x = t.splits(0).test.x[:B]
            except MissingDataError as e:
                pytest.skip(f"{task} data absent: {e}")
            out = model(x)
            counts.append(per_step_reads(out.pred.sum().reshape(()), x.shape[1]))
        assert counts[0] == counts[1], f"{name} on {task}: {counts}"


def test_the_check_sees_the_quadratic_pattern():
    w = torch.randn(V, D, requires_grad=True)

    def loop(x, read):
        h = torch.zeros(B, D)
        for t, x_t in enumerate(x.unbind(1)):
            h = torch.tanh((read(x, t) if read else x_t) @ w + h)
        return h

    for T in (8, 16):
        x = torch.randn(B, T, V, requires_grad=True)
        assert per_step_reads(loop(x, lambda x, t: x[:, t]).sum(), T) == T
        assert per_step_reads(loop(x, lambda x, t: x[:, t : t + 1].squeeze(1)).sum(), T) == T
        assert per_step_reads(loop(x, None).sum(), T) == 0
