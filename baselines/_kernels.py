"""Optional fused CPU kernels for the fast inference paths (``fast_forward``).

In PyTorch, computing only the k updated rows of a recurrent matrix means gathering them (a copy)
and reading them again, plus a few dozen small ops per step; at batch 1 that caps SA-RNN's
realised speedup near a third of its FLOP reduction. The kernel in ``csrc/sarnn.cpp`` runs SA-RNN's
whole inference sequence in C++, reading only the rows the updated units need, once, with no
per-step dispatch.

It is compiled on first use (never at import) with ``torch.utils.cpp_extension.load``, which needs
a C++ compiler and ninja (the ``kernels`` extra). Where it cannot be built, or with
``HARNESS_NO_KERNELS=1``, ``sarnn_kernel()`` returns None and callers fall back to their PyTorch
path, which computes the same thing. Floating-point contraction is off so that the update
decisions round exactly like PyTorch's elementwise ops; dot products are vectorised reductions
(``omp simd``), summed in a different order than BLAS, so outputs agree to rounding, as the
PyTorch fast path does.

``sarnn_kernel_status()`` says which of the two happened without building anything: reports are
rendered from measured rows, and rendering must never start a compiler.

The build uses ``-march=native``, so a binary is only valid on the CPU that built it. The build
directory is keyed by a digest of the source, the flags, the torch version and this CPU's model
and instruction-set flags: a cache shared by the nodes of a cluster holds one build per kind of
CPU, and a node never loads a binary built for another (which would die with SIGILL).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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


# What the last call of sarnn_kernel() found; meaningful only while its lru_cache holds a result
# (tests clear the cache to rebuild, which makes the kernel "not tried" again).
_sarnn_last = KernelStatus("not tried")


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
    """A digest of everything a compiled binary depends on: source, flags, torch, CPU."""
    import torch

    h = hashlib.sha256()
    for part in (source.read_bytes(), " ".join(CFLAGS).encode(), torch.__version__.encode()):
        h.update(part)
        h.update(b"\0")
    h.update(cpu_identity().encode())
    return h.hexdigest()[:16]


def sarnn_kernel_status() -> KernelStatus:
    """The state of the SA-RNN kernel, found without building or loading anything."""
    if sarnn_kernel.cache_info().currsize:
        return _sarnn_last
    if os.environ.get("HARNESS_NO_KERNELS"):  # asking for it now would not build it either
        return KernelStatus("unavailable", DISABLED)
    return KernelStatus("not tried")


@functools.lru_cache(maxsize=1)
def sarnn_kernel() -> Any:
    """The compiled ``sarnn_sequence`` function, or None where it cannot be built."""
    global _sarnn_last
    if os.environ.get("HARNESS_NO_KERNELS"):
        _sarnn_last = KernelStatus("unavailable", DISABLED)
        return None
    try:
        from torch.utils.cpp_extension import load

        from harness.data import cache_dir

        source = CSRC / "sarnn.cpp"
        key = build_key(source)
        build = cache_dir() / "kernels" / f"sarnn-{key}"
        build.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = load(
                name=f"harness_sarnn_{key}",
                sources=[str(source)],
                # exact rounding for the decisions; SIMD reductions only where the pragma says
                extra_cflags=list(CFLAGS),
                build_directory=str(build),
                verbose=False,
            )
    except Exception as e:  # no compiler, no ninja, ...: use the PyTorch path
        # a failed build's message holds the whole compiler output; the status is one line
        first = (str(e).strip().splitlines() or [""])[0][:200]
        why = f"{type(e).__name__}: {first}" if first else type(e).__name__
        _sarnn_last = KernelStatus("unavailable", why)
        warnings.warn(f"fused SA-RNN kernel unavailable, using the PyTorch path: {e}", stacklevel=2)
        return None
    _sarnn_last = KernelStatus("loaded")
    return mod.sarnn_sequence
