"""SA-RNN's whole-sequence training kernel (``baselines.ops.sarnn_train``, csrc/sarnn_train.cpp)
against the method's per-step PyTorch loop, its reference: outputs, masks, budget, state and the
gradient of every parameter, the input and the initial state, in both GRU forms, float64 and
float32, at the gate's extremes; and the fallbacks (kernels off, a failed build, off the CPU).

Every test is marked ``kernel`` (``pytest -m kernel``): the default run builds no kernel.
"""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
import torch
import torch.utils.cpp_extension
from kernel_support import OnCuda, built, op_node, train_on_meta

import baselines.ops.library as kernels
import baselines.ops.sarnn_train as sarnn_train
import baselines.sa_rnn as sa
from baselines.sa_rnn import SARNN, SARNNConfig

pytestmark = pytest.mark.kernel

KERNEL_FN = op_node("sarnn_train_forward")


@pytest.fixture
def train_kernel():
    """The kernel built (``kernel_support.built``)."""
    yield from built(sarnn_train.sarnn_train_kernel)


@pytest.fixture
def kernel_ops():
    """The kernel built (``kernel_support.built``), its matmuls as they are."""
    yield from built(sarnn_train.sarnn_train_kernel)


def model(dtype: torch.dtype, form: str = "after", V: int = 3, D: int = 6, **knobs) -> SARNN:
    """SA-RNN in train mode with a large budget weight (the mask's gradient matters)."""
    torch.manual_seed(1)
    cfg = SARNNConfig(gru_form=form, **{"lam": 0.5, **knobs})
    return SARNN(V, D, cfg).to(dtype).train()


def test_the_default_run_trains_on_the_per_step_path(fresh_kernel, no_build, monkeypatch):
    monkeypatch.setenv("HARNESS_NO_KERNELS", "1")
    assert sarnn_train.sarnn_train_kernel_status() == kernels.KernelStatus(
        "unavailable", kernels.DISABLED
    )
    m = model(torch.float32)
    m.on_epoch_start(0, 1)
    assert type(m(torch.randn(2, 5, 3)).outputs.grad_fn).__name__ == "StackBackward0"
    assert not fresh_kernel.exists()


def test_a_failed_build_is_one_line_at_the_epoch_start_and_falls_back(fresh_kernel, monkeypatch):
    """The method asks for the kernel in ``on_epoch_start`` (before the epoch's timer); a build
    that fails is one warning and a one-line status, and training takes the per-step path."""
    asked = []

    def load(*args, **kwargs):
        asked.append(kwargs["name"])
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ...")

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = model(torch.float32)
    with pytest.warns(UserWarning, match="SA-RNN training kernel unavailable"):
        m.on_epoch_start(0, 1)
    m.on_epoch_start(1, 2)  # cached: asked once a process
    assert type(m(torch.randn(2, 5, 3)).outputs.grad_fn).__name__ == "StackBackward0"
    assert len(asked) == 1 and asked[0].startswith("condrnn_ops_")
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert sarnn_train.sarnn_train_kernel_status() == kernels.KernelStatus("unavailable", why)


def test_off_cpu_and_other_dtypes_take_the_per_step_path(monkeypatch, no_build):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="the SA-RNN training kernel runs on CPU only: on cuda"):
        assert sarnn_train.sequence_kernel(OnCuda()) is None
    assert sarnn_train.sequence_kernel(OnCuda()) is None  # once: an error filter would raise here
    assert sarnn_train.sequence_kernel(torch.empty(2, dtype=torch.bfloat16)) is None
    assert sarnn_train.sequence_kernel(torch.empty(2), torch.empty(2).double()) is None


@pytest.mark.parametrize("form", ["after", "before"])
def test_sa_rnn_trains_on_meta_through_the_op(kernel_ops, form):
    """On the meta device the op runs (its fake implementation, forward and backward), not the
    per-step path."""
    m = model(torch.float32, form)
    m.on_epoch_start(3, 4)
    assert op_node("sarnn_train_forward") in train_on_meta(m, (2, 5, 3))


def test_the_kernel_source_is_part_of_sa_rnn_code_version(tmp_path, monkeypatch, no_build):
    from harness.components.code import method_code

    shutil.copytree(kernels.CSRC, tmp_path, dirs_exist_ok=True)
    monkeypatch.setattr(kernels, "CSRC", tmp_path)
    method_code.cache_clear()
    before = method_code("sa-rnn")
    source = tmp_path / "sarnn_train.cpp"
    source.write_text(source.read_text() + "// changed\n")
    method_code.cache_clear()
    assert method_code("sa-rnn") != before
    method_code.cache_clear()


# (B, T, V, D): T = 1, B = 1, D != V, and a bigger one
SHAPES = ((4, 11, 3, 6), (1, 1, 3, 6), (1, 9, 5, 4), (3, 13, 2, 16))
# The gate's regimes: the slope at its extremes (0.1 without annealing: hardly anything clipped;
# 5 at epoch >= 100: most clipped), a mid slope, everything skipped and everything updated (b_u
# far below / above 0: every decision clipped, so no gradient reaches the coordinator).
REGIMES = {  # knobs, epoch, b_u
    "slope_mid": ({}, 3, None),
    "slope_min": ({"anneal": False}, 0, None),
    "slope_max": ({}, 100, None),
    "all_skipped": ({}, 3, -50.0),
    "all_updated": ({}, 3, 50.0),
}


def forward_backward(m, x, h0, loss_terms, kernel, monkeypatch):
    """The training forward of ``m`` with ``kernel`` (None: the per-step path) and the gradients
    of the input, h0 and every parameter of a loss of ``loss_terms``."""
    monkeypatch.setattr(sa, "sequence_kernel", lambda *t: kernel)
    x, h0 = x.clone().requires_grad_(), h0.clone().requires_grad_()
    out = m(x, state=h0)
    fn = type(out.outputs.grad_fn).__name__
    assert (fn == KERNEL_FN) == (kernel is not None), fn
    gen = torch.Generator().manual_seed(5)
    loss = out.outputs.new_zeros(())
    if "outputs" in loss_terms:
        loss = loss + (out.outputs * torch.randn(out.outputs.shape, generator=gen).to(x)).sum()
        loss = loss + out.state.square().sum()
    if "budget" in loss_terms:
        loss = loss + out.aux_loss
    # the budget alone at T = 1 reads no recurrent weight: zeros for the per-step path's None
    grads = torch.autograd.grad(loss, [x, h0, *m.parameters()], materialize_grads=True)
    return out, grads


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("regime", list(REGIMES))
def test_the_kernel_equals_the_per_step_path(train_kernel, monkeypatch, dtype, form, regime):
    """Outputs, state and budget to 1e-10 in float64 (1e-5 in float32), masks exactly, and the
    gradients of the input, h_0 and every parameter, for a loss of the outputs and state, of the
    budget alone (only the mask's gradient flows) and of the outputs alone (none through the
    mask's output); in both GRU forms, at every regime of ``REGIMES``, at every shape of
    ``SHAPES``. Eval stays on the per-step path though the kernel is there."""
    knobs, epoch, b_u = REGIMES[regime]
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    gen = torch.Generator().manual_seed(3)
    for B, T, V, D in SHAPES:
        x = torch.randn(B, T, V, dtype=dtype, generator=gen)
        h0 = torch.randn(B, D, dtype=dtype, generator=gen) * 0.5
        for terms in (("outputs", "budget"), ("budget",), ("outputs",)):
            runs = []
            for kernel in (train_kernel, None):
                m = model(dtype, form, V, D, **knobs)
                m.on_epoch_start(epoch, epoch + 1)
                if b_u is not None:
                    torch.nn.init.constant_(m.b_u, b_u)
                runs.append((m, *forward_backward(m, x, h0, terms, kernel, monkeypatch)))
            (m, out, grads), (_, ref, grads_ref) = runs
            what = f"{form} {regime} {B, T, V, D} {terms}"
            assert torch.equal(out.mask, ref.mask), what
            if b_u is not None:
                assert out.mask.mean() == (b_u > 0), what
                if b_u < 0:  # nothing updated: exact copies of the initial state
                    assert torch.equal(out.outputs, h0[:, None].expand(B, T, D)), what
            elif B * T > 1:
                assert 0 < out.mask.mean() < 1, what
            torch.testing.assert_close(out.outputs, ref.outputs, rtol=tol, atol=tol, msg=what)
            torch.testing.assert_close(out.state, ref.state, rtol=tol, atol=tol, msg=what)
            torch.testing.assert_close(out.aux_loss, ref.aux_loss, rtol=tol, atol=tol, msg=what)
            names = ["x", "h0"] + [n for n, _ in m.named_parameters()]
            for n, a, b in zip(names, grads, grads_ref, strict=True):
                torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=f"{what}: d{n}")
            coordinator = grads[names.index("w_i")].abs().sum()
            assert (coordinator > 0) == (b_u is None), what  # the clip cuts all or not all
    monkeypatch.setattr(sa, "sequence_kernel", lambda *t: train_kernel)
    evaluated = m.eval()(x)  # eval: the per-step path, though the kernel is there
    assert type(evaluated.outputs.grad_fn).__name__ == "StackBackward0"


@pytest.mark.parametrize("form", ["after", "before"])
def test_a_two_layer_model_with_lengths_trains_alike_with_the_kernel(
    train_kernel, monkeypatch, form
):
    """The harness's model (``SeqModel``: two stacked layers, padded sequences read out at their
    last true step) in training, float64: the predictions, the budget and the gradient of every
    parameter with the kernel equal the per-step path's to 1e-10."""
    from harness.components.config import ModelConfig
    from harness.components.model import SeqModel

    task = SimpleNamespace(readout="last", input_size=3, output_size=2, token_input=False)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 9, 3, dtype=torch.float64, generator=gen)
    lengths = torch.tensor([9, 4, 1])
    runs = []
    for kernel in (train_kernel, None):
        monkeypatch.setattr(sa, "sequence_kernel", lambda *t, k=kernel: k)
        torch.manual_seed(2)
        cfg = SARNNConfig(gru_form=form, lam=0.5)
        net = SeqModel(SARNN, cfg, task, ModelConfig(6, 2)).double().train()
        for layer in net.methods:
            layer.on_epoch_start(7, 10)
        out = net(x, lengths)
        fns = {type(o.outputs.grad_fn).__name__ for o in out.layers}
        assert fns == {KERNEL_FN if kernel is not None else "StackBackward0"}
        budget = sum(o.aux_loss for o in out.layers)
        loss = out.pred.square().sum() + budget
        runs.append((out.pred, budget, torch.autograd.grad(loss, list(net.parameters()))))
    (pred, budget, grads), (pred_ref, budget_ref, grads_ref) = runs
    torch.testing.assert_close(pred, pred_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(budget, budget_ref, rtol=1e-10, atol=1e-10)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
