"""SREHN's whole-sequence training kernel (``baselines.ops.srehn``, ``csrc/srehn.cpp``) against the
per-step PyTorch path it replaces in training: outputs, state, mask, depth, d^1's mean, the
compute penalty and the gradient of every parameter, the input and the initial state, in float64
and float32, over shapes with T = 1, B = 1, D != V, r_max = 1 and the gate's extremes (every unit
halted at every layer; every unit updated at every layer, with u rounded to 0); a two-layer
model; how the default run, a failed build and another device fall back to the per-step path; a
training step on the meta device through the op (its fake implementations); and the kernel's source
in SREHN's code version.

Every test is marked ``kernel`` (``pytest -m kernel``): the default run builds nothing.
"""

from __future__ import annotations

import shutil
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.utils.cpp_extension
from kernel_support import OnCuda, built, op_node, train_on_meta

import baselines.ops.library as kernels
import baselines.ops.srehn as srehn_kernel
import baselines.srehn as srehn
from baselines._elastic import ElasticConfig
from baselines.srehn import SREHN

pytestmark = pytest.mark.kernel

PER_STEP = "StackBackward0"  # run_sequence's torch.stack
KERNEL = op_node("srehn_forward")


@pytest.fixture
def kernel():
    """The kernel built (``kernel_support.built``)."""
    yield from built(srehn_kernel.srehn_kernel)


@pytest.fixture
def ops():
    """The kernel built (``kernel_support.built``)."""
    yield from built(srehn_kernel.srehn_kernel)


def model(V: int, D: int, r_max: int, dtype: torch.dtype, gate: str = "mixed", lam_d=0.3):
    """SREHN in train mode, every weight drawn at random, the gate set to ``gate``: "mixed"
    (depths from 0 to r_max among the units, d^1 = 0 at some), "closed" (d = 0 at every layer:
    every unit halts before layer 1) or "open" (alpha and alpha_t rounded to 0, so u = 0 and
    d = beta > 0 at every layer: every unit runs every layer)."""
    torch.manual_seed(11)
    m = SREHN(V, D, ElasticConfig(r_max=r_max, lam_d=lam_d)).to(dtype).train()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.7)
        el = m.elastic
        if gate == "mixed":
            el.alpha_hat.uniform_(-4.0, 0.0)
            el.rate.bias.uniform_(-3.0, 1.0)
        elif gate == "closed":
            el.beta_hat.fill_(-30.0)  # beta ~ 1e-13, below 1 - e^alpha's gap at layer 1
            el.alpha_hat.fill_(2.0)
            el.rate.bias.fill_(5.0)
        else:  # "open"
            el.alpha_hat.fill_(-1e3)  # softplus: alpha = 0 exactly
            el.rate.weight.zero_()
            el.rate.bias.fill_(-1e3)  # sigmoid: alpha_t = 0 exactly
    return m


def run(m: SREHN, x, h0, k, monkeypatch, w):
    """A training forward (the kernel ``k``, or the per-step path for None) and the gradients of
    a loss reading every output, the state and the compute penalty."""
    monkeypatch.setattr(srehn, "sequence_kernel", lambda *t: k)
    xr, hr = x.clone().requires_grad_(), h0.clone().requires_grad_()
    out = m(xr, state=hr)
    assert type(out.outputs.grad_fn).__name__ == (PER_STEP if k is None else KERNEL)
    loss = (out.outputs * w).sum() + out.state.square().sum()
    if out.aux_loss is not None:
        loss = loss + out.aux_loss
    return out, torch.autograd.grad(loss, [xr, hr, *m.parameters()])


CASES = [  # B, T, V, D, r_max, gate
    (4, 11, 3, 6, 6, "mixed"),
    (1, 1, 3, 5, 1, "mixed"),
    (3, 7, 5, 4, 4, "mixed"),
    (2, 5, 6, 6, 10, "mixed"),
    (2, 4, 3, 5, 3, "closed"),
    (2, 4, 3, 5, 3, "open"),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_training_with_the_kernel_equals_the_per_step_path(kernel, monkeypatch, case, dtype):
    """Outputs, state, d^1's mean, the penalty and every gradient (input, h_0, each parameter)
    to 1e-12 (relative to the largest) in float64 and 1e-5 in float32; the mask and the depth
    exactly; the training-depth tally alike. The closed gate copies h_0 exactly; the open one
    runs every layer of every unit. Eval stays on the per-step path, though the kernel is there."""
    B, T, V, D, r_max, gate = case
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(B, T, V, dtype=dtype, generator=gen)
    h0 = torch.randn(B, D, dtype=dtype, generator=gen)
    w = torch.randn(B, T, D, dtype=dtype, generator=gen)
    m = model(V, D, r_max, dtype, gate)
    out, grads = run(m, x, h0, kernel, monkeypatch, w)
    ref, grads_ref = run(m, x, h0, None, monkeypatch, w)
    assert torch.equal(out.mask, ref.mask) and torch.equal(out.depth, ref.depth)
    if gate == "mixed" and T > 1:  # the trace takes several values, d^1 = 0 among them
        assert 0 < ref.mask.mean() < 1 and len(ref.depth.unique()) > 2
    if gate == "closed":
        assert not ref.mask.any()
        assert torch.equal(out.outputs, h0[:, None].expand(B, T, D))
    if gate == "open":
        assert torch.equal(ref.depth, torch.full_like(ref.depth, r_max))

    def close(a, b, what):
        scale = max(b.abs().max().item(), 1.0)
        torch.testing.assert_close(a, b, rtol=0, atol=tol * scale, msg=f"{case} {dtype}: {what}")

    close(out.outputs, ref.outputs, "outputs")
    close(out.state, ref.state, "state")
    close(out.extras["elastic_d1_mean"], ref.extras["elastic_d1_mean"], "d^1 mean")
    close(out.aux_loss, ref.aux_loss, "penalty")
    names = ["x", "h0"] + [n for n, _ in m.named_parameters()]
    for n, a, b in zip(names, grads, grads_ref, strict=True):
        close(a, b, f"d{n}")
    if gate == "mixed":
        assert all(g.abs().sum() > 0 for g in grads)  # every gradient is exercised
    assert m.train_diagnostics() == {"train_layers_per_step": float(r_max)}  # 2 forwards alike
    monkeypatch.setattr(srehn, "sequence_kernel", lambda *t: kernel)
    assert type(m.eval()(x).outputs.grad_fn).__name__ == PER_STEP


def test_a_two_layer_model_trains_alike_with_the_kernel(kernel, monkeypatch):
    """The harness's model (``SeqModel``: two stacked SREHN layers, padded sequences read out at
    their last true step) in training, float64: the predictions, the penalty and the gradient of
    every parameter with the kernel equal the per-step path's to 1e-12."""
    from harness.components.config import ModelConfig
    from harness.components.model import SeqModel

    task = SimpleNamespace(readout="last", input_size=3, output_size=2, token_input=False)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 9, 3, dtype=torch.float64, generator=gen)
    lengths = torch.tensor([9, 4, 1])
    runs = []
    for k in (kernel, None):
        monkeypatch.setattr(srehn, "sequence_kernel", lambda *t, k=k: k)
        torch.manual_seed(2)
        cfg = ElasticConfig(r_max=4, lam_d=0.1)
        net = SeqModel(SREHN, cfg, task, ModelConfig(6, 2)).double().train()
        out = net(x, lengths)
        fns = {type(o.outputs.grad_fn).__name__ for o in out.layers}
        assert fns == {KERNEL if k is not None else PER_STEP}
        loss = out.pred.square().sum() + out.aux_loss
        runs.append((out.pred, out.aux_loss, torch.autograd.grad(loss, list(net.parameters()))))
    (pred, aux, grads), (pred_ref, aux_ref, grads_ref) = runs
    torch.testing.assert_close(pred, pred_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(aux, aux_ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_the_default_run_trains_on_the_per_step_path(fresh_kernel, no_build, monkeypatch):
    """With ``HARNESS_NO_KERNELS`` (the default run's), nothing is built, the status says why,
    and training takes the per-step path."""
    monkeypatch.setenv("HARNESS_NO_KERNELS", "1")
    assert srehn_kernel.srehn_kernel_status() == kernels.KernelStatus(
        "unavailable", kernels.DISABLED
    )
    m = model(3, 5, 3, torch.float32)
    m.on_epoch_start(0, 1)
    assert type(m(torch.randn(2, 4, 3)).outputs.grad_fn).__name__ == PER_STEP
    assert not fresh_kernel.exists()


def test_a_failed_build_is_one_line_at_the_epoch_start_and_falls_back(fresh_kernel, monkeypatch):
    """SREHN asks for the kernel in ``on_epoch_start`` (before the epoch's timer); a build that
    fails is one warning and a one-line status, asked once a process, and training takes the
    per-step path."""
    asked = []

    def load(*args, **kwargs):
        asked.append(kwargs["name"])
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ...")

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = model(3, 5, 3, torch.float32)
    with pytest.warns(UserWarning, match="SREHN training kernel unavailable"):
        m.on_epoch_start(0, 1)
    m.on_epoch_start(1, 2)  # cached
    assert type(m(torch.randn(2, 4, 3)).outputs.grad_fn).__name__ == PER_STEP
    assert len(asked) == 1 and asked[0].startswith("condrnn_ops_")
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert srehn_kernel.srehn_kernel_status() == kernels.KernelStatus("unavailable", why)


def test_off_cpu_warns_once_and_takes_the_per_step_path(monkeypatch, no_build):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(kernels, "_off_cpu", set())
    with pytest.warns(UserWarning, match="the SREHN training kernel runs on CPU only: on cuda"):
        assert srehn_kernel.sequence_kernel(OnCuda()) is None
    assert srehn_kernel.sequence_kernel(OnCuda()) is None  # once: an error filter would raise here


@pytest.mark.parametrize("r_max", [1, 3])
def test_srehn_trains_on_meta_through_the_op(ops, r_max):
    """On the meta device the op runs (its fake implementation, forward and backward; bias's
    gradient is there at r_max 1 too, from layer 1's input terms), not the per-step path."""
    nodes = train_on_meta(model(3, 5, r_max, torch.float32), (2, 4, 3))
    assert KERNEL in nodes and PER_STEP not in nodes, nodes


def test_the_kernel_source_is_part_of_srehns_code_version_only(tmp_path, monkeypatch, no_build):
    """A changed ``csrc/srehn.cpp`` changes SREHN's ``method_code`` and not EI-REHN's."""
    from harness.components import code
    from harness.planning import resume

    shutil.copytree(kernels.CSRC, tmp_path, dirs_exist_ok=True)
    monkeypatch.setattr(kernels, "CSRC", tmp_path)
    assert str(tmp_path / "srehn.cpp") in code.source_files(sys.modules[SREHN.__module__])
    resume.method_code.cache_clear()
    before = {name: resume.method_code(name) for name in ("srehn", "ei-rehn")}
    source = tmp_path / "srehn.cpp"
    source.write_text(source.read_text() + "// changed\n")
    resume.method_code.cache_clear()
    assert resume.method_code("srehn") != before["srehn"]
    assert resume.method_code("ei-rehn") == before["ei-rehn"]
    resume.method_code.cache_clear()
