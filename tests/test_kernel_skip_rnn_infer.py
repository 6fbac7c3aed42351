"""Skip RNN's whole-sequence inference kernel (``baselines.ops.skip_rnn_infer``,
``csrc/skip_rnn_infer.cpp``) against the dense masked loop ``model.eval()(x)``, the reference.

Every test is marked ``kernel``: the default run deselects them; ``-m kernel`` builds the library
into the session's cache dir, and the equality tests fail, rather than skip, wherever it is
expected to build (``HARNESS_EXPECT_KERNELS=1``)."""

from __future__ import annotations

import pytest
import torch
from kernel_support import built

import baselines.skip_rnn as skip_rnn
from baselines.ops import library
from baselines.ops.inference import column_panels
from baselines.ops.skip_gru import skip_gru_kernel
from baselines.ops.skip_rnn_infer import skip_rnn_infer_kernel, skip_rnn_infer_kernel_status
from baselines.skip_rnn import SkipRNN, SkipRNNConfig

pytestmark = pytest.mark.kernel

V, D, T = 3, 32, 40
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


@pytest.fixture
def calls(monkeypatch):
    """The library built (``kernel_support.built``); the op as ``fast_forward`` finds it, each
    call counted."""
    for _ in built(skip_gru_kernel):
        op = skip_rnn_infer_kernel()
        assert op is not None
        counted: list[int] = []

        def found(op=op, counted=counted):
            counted.append(1)
            return op

        monkeypatch.setattr(skip_rnn, "skip_rnn_infer_kernel", found)
        yield counted


def model(form: str, skip: float, w_scale: float, dtype: torch.dtype) -> SkipRNN:
    """``at_skip``'s model at ``skip`` in ``form`` with ``w_p ~ N(0, w_scale^2 / D)``: 0 keeps the
    schedule the same in every sequence (an update every m steps); otherwise the gate reads the
    state, like a trained one, and every sequence updates at its own steps."""
    torch.manual_seed(0)
    hooked, _ = SkipRNN.at_skip(V, D, skip, T)
    m = SkipRNN(V, D, SkipRNNConfig(gru_form=form)).eval()
    m.load_state_dict(hooked.state_dict())
    with torch.no_grad():
        m.w_p.normal_(0.0, w_scale / D**0.5)
        m.cell.weight_hh.mul_(3.0)  # states that move (trained-like), not near-constant ones
    return m.to(dtype)


def inputs(B: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(B, T, V, dtype=dtype, generator=torch.Generator().manual_seed(B))


def assert_equals_dense(m: SkipRNN, x: torch.Tensor, calls: list[int]):
    """The kernel ran, once; the decisions bit for bit, the outputs and the state to rounding;
    the dense output."""
    tol = TOL[x.dtype]
    with torch.no_grad():
        dense = m(x)
    n = len(calls)
    fused = m.fast_forward(x)
    assert len(calls) == n + 1, "the fused kernel was not used"
    assert torch.equal(fused.mask, dense.mask)
    torch.testing.assert_close(fused.outputs, dense.outputs, rtol=0, atol=tol)
    h, _, u, up, cum = fused.state
    h_ref, cand_ref, u_ref, up_ref, cum_ref = dense.state
    torch.testing.assert_close(h, h_ref, rtol=0, atol=tol)
    assert torch.equal(u, u_ref)
    for a, b in ((up, up_ref), (cum, cum_ref)):  # P reads p's dot product: to rounding
        torch.testing.assert_close(a, b, rtol=0, atol=tol)
    # h stands in for h~_T, which is read where u_T = 1 only
    torch.testing.assert_close(torch.where(u > 0, h, cand_ref), cand_ref, rtol=0, atol=tol)
    torch.testing.assert_close(fused.aux_loss, dense.aux_loss, rtol=0, atol=0)
    return dense


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("skip", [0.5, 0.75, 0.9])
@pytest.mark.parametrize("B", [1, 6])
def test_the_schedule_of_at_skip_equals_the_dense_loop(calls, form, skip, B):
    """``at_skip``'s models (the speedup report's): an update every m steps in every sequence,
    the other steps read no weight."""
    for dtype in (torch.float64, torch.float32):
        m = model(form, skip, 0.0, dtype)
        dense = assert_equals_dense(m, inputs(B, dtype), calls)
        period = round(1 / (1 - skip))
        u = (torch.arange(T) % period == 0).to(dtype)
        assert torch.equal(dense.mask[..., 0], u.expand(B, -1))


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("skip", [0.5, 0.75, 0.9])
@pytest.mark.parametrize("B", [1, 6])
def test_decisions_of_each_sequence_equal_the_dense_loop(calls, form, skip, B):
    """A gate that reads the state: each sequence updates at its own steps. At B > 1 the steps
    where all, some and none of the sequences update all occur (the kernel's paths: in place,
    gathered, nothing)."""
    for dtype in (torch.float64, torch.float32):
        m = model(form, skip, 2.0, dtype)
        dense = assert_equals_dense(m, inputs(B, dtype), calls)
        u = dense.mask[..., 0]  # [B, T]
        assert 0.2 < 1 - u.mean().item() < 0.98, 1 - u.mean().item()
        if B > 1:
            n = u.sum(0)  # updating sequences of each step
            assert (n == B).any() and ((n > 0) & (n < B)).any() and (n == 0).any(), n
            assert len({tuple(row.tolist()) for row in u}) > 1  # the sequences differ


@pytest.mark.parametrize("form", ["after", "before"])
def test_the_gate_rounds_and_ties_as_the_dense_loop(calls, form):
    """``w_p = 0``, ``b_p = 0``: p = 1/2 exactly, so every other step ``u~ = 1/2`` rounds half to
    even (to 0) and the next one ``C = 1 - C`` ties the min: updates at the even steps only."""
    for dtype in (torch.float64, torch.float32):
        m = model(form, 0.5, 0.0, dtype)
        with torch.no_grad():
            m.b_p.zero_()
        dense = assert_equals_dense(m, inputs(3, dtype), calls)
        u = (torch.arange(T) % 2 == 0).to(dtype)
        assert torch.equal(dense.mask[..., 0], u.expand(3, -1))


def test_a_step_reads_the_inputs_of_the_updating_sequences_only(calls):
    """The inputs of a sequence at the steps it skips are not computed with: NaN there leaves
    the kernel's outputs those of the clean inputs (the dense loop's NaN candidate would reach
    its output through lerp's ``0 * NaN``; so would a gather of the wrong rows)."""
    m = model("after", 0.75, 2.0, torch.float64)
    x = inputs(6, torch.float64)
    with torch.no_grad():
        dense = m(x)
    u = dense.mask[..., 0]
    assert ((u.sum(0) > 0) & (u.sum(0) < 6)).any()
    poisoned = x.masked_fill((u == 0)[..., None], float("nan"))
    fused = m.fast_forward(poisoned)
    assert len(calls) == 1
    assert torch.equal(fused.mask, dense.mask)
    torch.testing.assert_close(fused.outputs, dense.outputs, rtol=0, atol=1e-10)


def test_batch_outputs_are_each_sequences_own(calls):
    """Each sequence of a batch gets what it gets alone (B = 1): the decisions exactly."""
    m = model("before", 0.75, 2.0, torch.float64)
    x = inputs(5, torch.float64)
    batch = m.fast_forward(x)
    for b in range(5):
        alone = m.fast_forward(x[b : b + 1])
        assert torch.equal(alone.mask, batch.mask[b : b + 1])
        torch.testing.assert_close(alone.outputs, batch.outputs[b : b + 1], rtol=0, atol=1e-12)
    assert len(calls) == 6


def test_the_fast_path_note_says_the_kernel_ran(calls):
    m = model("after", 0.5, 0.0, torch.float32)
    m.fast_forward(inputs(2, torch.float32))
    assert skip_rnn_infer_kernel_status().state == "loaded"
    assert (
        SkipRNN.fast_path_note() == "skip-rnn: on CPU the fast path runs a fused C++ kernel (used)"
    )


def test_other_dtypes_take_the_pytorch_path(monkeypatch, no_build):
    """A dtype the kernel does not compute in (float16) never asks for it."""
    monkeypatch.setattr(skip_rnn, "skip_rnn_infer_kernel", lambda: pytest.fail("asked"))
    monkeypatch.setattr(library, "_off_cpu", set())
    m = model("after", 0.5, 1.0, torch.float16)
    x = inputs(2, torch.float16)
    with torch.no_grad():
        dense = m(x)
    assert torch.equal(m.fast_forward(x).mask, dense.mask)


@pytest.mark.parametrize("form", ["after", "before"])
def test_any_panel_width_gives_the_dense_loop(calls, form):
    """The op on ``W_hh^T`` packed in column panels of 3 columns (a narrower last one), of 64
    (float32's, two panels a gate at D = 80) and of D (float64's): the dense loop's decisions and
    outputs in both dtypes."""
    for dtype in (torch.float64, torch.float32):
        torch.manual_seed(0)
        hooked, _ = SkipRNN.at_skip(V, 80, 0.75, T)
        m = SkipRNN(V, 80, SkipRNNConfig(gru_form=form)).eval()
        m.load_state_dict(hooked.state_dict())
        with torch.no_grad():
            m.w_p.normal_(0.0, 2.0 / 80**0.5)
        m = m.to(dtype)
        x = inputs(4, dtype)
        with torch.no_grad():
            dense = m(x)
        op = skip_rnn_infer_kernel()
        wi = m.cell.weight_ih.t().contiguous()
        h0 = m.h0.expand(4, -1).contiguous()
        for width in (3, 64, 80):
            w = m.cell.weight_hh.detach()
            wh = torch.cat([column_panels(w[g * 80 : (g + 1) * 80].t(), width) for g in range(3)])
            args = (x, h0, wi, wh, m.cell.bias, m.w_p.view(-1), m.b_p, width, form == "before")
            hs, u, _, _ = op(*args)
            assert torch.equal(u, dense.mask[..., 0]), (dtype, width)
            torch.testing.assert_close(hs, dense.outputs, rtol=0, atol=TOL[dtype])
