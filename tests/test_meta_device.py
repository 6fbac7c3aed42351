"""Every registered method trains off the CPU: its forward and backward run on the ``meta`` device
(the module built under ``torch.device("meta")``, its input there, the step outside the context).
A meta tensor has a shape and no values, so a tensor a method makes on another device
(``torch.zeros(n)`` without ``device=``) fails the step, and so does a host synchronisation
(``.item()``, ``int(t)``, ``.tolist()``, ``if t.any():``), which needs a value. The syncs a method
needs per training step are ``HOST_SYNCS`` (and in its section of docs/methods.md): its run must
stop exactly there. The default test run sets ``HARNESS_NO_KERNELS=1`` (conftest), the path
training takes without the kernels.

The CPU-only fast code (the fused C++ kernels, Delta GRU's NumPy delta scan) asks
``baselines.ops.library.on_cpu`` first: on another device it takes the PyTorch path, and says so
in one warning per process and fast path. With the kernels off (the default test run), a method
on meta takes its PyTorch path; with them, its ops run there (their fake implementations).
"""

from __future__ import annotations

import sys
import traceback
import warnings
from pathlib import Path

import pytest
import torch
from kernel_support import OnCuda, train_on_meta, training_kernels

import baselines
import baselines.clockwork_rnn
import baselines.sa_rnn
import baselines.skip_rnn
import baselines.vc_rnn
from baselines._delta_gru_fast import input_deltas, scan_deltas
from baselines.ops import library
from baselines.ops.ei_rehn_stack import step_kernel
from harness.authoring import conformance
from harness.components.code import method_kernels
from harness.components.registry import METHODS

ROOT = Path(__file__).resolve().parents[1]
NAMES = METHODS.names()
V, D, B, T = conformance.V, conformance.D, conformance.B, conformance.T
# The host synchronisations a method needs per training step: (file, the code that syncs). Each
# is explained in the method's section of docs/methods.md.
HOST_SYNCS = {"ei-rehn": ("baselines/ei_rehn.py", "int(tr.R.max())")}
META_VALUE = r"item\(\) cannot be called on meta tensors"


@pytest.fixture(autouse=True)
def _fresh_fallback_warnings(monkeypatch):
    """Each test sees the first fallback of a process: ``on_cpu``'s record starts empty."""
    monkeypatch.setattr(library, "_off_cpu", set())


def is_ours(path: Path) -> bool:
    """A file of the checkout's code, not of an environment inside it (``.venv``)."""
    return path.is_relative_to(ROOT) and not path.is_relative_to(sys.prefix)


def meta_model(name: str):
    """The method at the conformance checks' sizes, seeded as they build it, on meta."""
    with torch.device("meta"):
        return conformance._make(name)


def train_step(model) -> None:
    x = torch.randn(B, T, V, device="meta")
    out = model.train()(x)
    loss = (out.outputs**2).sum() + (0 if out.aux_loss is None else out.aux_loss)
    loss.backward()


def fallback_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "runs on CPU only" in str(w.message)]


@pytest.mark.parametrize("name", [n for n in NAMES if n not in HOST_SYNCS])
def test_forward_and_backward_run_on_meta(name):
    model = meta_model(name)
    train_step(model)
    for pname, p in model.named_parameters():
        assert p.device.type == "meta", pname
        assert p.grad is not None and p.grad.device.type == "meta", pname


@pytest.mark.filterwarnings("ignore:.*runs on CPU only")  # checked below
@pytest.mark.parametrize("name", sorted(HOST_SYNCS))
def test_a_needed_host_sync_is_where_the_meta_run_stops(name):
    path, code = HOST_SYNCS[name]
    model = meta_model(name)
    with pytest.raises(RuntimeError, match=META_VALUE) as err:
        train_step(model)
    ours = [f for f in traceback.extract_tb(err.tb) if is_ours(Path(f.filename))]
    assert Path(ours[-1].filename) == ROOT / path and code in ours[-1].line, ours[-1]
    docs = (ROOT / "docs" / "methods.md").read_text()
    assert f"`{code}`" in docs, f"{name}'s host sync {code} is not in docs/methods.md"


def test_without_the_kernels_ei_rehn_on_meta_takes_the_python_step_silently():
    """The default run (kernels off): no op runs, and no device warning is given (the meta
    device is one the ops run on, where built)."""
    model = meta_model("ei-rehn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match=META_VALUE):
            train_step(model)  # the Python step's depth sync
    assert fallback_warnings(caught) == []


def test_on_cpu_refuses_other_devices_with_one_warning_per_fast_path():
    cpu, meta = torch.zeros(2), torch.zeros(2, device="meta")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert library.on_cpu("A's kernel", cpu, cpu)
        assert not library.on_cpu("A's kernel", cpu, meta)
        assert not library.on_cpu("A's kernel", meta)
        assert not library.on_cpu("B's kernel", meta)
        assert library.on_cpu("B's kernel", cpu)
        assert library.on_cpu("C's ops", cpu, meta, meta=True)  # where their fakes run
        assert not library.on_cpu("C's ops", OnCuda(), meta=True)
    assert fallback_warnings(caught) == [
        "A's kernel runs on CPU only: on meta the PyTorch path runs",
        "B's kernel runs on CPU only: on meta the PyTorch path runs",
        "C's ops runs on CPU only: on cuda the PyTorch path runs",
    ]


def test_a_training_kernel_is_never_asked_for_off_the_cpu(monkeypatch):
    """Every method's training kernel: off the CPU and meta (CUDA: one warning each) and in
    another dtype its gate answers None without asking the loader; on the CPU in float32, and on
    meta (its ops' fake implementations), it gives the kernel."""
    loaded = []

    def load(label, part):  # the build and load of a part of the library, a stand-in
        loaded.append(label)
        return library.KernelStatus("loaded")

    monkeypatch.setattr(library, "_load", load)
    monkeypatch.setattr(library, "_off_cpu", set())
    meta = (torch.zeros(2, 3, device="meta"), torch.zeros(3, device="meta"))
    cpu = (torch.zeros(2, 3), torch.zeros(3))
    assert {k.stem for k in training_kernels()} >= {"ei_rehn_stack", "masked_cell", "skip_gru"}
    for kernel in training_kernels():
        kernel.cache_clear()
        try:
            with pytest.warns(UserWarning, match=f"the {kernel.name} kernel runs on CPU only"):
                assert kernel.for_tensors(OnCuda(), cpu[1]) is None
            assert kernel.for_tensors(*(t.half() for t in cpu)) is None  # CPU, not float32/64
            assert kernel.for_tensors(cpu[0], cpu[1].double()) is None  # two dtypes
            assert loaded == []
            for tensors in (cpu, meta):
                ops = kernel.for_tensors(*tensors)
                assert isinstance(ops, library.KernelOps) and ops.stem == kernel.stem
            assert loaded == [kernel.name]  # asked once: the answer is kept
        finally:
            kernel.cache_clear()  # later tests get the state their environment says
            loaded.clear()
    assert step_kernel(OnCuda()) is None  # EI-REHN's step asks through its kernel's gate


@pytest.mark.kernel
@pytest.mark.parametrize("name", [n for n in NAMES if method_kernels(n)])
def test_with_the_kernels_a_method_trains_on_meta_through_its_ops(name):
    """With the library built, a method that has a training kernel trains on meta through its
    ops (their fake implementations and registered backwards), not its per-step path. EI-REHN's
    whole step has a data-dependent layer count, which a meta tensor cannot give: its run stops
    in the op's fake implementation (docs/methods.md 2.14)."""
    if not method_kernels(name)[0]():
        pytest.skip("the kernel library does not build here")
    model = meta_model(name)
    if name in HOST_SYNCS:
        with pytest.raises(Exception, match="data-dependent"):
            train_step(model)
        return
    nodes = train_on_meta(model, (B, T, V))
    assert any(n.startswith("GeneratedBackwardFor_condrnn_") for n in nodes), sorted(nodes)


FUSED = [
    ("sa-rnn", baselines.sa_rnn, "sarnn_kernel", "SA-RNN's fused kernel"),
    ("vc-rnn", baselines.vc_rnn, "vcrnn_kernel", "VC-RNN's fused kernel"),
    ("skip-rnn", baselines.skip_rnn, "skip_rnn_infer_kernel", "Skip RNN's fused kernel"),
    (
        "clockwork-rnn",
        baselines.clockwork_rnn,
        "clockwork_infer_kernel",
        "Clockwork RNN's fused kernel",
    ),
]


@pytest.mark.parametrize("name, module, loader, what", FUSED)
def test_batch_1_fast_path_off_the_cpu_takes_the_pytorch_path(
    name, module, loader, what, monkeypatch
):
    def build():
        raise AssertionError("the kernel was asked for")

    monkeypatch.setattr(module, loader, build)
    model = meta_model(name).eval()
    x = torch.randn(1, T, V, device="meta")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            # the PyTorch path decides on the host which rows to compute: on meta there is no
            # value to decide on (on CUDA it runs)
            with pytest.raises((NotImplementedError, RuntimeError)) as err:
                model.fast_forward(x)
            assert traceback.extract_tb(err.tb)[-1].name != "build"
    assert fallback_warnings(caught) == [f"{what} runs on CPU only: on meta the PyTorch path runs"]


def test_delta_gru_delta_scan_off_the_cpu_is_the_same_scan_in_torch():
    x = torch.randint(-4, 5, (3, 12, 4)).float() / 4  # quarter steps: ties |dx| = theta_x
    x_hat0 = torch.zeros(3, 4)
    for theta in (0.0, 0.5, 0.7):
        want, want_last = input_deltas(x, x_hat0, theta)
        got, got_last = scan_deltas(x, x_hat0, theta)
        assert torch.equal(got, want) and torch.equal(got_last, want_last)
        assert (want == 0).any() and (want != 0).any()
    with pytest.warns(UserWarning, match="Delta GRU's fast path .* runs on CPU only"):
        dx, last = input_deltas(x.to("meta"), x_hat0.to("meta"), 0.5)
    assert dx.device.type == last.device.type == "meta"
    assert dx.shape == x.shape and last.shape == x_hat0.shape
