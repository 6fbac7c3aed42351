"""The masked cell's CUDA implementation (Triton, baselines/ops/gpu/masked_cell.py) against the
methods' per-step PyTorch code: values and the gradients of xp, h0, c0, W and the mask, float64
and float32. Without a GPU the launchers run on CPU tensors in Triton's interpreter
(``TRITON_INTERPRET=1``, set here before the kernels' module is imported); on a GPU the same
comparison runs through the op ``condrnn::masked_cell_forward`` on the device (``-m cuda``).
Skipped, naming it, where triton is not installed (it comes with the dev extra on Linux)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
import torch
from kernel_support import OnCuda, built, op_node, per_step

CUDA = torch.cuda.is_available()
if not CUDA:  # before triton is first imported, where this module imports it first
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton", reason="triton is not installed (the dev extra brings it on Linux)")

import baselines.ops.library as library  # noqa: E402
import baselines.ops.masked_cell as masked_cell  # noqa: E402

GATES = {"tanh": 1, "gru": 3, "lstm": 4}
# (B, T, D, fill): B below a program's 16 rows and above (two programs), D not a power of 2,
# T = 1, masks with exact 0s and 1s among gate values, all 0 (the state copied) and all 1
SHAPES = ((3, 7, 5, None), (1, 1, 4, None), (17, 5, 20, None), (2, 4, 3, 0.0), (2, 4, 3, 1.0))


def interpreted():
    """The kernels' module, its kernels built by Triton's interpreter (CPU tensors); None where
    triton itself was imported before ``TRITON_INTERPRET`` was set (by ``torch.compile`` in an
    earlier test, say): its own jitted helpers (``tl.zeros``) are then compiled, not
    interpreted, and only a fresh process can run the kernels (``in_a_fresh_process``)."""
    import triton.language.standard as standard

    if type(standard.zeros).__name__ != "InterpretedFunction":
        return None
    os.environ["TRITON_INTERPRET"] = "1"
    import baselines.ops.gpu.masked_cell as gpu

    if type(gpu._forward_kernel).__name__ != "InterpretedFunction":
        gpu = importlib.reload(gpu)  # imported before, compiled for a GPU
    return gpu


def in_a_fresh_process(request) -> None:
    """Run the calling test again in a process of its own, with ``TRITON_INTERPRET=1`` set before
    triton is imported; it fails if that run fails."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", request.node.nodeid]
    cwd = request.config.rootpath
    proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]


def inputs(cell, dtype, B, T, D, fill, device="cpu"):
    """``xp [B, T, G D]``, h0, W, m (0s, 1s and gate values, or all ``fill``), c0 or None, the
    loss's weights; every tensor a leaf that requires grad."""
    gen = torch.Generator().manual_seed(B * 1000 + T * 10 + D)

    def rand(*shape, scale=1.0):
        t = torch.randn(*shape, dtype=dtype, generator=gen) * scale
        return t.to(device).requires_grad_()

    scale = 0.5 if D <= 16 else D**-0.5  # chaotic at 0.5 beyond: float32's rounding would grow
    G = GATES[cell]
    xp, h0, W = rand(B, T, G * D), rand(B, D), rand(G * D, D, scale=scale)
    c0 = rand(B, D) if cell == "lstm" else None
    m = torch.rand(B, T, D, dtype=dtype, generator=gen)
    m = m.masked_fill(m < 0.3, 0).masked_fill(m > 0.8, 1) if fill is None else m.fill_(fill)
    m = m.to(device).requires_grad_()
    w_out = torch.randn(B, T, D, dtype=dtype, generator=gen).to(device)
    w_c = torch.randn(B, D, dtype=dtype, generator=gen).to(device)
    return xp, h0, W, m, c0, w_out, w_c


def reference(cell, xp, h0, W, m, c0, w_out, w_c):
    """``(hs, c_T, grads of xp, h0, W, m[, c0])`` of the per-step code."""
    hs, c = per_step(cell, xp, h0, W, m, c0)
    loss = (hs * w_out).sum() + (0 if c is None else (c * w_c).sum())
    leaves = [xp, h0, W, m] + ([c0] if c0 is not None else [])
    return hs, c, torch.autograd.grad(loss, leaves)


def check(cell, dtype, fill, h0, got, want):
    """``got`` and ``want``: ``(hs, c_T, grads)``, equal to float64 1e-12, float32 1e-5."""
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    (hs, c, grads), (hs_ref, c_ref, grads_ref) = got, want
    torch.testing.assert_close(hs, hs_ref, rtol=tol, atol=tol)
    if c_ref is not None:
        torch.testing.assert_close(c, c_ref, rtol=tol, atol=tol)
    if fill == 0.0:  # closed throughout: exact copies of the initial state
        assert torch.equal(hs, h0.detach()[:, None].expand_as(hs))
    assert len(grads) == len(grads_ref)
    for name, a, b in zip(("xp", "h0", "W", "m", "c0"), grads, grads_ref, strict=False):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=f"{cell} {hs.shape}: d{name}")


@pytest.mark.skipif(CUDA, reason="the interpreter's test (CPU tensors); -m cuda runs it on the GPU")
@pytest.mark.parametrize("cell", list(GATES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_triton_kernels_equal_the_per_step_cells_in_the_interpreter(cell, dtype, request):
    gpu = interpreted()
    if gpu is None:
        in_a_fresh_process(request)
        return
    code = masked_cell.CELLS[cell]
    for B, T, D, fill in SHAPES:
        xp, h0, W, m, c0, w_out, w_c = inputs(cell, dtype, B, T, D, fill)
        want = reference(cell, xp, h0, W, m, c0, w_out, w_c)
        empty = xp.new_empty(0).detach()
        args = [t.detach() for t in (xp.transpose(0, 1).contiguous(), h0)]
        c0_in = empty if c0 is None else c0.detach()
        hs, c_T, *saved = gpu.forward(*args, c0_in, W.detach(), m.detach(), code)
        g_c = w_c if c0 is not None else empty
        d_xp, d_h0, d_c0, d_w, d_m = gpu.backward(w_out, g_c, W.detach(), m.detach(), *saved, code)
        grads = [d_xp.transpose(0, 1), d_h0, d_w, d_m] + ([d_c0] if c0 is not None else [])
        check(cell, dtype, fill, h0, (hs, None if c0 is None else c_T, grads), want)


def test_the_kernels_take_the_widths_they_are_written_for():
    import baselines.ops.gpu.masked_cell as gpu

    h, w = torch.empty(2, 128), torch.empty(4 * 128, 128)
    assert gpu.takes(torch.empty(2, 5, 700), h, w)  # the input's width is not D
    assert not gpu.takes(torch.empty(2, 129), torch.empty(3 * 129, 129))
    assert not gpu.takes(OnCuda())  # no shape: no call the kernels know


def test_off_cuda_or_without_triton_the_family_asks_no_gpu_module(monkeypatch):
    x, h = torch.empty(2, 3, 4), torch.empty(2, 4)
    kernel = masked_cell.masked_cell_kernel
    assert not kernel.on_cuda((x, h))  # CPU tensors
    monkeypatch.setattr(library, "cuda_ready", lambda: False)
    assert not kernel.on_cuda((OnCuda(), OnCuda()))
    assert kernel.kernel_source_files()[-1].name == "masked_cell.py"  # in the code version


COMPILE = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import baselines.ops.gpu.masked_cell as gpu

cell, dtype = int(sys.argv[1]), sys.argv[2]
consts = {"S_STATIC": 0, "CELL": cell, "G": gpu.GATES[cell], "BLOCK_B": gpu.BLOCK_B,
          "BLOCK_D": gpu.block_d(gpu.MAX_D)}
shared = {}
for kernel in (gpu._forward_kernel, gpu._backward_kernel):
    names = kernel.arg_names
    sig = {n: "constexpr" if n in consts else "i32" if n in ("B", "D", "S") else "*" + dtype
           for n in names}
    src = ASTSource(kernel, sig, constexprs={(names.index(n),): v for n, v in consts.items()})
    options = {"num_warps": gpu.NUM_WARPS, "num_stages": gpu.NUM_STAGES}
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    shared[kernel.fn.__name__] = compiled.metadata.shared
print(json.dumps(shared))
"""
H100_SHARED = 227 * 1024
"""The shared memory a program may use on an H100 (sm_90, with the opt-in Triton takes)."""


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_the_kernels_compile_for_an_h100_within_its_shared_memory(dtype, request):
    """Compiled (not interpreted) for sm_90 without a GPU, in a process without
    ``TRITON_INTERPRET``: the LSTM's kernels, the largest (four gates' weight tiles), at the
    widest D they take fit an H100's shared memory (a launch would fail otherwise)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    args = [sys.executable, "-c", COMPILE, str(masked_cell.CELLS["lstm"]), dtype]
    cwd = request.config.rootpath
    proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shared = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(shared) == {"_forward_kernel", "_backward_kernel"}
    assert all(0 < n <= H100_SHARED for n in shared.values()), shared


@pytest.fixture
def masked_kernel():
    yield from built(masked_cell.masked_cell_kernel)


@pytest.mark.kernel
def test_the_triton_kernels_register_as_the_ops_cuda_implementation(masked_kernel):
    library.python_parts.register_cuda()  # Triton imports without a GPU
    for op in ("masked_cell_forward", "masked_cell_backward"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"condrnn::{op}", "CUDA"), op


@pytest.mark.cuda
@pytest.mark.kernel
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("cell", list(GATES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_masked_cell_op_on_cuda_equals_the_per_step_cells(masked_kernel, cell, dtype):
    # few tile widths (a compile each): 16 and 128
    for B, T, D, fill in ((3, 7, 5, None), (17, 5, 16, None), *SHAPES[3:], (64, 50, 128, None)):
        xp, h0, W, m, c0, w_out, w_c = inputs(cell, dtype, B, T, D, fill, device="cuda")
        want = reference(cell, xp, h0, W, m, c0, w_out, w_c)
        kernel = masked_cell.sequence_kernel(xp, h0, W)
        assert kernel is not None
        hs, c = masked_cell.masked_sequence(kernel, cell, xp.transpose(0, 1), h0, W, m, c0)
        assert type(hs.grad_fn).__name__ == op_node("masked_cell_forward")
        loss = (hs * w_out).sum() + (0 if c is None else (c * w_c).sum())
        leaves = [xp, h0, W, m] + ([c0] if c0 is not None else [])
        check(cell, dtype, fill, h0, (hs, c, torch.autograd.grad(loss, leaves)), want)
