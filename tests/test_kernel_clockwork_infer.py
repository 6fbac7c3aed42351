"""The Clockwork RNN's whole-sequence inference kernel (``baselines.ops.clockwork_infer``,
``csrc/clockwork_infer.cpp``) against the dense masked loop ``model.eval()(x)``, the reference.

Every test is marked ``kernel``: the default run deselects them; ``-m kernel`` builds the library
into the session's cache dir, and the equality tests fail, rather than skip, wherever it is
expected to build (``HARNESS_EXPECT_KERNELS=1``)."""

from __future__ import annotations

import pytest
import torch
from kernel_support import built

import baselines.clockwork_rnn as clockwork_rnn
from baselines.clockwork_rnn import ClockworkConfig, ClockworkRNN
from baselines.ops import library
from baselines.ops.clockwork_infer import (
    clockwork_infer_kernel,
    clockwork_infer_kernel_status,
    pack_modules,
)
from baselines.ops.masked_cell import masked_cell_kernel

pytestmark = pytest.mark.kernel

V, T = 3, 50
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


@pytest.fixture
def calls(monkeypatch):
    """The library built (``kernel_support.built``); the op as ``fast_forward`` finds it, each
    call counted."""
    for _ in built(masked_cell_kernel):
        op = clockwork_infer_kernel()
        assert op is not None
        counted: list[int] = []

        def found(op=op, counted=counted):
            counted.append(1)
            return op

        monkeypatch.setattr(clockwork_rnn, "clockwork_infer_kernel", found)
        yield counted


def trained_like(m: ClockworkRNN, dtype: torch.dtype) -> ClockworkRNN:
    """Weights 3x the initialisation's (states that move, as a trained model's), in ``dtype``."""
    with torch.no_grad():
        for p in (m.weight_hh, m.weight_ih, m.bias):
            p.mul_(3.0)
    return m.to(dtype).eval()


def inputs(B: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(B, T, V, dtype=dtype, generator=torch.Generator().manual_seed(B))


def assert_equals_dense(m: ClockworkRNN, x: torch.Tensor, calls: list[int]):
    """The kernel ran, once; the mask bit for bit, the outputs and the state to rounding; the
    dense output."""
    tol = TOL[x.dtype]
    with torch.no_grad():
        dense = m(x)
    n = len(calls)
    fused = m.fast_forward(x)
    assert len(calls) == n + 1, "the fused kernel was not used"
    assert torch.equal(fused.mask, dense.mask)
    torch.testing.assert_close(fused.outputs, dense.outputs, rtol=0, atol=tol)
    torch.testing.assert_close(fused.state[0], dense.state[0], rtol=0, atol=tol)
    assert torch.equal(fused.state[1], dense.state[1])
    return dense


@pytest.mark.parametrize("skip", [0.5, 0.75, 0.9])
@pytest.mark.parametrize("D", [64, 60])
@pytest.mark.parametrize("B", [1, 5])
def test_the_schedules_of_at_skip_equal_the_dense_loop(calls, skip, D, B):
    """``at_skip``'s layouts (the speedup report's) at several skips, module sizes a multiple of
    the vector width and not."""
    for dtype in (torch.float64, torch.float32):
        torch.manual_seed(0)
        m = trained_like(ClockworkRNN.at_skip(V, D, skip, T)[0], dtype)
        dense = assert_equals_dense(m, inputs(B, dtype), calls)
        assert abs(1 - dense.mask.mean().item() - skip) < 0.1


@pytest.mark.parametrize(
    "num_modules, base, phase",
    [(1, 2, 0), (4, 2, 0), (12, 9, 1), (12, 1, 0), (3, 5, 2)],  # one module; base 1: dense
)
@pytest.mark.parametrize("B", [1, 4])
def test_hand_made_layouts_equal_the_dense_loop(calls, num_modules, base, phase, B):
    for dtype in (torch.float64, torch.float32):
        torch.manual_seed(1)
        cfg = ClockworkConfig(num_modules=num_modules, base=base, phase=phase)
        m = trained_like(ClockworkRNN(V, 12, cfg), dtype)
        assert_equals_dense(m, inputs(B, dtype), calls)


def test_a_step_reads_the_nonzero_blocks_of_the_active_modules_only(calls):
    """NaN in the rows of the modules that never fire within T (their recurrent and input rows,
    their biases) and in the masked zeros below the diagonal blocks of every row leaves the
    kernel's outputs those of the clean weights: it never reads them (the dense loop would)."""
    torch.manual_seed(2)
    m = trained_like(
        ClockworkRNN(V, 40, ClockworkConfig(num_modules=8, base=3, phase=1)), torch.float64
    )
    x = inputs(3, torch.float64)
    with torch.no_grad():
        dense = m(x)
        fired = dense.mask[0].amax(0) > 0  # [D]
        assert not fired.all() and fired.any()
        m.weight_hh.masked_fill_(m.hh_mask == 0, float("nan"))
        m.weight_hh[~fired] = float("nan")
        m.weight_ih[~fired] = float("nan")
        m.bias[~fired] = float("nan")
    fused = m.fast_forward(x)
    assert len(calls) == 1
    assert torch.equal(fused.mask, dense.mask)
    torch.testing.assert_close(fused.outputs, dense.outputs, rtol=0, atol=1e-10)


def test_the_packed_weights_follow_the_parameters(calls):
    """The packed operands are cached on the model and rebuilt when a parameter changes."""
    torch.manual_seed(3)
    m = trained_like(ClockworkRNN(V, 12, ClockworkConfig(num_modules=4, base=2)), torch.float64)
    x = inputs(2, torch.float64)
    before = m.fast_forward(x).outputs
    with torch.no_grad():
        m.weight_ih.mul_(-1.0)
    assert_equals_dense(m, x, calls)
    assert not torch.allclose(m.fast_forward(x).outputs, before)


def test_the_fast_path_note_says_the_kernel_ran(calls):
    torch.manual_seed(0)
    m = trained_like(ClockworkRNN.at_skip(V, 16, 0.5, T)[0], torch.float32)
    m.fast_forward(inputs(2, torch.float32))
    assert clockwork_infer_kernel_status().state == "loaded"
    note = "clockwork-rnn: on CPU the fast path runs a fused C++ kernel (used)"
    assert ClockworkRNN.fast_path_note() == note


def test_other_dtypes_take_the_pytorch_path(monkeypatch, no_build):
    """A dtype the kernel does not compute in (float16) never asks for it."""
    monkeypatch.setattr(clockwork_rnn, "clockwork_infer_kernel", lambda: pytest.fail("asked"))
    monkeypatch.setattr(library, "_off_cpu", set())
    torch.manual_seed(0)
    m = trained_like(ClockworkRNN.at_skip(V, 16, 0.5, T)[0], torch.float16)
    x = inputs(2, torch.float16)
    with torch.no_grad():
        dense = m(x)
    assert torch.equal(m.fast_forward(x).mask, dense.mask)


@pytest.mark.parametrize("B, V_in, D", [(3, V, 60), (1, V, 60), (1, V, 130), (1, V + 1, 130)])
def test_any_panel_width_gives_the_dense_loop(calls, B, V_in, D):
    """The op on module operands packed in column panels of 3 columns (a narrower last one), of
    20, and of 64 (float32's), modules of k = D / 2 or D / 3: the dense loop's outputs in both
    dtypes. At batch 1 the products are the kernel's own (``vec_panel``): its blocks of four
    vectors of columns (k = 65: a panel of 64 and one of 1) and its narrower tail, over operands
    of an even and an odd number of rows (D + V + 1 - jk)."""
    num = 2 if D == 130 else 3
    k = D // num
    for dtype in (torch.float64, torch.float32):
        torch.manual_seed(4)
        m = trained_like(ClockworkRNN(V_in, D, ClockworkConfig(num_modules=num, base=2)), dtype)
        x = torch.randn(B, T, V_in, dtype=dtype, generator=torch.Generator().manual_seed(B))
        with torch.no_grad():
            dense = m(x)
        op = clockwork_infer_kernel()
        h0 = x.new_zeros(B, D)
        active = (dense.mask[0, :, ::k] > 0).sum(1)  # [T] firing modules
        for width in (3, 20, 64):
            packed = pack_modules(m.weight_hh.detach(), m.weight_ih, m.bias, k, width)
            hs = op(packed, x, h0, active, k, width)
            torch.testing.assert_close(hs, dense.outputs, rtol=0, atol=TOL[dtype])
