"""VC-RNN's whole-sequence training kernel (``baselines.ops.vcrnn_train``, ``csrc/vcrnn_train.cpp``)
against the method's per-step PyTorch loop (``VCRNN._step``, the reference).

Every test is marked ``kernel`` (``pytest -m kernel``): those that need the kernel build it, once
into this session's cache (``vc_kernel``) and once into an empty one (``fresh_vc_kernel``), and
fail rather than skip wherever it is expected to build (``HARNESS_EXPECT_KERNELS=1``).
"""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F
import torch.utils.cpp_extension
from kernel_support import (
    OnCuda,
    built,
    fresh_cache,
    kernel_expected,
    op_node,
    train_on_meta,
)

import baselines.ops.library as kernels
import baselines.ops.vcrnn_train as vc_train
import baselines.vc_rnn as vc
from baselines.vc_rnn import VCRNN, VCRNNConfig
from harness.data import cache_dir

pytestmark = pytest.mark.kernel

NODE = op_node("vcrnn_train_forward")  # the kernel's autograd node
LOOP = "StackBackward0"  # the per-step loop's last op


@pytest.fixture
def fresh_vc_kernel(tmp_path, monkeypatch):
    """``fresh_kernel`` (tests/conftest.py)."""
    yield from fresh_cache(tmp_path, monkeypatch)


@pytest.fixture
def vc_kernel():
    """The kernel built (``kernel_support.built``)."""
    yield from built(vc_train.vcrnn_train_kernel)


@pytest.fixture
def vc_ops():
    """The kernel built (``kernel_support.built``), its matmuls the default."""
    yield from built(vc_train.vcrnn_train_kernel)


def model(V: int, D: int, dtype: torch.dtype, form: str = "after", **knobs) -> VCRNN:
    """VC-RNN in train mode with a scheduler that reads the input and the state (it starts at
    zero), so that k_t varies over steps and sequences."""
    torch.manual_seed(0)
    m = VCRNN(V, D, VCRNNConfig(gru_form=form, gamma=0.3, **knobs)).to(dtype).train()
    with torch.no_grad():
        m.sched_h.normal_(0.0, 1.5 / D**0.5)
        m.sched_x.normal_(0.0, 0.7)
        m.sched_b.fill_(0.2)
    return m


def both_paths(monkeypatch, kernel, m: VCRNN, x: torch.Tensor, h0: torch.Tensor | None = None):
    """The forward and the gradients of the input, the initial state (when given) and every
    parameter, with the kernel and on the per-step path: ``[(out, grads), (out, grads)]``, the
    gradients by name. The loss reads every output, the final state and the L1 pull."""
    runs = []
    for k in (kernel, None):
        monkeypatch.setattr(vc, "sequence_kernel", lambda *t, k=k: k)
        xr = x.clone().requires_grad_()
        leaves = {"x": xr, **dict(m.named_parameters())}
        state = None
        if h0 is not None:
            state = leaves["h0"] = h0.clone().requires_grad_()
        out = m(xr, state=state)
        assert type(out.outputs.grad_fn).__name__ == (NODE if k is not None else LOOP)
        w = torch.randn(out.outputs.shape, dtype=x.dtype, generator=torch.Generator())
        loss = (out.outputs * w).sum() + out.state.square().sum() + out.aux_loss
        grads = torch.autograd.grad(loss, list(leaves.values()))
        runs.append((out, dict(zip(leaves, grads, strict=True))))
    return runs


def assert_equal_runs(runs, tol: float, what: str) -> None:
    """Masks exactly; outputs, state, ``m``, its deviation, the L1 pull and every gradient to
    ``tol`` (relative to the largest value of each, so float32's scale of rounding)."""
    (out, grads), (ref, grads_ref) = runs
    assert torch.equal(out.mask, ref.mask), what

    def close(a, b, name):
        scale = max(b.abs().max().item(), 1.0)
        torch.testing.assert_close(a, b, rtol=0, atol=tol * scale, msg=f"{what}: {name}")

    close(out.outputs, ref.outputs, "outputs")
    close(out.state, ref.state, "state")
    close(out.aux_loss, ref.aux_loss, "aux_loss")
    for key in ("m", "m_dev"):
        close(out.extras[key], ref.extras[key], key)
    assert grads.keys() == grads_ref.keys()
    for name, a in grads.items():
        close(a, grads_ref[name], f"the gradient of {name}")


# float32: rounding, which the soft band's gradient multiplies by lam D (340 at lam 20, D 17;
# the largest difference seen there was 7.5e-6 of the gradient's scale, elsewhere under 1e-6)
TOL = {torch.float64: 1e-10, torch.float32: 5e-5}


def test_a_build_is_what_training_runs(monkeypatch):
    """``on_epoch_start`` builds the kernel (the library, into the session's cache, once a
    process); training then runs it, eval and other dtypes the per-step loop."""
    expected = kernel_expected()
    if expected is None:
        pytest.skip("the C++ kernel is not expected to build here (no ninja, no compiler, or off)")
    vc_train.vcrnn_train_kernel.cache_clear()
    assert vc_train.vcrnn_train_kernel_status().state == "not tried"
    m = model(3, 6, torch.float32)
    m.on_epoch_start(0, 3)
    status = vc_train.vcrnn_train_kernel_status()
    assert status.state == "loaded", f"the kernel did not build although {expected}: {status}"
    library = kernels.library_file()
    assert library is not None and (cache_dir() / "kernels") in library.parents, library
    x = torch.randn(2, 5, 3)
    assert type(m(x).outputs.grad_fn).__name__ == NODE
    assert type(m.eval()(x).outputs.grad_fn).__name__ == LOOP  # eval: the per-step path
    assert vc_train.sequence_kernel(x.double(), x) is None  # mixed dtypes
    assert type(m.train().bfloat16()(x.bfloat16()).outputs.grad_fn).__name__ == LOOP


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("V, D", [(3, 6), (6, 6), (5, 17)])  # V = D: the GRU reads e * x
def test_the_kernel_equals_the_per_step_path(vc_kernel, monkeypatch, dtype, form, V, D):
    """Values, masks, m, the L1 pull and the gradients of x, h0 and every parameter, in float64
    to 1e-10 and float32 to rounding (``TOL``); shapes with T = 1 and B = 1, a given initial
    state or none, and the sharpness of the ramp's start (every unit in the soft band), middle
    and end and of a hard step."""
    gen = torch.Generator().manual_seed(1)
    m = model(V, D, dtype, form)
    for B, T, lam in ((4, 11, 2.0), (1, 1, 2.0), (2, 6, 0.1), (1, 9, 20.0), (3, 7, 1e4)):
        m.sharpness = lam
        x = torch.randn(B, T, V, dtype=dtype, generator=gen)
        for h0 in (None, torch.randn(B, D, dtype=dtype, generator=gen)):
            runs = both_paths(monkeypatch, vc_kernel, m, x, h0)
            assert_equal_runs(runs, TOL[dtype], f"{form} V={V} D={D} B={B} T={T} lam={lam}")
            if lam == 2.0 and T > 1:  # soft (0 < e < 1), updated and skipped units all occur
                e = soft_mask(m, x, runs[1][0], h0)
                assert ((e > 0) & (e < 1)).any() and (e == 1).any() and (e == 0).any()


def soft_mask(m: VCRNN, x: torch.Tensor, out, h0: torch.Tensor | None) -> torch.Tensor:
    """The soft mask e ``[B, T, D]`` of a run, recomputed from its states."""
    B, T, D = out.outputs.shape
    first = out.outputs.new_zeros(B, D) if h0 is None else h0
    h = torch.cat([first[:, None], out.outputs[:, :-1]], 1).detach()
    mt = torch.sigmoid(F.linear(x, m.sched_x, m.sched_b) + F.linear(h, m.sched_h))
    return vc.threshold_eps(torch.sigmoid(m.sharpness * (mt * D - m.unit_index)), m.cfg.eps)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("V", [3, 6])
def test_the_gate_extremes_equal_the_per_step_path(vc_kernel, monkeypatch, dtype, form, V):
    """Everything skipped (every state an exact copy of h0), everything updated, a threshold
    that leaves no soft band (eps near 0.5) and soft values exactly at eps and at 1 - eps, where
    Thr_eps passes the value and its gradient (``torch.where``'s strict comparisons)."""
    D, B, T = 6, 3, 5
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(B, T, V, dtype=dtype, generator=gen)
    h0 = torch.randn(B, D, dtype=dtype, generator=gen)
    for case in ("none", "all", "no band", "at eps", "at 1 - eps"):
        knobs = {"eps": 0.49} if case == "no band" else {}
        m = model(V, D, dtype, form, **knobs)
        m.sharpness = 20.0 if case in ("none", "all") else 2.0  # none: soft < eps at unit 1
        if case in ("none", "all"):
            with torch.no_grad():
                m.sched_b.fill_(-40.0 if case == "none" else 40.0)
        unit = 3 if case == "at eps" else 1  # its soft value: 0.1 < v < 0.5, 0.5 < v < 0.95
        if case.startswith("at"):  # a constant m_t, then eps set to one unit's soft value
            with torch.no_grad():
                m.sched_h.zero_()
                m.sched_x.zero_()
                # the step's soft mask, by the ops of VCRNN._step on its shapes: [B, 1], [B, D]
                p = m._input_proj(x[:, 0])[:, :1]
                mt = torch.sigmoid(torch.addmm(p, h0, m.sched_h.t()))
                soft = torch.sigmoid(m.sharpness * (mt * D - m.unit_index))
            v = soft[0, unit].item()
            eps = v if case == "at eps" else 1.0 - v  # 1 - (1 - v) == v: exact for v > 0.5
            m.cfg = VCRNNConfig(gru_form=form, gamma=0.3, eps=eps)
            assert (soft == (eps if case == "at eps" else 1 - eps)).any()
        runs = both_paths(monkeypatch, vc_kernel, m, x, h0)
        assert_equal_runs(runs, TOL[dtype], f"{form} V={V}: {case}")
        (out, grads), _ = runs
        mask = out.mask
        if case == "none":
            assert not mask.any()
            assert torch.equal(out.outputs, h0[:, None].expand(B, T, D))  # exact copies
        elif case in ("all", "no band"):
            assert mask.any() and (case == "no band" or mask.all())
        else:  # the unit at the threshold is in the band: updated, and m learns through it
            assert mask[..., unit].all()
            assert grads["sched_b"].abs().sum() > 0  # the pull's and the band's


@pytest.mark.parametrize("form", ["after", "before"])
def test_a_two_layer_model_with_lengths_trains_alike(vc_kernel, monkeypatch, form):
    """The harness's model (``SeqModel``: two stacked layers, the second's input masked as
    V = D, padded sequences read out at their last true step), float64: the predictions and the
    gradient of every parameter with the kernel equal the per-step path's to 1e-10."""
    from types import SimpleNamespace

    from harness.components.config import ModelConfig
    from harness.components.model import SeqModel

    task = SimpleNamespace(readout="last", input_size=3, output_size=2, token_input=False)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 9, 3, dtype=torch.float64, generator=gen)
    lengths = torch.tensor([9, 4, 1])
    runs = []
    for k in (vc_kernel, None):
        monkeypatch.setattr(vc, "sequence_kernel", lambda *t, k=k: k)
        torch.manual_seed(2)
        cfg = VCRNNConfig(gru_form=form)
        net = SeqModel(VCRNN, cfg, task, ModelConfig(6, 2)).double().train()
        for layer in net.layers:
            layer.on_epoch_start(1, 3)  # mid-ramp sharpness
            with torch.no_grad():
                layer.sched_h.normal_(0.0, 0.6, generator=torch.Generator().manual_seed(5))
        out = net(x, lengths)
        fns = {type(o.outputs.grad_fn).__name__ for o in out.layers}
        assert fns == {NODE if k is not None else LOOP}
        loss = out.pred.square().sum() + sum(o.aux_loss for o in out.layers)
        runs.append((out, torch.autograd.grad(loss, list(net.parameters()))))
    (out, grads), (ref, grads_ref) = runs
    torch.testing.assert_close(out.pred, ref.pred, rtol=1e-10, atol=1e-10)
    for a, b in zip(out.layers, ref.layers, strict=True):
        assert torch.equal(a.mask, b.mask)
        assert 0 < a.mask.mean() < 1
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_the_default_run_trains_on_the_per_step_path(fresh_vc_kernel, monkeypatch):
    """With ``HARNESS_NO_KERNELS=1`` nothing is built and training runs the per-step loop."""

    def load(*args, **kwargs):
        pytest.fail("the C++ kernel was built")

    monkeypatch.setenv("HARNESS_NO_KERNELS", "1")
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    status = kernels.KernelStatus("unavailable", kernels.DISABLED)
    assert vc_train.vcrnn_train_kernel_status() == status
    m = model(3, 6, torch.float32)
    m.on_epoch_start(0, 2)
    assert type(m(torch.randn(2, 5, 3)).outputs.grad_fn).__name__ == LOOP
    assert vc_train.vcrnn_train_kernel_status() == status
    assert not fresh_vc_kernel.exists()


def test_a_failed_build_is_one_line_at_the_epoch_start_and_falls_back(fresh_vc_kernel, monkeypatch):
    asked = []

    def load(*args, **kwargs):
        asked.append(kwargs["name"])
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ...")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = model(3, 6, torch.float32)
    with pytest.warns(UserWarning, match="VC-RNN training kernel unavailable"):
        m.on_epoch_start(0, 2)
    m.on_epoch_start(1, 2)  # cached: asked once a process
    assert type(m(torch.randn(2, 5, 3)).outputs.grad_fn).__name__ == LOOP
    assert len(asked) == 1 and asked[0].startswith("condrnn_ops_")
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert vc_train.vcrnn_train_kernel_status() == kernels.KernelStatus("unavailable", why)


def test_off_the_cpu_it_warns_once_and_takes_the_per_step_path(monkeypatch):
    def load(*args, **kwargs):
        pytest.fail("the C++ kernel was built")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="the VC-RNN training kernel runs on CPU only: on cuda"):
        assert vc_train.sequence_kernel(OnCuda()) is None
    assert vc_train.sequence_kernel(OnCuda()) is None  # once: an error filter would raise here


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("V", [3, 6])  # V = D: the GRU reads e * x
def test_it_trains_on_meta_through_the_op(vc_ops, form, V):
    """On the meta device the op runs (its fake implementation, forward and backward), not the
    per-step path: every parameter gets a gradient, the input's terms, W_i and b_i included."""
    nodes = train_on_meta(model(V, 6, torch.float32, form), (2, 4, V))
    assert NODE in nodes and LOOP not in nodes, nodes


def test_the_kernel_source_is_part_of_the_code_version(tmp_path, monkeypatch):
    from harness.components.code import method_code

    shutil.copytree(kernels.CSRC, tmp_path, dirs_exist_ok=True)
    monkeypatch.setattr(kernels, "CSRC", tmp_path)
    method_code.cache_clear()
    before = method_code("vc-rnn"), method_code("sa-rnn")
    source = tmp_path / "vcrnn_train.cpp"
    source.write_text(source.read_text() + "// changed\n")
    method_code.cache_clear()
    assert method_code("vc-rnn") != before[0]
    assert method_code("sa-rnn") == before[1]  # only VC-RNN trains with it
    method_code.cache_clear()
