"""Delta GRU's whole-sequence training kernel (``baselines.ops.delta_gru_seq``,
``csrc/delta_gru_seq.cpp``) against the method's PyTorch path, which is the reference.

Every test is marked ``kernel`` (``pytest -m kernel``): the default run never compiles it
(tests/conftest.py). The equality tests build it (or find it built) in the session's cache and
fail, rather than skip, wherever kernels are expected to build (``HARNESS_EXPECT_KERNELS=1``).
"""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
import torch
import torch.utils.cpp_extension
from kernel_support import OnCuda, built, kernel_expected, op_node, train_on_meta

import baselines.delta_gru as delta_gru
import baselines.ops.delta_gru_seq as seq
import baselines.ops.library as kernels
from baselines.delta_gru import DeltaGRU, DeltaGRUConfig
from harness.data import cache_dir

pytestmark = pytest.mark.kernel

NODE = op_node("delta_gru_seq_forward")  # the autograd node of the recurrence's op

V, D = 3, 5
SPARSE = {"theta_x": 0.6, "theta_h": 0.08}  # cut a good share of both kinds of delta (checked)
# the gate's extremes: every delta kept (the dense GRU), every delta cut (h^ and x^ stay at 0)
CASES = {
    "sparse": {**SPARSE, "beta": 0.05},
    "all kept": {"theta_x": 0.0, "theta_h": 0.0, "beta": 0.02},
    "all cut": {"theta_x": 1e4, "theta_h": 1e4, "beta": 0.05},
    "no penalty": {**SPARSE, "beta": 0.0},
    "authors init": {**SPARSE, "init": "authors"},
}


@pytest.fixture
def library():
    """The kernel built (``kernel_support.built``)."""
    yield from built(seq.delta_gru_seq_kernel)


@pytest.fixture
def kernel():
    """The kernel built (``kernel_support.built``)."""
    yield from built(seq.delta_gru_seq_kernel)


def model(dtype: torch.dtype, v: int = V, d: int = D, **knobs) -> DeltaGRU:
    torch.manual_seed(1)
    return DeltaGRU(v, d, DeltaGRUConfig(**knobs)).to(dtype).train()


def fn(out) -> str:
    return type(out.outputs.grad_fn).__name__


def test_the_kernel_builds_at_the_epoch_start_and_trains():
    """Asking for its state builds nothing; ``on_epoch_start`` builds it (the library, into the
    session's cache, once a process); training runs it (one node), eval the per-step path."""
    expected = kernel_expected()
    if expected is None:
        pytest.skip("the C++ kernel is not expected to build here (no ninja, no compiler, or off)")
    seq.delta_gru_seq_kernel.cache_clear()
    assert seq.delta_gru_seq_kernel_status().state == "not tried"
    m = model(torch.float32)
    m.on_epoch_start(0, 1)
    status = seq.delta_gru_seq_kernel_status()
    assert status.state == "loaded", f"the kernel did not build although {expected}: {status}"
    library = kernels.library_file()
    assert library is not None and (cache_dir() / "kernels") in library.parents, library
    x = torch.randn(2, 5, V)
    assert fn(m(x)) == NODE
    assert fn(m.eval()(x)) == "StackBackward0"


def test_switched_off_training_takes_the_per_step_path(fresh_kernel, no_build, monkeypatch):
    monkeypatch.setenv("HARNESS_NO_KERNELS", "1")
    assert seq.delta_gru_seq_kernel_status() == kernels.KernelStatus(
        "unavailable", kernels.DISABLED
    )
    m = model(torch.float32)
    m.on_epoch_start(0, 1)
    assert fn(m(torch.randn(2, 5, V))) == "StackBackward0"
    assert not fresh_kernel.exists()


def test_a_failed_build_is_one_line_at_the_epoch_start_and_falls_back(fresh_kernel, monkeypatch):
    asked = []

    def load(*args, **kwargs):
        asked.append(kwargs["name"])
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ...")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = model(torch.float32)
    with pytest.warns(UserWarning, match="Delta GRU training kernel unavailable"):
        m.on_epoch_start(0, 1)
    m.on_epoch_start(1, 2)  # cached: asked once a process
    assert fn(m(torch.randn(2, 5, V))) == "StackBackward0"
    assert len(asked) == 1 and asked[0].startswith("condrnn_ops_")
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert seq.delta_gru_seq_kernel_status() == kernels.KernelStatus("unavailable", why)


def test_off_cpu_and_other_dtypes_take_the_per_step_path(monkeypatch, no_build):
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="Delta GRU training kernel runs on CPU only: on cuda"):
        assert seq.sequence_kernel(OnCuda()) is None
    assert seq.sequence_kernel(OnCuda()) is None  # once: an error filter would raise here
    assert seq.sequence_kernel(torch.empty(2, dtype=torch.bfloat16)) is None
    assert seq.sequence_kernel(torch.empty(2), torch.empty(2, dtype=torch.float64)) is None


@pytest.mark.parametrize("beta", [0.05, 0.0])
def test_delta_gru_trains_on_meta_through_the_ops(library, beta):
    """On the meta device the ops run (their fake implementations: the scan, the recurrence
    forward and backward), not the per-step path; with and without the regulariser."""
    nodes = train_on_meta(model(torch.float32, **SPARSE, beta=beta), (2, 4, V))
    assert NODE in nodes and "StackBackward0" not in nodes, nodes


def test_the_kernel_source_is_part_of_the_code_version(tmp_path, monkeypatch, no_build):
    from harness.planning import resume

    shutil.copytree(kernels.CSRC, tmp_path, dirs_exist_ok=True)
    monkeypatch.setattr(kernels, "CSRC", tmp_path)
    resume.method_code.cache_clear()
    before = resume.method_code("delta-gru")
    source = tmp_path / "delta_gru_seq.cpp"
    source.write_text(source.read_text() + "// changed\n")
    resume.method_code.cache_clear()
    assert resume.method_code("delta-gru") != before
    resume.method_code.cache_clear()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_memorised_steps_equal_the_scan_exactly(kernel, dtype):
    """The input scan against ``DeltaGRU._memorised_steps``: the same steps, exactly, with
    changes of exactly the threshold (kept), just below it (cut), from a non-zero reference."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(4, 13, V, dtype=dtype, generator=gen)
    x[0, :, 0] = torch.tensor([0.5, 1.0, 1.5, 1.75, 2.0, 2.5] * 2 + [0.0], dtype=dtype)
    x[1, :, 1] = torch.arange(13, dtype=dtype) * 0.4999
    x_hat0 = torch.randn(4, V, dtype=dtype, generator=gen)
    x_hat0[0, 0] = x_hat0[1, 1] = 0
    for theta in (0.0, 0.5, 1.3, 1e4):
        m = model(dtype, theta_x=theta)
        want = m._memorised_steps(x, x_hat0)
        got = seq.memorised_steps(kernel, x, x_hat0, theta)
        assert torch.equal(got, want), theta
        if theta == 0.5:  # a change of exactly 0.5 is kept, one of 0.25 or 0.4999 is cut
            assert got[0, :, 0].tolist() == [0, 1, 2, 2, 4, 5, 6, 7, 8, 8, 10, 11, 12]
            assert got[1, :, 1].tolist() == [-1, -1, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12]
        if theta == 1e4:
            assert (got == -1).all()


def run(m: DeltaGRU, x: torch.Tensor, state=None):
    """A training forward and the gradients of a loss reading the outputs, the regulariser and
    every part of the final state: ``(out, grads of x, the state and every parameter)``."""
    xr = x.clone().requires_grad_()
    out = m(xr, state=state)
    w = torch.randn(out.outputs.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(9))
    loss = (out.outputs * w).sum() + sum((s * s.detach().sin()).sum() for s in out.state)
    if out.aux_loss is not None:
        loss = loss + out.aux_loss
    leaves = [xr, *(s for s in state or () if s.requires_grad), *m.parameters()]
    return out, torch.autograd.grad(loss, leaves, allow_unused=True)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_training_with_the_kernel_equals_the_per_step_path(kernel, monkeypatch, case, dtype):
    """Outputs, mask, reads, the regulariser, the final state and the gradients of the input and
    every parameter, kernel against per-step path: float64 to 1e-10, float32 to 1e-5 (reads
    exactly); shapes with T = 1, B = 1 and V != D. Eval stays per-step."""
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    gen = torch.Generator().manual_seed(3)
    for B, T, v, d in ((4, 11, V, D), (1, 1, V, D), (2, 7, 6, 2), (3, 20, 2, 8)):
        x = torch.randn(B, T, v, dtype=dtype, generator=gen)
        runs = []
        for k in (kernel, None):
            monkeypatch.setattr(delta_gru, "sequence_kernel", lambda *t, k=k: k)
            m = model(dtype, v, d, **CASES[case])
            out, grads = run(m, x)
            assert (fn(out) == NODE) == (k is not None), fn(out)
            runs.append((m, out, grads))
        (m, out, grads), (_, ref, grads_ref) = runs
        assert torch.equal(out.mask, ref.mask) and torch.equal(out.reads, ref.reads)
        torch.testing.assert_close(out.outputs, ref.outputs, rtol=tol, atol=tol)
        assert (out.aux_loss is None) == (ref.aux_loss is None) == (m.cfg.beta == 0)
        if out.aux_loss is not None:
            torch.testing.assert_close(out.aux_loss, ref.aux_loss, rtol=tol, atol=tol)
        for a, b in zip(out.state, ref.state, strict=True):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)
        names = ["x"] + [n for n, _ in m.named_parameters()]
        for n, a, b in zip(names, grads, grads_ref, strict=True):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=f"{case} {B, T, v, d}: {n}")
        cut_x, cut_h = 1 - out.reads[..., :v].mean(), 1 - out.reads[:, 1:, v:].mean()
        if case == "all cut":
            assert cut_x == 1 and out.reads.sum() == 0 and out.outputs.abs().sum() > 0
        elif case == "all kept":
            assert cut_x == 0 and (T == 1 or cut_h == 0)
        elif T > 10:
            assert 0.1 < cut_x < 0.9 and 0.1 < cut_h < 0.9, (cut_x, cut_h)
        monkeypatch.setattr(delta_gru, "sequence_kernel", lambda *t: kernel)
        assert fn(m.eval()(x)) == "StackBackward0"  # eval: the per-step path


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_state_carried_in_trains_alike_with_the_kernel(kernel, monkeypatch, dtype, ties):
    """A second window from the first's final state (every part differentiable): values and the
    gradients of that state, the input and every parameter equal the per-step path's. With
    ``ties``: theta_h = 0 and h^_0 = h_0 in half the units, a zero delta that is kept (``>=``),
    so its gradient reaches h_0 and h^_0 as autograd's ``torch.where`` sends it."""
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(3, 14, V, dtype=dtype, generator=gen)
    knobs = {**CASES["sparse"], "theta_h": 0.0} if ties else CASES["sparse"]
    first = list(model(dtype, **CASES["sparse"]).eval()(x[:, :6]).state)
    if ties:
        first[2] = torch.where(torch.arange(D) % 2 == 0, first[1], first[2])
    runs = []
    for k in (kernel, None):
        monkeypatch.setattr(delta_gru, "sequence_kernel", lambda *t, k=k: k)
        state = tuple(s.detach().clone().requires_grad_() for s in first)
        out, grads = run(model(dtype, **knobs), x[:, 6:], state)
        assert (fn(out) == NODE) == (k is not None)
        runs.append((out, grads))
    (out, grads), (ref, grads_ref) = runs
    assert torch.equal(out.reads, ref.reads)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=tol, atol=tol)
    names = ["x", "x_hat0", "h0", "h_hat0", "m0", "m_nh0", "weight_ih", "weight_hh", "bias"]
    for n, a, b in zip(names, grads, grads_ref, strict=True):
        if n == "bias":  # the bias enters through the state's m0 only
            assert a is None and b is None
            continue
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=n)
        if n in ("h0", "h_hat0", "m_nh0"):
            assert a.abs().sum() > 0, n


def test_a_two_layer_model_with_lengths_trains_alike_with_the_kernel(kernel, monkeypatch):
    """The harness's model (``SeqModel``: two stacked layers, each its own memories, padded
    sequences read out at their last true step) in training, float64: the predictions, the
    summed regulariser and the gradient of every parameter equal the per-step path's to 1e-10."""
    from harness.components.config import ModelConfig
    from harness.components.model import SeqModel

    task = SimpleNamespace(readout="last", input_size=V, output_size=2, token_input=False)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 9, V, dtype=torch.float64, generator=gen)
    lengths = torch.tensor([9, 4, 1])
    runs = []
    for k in (kernel, None):
        monkeypatch.setattr(delta_gru, "sequence_kernel", lambda *t, k=k: k)
        torch.manual_seed(2)
        cfg = DeltaGRUConfig(**CASES["sparse"])
        net = SeqModel(DeltaGRU, cfg, task, ModelConfig(6, 2)).double().train()
        out = net(x, lengths)
        fns = {fn(o) for o in out.layers}
        assert fns == {NODE if k is not None else "StackBackward0"}
        loss = out.pred.square().sum() + out.aux_loss
        runs.append((out.pred, out.aux_loss, torch.autograd.grad(loss, list(net.parameters()))))
    (pred, aux, grads), (pred_ref, aux_ref, grads_ref) = runs
    torch.testing.assert_close(pred, pred_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(aux, aux_ref, rtol=1e-10, atol=1e-10)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
