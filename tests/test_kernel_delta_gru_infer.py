"""Delta GRU's whole-sequence inference kernel (``baselines.ops.delta_gru_infer``,
``csrc/delta_gru_infer.cpp``), the CPU fast path of ``DeltaGRU.fast_forward``, against the
method's dense masked loop ``model.eval()(x)`` (the reference): reads and mask exactly, outputs,
final state and regulariser to rounding, in float64 and float32, at batch 1 and above, at several
activity sparsities; each sequence of a batch reads only its own columns (not the union's).

Every test is marked ``kernel`` (``pytest -m kernel``); those that need the compiled library
build it once into the session's cache and fail, rather than skip, wherever it is expected to
build (``HARNESS_EXPECT_KERNELS=1``, or ninja and a C++ compiler at hand).
"""

from __future__ import annotations

import pytest
import torch
import torch.utils.cpp_extension
from kernel_support import OnCuda, built

import baselines._delta_gru_fast as fast
import baselines.ops.delta_gru_infer as infer
import baselines.ops.library as kernels
from baselines.delta_gru import DeltaGRU, DeltaGRUConfig
from harness.bench.speedup import achieved_skip

pytestmark = pytest.mark.kernel

V, D, T = 5, 50, 30  # 3D = 150: the vectorised loops' remainders run too
TOL = {torch.float64: 1e-10, torch.float32: 2e-5}
# what each target activity sparsity must come out as on the test's inputs (not vacuous)
LEVELS = {0.0: (0.0, 0.1), 0.5: (0.3, 0.7), 0.9: (0.75, 1.0)}


@pytest.fixture
def calls(monkeypatch):
    """The library built (``kernel_support.built``); each call of the op by the fast path is
    appended to the yielded list."""
    found, real = [], fast.delta_gru_infer_kernel_for

    def counted(*tensors):
        op = real(*tensors)
        return None if op is None else (lambda *a: found.append(1) or op(*a))

    monkeypatch.setattr(fast, "delta_gru_infer_kernel_for", counted)
    for _ in built(kernels.Kernel("delta_gru_infer", "Delta GRU inference")):
        yield found


def model(skip: float, weights: str, beta: float = 0.0) -> DeltaGRU:
    """A Delta GRU whose thresholds aim at activity sparsity ``skip`` (``calibrate``, as
    ``at_skip``): the default initialisation (``at_skip``'s model), or trained-like weights
    (larger recurrent and input weights, non-zero biases)."""
    torch.manual_seed(0)
    m = DeltaGRU(V, D, DeltaGRUConfig(beta=beta)).eval()
    if weights == "trained":
        with torch.no_grad():
            m.cell.weight_hh.mul_(3.0)
            m.cell.weight_ih.mul_(2.0)
            m.cell.bias.uniform_(-1.0, 1.0)
    fast.calibrate(m, torch.randn(8, T, V), skip)
    return m


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("weights", ["at_skip", "trained"])
@pytest.mark.parametrize("skip", sorted(LEVELS))
def test_the_kernel_equals_the_dense_loop(calls, dtype, batch, weights, skip):
    m = model(skip, weights, beta=0.01 if weights == "trained" else 0.0).to(dtype)
    x = torch.randn(batch, T, V, dtype=dtype, generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        ref = m.eval()(x)
    n = len(calls)
    out = m.fast_forward(x)
    assert len(calls) == n + 1, "the fused kernel was not used"
    assert torch.equal(out.reads, ref.reads) and torch.equal(out.mask, ref.mask)
    tol = TOL[dtype]
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=0, atol=tol)
    for a, b in zip(out.state, ref.state, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=tol)
    assert (out.aux_loss is None) == (ref.aux_loss is None) == (m.cfg.beta == 0)
    if ref.aux_loss is not None:
        torch.testing.assert_close(out.aux_loss, ref.aux_loss, rtol=tol, atol=0)
    lo, hi = LEVELS[skip]
    assert lo <= achieved_skip(ref, m) <= hi
    if batch > 1 and skip > 0:  # each sequence its own columns
        assert (ref.reads != ref.reads[:1]).any()


def test_each_sequence_reads_only_its_own_columns(calls):
    """NaN in the columns of ``W_h`` that sequence 0 reads and sequence 1 never does: sequence 1
    equals the dense loop's (with the finite weights), sequence 0 turns NaN; a product over the
    union of the batch's columns would make both NaN (0 * NaN)."""
    m = model(0.9, "at_skip").double()
    x = torch.randn(2, 16, V, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(x)
    state_reads = ref.reads[..., V:].amax(1)  # [2, D]: read at some step
    only0 = ((state_reads[0] > 0) & (state_reads[1] == 0)).nonzero().view(-1)
    assert only0.numel() > 0
    with torch.no_grad():
        m.cell.weight_hh[:, only0] = float("nan")
    n = len(calls)
    out = m.fast_forward(x)
    assert len(calls) == n + 1
    assert out.outputs[0].isnan().any()
    torch.testing.assert_close(out.outputs[1], ref.outputs[1], rtol=0, atol=1e-10)
    assert torch.equal(out.reads[1], ref.reads[1])


def test_the_note_says_the_kernel_ran(calls):
    m = model(0.5, "at_skip")
    n = len(calls)
    m.fast_forward(torch.randn(1, T, V))
    assert len(calls) == n + 1
    assert DeltaGRU.fast_path_note() == (
        "delta-gru: on CPU the fast path runs a fused C++ kernel (used)"
    )


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
    status = infer.delta_gru_infer_kernel_status()
    assert (status.state, status.reason) == ("unavailable", kernels.DISABLED)
    assert DeltaGRU.fast_path_note().endswith(
        f"(unavailable here, {kernels.DISABLED}: PyTorch fallback)"
    )
    assert not fresh_kernel.exists()


def test_the_note_builds_nothing(fresh_kernel, no_build, monkeypatch):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    assert DeltaGRU.fast_path_note().endswith("(not tried: nothing ran on CPU)")
    assert infer.delta_gru_infer_kernel_status().state == "not tried"
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
    with pytest.warns(UserWarning, match="Delta GRU inference kernel unavailable"):
        out = m.fast_forward(x)
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert infer.delta_gru_infer_kernel_status() == kernels.KernelStatus("unavailable", why)
    with torch.no_grad():
        ref = m(x)
    assert torch.equal(out.reads, ref.reads)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=0, atol=1e-10)


def test_off_cpu_warns_once_and_takes_the_pytorch_path(monkeypatch, no_build):
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="Delta GRU's fast path .* runs on CPU only: on cuda"):
        assert infer.delta_gru_infer_kernel_for(OnCuda()) is None
    assert infer.delta_gru_infer_kernel_for(OnCuda()) is None  # once: an error filter would raise
    assert fast.FAST_PATH == infer.FAST_PATH  # the NumPy scan's fallback says no second line


def test_other_dtypes_take_the_pytorch_path(no_build):
    assert infer.delta_gru_infer_kernel_for(torch.empty(2, dtype=torch.bfloat16)) is None
    mixed = (torch.empty(2, dtype=torch.float32), torch.empty(2, dtype=torch.float64))
    assert infer.delta_gru_infer_kernel_for(*mixed) is None
