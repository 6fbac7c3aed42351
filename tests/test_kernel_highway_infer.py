"""The elastic highway methods' inference ops (baselines/ops/highway_infer.py,
csrc/highway_infer.cpp): ``fast_forward`` of EI-REHN and SREHN through the op equals the dense
eval loop ``model.eval()(x)``, the decisions (mask, depth) exactly, the outputs to rounding, in
float64 and float32, at batch 1 and 5, at several depth-skip levels; off the CPU the PyTorch path
runs with one warning line.

Every test is marked ``kernel`` (``pytest -m kernel``): the default run builds nothing.
"""

from __future__ import annotations

import pytest
import torch
from kernel_support import OnCuda, built

import baselines.ei_rehn as ei_rehn
import baselines.ops.highway_infer as hi
import baselines.ops.library as kernels
import baselines.srehn as srehn
from baselines.ei_rehn import EIREHN
from baselines.srehn import SREHN

pytestmark = pytest.mark.kernel

METHODS = {"ei-rehn": (EIREHN, ei_rehn), "srehn": (SREHN, srehn)}


@pytest.fixture
def ops():
    """The library built (``kernel_support.built``)."""
    yield from built(hi.highway_infer_kernel)


def trained_like(cls, skip: float, dtype: torch.dtype, D: int = 24):
    """``at_skip``'s model with random local-rate weights (so that the depth varies with the
    unit, the step and the sequence) and the other weights redrawn wider than at init, as a
    trained model's are."""
    torch.manual_seed(0)
    model, _ = cls.at_skip(3, D, skip, 20)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("elastic.rate.weight"):
                p.normal_(0.0, 0.4)
            elif p.dim() == 2:
                p.normal_(0.0, 1.5 / D**0.5)
            elif name in ("s0", "g0", "z0", "mix_bias", "hyper.bias"):
                p.normal_(0.0, 0.5)
    return model.to(dtype).eval()


@pytest.mark.parametrize("name", sorted(METHODS))
@pytest.mark.parametrize("skip", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_the_op_equals_the_dense_eval_loop(ops, monkeypatch, name, skip, B, dtype, tol):
    cls, module = METHODS[name]
    calls = []
    kernel = ops

    class Counted:
        def __getattr__(self, op):
            f = getattr(kernel, op)
            return lambda *a: calls.append(op) or f(*a)

    monkeypatch.setattr(module, "inference_kernel", lambda *t: Counted())
    model = trained_like(cls, skip, dtype)
    x = torch.randn(B, 20, 3, dtype=dtype, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x)
    out = model.fast_forward(x)
    assert calls == [name.replace("-", "_")]
    assert torch.equal(out.mask, ref.mask)
    assert torch.equal(out.depth, ref.depth)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=0, atol=tol)
    torch.testing.assert_close(out.state, ref.state, rtol=0, atol=tol)
    d1, d1_ref = out.extras["elastic_d1_mean"], ref.extras["elastic_d1_mean"]
    torch.testing.assert_close(d1, d1_ref, rtol=0, atol=tol)
    assert ref.depth.min() < ref.depth.max(), "the units' depths do not vary"
    if skip > 0:  # each sequence's own depth per step varies too, below r_max
        depth = ref.depth.amax(-1)  # [B, T]
        assert depth.min() < depth.max(), "the depths do not vary: the test would miss a mix-up"
        assert ref.depth.mean() < 0.8 * model.cfg.r_max


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_pytorch_fast_path_equals_the_op(ops, monkeypatch, name):
    """With the op off (``inference_kernel`` None) ``fast_forward`` runs the step loop: the same
    decisions and outputs."""
    cls, module = METHODS[name]
    model = trained_like(cls, 0.5, torch.float64)
    x = torch.randn(3, 20, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    out = model.fast_forward(x)
    monkeypatch.setattr(module, "inference_kernel", lambda *t: None)
    ref = model.fast_forward(x)
    assert torch.equal(out.mask, ref.mask) and torch.equal(out.depth, ref.depth)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=0, atol=1e-12)


def test_off_the_cpu_the_op_is_not_asked_for_with_one_warning(monkeypatch):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(kernels, "_off_cpu", set())
    what = "the elastic highway inference kernel runs on CPU only: on cuda"
    with pytest.warns(UserWarning, match=what):
        assert hi.inference_kernel(OnCuda()) is None
    assert hi.inference_kernel(OnCuda()) is None  # once: an error filter would raise here


def test_pack_srehn_puts_a_units_two_rows_together():
    w = torch.arange(2 * 3 * 3.0).view(6, 3)
    packed = hi.pack_srehn(w)
    for i in range(3):
        assert torch.equal(packed[2 * i], w[i]) and torch.equal(packed[2 * i + 1], w[3 + i])
