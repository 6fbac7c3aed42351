"""Optional fused CPU kernels: the fast inference paths (``fast_forward``) of SA-RNN and VC-RNN,
and the methods' training kernels (``TrainingKernel``).

In PyTorch, computing only the k updated rows of a recurrent matrix means gathering them (a copy)
and reading them again, plus a few dozen small ops per step; at batch 1 that caps SA-RNN's
realised speedup near a third of its FLOP reduction, and VC-RNN's, whose step is a few dozen
torch ops on about a tenth of the weights at 90 % skip, is bound by their dispatch. The kernels
in ``csrc/sarnn.cpp`` and ``csrc/vcrnn.cpp`` run each method's whole batch-1 inference sequence in
C++, reading only the rows (and, for VC-RNN, columns) the updated units need, once, with no
per-step Python dispatch. The helpers both use (``dot``, ``sigmoid``) are in ``csrc/common.h``.

Each is compiled on first use (never at import) with ``torch.utils.cpp_extension.load``, which
needs a C++ compiler and ninja (the ``kernels`` extra). Where it cannot be built, or with
``HARNESS_NO_KERNELS=1``, ``sarnn_kernel()`` / ``vcrnn_kernel()`` return None and callers fall
back to their PyTorch path, which computes the same thing. Floating-point contraction is off so
that the update decisions round exactly like PyTorch's elementwise ops (VC-RNN's sigmoids on its
decision path are ATen's own ``at::sigmoid_out``, see ``csrc/vcrnn.cpp``); dot products are
vectorised reductions (``omp simd``), summed in a different order than BLAS, so outputs agree to
rounding, as the PyTorch fast paths do.

The training kernels (``TrainingKernel``, issue 54) run a method's recurrence, forward and
backward, in C++ behind its autograd Function: EI-REHN's step (``csrc/ei_rehn_stack.cpp``,
``baselines._ei_rehn_stack`` and ``_ei_rehn_fused``), the masked cell of Phased LSTM, Random
Updates and the Clockwork RNN (``_masked_cell``), Phased LSTM's time gate (``_phased_gate``), and
the sequences of Skip RNN (``_skip_gru``), SA-RNN (``_sarnn_train``), VC-RNN (``_vcrnn_train``),
Delta GRU (``_delta_gru_seq``), EGRU (``_egru``) and SREHN (``_srehn``). Each is defined in its
method's module, where ``method_code`` finds it: its source is part of that method's code version,
as the kernel runs in the training that records carry, and a sweep builds it before its first run.
The per-step PyTorch code is each one's reference, tested against it to float rounding, and the
path wherever the kernel cannot run (eval, another device or dtype, no build,
``HARNESS_NO_KERNELS``).

The kernels take CPU tensors only. Every caller asks ``on_cpu`` before it asks for a kernel: on
another device (CUDA, meta) it takes its PyTorch path, which computes the same thing, and the
first such fallback of each fast path in a process says so in one warning line.

``sarnn_kernel_status()`` / ``vcrnn_kernel_status()`` / ``TrainingKernel.status()`` say
which of the two happened without building anything: reports are rendered from measured rows, and
rendering must never start a compiler.

The build uses ``-march=native``, so a binary is only valid on the CPU that built it. The build
directory is keyed by a digest of the source and the shared headers, the flags, the torch version
and this CPU's model and instruction-set flags: a cache shared by the nodes of a cluster holds one
build per kind of CPU, and a node never loads a binary built for another (which would die with
SIGILL).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from harness.data import cache_dir

CSRC = Path(__file__).resolve().parent / "csrc"
CFLAGS = ("-O3", "-ffp-contract=off", "-fopenmp-simd", "-march=native")
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

    def fast_path_note(self, method: str) -> str:
        """The report line of a method whose batch-1 CPU fast path is this kernel."""
        if self.state == "loaded":
            state = "used"
        elif self.state == "not tried":
            state = "not tried: nothing ran at batch 1 on CPU"
        else:
            state = f"unavailable here, {self.reason}: PyTorch fallback"
        return f"{method}: at batch 1 on CPU the fast path runs a fused C++ kernel ({state})"


# The fast paths ``on_cpu`` has sent to their PyTorch path in this process (each warns once).
_off_cpu: set[str] = set()


def on_cpu(what: str, *tensors: Any) -> bool:
    """Whether ``tensors`` are all on the CPU, the one device the CPU-only code ``what`` (a
    method's fused kernel, say) runs on. Where not, the caller runs its PyTorch path instead; the
    first time in a process for each ``what``, a warning says so in one line."""
    device = next((t.device for t in tensors if t.device.type != "cpu"), None)
    if device is None:
        return True
    if what not in _off_cpu:
        _off_cpu.add(what)
        warnings.warn(
            f"{what} runs on CPU only: on {device.type} the PyTorch path runs", stacklevel=2
        )
    return False


# What the last call of each kernel's loader found; meaningful only while its lru_cache holds a
# result (tests clear the cache to rebuild, which makes the kernel "not tried" again).
_last: dict[str, KernelStatus] = {}


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


def build_key(source: Path) -> str:
    """A digest of everything a compiled binary depends on: source, headers, flags, torch, CPU."""
    h = hashlib.sha256()
    headers = [p.read_bytes() for p in sorted(source.parent.glob("*.h"))]
    flags, version = " ".join(CFLAGS).encode(), torch.__version__.encode()
    for part in (source.read_bytes(), *headers, flags, version):
        h.update(part)
        h.update(b"\0")
    h.update(cpu_identity().encode())
    return h.hexdigest()[:16]


def _status(loader: Any, stem: str) -> KernelStatus:
    """A kernel's state from its cached loader and what that found, never building anything."""
    if loader.cache_info().currsize:
        return _last[stem]
    if os.environ.get("HARNESS_NO_KERNELS"):  # asking for it now would not build it either
        return KernelStatus("unavailable", DISABLED)
    return KernelStatus("not tried")


def _load(stem: str, label: str, announce: str | None = None) -> tuple[Any, KernelStatus]:
    """Build (or find built) and load ``csrc/<stem>.cpp``: ``(module, status)``; the module is
    None where it cannot be built (with a warning naming ``label``) or kernels are disabled.

    With ``announce`` (the kernel's name), a build that compiles (no binary in the cache yet: the
    first on a machine and CPU, 30-60 s) is said first on stderr, in one line."""
    if os.environ.get("HARNESS_NO_KERNELS"):
        return None, KernelStatus("unavailable", DISABLED)
    try:
        from torch.utils.cpp_extension import LIB_EXT, load

        source = CSRC / f"{stem}.cpp"
        key = build_key(source)
        build = cache_dir() / "kernels" / f"{stem}-{key}"
        build.mkdir(parents=True, exist_ok=True)
        if announce and not (build / f"harness_{stem}_{key}{LIB_EXT}").exists():
            print(
                f"building the fused {announce} kernel (once, cached in {build})", file=sys.stderr
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = load(
                name=f"harness_{stem}_{key}",
                sources=[str(source)],
                extra_include_paths=[str(CSRC)],  # common.h
                # exact rounding for the decisions; SIMD reductions only where the pragma says
                extra_cflags=list(CFLAGS),
                build_directory=str(build),
                verbose=False,
            )
    except Exception as e:  # no compiler, no ninja, ...: use the PyTorch path
        # a failed build's message holds the whole compiler output; the status is one line
        first = (str(e).strip().splitlines() or [""])[0][:200]
        why = f"{type(e).__name__}: {first}" if first else type(e).__name__
        warnings.warn(
            f"fused {label} kernel unavailable, using the PyTorch path: {e}", stacklevel=3
        )
        return None, KernelStatus("unavailable", why)
    return mod, KernelStatus("loaded")


def sarnn_kernel_status() -> KernelStatus:
    """The state of the SA-RNN kernel, found without building or loading anything."""
    return _status(sarnn_kernel, "sarnn")


@functools.lru_cache(maxsize=1)
def sarnn_kernel() -> Any:
    """The compiled ``sarnn_sequence`` function, or None where it cannot be built."""
    mod, _last["sarnn"] = _load("sarnn", "SA-RNN")
    return None if mod is None else mod.sarnn_sequence


def vcrnn_kernel_status() -> KernelStatus:
    """The state of the VC-RNN kernel, found without building or loading anything."""
    return _status(vcrnn_kernel, "vcrnn")


@functools.lru_cache(maxsize=1)
def vcrnn_kernel() -> Any:
    """The compiled ``vcrnn_sequence`` function, or None where it cannot be built."""
    mod, _last["vcrnn"] = _load("vcrnn", "VC-RNN")
    return None if mod is None else mod.vcrnn_sequence


def kernel_sources(stem: str) -> tuple[Path, ...]:
    """``csrc/<stem>.cpp`` and the headers of ``csrc`` it includes (``#include "..."``)."""
    source = CSRC / f"{stem}.cpp"
    included = re.findall(r'^#include "([^"]+)"', source.read_text(), re.MULTILINE)
    return (source, *(CSRC / name for name in included))


class TrainingKernel:
    """A method's training kernel, ``csrc/<stem>.cpp``: forward and backward of its recurrence in
    C++, behind the method's autograd Function.

    Called, it returns the compiled module, built (or found built) at the first call, never at
    import, or None where it cannot be built (with one warning) or kernels are disabled; the
    first build that compiles says so in one line on stderr. Define it in the module of the
    method that trains with it: its sources (``kernel_source_files``) are part of the code version
    of every method whose modules hold it (``method_code``), and a sweep builds it before its
    first run.

    Args:
        stem: the source's name in ``csrc``, without ``.cpp``.
        name: what the kernel is, for its messages ("Skip-GRU training").
    """

    def __init__(self, stem: str, name: str) -> None:
        self.stem, self.name = stem, name
        self.cache_clear()

    def __call__(self) -> Any:
        if self._status is None:
            self._module, self._status = _load(self.stem, self.name, self.name)
        return self._module

    def cache_clear(self) -> None:
        """Forget what the last call found: the next call loads (or builds) again."""
        self._module: Any = None
        self._status: KernelStatus | None = None

    def status(self) -> KernelStatus:
        """Where the kernel stands in this process, found without building or loading it."""
        if self._status is not None:
            return self._status
        if os.environ.get("HARNESS_NO_KERNELS"):  # asking for it now would not build it either
            return KernelStatus("unavailable", DISABLED)
        return KernelStatus("not tried")

    def kernel_source_files(self) -> tuple[Path, ...]:
        """Its C++ source and the headers of ``csrc`` it includes."""
        return kernel_sources(self.stem)

    def for_tensors(self, *tensors: Any) -> Any:
        """The kernel where it can run on these tensors (CPU, float32/64, one dtype), else None
        (also where it cannot be built or ``HARNESS_NO_KERNELS`` is set). Off the CPU the first
        call warns once (``on_cpu``)."""
        if not on_cpu(f"the {self.name} kernel", *tensors):
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
