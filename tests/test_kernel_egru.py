"""EGRU's whole-sequence training kernel (``baselines.ops.egru``, ``csrc/egru.cpp``) against the
method's step loop in ``EGRU.forward`` (the reference, the path in eval and wherever the kernel
cannot run).

Every test is marked ``kernel`` (``pytest -m kernel``); those that need the compiled kernel build
it once into the session's cache and fail, rather than skip, wherever it is expected to build
(``HARNESS_EXPECT_KERNELS=1``, or ninja and a C++ compiler at hand).
"""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
import torch
import torch.utils.cpp_extension
from kernel_support import OnCuda, built, op_node, train_on_meta

import baselines.egru as egru_module
import baselines.ops.egru as egru_kernels
import baselines.ops.library as kernels
from baselines.egru import EGRU, EGRUConfig

pytestmark = pytest.mark.kernel

PATHS = {"kernel": op_node("egru_forward"), "step loop": "StackBackward0"}


@pytest.fixture
def library():
    """The kernel built (``kernel_support.built``)."""
    yield from built(egru_kernels.egru_kernel)


@pytest.fixture
def kernel():
    """The kernel built (``kernel_support.built``)."""
    yield from built(egru_kernels.egru_kernel)


def model(V: int, D: int, dtype: torch.dtype, level: float | None = None, **cfg) -> EGRU:
    """An EGRU (V inputs, D units) in train mode with non-zero biases and thresholds low enough
    for a mix of events and silence (tests/test_egru.py's ``make``); with ``level``, every
    threshold (and candidate bias) set by ``at_skip``'s knob instead: 1 silences every unit,
    -3 (theta 0, b_g 12) makes every unit fire."""
    torch.manual_seed(0)
    m = EGRU(V, D, EGRUConfig(**cfg)).to(dtype).train()
    with torch.no_grad():
        m.kernel.mul_(2.0)
        m.recurrent_kernel.mul_(2.0)
        m.bias.uniform_(-0.5, 0.5)
        m.recurrent_bias.uniform_(-0.5, 0.5)
        m.thr.uniform_(0.05, 0.3)
    if level is not None:
        m._set_level(level)
    return m


def run(m: EGRU, x, state, kernel, monkeypatch):
    """A training forward with (``kernel``) or without (None) the kernel, and the gradients of
    a loss reading every output, the final state, the event rate and the regulariser, wrt the
    input, the initial state (where given) and every parameter."""
    monkeypatch.setattr(egru_module, "sequence_kernel", lambda *t: kernel)
    xr = x.clone().requires_grad_()
    st = None if state is None else tuple(s.clone().requires_grad_() for s in state)
    rng = torch.get_rng_state()
    out = m(xr, state=st)
    assert torch.equal(torch.get_rng_state(), rng)  # neither path draws random numbers
    assert type(out.outputs.grad_fn).__name__ == PATHS["kernel" if kernel else "step loop"]
    gen = torch.Generator().manual_seed(9)
    w = torch.randn(out.outputs.shape, dtype=x.dtype, generator=gen)
    wc = torch.randn(out.state[0].shape, dtype=x.dtype, generator=gen)
    loss = (out.outputs * w).sum() + (out.state[0] * wc).sum() + out.state[1].square().sum()
    loss = loss + 3.0 * out.extras["event_rate"].sum()  # the events' own gradient
    if out.aux_loss is not None:
        loss = loss + out.aux_loss
    leaves = [xr, *(st or ()), *m.parameters()]
    return out, torch.autograd.grad(loss, leaves)


CASES = {  # (B, T, V, D), model knobs, initial state given
    "base": ((4, 11, 3, 6), {}, False),
    "T=1, B=1": ((1, 1, 3, 4), {}, False),
    "B=1, D>V, state": ((1, 7, 2, 16), {}, True),
    "D<V, regulariser": ((3, 9, 8, 5), {"activity_reg": 0.5, "activity_target": 0.2}, True),
    "narrow pseudo-derivative": (
        (2, 8, 3, 6),
        {"dampening_factor": 0.3, "pseudo_derivative_support": 4.0},
        False,
    ),
    "wide, flat pseudo-derivative": ((2, 8, 3, 6), {"pseudo_derivative_support": 0.2}, True),
    "no event (theta 1)": ((3, 6, 3, 5), {"level": 1.0, "activity_reg": 1.0}, True),
    "every unit fires": ((3, 6, 3, 5), {"level": -3.0, "activity_reg": 1.0}, False),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_training_with_the_egru_kernel_equals_the_step_loop(kernel, monkeypatch, case, dtype):
    """Outputs, final state, event rate and regulariser to 1e-10 in float64 (1e-5 in float32),
    mask and reads exactly, and the gradients of the input, the initial state and every
    parameter (thresholds included) likewise; shapes with T = 1, B = 1, D above and below V; the
    regulariser, other pseudo-derivative knobs, thresholds that silence every unit and a bias
    that makes every unit fire. Eval takes the step loop, though the kernel is there."""
    (B, T, V, D), knobs, with_state = CASES[case]
    knobs = dict(knobs)
    level = knobs.pop("level", None)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(B, T, V, dtype=dtype, generator=gen)
    state = None
    if with_state:  # c_0 any value, y_0 events (0 or above 0)
        c0 = 0.3 * torch.randn(B, D, dtype=dtype, generator=gen)
        state = (c0, torch.relu(torch.randn(B, D, dtype=dtype, generator=gen)))
    m = model(V, D, dtype, level, **knobs)
    out, grads = run(m, x, state, kernel, monkeypatch)
    ref, grads_ref = run(m, x, state, None, monkeypatch)
    assert torch.equal(out.mask, ref.mask) and torch.equal(out.reads, ref.reads)
    rate = ref.extras["event_rate"]
    if level == 1.0:
        assert rate.max() == 0 and out.extras["event_rate"].max() == 0
    elif level == -3.0:
        assert rate.min() == 1 and out.extras["event_rate"].min() == 1
    elif T > 1:
        assert 0 < rate.mean() < 1  # a real mix of events and silence
    close = {"rtol": tol, "atol": tol}
    torch.testing.assert_close(out.outputs, ref.outputs, **close)
    torch.testing.assert_close(out.state, ref.state, **close)
    torch.testing.assert_close(out.extras, ref.extras, **close)
    assert (out.aux_loss is None) == (ref.aux_loss is None) == ("activity_reg" not in knobs)
    if ref.aux_loss is not None:
        torch.testing.assert_close(out.aux_loss, ref.aux_loss, **close)
    names = ["x", *(["c0", "y0"] if with_state else []), *(n for n, _ in m.named_parameters())]
    for n, a, b in zip(names, grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, **close, msg=lambda s, n=n: f"{case}: d{n}: {s}")
    if level is None:  # the pseudo-derivative reaches the thresholds
        assert grads[names.index("thr")].abs().sum() > 0
    monkeypatch.setattr(egru_module, "sequence_kernel", lambda *t: kernel)
    assert type(m.eval()(x).outputs.grad_fn).__name__ == PATHS["step loop"]


def test_a_two_layer_model_with_lengths_trains_alike_with_the_egru_kernel(kernel, monkeypatch):
    """The harness's model (``SeqModel``: two stacked EGRU layers, padded sequences read out at
    their last true step, each layer's regulariser summed) in training, float64: predictions,
    auxiliary loss and the gradient of every parameter equal the step loop's to 1e-10."""
    from harness.components.config import ModelConfig
    from harness.components.model import SeqModel

    task = SimpleNamespace(readout="last", input_size=3, output_size=2, token_input=False)
    x = torch.randn(3, 9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    lengths = torch.tensor([9, 4, 1])
    cfg = EGRUConfig(activity_reg=0.3, thr_mean=0.1)
    runs = []
    for k in (kernel, None):
        monkeypatch.setattr(egru_module, "sequence_kernel", lambda *t, k=k: k)
        torch.manual_seed(2)
        net = SeqModel(EGRU, cfg, task, ModelConfig(6, 2)).double().train()
        out = net(x, lengths)
        fns = {type(o.outputs.grad_fn).__name__ for o in out.layers}
        assert fns == {PATHS["kernel" if k is not None else "step loop"]}
        assert all(0 < o.extras["event_rate"].mean() < 1 for o in out.layers)
        loss = out.pred.square().sum() + out.aux_loss
        runs.append((out, torch.autograd.grad(loss, list(net.parameters()))))
    (out, grads), (ref, grads_ref) = runs
    torch.testing.assert_close(out.pred, ref.pred, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out.aux_loss, ref.aux_loss, rtol=1e-10, atol=1e-10)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_egru_trains_on_the_step_loop_where_kernels_are_off(fresh_kernel, no_build, monkeypatch):
    monkeypatch.setenv("HARNESS_NO_KERNELS", "1")
    assert egru_kernels.egru_kernel_status() == kernels.KernelStatus(
        "unavailable", kernels.DISABLED
    )
    m = model(3, 6, torch.float32)
    m.on_epoch_start(0, 1)
    assert type(m(torch.randn(2, 5, 3)).outputs.grad_fn).__name__ == PATHS["step loop"]
    assert not fresh_kernel.exists()


def test_a_failed_egru_build_is_one_line_at_the_epoch_start_and_falls_back(
    fresh_kernel, monkeypatch
):
    """EGRU asks for the kernel in ``on_epoch_start`` (before the epoch's timer); a build that
    fails is one warning and a one-line status, asked once a process, and training takes the
    step loop."""
    asked = []

    def load(*args, **kwargs):
        asked.append(kwargs["name"])
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ...")

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = model(3, 6, torch.float32)
    with pytest.warns(UserWarning, match="EGRU training kernel unavailable"):
        m.on_epoch_start(0, 1)
    m.on_epoch_start(1, 2)  # cached
    assert type(m(torch.randn(2, 5, 3)).outputs.grad_fn).__name__ == PATHS["step loop"]
    assert len(asked) == 1 and asked[0].startswith("condrnn_ops_")
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert egru_kernels.egru_kernel_status() == kernels.KernelStatus("unavailable", why)


def test_egru_off_cpu_warns_once_and_takes_the_step_loop(monkeypatch, no_build):
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="EGRU training kernel runs on CPU only: on cuda"):
        assert egru_kernels.sequence_kernel(OnCuda()) is None
    assert egru_kernels.sequence_kernel(OnCuda()) is None  # once: an error filter would raise here


@pytest.mark.parametrize("knobs", [{}, {"activity_reg": 0.5}], ids=["plain", "regulariser"])
def test_egru_trains_on_meta_through_the_ops(library, knobs):
    """On the meta device the ops run (their fake implementations, forward and backward), not
    the step loop; with and without the regulariser (which reads the events)."""
    nodes = train_on_meta(model(3, 6, torch.float32, **knobs), (2, 4, 3))
    assert PATHS["kernel"] in nodes and PATHS["step loop"] not in nodes, nodes


def test_other_dtypes_take_the_step_loop(no_build):
    assert egru_kernels.sequence_kernel(torch.empty(2, dtype=torch.bfloat16)) is None
    mixed = (torch.empty(2, dtype=torch.float32), torch.empty(2, dtype=torch.float64))
    assert egru_kernels.sequence_kernel(*mixed) is None


def test_the_egru_kernel_source_is_part_of_its_code_version(tmp_path, monkeypatch, no_build):
    from harness.planning import resume

    shutil.copytree(kernels.CSRC, tmp_path, dirs_exist_ok=True)
    monkeypatch.setattr(kernels, "CSRC", tmp_path)
    resume.method_code.cache_clear()
    before = resume.method_code("egru"), resume.method_code("gru")
    source = tmp_path / "egru.cpp"
    source.write_text(source.read_text() + "// changed\n")
    resume.method_code.cache_clear()
    assert resume.method_code("egru") != before[0]
    assert resume.method_code("gru") == before[1]  # another method's version stays
    resume.method_code.cache_clear()
