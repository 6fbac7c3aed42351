"""Phased LSTM's time-gate kernel (``baselines.ops.phased_gate``, ``csrc/phased_gate.cpp``) against
``PhasedLSTM.time_gate`` (the reference, and the gate of the per-step path and of eval).

Every test is marked ``kernel`` (``pytest -m kernel``); those that need the compiled kernel build
it once into the session's cache and fail, rather than skip, wherever it is expected to build
(``HARNESS_EXPECT_KERNELS=1``, or ninja and a C++ compiler at hand).
"""

from __future__ import annotations

import pytest
import torch
from kernel_support import built, op_node, train_on_meta

import baselines.ops.phased_gate as phased_gate
import baselines.phased_lstm as phased_module
from baselines.phased_lstm import _R_ON_MIN, PhasedLSTM, PhasedLSTMConfig, timestamps
from harness.components.code import method_kernels

pytestmark = pytest.mark.kernel

D = 8
NODE = op_node("phased_gate_forward")  # the kernel's autograd node


@pytest.fixture
def kernel():
    """The kernel built (``kernel_support.built``)."""
    yield from built(phased_gate.phased_gate_kernel)


def model(dtype: torch.dtype) -> PhasedLSTM:
    """A Phased LSTM (3 inputs, D units) in train mode whose parameters hit every case of the
    gate: a period below ``min_period`` (clamped: no gradient) and one exactly at it (the clamp
    passes the gradient), an open ratio below its floor, one above 1 and one exactly 1, negative
    and large shifts, and a unit whose phase meets both of eq. 7's boundaries exactly at integer
    steps (P 4, r_on 0.5, s 0: phi = r / 2 and phi = r)."""
    torch.manual_seed(0)
    m = PhasedLSTM(3, D, PhasedLSTMConfig(r_on=0.3)).to(dtype).train()
    with torch.no_grad():
        m.period[:5] = torch.tensor([1.0, 2.0, 3.7, 17.0, 4.0])
        m.r_on[:5] = torch.tensor([1e-4, 1.5, 1.0, 0.05, 0.5])
        m.shift[:5] = torch.tensor([-4.25, 1e3, 0.5, 3.0, 0.0])
    return m


def gates(m: PhasedLSTM, kernel, clock, T, times, leak_model: bool = True):
    """k and the gradients of P, s and r_on from the reference and from the kernel, for a loss
    with random weights on every k."""
    out = []
    w = torch.randn(clock.shape[0], T, D, dtype=m.period.dtype, generator=torch.Generator())
    for fused in (True, False):
        if fused:
            knobs = (m.cfg.min_period, _R_ON_MIN, m.leak())
            params = (m.period, m.shift, m.r_on)
            k = phased_gate.time_gate_sequence(kernel, timestamps(clock, T, times), *params, *knobs)
        else:
            k = m.time_gate(clock, T, times)
        out.append((k, torch.autograd.grad((k * w).sum(), [m.period, m.shift, m.r_on])))
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("train", [True, False])
def test_the_gate_kernel_equals_time_gate(kernel, dtype, train):
    """k exactly (the phase is exact, eq. 7 rounds as the reference's ops do), the gradients of
    the period, the shift and the open ratio to 1e-12 (float64) and 1e-5 (float32): one clock
    for the batch, a clock per sequence (up to a million steps), and given sample times
    (negative, fractional); in training (leak 1e-3) and with eval's leak 0. The clamped
    parameters get no gradient, the others do."""
    m = model(dtype).train(train)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    gen = torch.Generator().manual_seed(1)
    cases = [
        (torch.zeros(1, dtype=torch.long), 40, None),
        (torch.tensor([0, 5, 10**6]), 23, None),
        (torch.zeros(2, dtype=torch.long), 1, None),
        (torch.zeros(2, dtype=torch.long), 30, torch.rand(2, 30, generator=gen).cumsum(1) * 7 - 20),
    ]
    for clock, T, times in cases:
        (k, grads), (k_ref, grads_ref) = gates(m, kernel, clock, T, times)
        assert type(k.grad_fn).__name__ == NODE
        assert torch.equal(k, k_ref), (clock, T, (k - k_ref).abs().max())
        assert ((k == 0).any() or train) and (k > 0).any()
        for name, a, b in zip(("period", "shift", "r_on"), grads, grads_ref, strict=True):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=f"{clock} {T}: d{name}")
        d_period, _, d_r = grads
        assert d_period[0] == 0 and d_r[0] == 0 and d_r[1] == 0  # held by their clamps
        if T > 1:  # the others learn, through each of the gate's terms
            assert (d_period[1:] != 0).all() and (grads[1][1:] != 0).all() and d_r[2] != 0


def test_a_training_step_uses_the_gate_kernel_and_equals_its_reference(kernel, monkeypatch):
    """Phased LSTM's training forward on the masked-cell kernel path takes its gate from this
    kernel (its op's node in the graph) and gives the outputs, the mask and every
    parameter's gradient of the same step with ``time_gate`` (the gate kernel switched off in
    the method's module), float64 to 1e-12; eval never uses it."""
    x = torch.randn(3, 9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    runs = []
    for gate in (kernel, None):
        monkeypatch.setattr(phased_module, "gate_kernel", lambda *t, g=gate: g)
        m = model(torch.float64)
        out = m(x)
        if phased_module.sequence_kernel(x) is None:
            pytest.skip("the masked-cell kernel is not built here: the gate runs on its own path")
        seen, todo = set(), [out.outputs.grad_fn]  # every autograd node behind the outputs
        while todo:
            fn = todo.pop()
            if fn is not None and fn not in seen:
                seen.add(fn)
                todo += [f for f, _ in fn.next_functions]
        nodes = {type(fn).__name__ for fn in seen}
        assert (NODE in nodes) == (gate is not None), nodes
        loss = out.outputs.square().sum() + out.state[1].sum()
        runs.append((out, torch.autograd.grad(loss, list(m.parameters()))))
    (out, grads), (ref, grads_ref) = runs
    assert torch.equal(out.mask, ref.mask)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(phased_module, "gate_kernel", lambda *t: kernel)
    asked = []
    monkeypatch.setattr(kernel, "forward", lambda *args: asked.append(args))
    model(torch.float64).eval()(x)
    assert not asked


def test_phased_lstm_trains_on_meta_through_the_gate_op(kernel):
    """On the meta device the gate's op runs (its fake implementation, forward and backward), as
    the masked cell's does, not ``time_gate``: P, s and r_on get their gradients through it."""
    nodes = train_on_meta(model(torch.float32), (2, 4, 3))
    assert NODE in nodes and op_node("masked_cell_forward") in nodes, nodes


def test_the_gate_source_is_part_of_phased_lstms_code_version_only():
    """Its loader is one of the kernels phased-lstm's training builds (and so its C++ is part of
    its code version), and of no other method that shares the masked cell."""
    assert phased_gate.phased_gate_kernel in method_kernels("phased-lstm")
    for other in ("random-updates", "clockwork-rnn"):
        assert phased_gate.phased_gate_kernel not in method_kernels(other)
