"""The environment a run was measured in: code version, software, device.

Also where ``--device`` is resolved, once for every command: ``resolve_device`` (the one device
to run on) and ``bench_devices`` (every device the timing suite times on). torch is imported
inside the functions that need it, so that importing this module stays light.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import platform
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError

if TYPE_CHECKING:
    import torch

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
# The distribution name in the checkout's pyproject.toml: how a checkout of this project is told
# apart from any other git repository the installed package happens to sit in.
PROJECT = "condrnn-harness"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout


def _is_project_root(root: Path) -> bool:
    try:
        with open(root / "pyproject.toml", "rb") as f:
            return tomllib.load(f).get("project", {}).get("name") == PROJECT
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        return False


# What the harness writes into its own checkout: records stores and generated reports. A change
# there cannot move a number, so it does not make a run's code "dirty" (a sweep appending to a
# committed store would otherwise record every run after its first as dirty).
OUTPUT_FOLDERS = ("results", "reports")
_NOT_CODE = tuple(f":(exclude){folder}" for folder in OUTPUT_FOLDERS)


def checkout_state(root: Path) -> tuple[str | None, bool | None]:
    """(commit sha, dirty) of the checkout of this project whose top level is ``root``.

    A commit is recorded only when ``root`` is itself the top level of a git work tree and holds
    this project's ``pyproject.toml``. An installed copy (site-packages) that happens to lie inside
    some other repository, a virtualenv in a project's folder say, must not record that
    repository's commit as the harness version.

    Args:
        root: the folder that holds the ``harness`` package.

    Returns:
        ``(sha, dirty)``, dirty meaning tracked files outside ``OUTPUT_FOLDERS`` (the records
        stores and reports) differ from the commit; ``(None, None)`` when ``root`` is not such
        a checkout or git is unavailable.
    """
    root = Path(root).resolve()
    try:
        top = _git(root, "rev-parse", "--show-toplevel").strip()
        if not top or Path(top).resolve() != root or not _is_project_root(root):
            return None, None
        sha = _git(root, "rev-parse", "HEAD").strip()
        status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", *_NOT_CODE)
        return sha, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit sha, dirty) of the harness checkout; (None, None) when installed, not checked out."""
    return checkout_state(REPO)


def resolve_device(device: str) -> torch.device:
    """The one device to run on, from ``--device``: ``cpu``, ``cuda`` or ``auto``.

    ``auto`` is CUDA when a CUDA device is available, else the CPU. Training runs and
    ``harness bench --speedup`` measure on this one device; the timing suite times on every
    device ``bench_devices`` gives.

    Args:
        device: ``cpu``, ``cuda`` or ``auto``.

    Returns:
        The torch device.

    Raises:
        HarnessError: ``cuda`` where no CUDA device is available, or another name.
    """
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise HarnessError("--device cuda requested but no CUDA device is available")
    if device not in ("cpu", "cuda"):
        raise HarnessError(f"Unknown device '{device}'. Use cpu, cuda or auto")
    return torch.device(device)


def bench_devices(device: str) -> list[torch.device]:
    """Every device the timing suite (``harness bench``) times on, from ``--device``.

    Unlike ``resolve_device``, ``auto`` means all of them: the CPU, plus CUDA when a CUDA device
    is available (each gets its own table in the timing report). ``cpu`` and ``cuda`` are the one
    device ``resolve_device`` gives.

    Args:
        device: ``cpu``, ``cuda`` or ``auto``.

    Returns:
        The devices, the CPU first.

    Raises:
        HarnessError: as ``resolve_device``.
    """
    if device != "auto":
        return [resolve_device(device)]
    found = resolve_device("auto")
    return [resolve_device("cpu")] + ([found] if found.type == "cuda" else [])


@functools.lru_cache(maxsize=4)
def device_name(device: torch.device) -> str:
    """A human-readable device name: the GPU model, or the CPU model (architecture if unknown)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"cpu ({line.split(':', 1)[1].strip()})"
    return f"cpu ({platform.processor() or platform.machine()})"


# Whether this process flushes subnormal floats to zero (``flush_denormals``) and holds the
# memory it frees for reuse (``hold_freed_memory``): what ``run_conditions`` sets.
_cpu = {"flush_denormal": False, "freed_memory_held": False}


def set_seed(seed: int) -> None:
    """Seed python, numpy and torch (a run's model, its data order and a reference's fit)."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def flush_denormals() -> bool:
    """Flush subnormal floats to zero on the CPU for this process; returns whether it can.

    Gradients that shrink over hundreds of steps (a sequence of T = 500 steps) fall into the
    subnormal range (below 1.2e-38 in float32), where each multiply-add costs many times more on
    x86 CPUs: the backward of torch's fused ``nn.GRU`` at batch 256, T = 500, D = 128 took about
    5 s with subnormals and 0.65 s without, and the time jumped between T = 150 and T = 200.
    Such values become 0, far below anything a metric shows. Every training run and every timing
    calls this (``run_conditions``), so methods and fused references are measured alike; records
    say so in ``env.flush_denormal``.
    """
    import torch

    _cpu["flush_denormal"] = bool(torch.set_flush_denormal(True))
    return _cpu["flush_denormal"]


# glibc's ``mallopt`` parameters (malloc.h): the free memory at the top of the heap beyond which
# ``free`` returns it to the OS, and the size from which an allocation gets its own mapping
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
_HOLD = 2**31 - 1  # the largest value mallopt takes (an int): 2 GiB


def hold_freed_memory() -> bool:
    """Make this process reuse the memory it frees rather than return it to the OS (glibc).

    By default glibc's malloc gives each block over its mmap threshold (128 KiB at first, rising
    to at most 32 MiB as such blocks are freed) a mapping of its own, unmapped when freed, and
    returns the top of its heap to the OS as soon as 128 KiB lie free there. A training step
    frees its activations and allocates them again at the next, so each step's memory faults in
    anew, page by page, zeroed by the kernel: the 96-run smoke sweep took 3.5 million page
    faults, 5.7 of its 18.8 s spent in the kernel. With both thresholds at the most ``mallopt``
    takes (2 GiB), what a step frees serves the next: 0.2 million faults, 13.4 s, and about
    the same peak memory (1000 MiB against 960). The process keeps its peak memory until it
    ends, as it keeps its threads. Values are not touched: only where memory comes from.

    Every training run and every timing calls this (``run_conditions``); records say so in
    ``env.freed_memory_held``.

    Returns:
        Whether it was set: False where the C library is not glibc (macOS, musl, Windows).
    """
    if platform.libc_ver()[0] == "glibc":
        mallopt = ctypes.CDLL(None).mallopt
        _cpu["freed_memory_held"] = bool(
            mallopt(M_MMAP_THRESHOLD, _HOLD) and mallopt(M_TRIM_THRESHOLD, _HOLD)
        )
    return _cpu["freed_memory_held"]


def run_conditions() -> bool:
    """Set what every training run and every timing runs under, in this process.

    Subnormal floats are flushed to zero (``flush_denormals``) and freed memory is held for
    reuse (``hold_freed_memory``), so that a method and its fused reference are timed as the
    training runs them. Returns whether subnormals are flushed.
    """
    hold_freed_memory()
    return flush_denormals()


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Set torch's CPU threads to ``threads`` (0: leave them) inside the block, then restore them.

    A timing's thread count, not the process's.
    """
    import torch

    previous = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def environment(device: torch.device) -> dict[str, Any]:
    """Everything a record needs to say where its numbers came from."""
    import torch

    sha, dirty = git_state()
    return {
        "git_sha": sha,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device.type,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "flush_denormal": _cpu["flush_denormal"],
        "freed_memory_held": _cpu["freed_memory_held"],
        "platform": platform.platform(),
        **(cuda_environment(device) if device.type == "cuda" else {}),
    }


def cuda_environment(device: torch.device) -> dict[str, Any]:
    """What a CUDA record adds to ``environment``.

    The CUDA runtime torch was built with, cuDNN's version, the driver's (``nvidia-smi``'s, else
    the CUDA driver API's number), the GPU's compute capability and Triton's version (None where
    not installed).
    """
    import importlib.metadata

    import torch

    driver = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        out = subprocess.run(query, capture_output=True, text=True, timeout=20, check=True)
        driver = out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
    if driver is None:
        with contextlib.suppress(AttributeError, RuntimeError):
            driver = f"CUDA driver API {torch._C._cuda_getDriverVersion()}"
    triton = None
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        triton = importlib.metadata.version("triton")
    major, minor = torch.cuda.get_device_capability(device)
    return {
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "driver": driver,
        "capability": f"{major}.{minor}",
        "triton": triton,
    }
