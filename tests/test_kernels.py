"""The optional fused C++ kernels of SA-RNN's and VC-RNN's batch-1 fast paths and of EI-REHN's
training stack (``baselines.ops.library``).

The default run never compiles them (tests/conftest.py sets ``HARNESS_NO_KERNELS=1``) and checks
that asking for their state, or rendering a speedup report, builds nothing. The tests marked
``kernel`` (``pytest -m kernel``) build them (the one library of every kernel, once a process)
into the session's fresh cache dir and check them against the dense forward (EI-REHN's: its
layers against the Python ``_Stack`` and the layer equations, its fused training step against
the Python step and the literal ops of the gate); they fail, rather than skip, wherever the
kernels are expected to build.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torch.utils.cpp_extension
from kernel_support import (
    OnCuda,
    built,
    kernel_expected,
    op_node,
    per_step,
    train_on_meta,
)

import baselines.clockwork_rnn as clockwork_rnn
import baselines.ei_rehn as ei_rehn_module
import baselines.ops.ei_rehn_stack as ei_stack
import baselines.ops.library as kernels
import baselines.ops.masked_cell as masked_cell
import baselines.ops.sarnn as sa_ops
import baselines.ops.vcrnn as vc_ops
import baselines.phased_lstm as phased_lstm
import baselines.random_updates as random_updates
import baselines.sa_rnn as sa
import baselines.vc_rnn as vc
from baselines.clockwork_rnn import ClockworkRNN
from baselines.ei_rehn import EIREHN, EIREHNConfig
from baselines.phased_lstm import PhasedLSTM
from baselines.random_updates import RandomUpdates
from baselines.sa_rnn import SARNN, SARNNConfig
from baselines.vc_rnn import VCRNN, VCRNNConfig
from harness.bench.speedup_report import speedup_markdown


def model_at_80pct_skip(form: str, D: int = 64, T: int = 30) -> SARNN:
    """Independent decisions at 80 % skip (``at_skip``) in the given GRU form, float64."""
    torch.manual_seed(0)
    hooked, _ = SARNN.at_skip(3, D, 0.8, T)
    model = SARNN(3, D, SARNNConfig(gru_form=form)).eval()
    model.load_state_dict(hooked.state_dict())
    return model.double()


def test_the_default_run_uses_the_pytorch_fallback(fresh_kernel, no_build):
    assert os.environ.get("HARNESS_NO_KERNELS")
    status = sa_ops.sarnn_kernel_status()
    assert (status.state, status.reason) == ("unavailable", kernels.DISABLED)
    m = model_at_80pct_skip("after")
    x = torch.randn(1, 30, 3, dtype=torch.float64)
    out, ref = m.fast_forward(x), m(x)
    assert torch.equal(out.mask, ref.mask)
    assert sa_ops.sarnn_kernel_status() == status
    note = SARNN.fast_path_note()
    assert note.endswith(f"(unavailable here, {kernels.DISABLED}: PyTorch fallback)")
    assert not fresh_kernel.exists()


def test_rendering_a_report_builds_nothing(fresh_kernel, no_build, monkeypatch):
    """Where the kernel could be built but nothing ran at batch 1 yet, its note and a report
    rendered from hand-made rows say so without starting a build."""
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    assert sa_ops.sarnn_kernel_status() == kernels.KernelStatus("not tried")
    note = SARNN.fast_path_note()
    assert note.endswith("(not tried: nothing ran at batch 1 on CPU)")
    row = {
        "method": SARNN.name, "D": 8, "B": 32, "T": 5, "V": 2, "target_skip": 0.5, "skip": 0.5,
        "setting": "s", "flop_reduction": 2.0, "flop_reduction_exact": 2.0, "dense_ms": 1.0,
        "fast_ms": 0.5, "speedup_dense": 2.0, "mac_ratio_dense": 2.0, "max_abs_diff": 0.0,
        "mask_mismatch": 0, "rounds": 3, "note": note,
    }  # fmt: skip
    md = speedup_markdown([row], "c")
    assert f"- {note}" in md and f"| {SARNN.name} | 8 | 32 |" in md
    assert sa_ops.sarnn_kernel_status().state == "not tried"
    assert not fresh_kernel.exists()


def test_a_failed_build_is_reported_in_one_line_and_falls_back(fresh_kernel, monkeypatch):
    def load(*args, **kwargs):
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ... lots of output")

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = model_at_80pct_skip("before")
    x = torch.randn(1, 30, 3, dtype=torch.float64)
    with pytest.warns(UserWarning, match="kernel unavailable"):
        out = m.fast_forward(x)
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert sa_ops.sarnn_kernel_status() == kernels.KernelStatus("unavailable", why)
    assert SARNN.fast_path_note().endswith(f"(unavailable here, {why}: PyTorch fallback)")
    assert vc_ops.vcrnn_kernel_status() == sa_ops.sarnn_kernel_status()  # one library
    ref = m(x)
    assert torch.equal(out.mask, ref.mask)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=0, atol=1e-10)


def test_the_build_key_of_a_part_covers_its_sources_and_every_header(tmp_path):
    # a changed source of the part, a shared header or a new source of the part must give a new
    # build directory; a source of the other part must not
    shutil.copytree(kernels.CSRC, tmp_path, dirs_exist_ok=True)
    pristine = {part: kernels.build_key(tmp_path, part) for part in kernels.PARTS}
    assert pristine == {part: kernels.build_key(part=part) for part in kernels.PARTS}
    for part, own, other in (
        ("train", "ops.cpp", "infer/sarnn.cpp"),
        ("infer", "infer/sarnn.cpp", "masked_cell.cpp"),
    ):
        keys = [pristine[part]] if part == "train" else [kernels.build_key(tmp_path, part)]
        for name in ("common.h", own):
            (tmp_path / name).write_text((tmp_path / name).read_text() + "// changed\n")
            keys.append(kernels.build_key(tmp_path, part))
        new = Path(own).parent / "new.cpp"
        (tmp_path / new).write_text("// a new kernel\n")
        keys.append(kernels.build_key(tmp_path, part))
        (tmp_path / other).write_text((tmp_path / other).read_text() + "// changed\n")
        assert kernels.build_key(tmp_path, part) == keys[-1]
        assert len(set(keys)) == len(keys)
        (tmp_path / new).unlink()
    assert kernels.build_key(part="train") != kernels.build_key(part="infer")


def test_the_library_holds_every_kernel_in_its_two_parts_and_says_so_in_the_build_line():
    train = {p.stem for p in kernels.CSRC.glob("*.cpp")} - {"ops"}
    infer = {p.stem for p in (kernels.CSRC / "infer").glob("*.cpp")}
    assert (
        set(kernels.kernel_stems("train")) == train and set(kernels.kernel_stems("infer")) == infer
    )
    assert set(kernels.kernel_stems()) == train | infer and not train & infer
    assert {kernels.part_of(s) for s in train} == {"train"}
    assert {kernels.part_of(s) for s in infer} == {"infer"}
    assert BUILDING == f"building {len(train)} kernels (once, cached in "


def test_every_header_a_kernel_includes_is_in_csrc_and_shipped():
    import fnmatch
    import sys
    from pathlib import Path

    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    root = Path(kernels.__file__).resolve().parents[2]
    shipped = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = shipped["package-data"]["baselines"]
    shared = {
        "sarnn.cpp": "common.h",
        "vcrnn.cpp": "common.h",
        "srehn.cpp": "elastic_gate.h",
        "ei_rehn_stack.cpp": "elastic_gate.h",
    }
    for path in [*kernels.part_sources("train"), *kernels.part_sources("infer")]:
        source = path.relative_to(kernels.CSRC).as_posix()
        included = re.findall(r'^#include "([^"]+)"', path.read_text(), re.MULTILINE)
        assert path.name not in shared or shared[path.name] in included, source
        assert any(fnmatch.fnmatch(f"ops/csrc/{source}", g) for g in globs), (source, globs)
        for name in included:
            assert (kernels.CSRC / name).is_file(), name
            assert any(fnmatch.fnmatch(f"ops/csrc/{name}", g) for g in globs), (name, globs)


def test_no_kernel_calls_a_bare_lerp():
    """The kernels round as torch's lerp with ``torch_lerp`` (csrc/common.h). A bare ``lerp(``
    would be C++20's ``std::lerp`` wherever libstdc++'s math.h makes it global (its float
    overload beats a template): other rounding, not vectorised; the values agree within the
    tests' tolerances, so only this check sees it."""
    bare = re.compile(r"(?<![\w.:>])lerp\(")
    found = [
        f"{f.name}:{i}"
        for f in sorted([*kernels.CSRC.rglob("*.cpp"), *kernels.CSRC.glob("*.h")])
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if bare.search(line.split("//")[0])
    ]
    assert found == []


@pytest.fixture
def library():
    """Kernels nothing asked for since the test began; a test that builds them builds the library
    into the session's cache (where this process has loaded it, it is reused)."""
    kernels.forget_library()
    yield
    kernels.forget_library()


def in_the_sessions_cache(path: Path | None) -> bool:
    """Whether ``path`` (the loaded library) is a build in this session's cache."""
    from harness.data import cache_dir

    return path is not None and path.is_file() and (cache_dir() / "kernels") in path.parents


@pytest.mark.kernel
def test_the_kernel_builds_and_equals_the_dense_forward(library, monkeypatch):
    """Built into the session's cache (the library: once a process), the kernel runs at batch 1
    and equals the dense eval forward in both GRU forms: masks exactly, outputs to 1e-10 in
    float64 (1e-5 and the same masks in float32 at this seed)."""
    expected = kernel_expected()
    if expected is None:
        why = "no ninja or no C++ compiler (c++, g++) on PATH"
        if os.environ.get("HARNESS_NO_KERNELS"):
            why = "HARNESS_NO_KERNELS is set"
        pytest.skip(f"the C++ kernel is not expected to build here: {why}")
    assert sa_ops.sarnn_kernel_status().state == "not tried"
    kernel = sa_ops.sarnn_kernel()
    status = sa_ops.sarnn_kernel_status()
    assert kernel is not None, f"the kernel did not build although {expected}: {status}"
    assert status.state == "loaded"
    assert in_the_sessions_cache(kernels.library_file()), kernels.library_file()
    assert SARNN.fast_path_note().endswith("(used)")

    calls = []
    monkeypatch.setattr(sa, "sarnn_kernel", lambda: lambda *a: calls.append(1) or kernel(*a))
    for form in ("after", "before"):
        m = model_at_80pct_skip(form)
        for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
            m = m.to(dtype)
            x = torch.randn(1, 30, 3, dtype=dtype, generator=torch.Generator().manual_seed(1))
            dense = m(x)
            n = len(calls)
            fused = m.fast_forward(x)
            assert len(calls) == n + 1, f"the fused kernel was not used at batch 1 ({form})"
            assert torch.equal(fused.mask, dense.mask), (form, dtype)
            torch.testing.assert_close(fused.outputs, dense.outputs, rtol=0, atol=tol)
            assert 0.6 < 1 - dense.mask.mean().item() < 0.95  # a real mix of skips
        m.fast_forward(torch.randn(2, 30, 3))
        assert len(calls) == (2 if form == "after" else 4)  # batch 2: the PyTorch path


def vc_model(form: str, V: int = 3, D: int = 64, skip: float = 0.8) -> VCRNN:
    """VC-RNN at ``skip`` (``at_skip``'s bias) in the given GRU form, float64, with scheduler
    weights that make ``k_t`` vary with the input and the state, and a soft band of a few units
    (sharpness 2) so that ``e`` takes values strictly between 0 and 1."""
    torch.manual_seed(0)
    hooked, _ = VCRNN.at_skip(V, D, skip, 30)
    model = VCRNN(V, D, VCRNNConfig(gru_form=form, sharpness_end=2.0)).eval()
    model.load_state_dict(hooked.state_dict())
    with torch.no_grad():
        model.sched_h.normal_(0.0, 0.5 / D**0.5)
        model.sched_x.normal_(0.0, 0.5)
    return model.double()


def test_vcrnn_default_run_uses_the_pytorch_fallback(fresh_kernel, no_build):
    status = vc_ops.vcrnn_kernel_status()
    assert (status.state, status.reason) == ("unavailable", kernels.DISABLED)
    m = vc_model("after")
    x = torch.randn(1, 30, 3, dtype=torch.float64)
    out, ref = m.fast_forward(x), m(x)
    assert torch.equal(out.mask, ref.mask)
    assert vc_ops.vcrnn_kernel_status() == status
    note = VCRNN.fast_path_note()
    assert note.startswith(f"{VCRNN.name}: ")
    assert note.endswith(f"(unavailable here, {kernels.DISABLED}: PyTorch fallback)")
    assert not fresh_kernel.exists()


def test_vcrnn_note_builds_nothing(fresh_kernel, no_build, monkeypatch):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    assert vc_ops.vcrnn_kernel_status() == kernels.KernelStatus("not tried")
    assert VCRNN.fast_path_note().endswith("(not tried: nothing ran on CPU)")
    assert vc_ops.vcrnn_kernel_status().state == "not tried"
    assert not fresh_kernel.exists()


def test_vcrnn_failed_build_is_one_line_and_falls_back(fresh_kernel, monkeypatch):
    def load(*args, **kwargs):
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ... output")

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = vc_model("before")
    x = torch.randn(1, 30, 3, dtype=torch.float64)
    with pytest.warns(UserWarning, match="VC-RNN inference kernel unavailable"):
        out = m.fast_forward(x)
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert vc_ops.vcrnn_kernel_status() == kernels.KernelStatus("unavailable", why)
    assert VCRNN.fast_path_note().endswith(f"(unavailable here, {why}: PyTorch fallback)")
    assert sa_ops.sarnn_kernel_status() == kernels.KernelStatus("unavailable", why)  # one part
    assert kernels.library_status("train").state == "not tried"  # the other part: nothing asked
    ref = m(x)
    assert torch.equal(out.mask, ref.mask)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=0, atol=1e-10)


@pytest.mark.kernel
def test_the_vcrnn_kernel_builds_and_equals_the_dense_forward(library, monkeypatch):
    """Built into the session's cache, the kernel runs at batch 1 and equals the dense eval
    forward in both GRU forms, with the input masked (V = D) or not: masks and the scheduler's
    ``m`` exactly, outputs to 1e-10 in float64 and 1e-6 in float32."""
    expected = kernel_expected()
    if expected is None:
        why = "no ninja or no C++ compiler (c++, g++) on PATH"
        if os.environ.get("HARNESS_NO_KERNELS"):
            why = "HARNESS_NO_KERNELS is set"
        pytest.skip(f"the C++ kernel is not expected to build here: {why}")
    assert vc_ops.vcrnn_kernel_status().state == "not tried"
    kernel = vc_ops.vcrnn_kernel()
    status = vc_ops.vcrnn_kernel_status()
    assert kernel is not None, f"the kernel did not build although {expected}: {status}"
    assert status.state == "loaded"
    assert in_the_sessions_cache(kernels.library_file("infer")), kernels.library_file("infer")
    assert VCRNN.fast_path_note().endswith("(used)")

    calls = []
    monkeypatch.setattr(vc, "vcrnn_kernel", lambda: lambda *a: calls.append(1) or kernel(*a))
    for form in ("after", "before"):
        for V in (3, 24):  # V = D: the GRU reads e * x
            m = vc_model(form, V=V, D=24 if V == 24 else 64)
            for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-6)):
                m = m.to(dtype)
                g = torch.Generator().manual_seed(1)
                x = torch.randn(1, 30, V, dtype=dtype, generator=g)
                dense = m(x)
                n = len(calls)
                fused = m.fast_forward(x)
                assert len(calls) == n + 1, f"the fused kernel was not used ({form}, V={V})"
                assert torch.equal(fused.mask, dense.mask), (form, V, dtype)
                torch.testing.assert_close(fused.outputs, dense.outputs, rtol=0, atol=tol)
                torch.testing.assert_close(fused.state, dense.state, rtol=0, atol=tol)
                for key in ("m", "m_dev"):  # the scheduler's dot product: to rounding
                    torch.testing.assert_close(fused.extras[key], dense.extras[key])
                k = dense.mask.sum(-1)
                assert 0.05 < 1 - dense.mask.mean().item() < 0.95 and k.min() < k.max()
            # the soft band is used: at t = 0 (h = 0) some units have 0 < e < 1
            m0 = torch.sigmoid(F.linear(x[0, 0], m.sched_x, m.sched_b))
            e0 = torch.sigmoid(m.cfg.sharpness_end * (m0 * m.hidden_size - m.unit_index))
            assert ((e0 > m.cfg.eps) & (e0 < 1 - m.cfg.eps)).any()


def vc_batch_model(form: str, V: int, D: int, sharpness: float, eps: float) -> VCRNN:
    """``vc_model`` with trained-like scheduler weights: ``m_t`` differs between the sequences
    of a batch, so that their prefixes ``k_t`` differ at the same step."""
    torch.manual_seed(2)
    model = VCRNN(V, D, VCRNNConfig(gru_form=form, sharpness_end=sharpness, eps=eps)).eval()
    with torch.no_grad():
        model.sched_h.normal_(0.0, 2.0 / D**0.5)
        model.sched_x.normal_(0.0, 1.0)
        model.sched_b.fill_(-1.0)
    return model.double()


def check_vc_batch(m: VCRNN, B: int, T: int, calls: list) -> None:
    """The fused kernel runs ``m`` at batch B and equals the dense eval forward in float64 and
    float32: masks exactly, outputs to 1e-10 / 2e-5 (float32 sums over 30 steps), ``m`` to
    rounding; the sequences' prefixes differ at some step."""
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 2e-5)):
        m = m.to(dtype)
        x = torch.randn(B, T, m.input_size, dtype=dtype, generator=torch.Generator().manual_seed(1))
        dense = m(x)
        n = len(calls)
        fused = m.fast_forward(x)
        assert len(calls) == n + 1, "the fused kernel was not used"
        assert torch.equal(fused.mask, dense.mask), dtype
        torch.testing.assert_close(fused.outputs, dense.outputs, rtol=0, atol=tol)
        torch.testing.assert_close(fused.state, dense.state, rtol=0, atol=tol)
        for key in ("m", "m_dev"):
            torch.testing.assert_close(fused.extras[key], dense.extras[key])
        k = dense.mask.sum(-1)  # [B, T]
        assert (k.amin(0) < k.amax(0)).float().mean() > 0.5  # different decisions per sequence
        assert 0.05 < 1 - dense.mask.mean().item() < 0.95


@pytest.mark.kernel
@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("V, D", [(3, 40), (24, 24), (5, 37), (3, 64)])  # V = D: masked
@pytest.mark.parametrize("sharpness, eps", [(20.0, 0.01), (2.0, 0.01), (2.0, 1e-6)])
def test_the_vcrnn_kernel_equals_the_dense_forward_at_batch_above_1(
    library, monkeypatch, form, V, D, sharpness, eps
):
    """At batch 7 (and 1 and 2), the union of the sequences' prefixes: each sequence's decisions
    its own, bit for bit the dense forward's, with the soft band (sharpness 2 and 20), at an eps
    below 1e-4 (every soft value through ATen's sigmoid) and where B D is not a multiple of 64
    (the last values of the dense tensor, in ATen's scalar branch); rows of D = 64 are written
    with non-temporal stores (``stream_copy``), the others by memcpy."""
    if vc_ops.vcrnn_kernel() is None:
        pytest.skip("the kernel library does not build here")
    kernel, calls = vc_ops.vcrnn_kernel(), []
    monkeypatch.setattr(vc, "vcrnn_kernel", lambda: lambda *a: calls.append(1) or kernel(*a))
    m = vc_batch_model(form, V, D, sharpness, eps)
    check_vc_batch(m, 7, 30, calls)
    for B in (1, 2):
        x = torch.randn(B, 30, V, dtype=m.sched_h.dtype)
        assert torch.equal(m.fast_forward(x).mask, m(x).mask)


@pytest.mark.kernel
def test_the_vcrnn_kernel_at_two_threads_and_a_large_batch(library, monkeypatch):
    """B D >= ATen's grain size on two threads, where the dense forward's sigmoid runs in
    chunks (the kernel then computes every soft value as the dense forward does): the
    decisions are still the dense forward's."""
    if vc_ops.vcrnn_kernel() is None:
        pytest.skip("the kernel library does not build here")
    kernel, calls = vc_ops.vcrnn_kernel(), []
    monkeypatch.setattr(vc, "vcrnn_kernel", lambda: lambda *a: calls.append(1) or kernel(*a))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        check_vc_batch(vc_batch_model("after", 3, 1030, 2.0, 0.01), 33, 6, calls)
    finally:
        torch.set_num_threads(threads)


# --- EI-REHN's training stack (baselines/ops/ei_rehn_stack.py, csrc/ei_rehn_stack.cpp) ---------


def stack_inputs(m: EIREHN, layers: int, dtype: torch.dtype, B: int = 5):
    """Leaves h, d (zeros among its values, R_max layers) and the inputs of ``stack_layers``."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, m.input_size, dtype=dtype, generator=g)
    h = torch.randn(B, m.hidden_size, dtype=dtype, generator=g).requires_grad_()
    d = torch.rand(B, m.cfg.r_max, m.hidden_size, dtype=dtype, generator=g)
    d = d.sub(0.3).clamp(min=0).requires_grad_()
    bx = F.linear(x, m.weight_x) + m.bias
    init = torch.cat([m.s0, m.g0, m.z0])
    weights = (m.weight0, m.bias, m.proj, m.mix_bias, m.hyper.weight, m.hyper.bias, init)
    return x, h, d, (h, d[:, :layers], bx, *weights)


def test_ei_rehn_default_run_uses_the_python_stack(fresh_kernel, no_build):
    from test_ei_rehn import R_MAX, _randomised

    assert ei_stack.ei_rehn_stack_kernel_status() == kernels.KernelStatus(
        "unavailable", kernels.DISABLED
    )
    m = _randomised(EIREHN(3, 6, EIREHNConfig(r_max=R_MAX)).double())
    _, _, _, args = stack_inputs(m, 3, torch.float64)
    out = ei_stack.stack_layers(*args)
    assert type(out.grad_fn).__name__ == "_StackBackward"
    assert ei_stack.ei_rehn_stack_kernel_status().state == "unavailable"
    assert not fresh_kernel.exists()


def test_ei_rehn_failed_build_falls_back_to_the_python_stack(fresh_kernel, monkeypatch):
    from test_ei_rehn import R_MAX, _randomised

    def load(*args, **kwargs):
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ...")

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = _randomised(EIREHN(3, 6, EIREHNConfig(r_max=R_MAX)).double())
    _, _, _, args = stack_inputs(m, 3, torch.float64)
    with pytest.warns(UserWarning, match="EI-REHN training kernel unavailable"):
        out = ei_stack.stack_layers(*args)
    assert type(out.grad_fn).__name__ == "_StackBackward"
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert ei_stack.ei_rehn_stack_kernel_status() == kernels.KernelStatus("unavailable", why)


BUILDING = f"building {len(kernels.kernel_stems('train'))} kernels (once, cached in "


def test_a_kernel_build_is_said_once_on_stderr_and_is_not_training_time(
    fresh_kernel, monkeypatch, capsys
):
    """The first EI-REHN run on a machine compiles the kernel library (every kernel, once): one
    line on stderr says so, and the build runs in ``on_epoch_start``, before the epoch's timer
    (``time.train_s``) starts. The compiler is a stand-in that records when it is called and
    fails, so the run takes the Python path."""
    from types import SimpleNamespace

    from harness.components import config
    from harness.training import train

    order = []

    def load(**kwargs):
        order.append("build")
        raise RuntimeError("no compiler here")

    def perf_counter():  # harness.training.train's clock: every start (and stop) of a timed phase
        order.append("timer")
        return time.perf_counter()

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    monkeypatch.setattr(train, "time", SimpleNamespace(perf_counter=perf_counter))
    cfg = config.resolve("ei-rehn", "adding", 0, "smoke")
    assert cfg.train.epochs >= 2  # the build is asked for at every epoch's start, and runs once
    with pytest.warns(UserWarning, match="EI-REHN training kernel unavailable"):
        rec = train.run(cfg)
    assert rec["status"] == "ok", rec.get("error")
    assert order.count("build") == 1 and order.index("build") < order.index("timer"), order
    err = capsys.readouterr().err
    assert err.count(BUILDING) == 1 and f"{BUILDING}{fresh_kernel}" in err


def test_a_kernel_found_built_is_loaded_without_a_word(fresh_kernel, monkeypatch, capsys):
    """A build says itself and its time on stderr; a later process finds the library built in
    the cache and loads it (``torch.ops.load_library``) without a word; every kernel is then
    there. The compiler and the loader are stand-ins."""
    builds, loaded = [], []

    def load(*, name, sources, build_directory, is_python_module, **kwargs):
        builds.append(sorted(Path(s).name for s in sources))
        assert is_python_module is False  # a plain shared library, no pybind11 module
        (Path(build_directory) / f"{name}{torch.utils.cpp_extension.LIB_EXT}").touch()

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    monkeypatch.setattr(torch.ops, "load_library", loaded.append)
    weights = torch.zeros(3)
    assert ei_stack.step_kernel(weights) is ei_stack.ei_rehn_stack_kernel._ops
    err = capsys.readouterr().err.splitlines()
    assert (
        len(err) == 2
        and err[0].startswith(f"{BUILDING}{fresh_kernel}")
        and err[0].endswith(") ...")
    ), err
    assert re.fullmatch(r"\.\.\. built in \d+ s", err[1]), err
    assert builds == [sorted(p.name for p in kernels.part_sources("train"))]  # each, once
    assert loaded == [str(kernels.library_file())] and kernels.library_file().is_file()
    assert masked_cell.masked_cell_kernel() is not None and len(builds) == 1  # all in it
    assert masked_cell.masked_cell_kernel_status() == kernels.KernelStatus("loaded")
    kernels._loaded.clear()  # a later process: the binary is there
    ei_stack.ei_rehn_stack_kernel.cache_clear()
    assert ei_stack.step_kernel(weights) is not None
    assert capsys.readouterr().err == "" and len(builds) == 2 and len(loaded) == 2


def test_the_ei_rehn_kernel_source_is_part_of_its_code_version(tmp_path, monkeypatch, no_build):
    """A changed ``csrc/ei_rehn_stack.cpp`` changes EI-REHN's ``method_code`` (records made with
    other kernel code are stale), and asking for it builds nothing."""
    import sys

    from harness.components import code
    from harness.planning import resume

    shutil.copytree(kernels.CSRC, tmp_path, dirs_exist_ok=True)
    monkeypatch.setattr(kernels, "CSRC", tmp_path)
    files = code.source_files(sys.modules[EIREHN.__module__])
    assert str(tmp_path / "ei_rehn_stack.cpp") in files
    assert kernels.__file__ in files
    assert str(tmp_path / "masked_cell.cpp") not in files  # only the kernels its modules hold
    resume.method_code.cache_clear()
    before = resume.method_code("ei-rehn")
    (tmp_path / "ei_rehn_stack.cpp").write_text(
        (tmp_path / "ei_rehn_stack.cpp").read_text() + "// changed\n"
    )
    resume.method_code.cache_clear()
    assert resume.method_code("ei-rehn") != before
    resume.method_code.cache_clear()


def ei_rehn_kernel_or_skip():
    """The built EI-REHN stack kernel (the library, into the session's cache), skipping where
    not expected."""
    expected = kernel_expected()
    if expected is None:
        why = "no ninja or no C++ compiler (c++, g++) on PATH"
        if os.environ.get("HARNESS_NO_KERNELS"):
            why = "HARNESS_NO_KERNELS is set"
        pytest.skip(f"the C++ kernel is not expected to build here: {why}")
    ei_stack.ei_rehn_stack_kernel.cache_clear()
    assert ei_stack.ei_rehn_stack_kernel_status().state == "not tried"
    kernel = ei_stack.ei_rehn_stack_kernel()
    status = ei_stack.ei_rehn_stack_kernel_status()
    assert kernel is not None, f"the kernel did not build although {expected}: {status}"
    assert status.state == "loaded"
    return kernel


@pytest.mark.kernel
@pytest.mark.parametrize("layers", [1, 3, 6])
def test_the_ei_rehn_kernel_equals_the_python_stack_and_the_equations(library, layers):
    """The fused stack against the Python ``_Stack`` and against ``EIREHN._layers`` (autograd of
    the equations): h_t to 1e-13 and the gradient of every input (the gate d, zeros among its
    values, included) to rtol 1e-11 in float64; to 1e-5 in float32. Bias's gradient is 0
    where one layer ran, as ``_Stack``'s (the equations' autograd: none)."""
    from test_ei_rehn import R_MAX, _randomised

    assert layers <= R_MAX
    kernel = ei_rehn_kernel_or_skip()
    assert in_the_sessions_cache(kernels.library_file()), kernels.library_file()
    for dtype, tol in ((torch.float64, None), (torch.float32, 1e-5)):
        m = _randomised(EIREHN(3, 6, EIREHNConfig(r_max=R_MAX))).to(dtype)
        x, h, d, args = stack_inputs(m, layers, dtype)
        assert (args[1] == 0).any() and (args[1] > 0).any()
        fused = ei_stack.stack_layers(*args)
        assert type(fused.grad_fn).__name__ == op_node("ei_rehn_stack_forward")
        python = ei_stack._Stack.apply(*args)
        leaves = [h, d, *m.parameters()]
        w = torch.randn_like(fused)
        grads = [
            torch.autograd.grad((y * w).sum(), leaves, allow_unused=True, retain_graph=True)
            for y in (fused, python)
        ]
        refs = [(python, grads[1])]
        if dtype == torch.float64:
            eqs = m._layers(x, h, d, layers)
            refs.append((eqs, torch.autograd.grad((eqs * w).sum(), leaves, allow_unused=True)))
        for want, g_want in refs:
            rtol, atol = (0, 1e-13) if tol is None else (tol, tol)
            torch.testing.assert_close(fused, want, rtol=rtol, atol=atol)
            for i, (a, b) in enumerate(zip(grads[0], g_want, strict=True)):
                a = torch.zeros_like(leaves[i]) if a is None else a
                b = torch.zeros_like(leaves[i]) if b is None else b
                rtol, atol = (1e-11, 1e-13) if tol is None else (tol, tol)
                torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=f"input {i} {dtype}")
        assert torch.all(grads[0][1][:, layers:] == 0)  # the layers not run get no gradient
        # the op's own gradients: bias's its shape, 0 where one layer ran (as _Stack's)
        contiguous = [a.detach().contiguous() for a in args]
        out, *saved = kernel.forward(*contiguous)
        d_, w0, proj, hyper = contiguous[1], contiguous[3], contiguous[5], contiguous[7]
        got = kernel.backward(torch.ones_like(out), d_, w0, proj, hyper, *saved)
        assert len(got) == 10 and got[4].shape == contiguous[4].shape
        assert (got[4] == 0).all() == (layers == 1)


def step_case(case: str, dtype: torch.dtype, B: int = 5):
    """An EI-REHN layer (V 3, D 6, R_max ``R_MAX``) and one step's x, h for the fused-step tests.

    "random": random parameters, various depths. "edges": units at alpha_hat = 100 and 1000
    (depth 0 or 1), a unit whose local rate rounds to 0 (u = 0 at r = 1: d^1 = beta, no gradient
    through u; float64 only, sigmoid(-800) = 0) and units cut off at d = 0. "dead": alpha_hat =
    1000 everywhere, so d = 0 at every layer of every unit (no layer runs, or a copy at ``first``).
    """
    from test_ei_rehn import R_MAX, _randomised

    m = _randomised(EIREHN(3, 6, EIREHNConfig(r_max=R_MAX))).to(dtype).train()
    with torch.no_grad():
        if case == "edges":
            m.elastic.alpha_hat[0] = 100.0
            m.elastic.alpha_hat[1] = 1000.0
            m.elastic.rate.bias[2] = -800.0  # alpha_t of unit 2 is exactly 0
            m.elastic.rate.weight[2] = 0.0
            m.elastic.rate.bias[3] = 1.0  # alpha_t ~ 0.7: cut off after few layers
        elif case == "dead":
            m.elastic.alpha_hat.fill_(1000.0)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(B, 3, dtype=dtype, generator=g)
    h = torch.randn(B, 6, dtype=dtype, generator=g).requires_grad_()
    return m, x, h


def literal_gate(alpha: torch.Tensor, beta: torch.Tensor, alpha_t: torch.Tensor, r_max: int):
    """Eq. 11 in ``_gate``'s overflow-safe form as plain torch ops (autograd differentiates it)."""
    r = torch.arange(1, r_max + 1, dtype=alpha.dtype)[:, None]
    u = alpha * (r - 1) + alpha_t[:, None] * r
    pos = u > 0
    log1m = torch.log(-torch.expm1(-torch.where(pos, u, 1.0)))
    q = (alpha + alpha_t[:, None]) * r + torch.where(pos, log1m, -math.inf)
    return torch.relu(beta - q.clamp(max=0.0).exp())


def steps_of(m: EIREHN, x: torch.Tensor, h: torch.Tensor, first: bool, kernel):
    """One training step three ways: the fused C++ step (``fused_step``), the Python step of
    ``_train_forward`` (``_ElasticGate``, ``_Stack``) and the literal ops (``literal_gate``,
    ``EIREHN._layers``), each ``(h_t, d^1, n, mask, layers)``."""
    D, gate = m.hidden_size, m.elastic
    p = F.linear(
        x,
        torch.cat([gate.rate.weight[:, D:], m.weight_x]),
        torch.cat([gate.rate.bias, m.bias]),
    )
    alpha, beta = F.softplus(gate.alpha_hat), torch.sigmoid(gate.beta_hat)
    rate_h = gate.rate.weight[:, :D]
    init = torch.cat([m.s0, m.g0, m.z0])
    weights = (m.weight0, m.bias, m.proj, m.mix_bias, m.hyper.weight, m.hyper.bias, init)
    fused = ei_stack.fused_step(kernel, first, p, h, rate_h, alpha, beta, gate.r_max, weights)
    assert type(fused[0].grad_fn).__name__ == op_node("ei_rehn_stack_step_forward")
    rate_x, bx = p.split((D, 2 * D), -1)
    alpha_t = torch.sigmoid(torch.addmm(rate_x, h, rate_h.t()))
    out = [fused]
    for literal in (False, True):
        if literal:
            d = literal_gate(alpha, beta, alpha_t, gate.r_max)
            n = (d.detach() > 0).sum(1)
            trace = (d, n.to(d.dtype), (n > 0).to(d.dtype), n.amax(-1))
        else:
            tr = gate.trace(alpha, beta, alpha_t)
            assert type(tr.d.grad_fn).__name__ == "_ElasticGateBackward"
            trace = (tr.d, tr.n, tr.mask, tr.R)
        d, n, mask, R = trace
        layers = max(int(R.max()), int(first))
        if literal:
            h_t = m._layers(x, h, d, layers)
        else:
            h_t = ei_stack._Stack.apply(h, d[:, :layers], bx, *weights) if layers else h
        out.append((h_t, d[:, 0], n, mask, layers))
    return out


@pytest.mark.kernel
@pytest.mark.parametrize(
    ("case", "first"), [("random", False), ("edges", False), ("dead", False), ("dead", True)]
)
def test_the_fused_ei_rehn_step_equals_the_python_step_and_the_literal_ops(library, case, first):
    """One training step in the fused C++ node (local rate, elastic gate, depth trace, layers)
    against the Python step (``_ElasticGate``, ``_Stack``) and autograd of the literal ops, in
    float64: h_t to 1e-13, d^1 bit for bit (the same ATen expm1, log, exp), n, mask and the layer
    count exactly, and the gradient of h and of every parameter (alpha_hat, beta_hat, W_a and its
    bias, the layers') to rtol 1e-11, from h_t and from d^1 (the compute penalty's path), also
    with an infinite upstream gradient where d^1 = 0 (0 there, not NaN). To 1e-5 in float32."""
    kernel = ei_rehn_kernel_or_skip()
    for dtype in (torch.float64, torch.float32):
        if dtype == torch.float32 and case == "edges":
            continue  # the u = 0 unit needs float64's range (sigmoid(-800) = 0)
        m, x, h = step_case(case, dtype)
        (fused, python, literal) = steps_of(m, x, h, first, kernel)
        d1 = python[1].detach()
        if case == "edges":
            assert (d1[:, 2] == torch.sigmoid(m.elastic.beta_hat[2])).all()  # u = 0: d = beta
            assert (d1[:, :2] == 0).all() and (d1 > 0).any()  # alpha 100, 1000: depth 0
            assert python[4] > 0 and ((python[2] > 0) & (python[2] < m.cfg.r_max)).any()
        if case == "dead":
            assert (d1 == 0).all() and fused[4] == python[4] == int(first)
        if case == "random":
            assert 1 < python[4] and (python[2] < python[4]).any()  # various depths
        leaves = [h, *m.parameters()]
        w_h = torch.randn_like(fused[0])
        finite = torch.rand_like(d1)
        for w_d1 in (finite, torch.where(d1 == 0, math.inf, finite)):
            (fused, python, literal) = steps_of(m, x, h, first, kernel)  # _Stack frees its graph
            grads = []
            for h_t, d1_, *_ in (fused, python, literal):
                loss = (h_t * w_h).sum() + (d1_ * w_d1).sum()
                grads.append(
                    torch.autograd.grad(loss, leaves, allow_unused=True, retain_graph=True)
                )
            for want, g_want in ((python, grads[1]), (literal, grads[2])):
                if dtype == torch.float64:
                    torch.testing.assert_close(fused[0], want[0], rtol=0, atol=1e-13)
                    if want is python:
                        assert torch.equal(fused[1], want[1])
                    rtol, atol = 1e-11, 1e-13
                else:
                    rtol = atol = 1e-5
                torch.testing.assert_close(fused[1], want[1], rtol=rtol, atol=atol)
                assert torch.equal(fused[2], want[2]) and torch.equal(fused[3], want[3])
                assert fused[4] == want[4]
                for i, (a, b) in enumerate(zip(grads[0], g_want, strict=True)):
                    a = torch.zeros_like(leaves[i]) if a is None else a
                    b = torch.zeros_like(leaves[i]) if b is None else b
                    assert torch.isfinite(a).all(), f"leaf {i}"
                    torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=f"leaf {i} {dtype}")


@pytest.mark.kernel
def test_ei_rehn_training_with_the_kernel_equals_the_python_path(library, monkeypatch):
    """A whole training forward and backward (train mode, the batch's depth per step, the compute
    penalty on) with the fused step (rate, gate, trace and layers in C++), with the fused layers
    only (the Python gate) and on the Python path, in float64: outputs, trace, the penalty and
    every parameter's gradient equal; ``train_fused_kernel`` says which ran."""
    from test_ei_rehn import R_MAX, _randomised

    kernel = ei_rehn_kernel_or_skip()
    cfg = EIREHNConfig(r_max=R_MAX, lam_d=0.3)
    state = _randomised(EIREHN(3, 6, cfg).double()).state_dict()
    x = torch.randn(4, 12, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    steps, stacks = [], []
    runs = {}
    for name, step_k, stack_k in (
        ("fused", kernel, kernel),
        ("stack", None, kernel),
        ("python", None, None),
    ):
        monkeypatch.setattr(
            ei_rehn_module, "step_kernel", lambda *t, k=step_k: steps.append(1) or k
        )
        monkeypatch.setattr(ei_stack, "stack_kernel", lambda *t, k=stack_k: stacks.append(1) or k)
        m = EIREHN(3, 6, cfg).double().train()
        m.load_state_dict(state)
        steps.clear(), stacks.clear()
        out = m(x)
        runs[name] = m, out
        assert len(steps) == 1  # asked once per sequence
        assert len(stacks) == (0 if name == "fused" else x.shape[1])
        fused = 1.0 if name == "fused" else 0.0
        assert m.train_diagnostics()["train_fused_kernel"] == fused
    m, python = runs["python"]
    depth = python.depth.amax(-1).amax(0)
    assert 1 < depth.max() and depth.min() < R_MAX  # various depths, fewer than R_max somewhere
    w = torch.randn_like(python.outputs)
    want = (python.outputs * w).sum() + python.aux_loss
    g_ref = torch.autograd.grad(want, list(m.parameters()))
    names = [k for k, _ in m.named_parameters()]
    for name in ("fused", "stack"):
        m_k, out = runs[name]
        torch.testing.assert_close(out.outputs, python.outputs, rtol=0, atol=1e-13)
        assert torch.equal(out.mask, python.mask) and torch.equal(out.depth, python.depth)
        torch.testing.assert_close(out.aux_loss, python.aux_loss, rtol=1e-13, atol=0)
        assert (
            m_k.train_diagnostics()["train_layers_per_step"]
            == (m.train_diagnostics()["train_layers_per_step"])
        )
        got = (out.outputs * w).sum() + out.aux_loss
        g = torch.autograd.grad(got, list(m_k.parameters()))
        for n, a, b in zip(names, g, g_ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-13, msg=f"{name}: {n}")


def test_ei_rehn_off_cpu_warns_once_and_takes_the_python_step(monkeypatch, no_build):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="EI-REHN training kernel runs on CPU only: on cuda"):
        assert ei_stack.step_kernel(OnCuda()) is None
    assert ei_stack.stack_kernel(OnCuda()) is None  # once: an error filter would raise here


@pytest.mark.kernel
def test_the_ei_rehn_stack_op_runs_on_meta(library):
    """A step's layers on the meta device run the op (its fake implementations, forward and
    backward): h_t and the gradient of every input there, in its shape (bias's where one layer
    ran too: 0)."""
    from test_ei_rehn import R_MAX, _randomised

    ei_rehn_kernel_or_skip()
    m = _randomised(EIREHN(3, 6, EIREHNConfig(r_max=R_MAX)))
    for layers in (1, 3):
        _, _, _, args = stack_inputs(m, layers, torch.float32)
        leaves = [a.detach().to("meta").requires_grad_() for a in args]
        h_t = ei_stack.stack_layers(*leaves)
        assert h_t.device.type == "meta" and h_t.shape == args[0].shape
        assert type(h_t.grad_fn).__name__ == op_node("ei_rehn_stack_forward")
        grads = torch.autograd.grad(h_t.sum(), leaves, allow_unused=True)
        for i, (g, leaf) in enumerate(zip(grads, leaves, strict=True)):
            assert g.device.type == "meta" and g.shape == leaf.shape, i


@pytest.mark.kernel
@pytest.mark.parametrize(("case", "first"), [("dead", False), ("dead", True), ("random", False)])
def test_the_fused_ei_rehn_step_runs_under_fake_tensors(library, case, first):
    """Under FakeTensor with a shape environment (as torch.compile and export trace) the step op
    runs its fake implementations: the layer count is an unbacked symbolic int between ``first``
    and R_max. Once the caller knows the count (``torch._check``: the method's host sync), every
    output has the shape the C++ gives it (the layers' saved tensors that many rows), and the
    backward gives every input a gradient of its shape, whatever the count (the layers' 0 where no
    layer ran, L = 0, bias's where one did). On the meta device (no shape environment) the op
    cannot run: its output's shape is data."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

    kernel = ei_rehn_kernel_or_skip()
    m, x, h = step_case(case, torch.float32)
    D, gate = m.hidden_size, m.elastic
    with torch.no_grad():
        p = F.linear(
            x,
            torch.cat([gate.rate.weight[:, D:], m.weight_x]),
            torch.cat([gate.rate.bias, m.bias]),
        )
        inputs = [
            p,
            h.detach(),
            gate.rate.weight[:, :D],
            F.softplus(gate.alpha_hat),
            torch.sigmoid(gate.beta_hat),
            m.weight0,
            m.bias,
            m.proj,
            m.mix_bias,
            m.hyper.weight,
            m.hyper.bias,
            torch.cat([m.s0, m.g0, m.z0]),
        ]
        real, layers = kernel.step_forward(*inputs, gate.r_max, first)
    assert (layers == int(first)) if case == "dead" else (layers > 1)
    with pytest.raises(RuntimeError, match="data-dependent shape"):
        meta = [t.detach().to("meta") for t in inputs]
        ei_stack.fused_step(kernel, first, *meta[:5], gate.r_max, tuple(meta[5:]))
    mode = FakeTensorMode(shape_env=ShapeEnv())
    leaves = [mode.from_tensor(t.detach()).requires_grad_() for t in inputs]
    with mode:
        out, count = kernel.step_forward(*leaves, gate.r_max, first)
        assert isinstance(count, torch.SymInt) and free_unbacked_symbols(count)
        bounds = mode.shape_env.bound_sympy(count.node.expr)
        assert (bounds.lower, bounds.upper) == (int(first), gate.r_max)
        assert type(out[0].grad_fn).__name__ == op_node("ei_rehn_stack_step_forward")
        torch._check(count == layers)
        assert [tuple(t.shape) for t in out] == [tuple(t.shape) for t in real]
        grads = torch.autograd.grad(out[0].sum() + out[1].sum(), leaves, allow_unused=True)
    for i, (g, leaf) in enumerate(zip(grads, leaves, strict=True)):
        assert g is not None and g.shape == leaf.shape, i


# --- the whole-sequence masked-cell training kernel (Phased LSTM, Random Updates, Clockwork) ---

MASKED_METHODS = {
    "phased-lstm": (phased_lstm, PhasedLSTM),
    "random-updates": (random_updates, RandomUpdates),
    "clockwork-rnn": (clockwork_rnn, ClockworkRNN),
}


def masked_model(name: str, dtype: torch.dtype, D: int = 6):
    """The method ``name`` (V = 3, D units) in train mode, with gates that both open and close:
    short periods and a large leak for Phased LSTM, base 2 for the Clockwork RNN."""
    torch.manual_seed(1)
    cls = MASKED_METHODS[name][1]
    knobs = {
        "phased-lstm": {"period_low": 2.0, "period_high": 5.0, "leak": 0.05},
        "random-updates": {"p_skip": 0.5},
        "clockwork-rnn": {"num_modules": 3, "base": 2},
    }[name]
    return cls(3, D, cls.config_cls(**knobs)).to(dtype).train()


@pytest.fixture
def masked_kernel():
    """The kernel built (``kernel_support.built``)."""
    yield from built(masked_cell.masked_cell_kernel)


def test_masked_cell_default_run_trains_on_the_per_step_path(fresh_kernel, no_build):
    assert masked_cell.masked_cell_kernel_status() == kernels.KernelStatus(
        "unavailable", kernels.DISABLED
    )
    x = torch.randn(2, 5, 3)
    for name in MASKED_METHODS:
        m = masked_model(name, torch.float32)
        m.on_epoch_start(0, 1)
        assert type(m(x).outputs.grad_fn).__name__ == "StackBackward0", name
    assert not fresh_kernel.exists()


def test_a_failed_masked_cell_build_is_one_line_at_the_epoch_start_and_falls_back(
    fresh_kernel, monkeypatch
):
    """The methods ask for the kernel in ``on_epoch_start`` (before the epoch's timer); a build
    that fails is one warning and a one-line status, and training takes the per-step path."""
    asked = []

    def load(*args, **kwargs):
        asked.append(kwargs["name"])
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ...")

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    x = torch.randn(2, 5, 3)
    for i, name in enumerate(MASKED_METHODS):
        m = masked_model(name, torch.float32)
        if i == 0:
            with pytest.warns(UserWarning, match="masked-cell training kernel unavailable"):
                m.on_epoch_start(0, 1)
        else:
            m.on_epoch_start(0, 1)  # cached: asked once a process
        assert type(m(x).outputs.grad_fn).__name__ == "StackBackward0", name
    assert len(asked) == 1 and asked[0].startswith("condrnn_ops_")
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert masked_cell.masked_cell_kernel_status() == kernels.KernelStatus("unavailable", why)


def test_masked_cell_off_cpu_warns_once_and_takes_the_per_step_path(monkeypatch, no_build):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="masked-cell training kernel runs on CPU only: on cuda"):
        assert masked_cell.sequence_kernel(OnCuda()) is None
    assert masked_cell.sequence_kernel(OnCuda()) is None  # once: an error filter would raise here


@pytest.mark.kernel
@pytest.mark.parametrize("name", list(MASKED_METHODS))
def test_masked_cell_methods_train_on_meta_through_the_op(masked_kernel, name):
    """On the meta device the op runs (its fake implementation, forward and backward), not the
    per-step path."""
    nodes = train_on_meta(masked_model(name, torch.float32), (2, 4, 3))
    assert op_node("masked_cell_forward") in nodes, nodes


def test_the_masked_cell_kernel_source_is_part_of_the_methods_code_versions(
    tmp_path, monkeypatch, no_build
):
    from harness.planning import resume

    shutil.copytree(kernels.CSRC, tmp_path, dirs_exist_ok=True)
    monkeypatch.setattr(kernels, "CSRC", tmp_path)
    resume.method_code.cache_clear()
    before = {name: resume.method_code(name) for name in MASKED_METHODS}
    source = tmp_path / "masked_cell.cpp"
    source.write_text(source.read_text() + "// changed\n")
    resume.method_code.cache_clear()
    for name, code in before.items():
        assert resume.method_code(name) != code, name
    resume.method_code.cache_clear()


@pytest.mark.kernel
@pytest.mark.parametrize("cell", ["tanh", "gru", "lstm"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_masked_cell_kernel_equals_the_per_step_cells(masked_kernel, cell, dtype):
    """Values and the gradients of xp, h0, c0, W and the mask m against the methods' per-step
    code (``per_step``): float64 to 1e-12, float32 to 1e-5; shapes with T = 1 and B = 1; masks
    with exact 0s and 1s among gate values, all 0 (the state copied exactly) and all 1. The loss
    reads every h_t and, for the LSTM, c_T. Each way of the kernel's matmuls."""
    G = {"tanh": 1, "gru": 3, "lstm": 4}[cell]
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    gen = torch.Generator().manual_seed(0)
    shapes = ((3, 7, 5, None), (1, 1, 4, None), (2, 9, 16, None), (2, 4, 3, 0.0), (2, 4, 3, 1.0))
    # and a larger one: W's gradient over B T = 13 x 21 products
    shapes += ((13, 21, 37, None),)
    for B, T, D, fill in shapes:  # fill: a mask all 0 or all 1

        def rand(*shape, scale=1.0):
            return (torch.randn(*shape, dtype=dtype, generator=gen) * scale).requires_grad_()

        # W at 0.5 is chaotic at D = 37: float32's rounding would grow past 1e-5 by any matmul
        scale = 0.5 if D <= 16 else D**-0.5
        xp, h0, W = rand(B, T, G * D), rand(B, D), rand(G * D, D, scale=scale)
        c0 = rand(B, D) if cell == "lstm" else None
        m = torch.rand(B, T, D, dtype=dtype, generator=gen)
        m = m.masked_fill(m < 0.3, 0).masked_fill(m > 0.8, 1) if fill is None else m.fill_(fill)
        m.requires_grad_()
        w_out, w_c = torch.randn(B, T, D, dtype=dtype), torch.randn(B, D, dtype=dtype)
        leaves = [xp, h0, W, m] + ([c0] if c0 is not None else [])
        runs = []
        for fused in (True, False):
            if fused:  # the kernel takes the input terms time-major
                hs, c = masked_cell.masked_sequence(
                    masked_kernel, cell, xp.transpose(0, 1), h0, W, m, c0
                )
            else:
                hs, c = per_step(cell, xp, h0, W, m, c0)
            loss = (hs * w_out).sum() + (0 if c is None else (c * w_c).sum())
            runs.append((hs, c, torch.autograd.grad(loss, leaves)))
        (hs, c, grads), (hs_ref, c_ref, grads_ref) = runs
        assert type(hs.grad_fn).__name__ == op_node("masked_cell_forward")
        torch.testing.assert_close(hs, hs_ref, rtol=tol, atol=tol)
        if c0 is not None:
            torch.testing.assert_close(c, c_ref, rtol=tol, atol=tol)
        if fill == 0.0:  # closed throughout: exact copies of the initial state
            assert torch.equal(hs, h0.detach()[:, None].expand(B, T, D))
            assert c is None or torch.equal(c, c0.detach())
        for name, a, b in zip(("xp", "h0", "W", "m", "c0"), grads, grads_ref, strict=False):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=f"{cell} {B, T, D}: d{name}")


@pytest.mark.kernel
def test_the_masked_cell_keeps_its_freed_buffers_for_the_next_call(masked_kernel):
    """The sequence's buffers, once freed, are held (``pool_held``) and serve the next call of
    the same sizes (the next training step) instead of fresh memory."""
    S, B, D = 7, 3, 5
    args = (torch.randn(S, B, 4 * D), torch.randn(B, D), torch.randn(B, D), torch.randn(4 * D, D))
    m = torch.rand(B, S, D)
    out = masked_kernel.forward(*args, m, 2)  # hs, H, A, X, C
    a_bytes = out[2].numel() * out[2].element_size()
    held = masked_kernel.pool_held()
    first = [t.data_ptr() for t in out]
    del out
    assert masked_kernel.pool_held() >= held + a_bytes
    again = masked_kernel.forward(*args, m, 2)
    assert masked_kernel.pool_held() <= held
    assert again[2].data_ptr() in first  # A: the only buffer of its size


@pytest.mark.kernel
@pytest.mark.parametrize("name", list(MASKED_METHODS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_training_with_the_masked_cell_kernel_equals_the_per_step_path(
    masked_kernel, monkeypatch, name, dtype
):
    """A training forward and backward of the method with the kernel and on its per-step path
    (the kernel switched off in its module): the same masks (Random Updates' draws from the same
    global RNG state), outputs, state and the gradient of every parameter and of the input, to
    1e-12 in float64 and 1e-5 in float32; Phased LSTM also with given sample times, its leak
    making the gate's parameters learn through the mask's gradient. Eval stays per-step."""
    module, _ = MASKED_METHODS[name]
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    gen = torch.Generator().manual_seed(3)
    for B, T in ((4, 11), (1, 1), (2, 6)):
        x = torch.randn(B, T, 3, dtype=dtype, generator=gen)
        times = torch.rand(B, T, dtype=dtype, generator=gen).cumsum(1) * 3
        for kw in ({}, {"times": times}) if name == "phased-lstm" else ({},):
            runs = []
            for kernel in (masked_kernel, None):
                monkeypatch.setattr(module, "sequence_kernel", lambda *t, k=kernel: k)
                m = masked_model(name, dtype)
                xr = x.clone().requires_grad_()
                torch.manual_seed(7)
                out = m(xr, **kw)
                fn = type(out.outputs.grad_fn).__name__
                assert (fn == op_node("masked_cell_forward")) == (kernel is not None), fn
                w = torch.randn(out.outputs.shape, dtype=dtype, generator=torch.Generator())
                h_state = out.state[0] if isinstance(out.state, tuple) else out.state
                loss = (out.outputs * w).sum() + h_state.sum()
                if name == "phased-lstm":
                    loss = loss + out.state[1].square().sum()  # c_T
                params = [xr, *m.parameters()]
                runs.append((m, out, torch.autograd.grad(loss, params)))
            (m, out, grads), (m_ref, ref, grads_ref) = runs
            assert torch.equal(out.mask, ref.mask)
            assert 0 < out.mask.mean() < 1 or T == 1 or name == "phased-lstm"  # its leak: k > 0
            torch.testing.assert_close(out.outputs, ref.outputs, rtol=tol, atol=tol)
            names = ["x"] + [n for n, _ in m.named_parameters()]
            for n, a, b in zip(names, grads, grads_ref, strict=True):
                torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=f"{name} {B, T}: {n}")
            if name == "phased-lstm" and T > 1:
                assert grads[names.index("r_on")].abs().sum() > 0  # learns through k
            monkeypatch.setattr(module, "sequence_kernel", lambda *t: masked_kernel)
            evaluated = m.eval()(x)  # eval: the per-step path, though the kernel is there
            assert type(evaluated.outputs.grad_fn).__name__ == "StackBackward0"


@pytest.mark.kernel
@pytest.mark.parametrize("name", list(MASKED_METHODS))
def test_a_two_layer_model_with_lengths_trains_alike_with_the_masked_cell_kernel(
    masked_kernel, monkeypatch, name
):
    """The harness's model (``SeqModel``: two stacked layers, padded sequences read out at their
    last true step, sample times for Phased LSTM) in training, float64: the predictions and the
    gradient of every parameter with the kernel equal the per-step path's to 1e-12."""
    from types import SimpleNamespace

    from harness.components.config import ModelConfig
    from harness.components.model import SeqModel

    module, cls = MASKED_METHODS[name]
    task = SimpleNamespace(readout="last", input_size=3, output_size=2, token_input=False)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 9, 3, dtype=torch.float64, generator=gen)
    lengths = torch.tensor([9, 4, 1])
    times = torch.rand(3, 9, dtype=torch.float64, generator=gen).cumsum(1) * 2
    runs = []
    for kernel in (masked_kernel, None):
        monkeypatch.setattr(module, "sequence_kernel", lambda *t, k=kernel: k)
        torch.manual_seed(2)
        model = SeqModel(cls, masked_model(name, torch.float64).cfg, task, ModelConfig(6, 2))
        model = model.double().train()
        out = model(x, lengths, times=times)
        fns = {type(o.outputs.grad_fn).__name__ for o in out.layers}
        assert fns == {op_node("masked_cell_forward") if kernel is not None else "StackBackward0"}
        grads = torch.autograd.grad(out.pred.square().sum(), list(model.parameters()))
        runs.append((out.pred, grads))
    (pred, grads), (pred_ref, grads_ref) = runs
    torch.testing.assert_close(pred, pred_ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
