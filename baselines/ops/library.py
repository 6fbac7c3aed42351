"""The kernel library: the C++ sources of ``csrc`` built into two shared libraries (its parts:
the training kernels, and the inference kernels of ``csrc/infer``) whose ops are the namespace
``torch.ops.condrnn``, each loaded once a process, with the ops' Python parts (fake
implementations, backwards) registered once it is loaded; the kernels' status; the handle a
method holds on its family's ops (``Kernel``).

Each source ``csrc/<stem>.cpp`` declares its ops, ``condrnn::<stem>_<function>``, with their
schemas (``TORCH_LIBRARY_FRAGMENT``) and registers their CPU implementations
(``TORCH_LIBRARY_IMPL``); ``csrc/ops.cpp`` holds the namespace's ``TORCH_LIBRARY`` block and
the conventions of the schemas. A source may export plain C functions (no tensor, so no op: a
pool's size), which Python calls through ctypes (``c_function``). No pybind11: the sources
include ATen's ``Tensor`` and operator headers and ``torch/library.h`` only. The op families'
modules beside this one (``baselines/ops/<stem>.py``) declare each op's fake implementation
(``fake``) and the forward op's backward (``autograd``), registered with the dispatcher when
the library is loaded (``python_parts``).

The sources of a part (``PARTS``) are compiled into one shared library by one
``torch.utils.cpp_extension.load`` (ninja compiles them in parallel), on first use (never at
import), which needs a C++ compiler and ninja (the ``kernels`` extra), and loaded with
``torch.ops.load_library``, once a process (``load_library``): its ops stay registered for the
life of the process. The training part is what a sweep needs (it builds it before its first
run); the inference part only the fast paths (``fast_forward``, ``harness bench --speedup``), so
that a newcomer's first run waits for half the sources (the README gives the time and how it was
measured; benchmarks/test_build.py times both parts from an empty cache; each source includes
only the ATen operators it calls, ``ATen/ops/<op>.h``, which builds faster than
``ATen/ATen.h``). A build says so in one line on stderr before it starts (``building N kernels
(once, cached in DIR) ...``) and its time when done (``... built in S s``). Where it cannot be
built, or with ``HARNESS_NO_KERNELS=1``, every kernel's loader returns None (one warning where a
build fails) and callers take their PyTorch path, which computes the same thing. Floating-point
contraction is off so that the update decisions round exactly like PyTorch's elementwise ops;
dot products are vectorised reductions (``omp simd``), summed in a different order than BLAS, so
outputs agree to rounding.

The kernels: the batch-1 inference sequences of SA-RNN and VC-RNN (``baselines.ops.sarnn``,
``baselines.ops.vcrnn``) and the inference sequences of Delta GRU and EGRU at any batch size
(``baselines.ops.delta_gru_infer``, ``baselines.ops.egru_infer``): their fast paths,
``fast_forward``; and the training kernels
(``Kernel``), which run a method's recurrence, forward and backward: EI-REHN's layers and
whole step (``ei_rehn_stack``), the masked cell of Phased LSTM, Random Updates and the Clockwork
RNN (``masked_cell``), Phased LSTM's time gate (``phased_gate``), and the sequences of Skip RNN
(``skip_gru``), SA-RNN (``sarnn_train``), VC-RNN (``vcrnn_train``), Delta GRU
(``delta_gru_seq``), EGRU (``egru``) and SREHN (``srehn``). Called, a ``Kernel``
returns its ops (``KernelOps``: ``kernel.forward`` is ``torch.ops.condrnn.<stem>_forward``),
which its family's wrapper calls. Each is defined in its family's module, where ``method_code``
finds it from the method's module: its own source (not the whole library's) is part of that
method's code version, as the kernel runs in the training that records carry, and a sweep builds
the library before its first run. The per-step PyTorch code is each one's reference, tested
against it to float rounding, and the path wherever the kernel cannot run (eval, CUDA, another
dtype, no build, ``HARNESS_NO_KERNELS``).

The ops run on CPU tensors (their C++) and on the meta device (their fake implementations; so do
FakeTensor and ``torch.compile``). Every caller asks ``on_cpu`` (``meta=True`` for the training
kernels, ``Kernel.for_tensors``) before it asks for a kernel: on another device (CUDA)
it takes its PyTorch path, which computes the same thing, and the first such fallback of each
fast path in a process says so in one warning line.

``library_status(part)`` (and each kernel's ``status()``) says which of the two happened without
building anything: reports are rendered from measured rows, and rendering must never start a
compiler. The kernels of a part share its state: "not tried" until something asks for one of
them, then "loaded" or "unavailable" for all of them.

The build uses ``-march=native``, so a binary is only valid on the CPU that built it. The build
directory of a part is keyed by a digest of its sources and every header, the flags, the torch
version and this CPU's model and instruction-set flags (``build_key``): a cache shared by the
nodes of a cluster holds one build per kind of CPU, and a node never loads a binary built for
another (which would die with SIGILL)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from harness.data import cache_dir

CSRC = Path(__file__).resolve().parent / "csrc"
PARTS = ("train", "infer")
"""The library's two parts, each its own shared library of the one namespace, built and loaded on
its own: the training kernels (``csrc/*.cpp``: what a sweep builds before its first run) and the
inference kernels (``csrc/infer/*.cpp``: the fast paths, built by the first fast forward or
``harness bench --speedup``), so that a newcomer's first run compiles only the first. The
headers of ``csrc`` are shared."""
CFLAGS = ("-O3", "-ffp-contract=off", "-fopenmp-simd", "-march=native")
LIBRARY = "condrnn"  # the ops' namespace: torch.ops.condrnn
DISABLED = "disabled by HARNESS_NO_KERNELS"


@dataclass(frozen=True)
class KernelStatus:
    """Where a kernel stands in this process.

    ``state`` is "not tried" (nothing asked for it yet), "loaded" (built, or found built, and
    loaded) or "unavailable" (``reason`` says why: disabled, no compiler, a build error, ...).
    """

    state: Literal["not tried", "loaded", "unavailable"]
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.state}: {self.reason}" if self.reason else self.state

    def fast_path_note(self, method: str, where: str = "at batch 1 on CPU") -> str:
        """The report line of a method whose fast path runs this kernel ``where`` (at batch 1 on
        CPU; "on CPU" for a kernel that takes any batch)."""
        if self.state == "loaded":
            state = "used"
        elif self.state == "not tried":
            state = f"not tried: nothing ran {where}"
        else:
            state = f"unavailable here, {self.reason}: PyTorch fallback"
        return f"{method}: {where} the fast path runs a fused C++ kernel ({state})"


# The fast paths ``on_cpu`` has sent to their PyTorch path in this process (each warns once).
_off_cpu: set[str] = set()


def on_cpu(what: str, *tensors: Any, meta: bool = False) -> bool:
    """Whether ``tensors`` are all on the CPU, the one device the CPU-only code ``what`` (a
    method's fused kernel, say) runs on (or on the meta device, with ``meta``: where the ops' fake
    implementations run). Where not, the caller runs its PyTorch path instead; the first time in a
    process for each ``what``, a warning says so in one line."""
    here = ("cpu", "meta") if meta else ("cpu",)
    device = next((t.device for t in tensors if t.device.type not in here), None)
    if device is None:
        return True
    if what not in _off_cpu:
        _off_cpu.add(what)
        warnings.warn(
            f"{what} runs on CPU only: on {device.type} the PyTorch path runs", stacklevel=2
        )
    return False


def cuda_ready() -> bool:
    """Whether the CUDA implementations (``baselines/ops/gpu``, Triton) can run in this process:
    a CUDA device and the triton package."""
    import importlib.util

    return torch.cuda.is_available() and importlib.util.find_spec("triton") is not None


def cpu_identity() -> str:
    """The CPU's architecture, model and instruction-set flags (what ``-march=native`` targets)."""
    parts = [platform.machine()]
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key = line.split(":", 1)[0].strip()
            if key in ("model name", "flags", "Features", "CPU part"):
                parts.append(line.split(":", 1)[1].strip())
            if len(parts) >= 3 and not line.strip():
                break  # the first processor's block is enough
    except OSError:
        parts.append(platform.processor())
    return "\n".join(parts)


def part_sources(part: str = "train", csrc: Path | None = None) -> list[Path]:
    """The sources of a part of the library (``PARTS``), in ``csrc`` (default ``CSRC``)."""
    folder = CSRC if csrc is None else csrc
    return sorted((folder / "infer" if part == "infer" else folder).glob("*.cpp"))


def kernel_stems(part: str | None = None) -> tuple[str, ...]:
    """The kernels of the library (of one part): every source but ``ops.cpp`` (the shared one)."""
    parts = PARTS if part is None else (part,)
    return tuple(sorted(p.stem for q in parts for p in part_sources(q) if p.stem != "ops"))


def part_of(stem: str) -> str:
    """The part of the library (``PARTS``) whose sources hold the kernel ``stem``."""
    return next((q for q in PARTS if stem in kernel_stems(q)), "train")


def build_key(csrc: Path | None = None, part: str = "train") -> str:
    """A digest of everything a part of the compiled library depends on: its sources and every
    header of ``csrc`` (default ``CSRC``), the flags, torch's version and this CPU."""
    folder = CSRC if csrc is None else csrc
    h = hashlib.sha256(part.encode())
    for path in sorted([*part_sources(part, folder), *folder.glob("*.h")]):
        for piece in (path.name.encode(), path.read_bytes()):
            h.update(piece)
            h.update(b"\0")
    for piece in (" ".join(CFLAGS).encode(), torch.__version__.encode(), cpu_identity().encode()):
        h.update(piece)
        h.update(b"\0")
    return h.hexdigest()[:16]


# What asking for each part of the library found in this process (none: nothing asked since
# the last ``forget_library``), and the files loaded. A process loads a part once: its ops stay
# registered, and a second copy (another cache dir) would register them again, which the
# dispatcher refuses by ending the process.
_found: dict[str, KernelStatus] = {}
_loaded: dict[str, Path] = {}


def library_status(part: str = "train") -> KernelStatus:
    """Where a part of the library (its kernels) stands in this process, found without building
    it."""
    if part in _found:
        return _found[part]
    if os.environ.get("HARNESS_NO_KERNELS"):  # asking for it now would not build it either
        return KernelStatus("unavailable", DISABLED)
    return KernelStatus("not tried")


def library_file(part: str = "train") -> Path | None:
    """The compiled part of the library this process loaded, or None."""
    return _loaded.get(part)


def load_library(label: str, part: str = "train") -> bool:
    """Whether the ops of a part of ``torch.ops.condrnn`` can run: that part built (or found
    built) and loaded at the first ask of a process (or the first since ``forget_library``), the
    answer kept.

    Args:
        label: the kernel that asks ("SA-RNN", "EGRU training"), named by the warning of a build
            that fails.
        part: which part (``PARTS``).
    """
    if part not in _found:
        _found[part] = _load(label, part)
    return _found[part].state == "loaded"


def forget_library() -> None:
    """Forget what asking for the library found: the next ask loads (or builds) again. A library
    this process has loaded stays loaded (its ops stay registered): asked again, it is reused."""
    _found.clear()


def _load(label: str, part: str) -> KernelStatus:
    """Build (or find built) the sources of a part into one shared library and load it: its status.

    A build that compiles (no binary in the cache yet: the first on a machine and CPU) is said on
    stderr in one line before it starts, and its time after; one that fails is one warning naming
    ``label``, and the status says why in one line."""
    if os.environ.get("HARNESS_NO_KERNELS"):
        return KernelStatus("unavailable", DISABLED)
    if part in _loaded:  # loaded once a process: its ops are there
        return KernelStatus("loaded")
    try:
        from torch.utils.cpp_extension import LIB_EXT, load

        key = build_key(part=part)
        stem = "ops" if part == "train" else part
        name = f"{LIBRARY}_{stem}_{key}"
        build = cache_dir() / "kernels" / f"{stem}-{key}"
        build.mkdir(parents=True, exist_ok=True)
        library = build / f"{name}{LIB_EXT}"
        compiles = not library.exists()
        if compiles:
            count = len(kernel_stems(part))
            print(f"building {count} kernels (once, cached in {build}) ...", file=sys.stderr)
            sys.stderr.flush()
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load(
                name=name,
                sources=[str(p) for p in part_sources(part)],
                extra_include_paths=[str(CSRC)],  # common.h, gemm.h, elastic_gate.h
                # exact rounding for the decisions; SIMD reductions only where the pragma says
                extra_cflags=list(CFLAGS),
                build_directory=str(build),
                is_python_module=False,  # a plain shared library: its ops register as it loads
                verbose=False,
            )
        torch.ops.load_library(str(library))  # ``load`` did: a second call is a no-op
        _loaded[part] = library
        python_parts.register()  # the ops' fake implementations and backwards
        if compiles:
            print(f"... built in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    except Exception as e:  # no compiler, no ninja, ...: use the PyTorch path
        # a failed build's message holds the whole compiler output; the status is one line
        first = (str(e).strip().splitlines() or [""])[0][:200]
        why = f"{type(e).__name__}: {first}" if first else type(e).__name__
        warnings.warn(
            f"fused {label} kernel unavailable, using the PyTorch path: {e}", stacklevel=4
        )
        return KernelStatus("unavailable", why)
    return KernelStatus("loaded")


def c_function(
    name: str,
    restype: Any = ctypes.c_int64,
    argtypes: tuple[Any, ...] = (ctypes.c_int64,),
    part: str = "train",
) -> Callable[..., Any]:
    """The plain C function ``condrnn_<name>`` of the loaded part of the library, through
    ctypes: what is no op (no tensor in or out: a pool's size). AttributeError where the library
    has no such function; RuntimeError where that part is not loaded."""
    if part not in _loaded:
        raise RuntimeError(f"the kernel library's {part} part is not loaded (load_library)")
    function = getattr(ctypes.CDLL(str(_loaded[part])), f"{LIBRARY}_{name}")
    function.restype, function.argtypes = restype, list(argtypes)
    return function


class PythonParts:
    """The Python parts of the ops: their fake (shape) implementations and backward formulas,
    declared by the op families' modules (``fake``, ``autograd``) and registered with the
    dispatcher once the library is loaded (``register``: once a process; an op declared later,
    by a module imported after the load, at once)."""

    def __init__(self) -> None:
        self.fakes: dict[str, Callable[..., Any]] = {}
        self.backwards: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}
        self.gpu: dict[str, str] = {}  # a family's stem: its CUDA module (``Kernel``'s ``gpu``)
        self.done: set[tuple[str, str]] = set()
        self._lib: Any = None

    def fake(self, op: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: the fake implementation of ``condrnn::<op>`` (the shapes, dtypes and
        devices of its outputs, from those of its inputs; no values)."""

        def declare(function: Callable[..., Any]) -> Callable[..., Any]:
            self.fakes[op] = function
            self._maybe_register()
            return function

        return declare

    def autograd(
        self, op: str, backward: Callable[..., Any], setup_context: Callable[..., Any]
    ) -> None:
        """The backward of ``condrnn::<op>`` (``torch.library.register_autograd``)."""
        self.backwards[op] = (backward, setup_context)
        self._maybe_register()

    def _maybe_register(self) -> None:
        if _loaded:
            self.register()

    def register(self) -> None:
        """Register what is declared and not yet registered, for the ops the loaded library has
        (tests/test_ops.py checks that every declaration names one of them)."""
        if self._lib is None:
            self._lib = torch.library.Library(LIBRARY, "FRAGMENT")
        there = {op for op in [*self.fakes, *self.backwards] if hasattr(torch.ops.condrnn, op)}
        for op, function in self.fakes.items():
            if ("fake", op) not in self.done and op in there:
                torch.library.register_fake(f"{LIBRARY}::{op}", function, lib=self._lib)
                self.done.add(("fake", op))
        for op, (backward, setup) in self.backwards.items():
            if ("autograd", op) not in self.done and op in there:
                torch.library.register_autograd(
                    f"{LIBRARY}::{op}", backward, setup_context=setup, lib=self._lib
                )
                self.done.add(("autograd", op))
        if cuda_ready():
            self.register_cuda()

    def register_cuda(self) -> None:
        """Register the CUDA implementations (Triton) of the families that have one: each
        ``gpu`` module's ``OPS`` (op name: launcher), for the ops the loaded library has. Called
        by ``register`` where CUDA and Triton are there; on CPU by the tests (Triton imports
        without a GPU), which check what it registers."""
        import importlib

        for module in self.gpu.values():
            for op, launcher in importlib.import_module(module).OPS.items():
                if ("cuda", op) not in self.done and hasattr(torch.ops.condrnn, op):
                    torch.library.register_kernel(
                        f"{LIBRARY}::{op}", "cuda", launcher, lib=self._lib
                    )
                    self.done.add(("cuda", op))


python_parts = PythonParts()
fake = python_parts.fake
autograd = python_parts.autograd


def incoming(grad: Any, like: Any, *shape: int) -> Any:
    """The gradient arriving at an op's output, contiguous as the kernels read it, or zeros where
    none arrived (the ops' backwards do not materialise gradients): shaped like ``like``, or
    ``shape`` in its dtype and device."""
    if grad is not None:
        return grad.contiguous()
    return like.new_zeros(shape) if shape else torch.zeros_like(like)


def none_if_empty(t: Any) -> Any:
    """None for an op's output that has no elements where the method has no such tensor (shape
    [0]: csrc/ops.cpp), else ``t``."""
    return None if t.dim() == 1 and t.shape[0] == 0 else t


def kernel_sources(stem: str) -> tuple[Path, ...]:
    """The kernel's source (``csrc/<stem>.cpp`` or ``csrc/infer/<stem>.cpp``) and the headers of
    ``csrc`` it includes (``#include "..."``)."""
    source = next(p for p in part_sources(part_of(stem)) if p.stem == stem)
    included = re.findall(r'^#include "([^"]+)"', source.read_text(), re.MULTILINE)
    return (source, *(CSRC / name for name in included))


class KernelOps:
    """The ops of one kernel of the loaded library, as attributes: ``forward`` is
    ``torch.ops.condrnn.<stem>_forward`` (its one overload), and a plain C function of the
    kernel's source (``condrnn_<stem>_<name>``, no tensor: ``pool_held``) where no op has the
    name.

    Args:
        stem: the kernel's source name in ``csrc``, without ``.cpp``.
    """

    def __init__(self, stem: str) -> None:
        self.stem = stem

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        op = f"{self.stem}_{name}"
        try:
            found = getattr(torch.ops.condrnn, op).default
        except AttributeError:  # not an op: a plain C function of the kernel (``pool_held``)
            try:
                found = c_function(op, argtypes=(), part=part_of(self.stem))
            except AttributeError as e:
                raise AttributeError(f"the kernel library has no op condrnn::{op}") from e
        setattr(self, name, found)  # found once
        return found

    def __repr__(self) -> str:
        return f"KernelOps({self.stem!r})"


class Kernel:
    """A method's kernel family as ops of the library: a training kernel, ``csrc/<stem>.cpp``
    (forward and backward of its recurrence, the forward op's backward registered with it), or an
    inference kernel, ``csrc/infer/<stem>.cpp`` (a whole eval sequence, no backward); ``part``
    says which part of the library holds it.

    Called, it returns its ops (``KernelOps``), its part of the library built (or found built)
    and loaded at the first ask of a process, never at import, or None where it cannot be built
    (with one warning) or kernels are disabled; a build that compiles says so in one line on stderr.
    Define it in its op family's module (``baselines/ops/<stem>.py``): its sources
    (``kernel_source_files``) are part of the code version of every method whose modules hold it
    (``method_code``), and a sweep builds the training part before its first run.

    A family with a CUDA implementation (``gpu``: its module in ``baselines/ops/gpu``, Triton,
    registered as the ops' CUDA kernels) runs on CUDA tensors too, where ``cuda_ready`` and the
    module ``takes`` them; every other family runs on CPU only.

    Args:
        stem: the source's name in ``csrc`` (or ``csrc/infer``), without ``.cpp``.
        name: what the kernel is, for its messages ("Skip-GRU training").
        gpu: the module of its CUDA implementation (``baselines.ops.gpu.<stem>``), or None.
    """

    def __init__(self, stem: str, name: str, gpu: str | None = None) -> None:
        self.stem, self.name, self.gpu = stem, name, gpu
        self.part = part_of(stem)
        if gpu is not None:
            python_parts.gpu[stem] = gpu
            python_parts._maybe_register()
        self._ops = KernelOps(stem)
        # where it is declared (its family's module), as a class's: the code versions follow a
        # method's modules to it through its methods too (``x_kernel.for_tensors``)
        self.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)

    def __call__(self) -> KernelOps | None:
        return self._ops if load_library(self.name, self.part) else None

    def cache_clear(self) -> None:
        """Forget what the last ask found, for every kernel: the next call loads (or builds)
        again (``forget_library``)."""
        forget_library()

    def status(self) -> KernelStatus:
        """Where the kernel (its part of the library) stands in this process, found without
        building it."""
        return library_status(self.part)

    def kernel_source_files(self) -> tuple[Path, ...]:
        """Its C++ source and the headers of ``csrc`` it includes (and its CUDA module's file)."""
        if self.gpu is None:
            return kernel_sources(self.stem)
        import importlib.util

        spec = importlib.util.find_spec(self.gpu)  # its file, without importing it (or triton)
        return (*kernel_sources(self.stem), Path(spec.origin))

    def on_cuda(self, tensors: tuple[Any, ...]) -> bool:
        """Whether its CUDA implementation runs on ``tensors``: all on CUDA, ``cuda_ready``, and
        its module ``takes`` them (the widths it is written for)."""
        if self.gpu is None or not tensors or any(t.device.type != "cuda" for t in tensors):
            return False
        import importlib

        return cuda_ready() and importlib.import_module(self.gpu).takes(*tensors)

    def for_tensors(self, *tensors: Any) -> Any:
        """The kernel where it can run on these tensors (CPU, or meta: its ops' fake
        implementations; CUDA where it has a CUDA implementation that takes them, ``on_cuda``;
        float32/64, one dtype), else None (also where it cannot be built or
        ``HARNESS_NO_KERNELS`` is set). On another device the first call warns once
        (``on_cpu``)."""
        if not self.on_cuda(tensors) and not on_cpu(f"the {self.name} kernel", *tensors, meta=True):
            return None
        dtype = tensors[0].dtype
        if dtype not in (torch.float32, torch.float64) or any(t.dtype != dtype for t in tensors):
            return None
        return self()


def input_terms(x: Any, weight: Any, bias: Any, time_major: bool = True) -> Any:
    """``F.linear(x, weight, bias)`` for every step, ``[B, T, V] -> [T, B, G]`` (time-major: a
    step's rows contiguous, as the sequence kernels read them) or ``[B, T, G]``: the same values
    as one ``addmm`` on a row-major copy of ``W^T``, so that its backward computes W's gradient
    as ``x^T dxp`` (``[V, T B] [T B, G]``), several times faster at few inputs than
    ``F.linear``'s ``dxp^T x`` (the same sums, in another order; at the adding task's sizes 0.15
    s against 1.1 s), and a time-major gradient is read in place, without a transposed copy."""
    B, T, V = x.shape
    rows = x.transpose(0, 1).reshape(T * B, V) if time_major else x.reshape(B * T, V)
    out = torch.addmm(bias, rows, weight.t().contiguous())
    return out.view(T, B, -1) if time_major else out.view(B, T, -1)
