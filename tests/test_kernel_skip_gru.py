"""Skip RNN's whole-sequence training kernel (``baselines.ops.skip_gru``, ``csrc/skip_gru.cpp``)
against the per-step PyTorch path (``SkipRNN._step``), the reference.

Every test is marked ``kernel``: the default run deselects them; ``-m kernel`` builds the kernel
into a fresh cache dir, and the equality tests fail, rather than skip, wherever it is expected to
build (``HARNESS_EXPECT_KERNELS=1``)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
import torch
from kernel_support import OnCuda, built, op_node, train_on_meta
from test_skip_rnn import assert_matches_authors, authors_variables, ours_with

import baselines.ops.library as kernels
import baselines.ops.skip_gru as skip_gru
import baselines.skip_rnn as skip_rnn
from baselines.skip_rnn import SkipRNN, SkipRNNConfig

pytestmark = pytest.mark.kernel

KERNEL_FN, STEP_FN = op_node("skip_gru_forward"), "StackBackward0"


@pytest.fixture
def skip_kernel():
    """The kernel built (``kernel_support.built``)."""
    yield from built(skip_gru.skip_gru_kernel)


@pytest.fixture
def kernel_ops():
    """The kernel built (``kernel_support.built``), its matmuls as they are."""
    yield from built(skip_gru.skip_gru_kernel)


def use(monkeypatch, kernel) -> None:
    """Make ``SkipRNN.forward`` find ``kernel`` (None: the per-step path)."""
    monkeypatch.setattr(skip_rnn, "sequence_kernel", lambda *t: kernel)


def model(form: str, dtype: torch.dtype, V: int, D: int, b_p: float, w_scale: float) -> SkipRNN:
    """A Skip-GRU in train mode with ``b_p`` and ``w_p`` scaled: the gate's regime."""
    torch.manual_seed(0)
    m = SkipRNN(V, D, SkipRNNConfig(lam=0.1, gru_form=form)).to(dtype).train()
    with torch.no_grad():
        m.b_p.fill_(b_p)
        m.w_p.mul_(w_scale)
    return m


# (B, T, V, D, b_p, w_p scale, regime)
CASES = (
    (3, 14, 2, 4, -1.5, 4.0, "mixed"),  # updates and runs of skips, p varying with the state
    (1, 1, 3, 5, 1.0, 1.0, "one step"),  # T = 1, B = 1
    (4, 9, 3, 6, 0.0, 0.0, "tie"),  # p = 0.5 exactly: C meets P every other step (the min ties)
    (2, 6, 2, 3, 10.0, 1.0, "all"),  # every step updates
    (2, 7, 4, 3, -10.0, 1.0, "none"),  # only the forced first step updates
)


def regime_holds(u: torch.Tensor, regime: str) -> bool:
    """The update pattern ``u [B, T]`` is the one the case is meant to exercise."""
    T = u.shape[1]
    first = torch.zeros(T, dtype=u.dtype)
    first[0] = 1
    return {
        "mixed": 0.2 < u.mean() < 0.8 and bool(((u[:, 1:-1] == 0) & (u[:, 2:] == 0)).any()),
        "one step": bool((u == 1).all()),
        "tie": bool((u == (torch.arange(T) % 2 == 0).to(u.dtype)).all()),
        "all": bool((u == 1).all()),
        "none": bool((u == first).all()),
    }[regime]


def train_pass(m: SkipRNN, x: torch.Tensor) -> tuple[list, tuple]:
    """Two windows where T > 1 (the second from the first's final state, its gradient kept) and
    the gradient of a loss reading the outputs, masks and budgets of both and the last final
    state, wrt the input and every parameter."""
    gen = torch.Generator().manual_seed(2)
    xr = x.clone().requires_grad_()
    T = x.shape[1]
    outs, state, loss = [], None, 0
    for i, xw in enumerate([xr] if T == 1 else [xr[:, : T // 2], xr[:, T // 2 :]]):
        out = m(xw, state=state)
        state = out.state
        w_h = torch.randn(out.outputs.shape, dtype=x.dtype, generator=gen)
        w_m = torch.randn(out.mask.shape, dtype=x.dtype, generator=gen)
        loss = loss + (i + 1) * out.aux_loss + (out.outputs * w_h).sum() + (out.mask * w_m).sum()
        outs.append(out)
    for s in state:  # h_T, h~_T, u_T, P_{T-1}, C_T
        loss = loss + (s * torch.randn(s.shape, dtype=x.dtype, generator=gen)).sum()
    return outs, torch.autograd.grad(loss, [xr, *m.parameters()])


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_training_with_the_kernel_equals_the_per_step_path(skip_kernel, monkeypatch, form, dtype):
    """A training forward and backward over two windows, the state carried with its gradient:
    the masks exactly, the outputs, budgets, final state and the gradient of every parameter and
    of the input to 1e-12 in float64 and 1e-5 in float32, in the gate's regimes (a mix of updates
    and runs of skips, T = B = 1, the min's tie, all updated, all skipped but the first)."""
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for B, T, V, D, b_p, w_scale, regime in CASES:
        x = torch.randn(B, T, V, dtype=dtype, generator=torch.Generator().manual_seed(1))
        runs = []
        for kernel in (skip_kernel, None):
            use(monkeypatch, kernel)
            m = model(form, dtype, V, D, b_p, w_scale)
            outs, grads = train_pass(m, x)
            fns = {type(o.outputs.grad_fn).__name__ for o in outs}
            assert fns == {KERNEL_FN if kernel is not None else STEP_FN}, fns
            runs.append((m, outs, grads))
        (m, outs, grads), (_, refs, grads_ref) = runs
        what = f"{form} {dtype} {regime}"
        u = torch.cat([o.mask for o in outs], 1)[..., 0]
        assert regime_holds(u, regime), (what, u)
        for out, ref in zip(outs, refs, strict=True):
            assert torch.equal(out.mask, ref.mask), what
            assert out.mask.is_contiguous() and out.depth is None and out.extras == {}
            torch.testing.assert_close(out.outputs, ref.outputs, rtol=tol, atol=tol, msg=what)
            torch.testing.assert_close(out.aux_loss, ref.aux_loss, rtol=tol, atol=tol, msg=what)
            for s, s_ref in zip(out.state, ref.state, strict=True):
                torch.testing.assert_close(s, s_ref, rtol=tol, atol=tol, msg=what)
        names = ["x"] + [n for n, _ in m.named_parameters()]
        for n, a, b in zip(names, grads, grads_ref, strict=True):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=f"{what}: d{n}")
            if regime == "mixed":
                assert a.abs().sum() > 0, n  # every parameter learns, w_p and b_p through u


@pytest.mark.parametrize("form", ["after", "before"])
def test_the_kernel_matches_the_authors_cell(skip_kernel, monkeypatch, form):
    """With the kernel, training's forward against the float64 transcription of the authors'
    SkipGRUCell and budget (tests/test_skip_rnn.py): outputs, state gates, budget and the gradient
    of every parameter, through updates and runs of skips, and where the min ties."""
    use(monkeypatch, skip_kernel)
    V, D, lam = 2, 4, 0.1
    w = authors_variables(V, D, seed=3, update_bias=-0.5)
    with torch.no_grad():
        w["state_update_prob/Weights"].mul_(4)
    m = ours_with(w, V, D, lam=lam, gru_form=form)
    x = torch.randn(3, 14, V, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert m.training and type(m(x).outputs.grad_fn).__name__ == KERNEL_FN
    assert max(assert_matches_authors(m, w, x, lam, form).values()) < 1e-12
    w = authors_variables(V, 3, seed=4)
    with torch.no_grad():
        w["state_update_prob/Weights"].zero_()
        w["state_update_prob/Biases"].zero_()
    m = ours_with(w, V, 3, lam=0.01, gru_form=form)
    x = torch.randn(2, 7, V, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    assert m(x).mask[0, :, 0].tolist() == [1, 0, 1, 0, 1, 0, 1]
    assert_matches_authors(m, w, x, 0.01, form)


def test_a_two_layer_model_with_lengths_trains_alike_with_the_kernel(skip_kernel, monkeypatch):
    """The harness's model (``SeqModel``: two stacked Skip-GRU layers, each with its own gate;
    padded sequences read out at their last true step) in training, float64: the predictions,
    the summed budgets and the gradient of every parameter with the kernel equal the per-step
    path's to 1e-12. Eval stays per-step, though the kernel is there."""
    from harness.components.config import ModelConfig
    from harness.components.model import SeqModel

    task = SimpleNamespace(readout="last", input_size=3, output_size=2, token_input=False)
    x = torch.randn(3, 9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    lengths = torch.tensor([9, 4, 1])
    runs = []
    for kernel in (skip_kernel, None):
        use(monkeypatch, kernel)
        torch.manual_seed(2)
        cfg = SkipRNNConfig(lam=0.1, update_bias=-0.5)
        model = SeqModel(SkipRNN, cfg, task, ModelConfig(6, 2)).double().train()
        out = model(x, lengths)
        fns = {type(o.outputs.grad_fn).__name__ for o in out.layers}
        assert fns == {KERNEL_FN if kernel is not None else STEP_FN}
        aux = sum(o.aux_loss for o in out.layers)
        grads = torch.autograd.grad(out.pred.square().sum() + aux, list(model.parameters()))
        runs.append((out, aux, grads))
        if kernel is not None:
            evaluated = model.eval()(x, lengths)
            assert {type(o.outputs.grad_fn).__name__ for o in evaluated.layers} == {STEP_FN}
    (out, aux, grads), (ref, aux_ref, grads_ref) = runs
    for o, r in zip(out.layers, ref.layers, strict=True):
        assert torch.equal(o.mask, r.mask)
    assert 0 < out.layers[0].mask.mean() < 1
    torch.testing.assert_close(out.pred, ref.pred, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(aux, aux_ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_other_dtypes_take_the_per_step_path(skip_kernel):
    """bfloat16 (or mixed dtypes) is not the kernel's: the per-step path runs."""
    x = torch.randn(2, 3, 2)
    assert skip_gru.sequence_kernel(x) is skip_kernel
    assert skip_gru.sequence_kernel(x.bfloat16()) is None
    assert skip_gru.sequence_kernel(x, x.double()) is None
    m = model("after", torch.bfloat16, 2, 3, 1.0, 1.0)
    assert type(m(x.bfloat16()).outputs.grad_fn).__name__ == STEP_FN


def test_the_default_run_trains_on_the_per_step_path(fresh_kernel, no_build, monkeypatch):
    monkeypatch.setenv("HARNESS_NO_KERNELS", "1")
    assert skip_gru.skip_gru_kernel_status() == kernels.KernelStatus(
        "unavailable", kernels.DISABLED
    )
    m = model("after", torch.float32, 3, 4, 1.0, 1.0)
    m.on_epoch_start(0, 1)
    assert type(m(torch.randn(2, 5, 3)).outputs.grad_fn).__name__ == STEP_FN
    assert not fresh_kernel.exists()


def test_a_failed_build_is_one_line_at_the_epoch_start_and_falls_back(fresh_kernel, monkeypatch):
    """``on_epoch_start`` (before the epoch's timer) asks for the kernel; a build that fails is
    one warning and a one-line status, asked once a process, and training takes the per-step
    path."""
    asked = []

    def load(*args, **kwargs):
        asked.append(kwargs["name"])
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ...")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = model("after", torch.float32, 3, 4, 1.0, 1.0)
    with pytest.warns(UserWarning, match="Skip-GRU training kernel unavailable"):
        m.on_epoch_start(0, 1)
    m.on_epoch_start(1, 2)
    assert type(m(torch.randn(2, 5, 3)).outputs.grad_fn).__name__ == STEP_FN
    assert len(asked) == 1 and asked[0].startswith("condrnn_ops_")
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert skip_gru.skip_gru_kernel_status() == kernels.KernelStatus("unavailable", why)


def test_off_cpu_warns_once_and_takes_the_per_step_path(monkeypatch, no_build):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="Skip-GRU training kernel runs on CPU only: on cuda"):
        assert skip_gru.sequence_kernel(OnCuda()) is None
    assert skip_gru.sequence_kernel(OnCuda()) is None  # once: an error filter would raise here


@pytest.mark.parametrize("form", ["after", "before"])
def test_skip_rnn_trains_on_meta_through_the_op(kernel_ops, form):
    """On the meta device the op runs (its fake implementation, forward and backward), not the
    per-step path."""
    nodes = train_on_meta(model(form, torch.float32, 3, 4, 1.0, 1.0), (2, 5, 3))
    assert op_node("skip_gru_forward") in nodes, nodes


def test_the_kernel_source_is_part_of_the_code_version(tmp_path, monkeypatch, no_build):
    from harness.components.code import method_code

    shutil.copytree(kernels.CSRC, tmp_path, dirs_exist_ok=True)
    monkeypatch.setattr(kernels, "CSRC", tmp_path)
    method_code.cache_clear()
    before = method_code("skip-rnn")
    source = tmp_path / "skip_gru.cpp"
    source.write_text(source.read_text() + "// changed\n")
    method_code.cache_clear()
    assert method_code("skip-rnn") != before
    method_code.cache_clear()
