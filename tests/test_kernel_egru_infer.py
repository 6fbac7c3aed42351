"""EGRU's whole-sequence inference kernel (``baselines.ops.egru_infer``, ``csrc/egru_infer.cpp``),
the CPU fast path of ``EGRU.fast_forward``, against the method's dense masked loop
``model.eval()(x)`` (the reference): events, reads and mask exactly, outputs, final state and
event rate to rounding, in float64 and float32, at batch 1 and above, at several activity
sparsities; each sequence of a batch reads only the rows of its own events (not the union's).

Every test is marked ``kernel`` (``pytest -m kernel``); those that need the compiled library
build it once into the session's cache and fail, rather than skip, wherever it is expected to
build (``HARNESS_EXPECT_KERNELS=1``, or ninja and a C++ compiler at hand).
"""

from __future__ import annotations

import pytest
import torch
import torch.utils.cpp_extension
from kernel_support import OnCuda, built

import baselines.egru as egru_module
import baselines.ops.egru_infer as infer
import baselines.ops.library as kernels
from baselines._sparse import bisect_level
from baselines.egru import EGRU
from harness.bench.speedup import achieved_skip

pytestmark = pytest.mark.kernel

V, D, T = 5, 50, 30  # 3D = 150: the vectorised loops' remainders run too
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
# what each target activity sparsity must come out as on the test's inputs (not vacuous);
# every input column is read, so the share is at most D / (V + D) = 0.91
LEVELS = {0.0: (0.0, 0.1), 0.5: (0.3, 0.7), 0.85: (0.7, 0.91)}


@pytest.fixture
def calls(monkeypatch):
    """The library built (``kernel_support.built``); each call of the op by the fast path is
    appended to the yielded list."""
    found, real = [], egru_module.egru_infer_kernel_for

    def counted(*tensors):
        op = real(*tensors)
        return None if op is None else (lambda *a: found.append(1) or op(*a))

    monkeypatch.setattr(egru_module, "egru_infer_kernel_for", counted)
    for _ in built(kernels.Kernel("egru_infer", "EGRU inference")):
        yield found


def model(skip: float, weights: str) -> EGRU:
    """An EGRU whose activity sparsity aims at ``skip`` (``at_skip``'s knob, calibrated alike):
    the code's initialisation (``at_skip``'s model), or trained-like weights (larger input and
    recurrent weights, non-zero biases)."""
    torch.manual_seed(0)
    if weights == "at_skip":
        return EGRU.at_skip(V, D, skip, T)[0]
    m = EGRU(V, D).eval()
    with torch.no_grad():
        m.kernel.mul_(2.0)
        m.recurrent_kernel.mul_(2.0)
        m.bias.uniform_(-0.5, 0.5)
        m.recurrent_bias.uniform_(-0.5, 0.5)
    x = torch.randn(8, T, V)

    def share(level: float) -> float:
        m._set_level(level)
        return 1.0 - m.fast_forward(x).reads.double().mean().item()

    bisect_level(share, skip, -1.0, 1.0, 16)
    return m


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("weights", ["at_skip", "trained"])
@pytest.mark.parametrize("skip", sorted(LEVELS))
def test_the_kernel_equals_the_dense_loop(calls, dtype, batch, weights, skip):
    m = model(skip, weights).to(dtype)
    x = torch.randn(batch, T, V, dtype=dtype, generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        ref = m.eval()(x)
    n = len(calls)
    out = m.fast_forward(x)
    assert len(calls) == n + 1, "the fused kernel was not used"
    assert torch.equal(out.reads, ref.reads) and torch.equal(out.mask, ref.mask)
    assert torch.equal(out.outputs != 0, ref.outputs != 0)  # the events
    tol = TOL[dtype]
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=0, atol=tol)
    for a, b in zip(out.state, ref.state, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=tol)
    torch.testing.assert_close(out.extras["event_rate"], ref.extras["event_rate"], rtol=0, atol=0)
    lo, hi = LEVELS[skip]
    assert lo <= achieved_skip(ref, m) <= hi
    if batch > 1 and skip > 0:  # each sequence its own events
        assert (ref.reads != ref.reads[:1]).any()


def test_each_sequence_reads_only_the_rows_of_its_own_events(calls):
    """NaN in the rows of ``R`` of units that fire in sequence 0 and never in sequence 1:
    sequence 1 equals the dense loop's (with the finite weights), sequence 0's internal state
    turns NaN (a NaN ``c~`` fires no event: ``NaN > theta`` is false); a product over the union
    of the batch's events would make both NaN (0 * NaN)."""
    m = model(0.85, "at_skip").double()
    x = torch.randn(2, 16, V, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(x)
    state_reads = ref.reads[..., V:].amax(1)  # [2, D]: read at some step
    only0 = ((state_reads[0] > 0) & (state_reads[1] == 0)).nonzero().view(-1)
    assert only0.numel() > 0
    with torch.no_grad():
        m.recurrent_kernel[only0] = float("nan")
    n = len(calls)
    out = m.fast_forward(x)
    assert len(calls) == n + 1
    assert out.state[0][0].isnan().any()
    torch.testing.assert_close(out.outputs[1], ref.outputs[1], rtol=0, atol=1e-10)
    torch.testing.assert_close(out.state[0][1], ref.state[0][1], rtol=0, atol=1e-10)
    assert torch.equal(out.reads[1], ref.reads[1])


def test_the_note_says_the_kernel_ran(calls):
    m = model(0.5, "at_skip")
    n = len(calls)
    m.fast_forward(torch.randn(1, T, V))
    assert len(calls) == n + 1
    assert EGRU.fast_path_note() == "egru: on CPU the fast path runs a fused C++ kernel (used)"


def test_switched_off_it_takes_the_pytorch_path_and_builds_nothing(
    fresh_kernel, no_build, monkeypatch
):
    monkeypatch.setenv("HARNESS_NO_KERNELS", "1")
    m = model(0.5, "at_skip").double()
    x = torch.randn(2, T, V, dtype=torch.float64)
    with torch.no_grad():
        ref = m(x)
    out = m.fast_forward(x)
    assert torch.equal(out.reads, ref.reads)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=0, atol=1e-10)
    status = infer.egru_infer_kernel_status()
    assert (status.state, status.reason) == ("unavailable", kernels.DISABLED)
    note = EGRU.fast_path_note()
    assert note.endswith(f"(unavailable here, {kernels.DISABLED}: PyTorch fallback)")
    assert not fresh_kernel.exists()


def test_the_note_builds_nothing(fresh_kernel, no_build, monkeypatch):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    assert EGRU.fast_path_note().endswith("(not tried: nothing ran on CPU)")
    assert infer.egru_infer_kernel_status().state == "not tried"
    assert not fresh_kernel.exists()


def test_a_failed_build_is_one_line_and_falls_back(fresh_kernel, monkeypatch):
    def load(*args, **kwargs):
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ... output")

    monkeypatch.setenv("HARNESS_NO_KERNELS", "1")
    m = model(0.5, "at_skip").double()  # calibrated on the PyTorch path
    monkeypatch.delenv("HARNESS_NO_KERNELS")
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    kernels.forget_library()
    x = torch.randn(2, T, V, dtype=torch.float64)
    with pytest.warns(UserWarning, match="EGRU inference kernel unavailable"):
        out = m.fast_forward(x)
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert infer.egru_infer_kernel_status() == kernels.KernelStatus("unavailable", why)
    with torch.no_grad():
        ref = m(x)
    assert torch.equal(out.reads, ref.reads)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=0, atol=1e-10)


def test_off_cpu_warns_once_and_takes_the_pytorch_path(monkeypatch, no_build):
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="EGRU's fused inference kernel runs on CPU only: on cuda"):
        assert infer.egru_infer_kernel_for(OnCuda()) is None
    assert infer.egru_infer_kernel_for(OnCuda()) is None  # once: an error filter would raise


def test_other_dtypes_take_the_pytorch_path(no_build):
    assert infer.egru_infer_kernel_for(torch.empty(2, dtype=torch.bfloat16)) is None
    mixed = (torch.empty(2, dtype=torch.float32), torch.empty(2, dtype=torch.float64))
    assert infer.egru_infer_kernel_for(*mixed) is None
