"""The environment a run was measured in (commit, software, device), and ``--device``; light."""

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
# tells a checkout of this project from another git repository the installed package sits in
PROJECT = "condrnn-harness"


def _stdout(*command: str, timeout: float = 10) -> str:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=True
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

    Only when ``root`` is the top of a git work tree holding this project's ``pyproject.toml``:
    an installed copy inside another repository (a virtualenv) must not record its commit.
    Dirty: tracked files outside ``OUTPUT_FOLDERS`` differ. ``(None, None)``: no such checkout.
    """
    root = Path(root).resolve()
    git = functools.partial(_stdout, "git", "-C", str(root))
    try:
        top = git("rev-parse", "--show-toplevel").strip()
        if not top or Path(top).resolve() != root or not _is_project_root(root):
            return None, None
        sha = git("rev-parse", "HEAD").strip()
        status = git("status", "--porcelain", "--untracked-files=no", "--", ".", *_NOT_CODE)
        return sha, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit sha, dirty) of the harness checkout; (None, None) when installed, not checked out."""
    return checkout_state(REPO)


def resolve_device(device: str) -> torch.device:
    """The one device ``--device`` names (``auto``: CUDA if available); HarnessError: no CUDA."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise HarnessError("--device cuda requested but no CUDA device is available")
    if device not in ("cpu", "cuda"):
        raise HarnessError(f"Unknown device '{device}'. Use cpu, cuda or auto")
    return torch.device(device)


def bench_devices(device: str) -> list[torch.device]:
    """Every device the timing suite times on: ``auto`` is the CPU plus CUDA when available."""
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


# what ``run_conditions`` set in this process (recorded in ``environment``)
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
    """Flush subnormal floats to zero on the CPU (why: docs/speedup.md); whether it can."""
    import torch

    _cpu["flush_denormal"] = bool(torch.set_flush_denormal(True))
    return _cpu["flush_denormal"]


# glibc's ``mallopt`` parameters (malloc.h): the free memory at the top of the heap beyond which
# ``free`` returns it to the OS, and the size from which an allocation gets its own mapping
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
_HOLD = 2**31 - 1  # the largest value mallopt takes (an int): 2 GiB


def hold_freed_memory() -> bool:
    """Make this process reuse the memory it frees (why: docs/speedup.md); False: not glibc."""
    if platform.libc_ver()[0] == "glibc":
        mallopt = ctypes.CDLL(None).mallopt
        _cpu["freed_memory_held"] = bool(
            mallopt(M_MMAP_THRESHOLD, _HOLD) and mallopt(M_TRIM_THRESHOLD, _HOLD)
        )
    return _cpu["freed_memory_held"]


def run_conditions() -> bool:
    """Set what every run and timing runs under; returns whether subnormals are flushed."""
    hold_freed_memory()
    return flush_denormals()


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Set torch's CPU threads to ``threads`` (0: leave them) inside the block, then restore."""
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
        **_cpu,  # flush_denormal, freed_memory_held
        "platform": platform.platform(),
        **(cuda_environment(device) if device.type == "cuda" else {}),
    }


def cuda_environment(device: torch.device) -> dict[str, Any]:
    """What a CUDA record adds to ``environment`` (the driver: nvidia-smi's, else the API's)."""
    import importlib.metadata

    import torch

    driver = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        query = ("--query-gpu=driver_version", "--format=csv,noheader")
        driver = (_stdout("nvidia-smi", *query, timeout=20).strip().splitlines() or [None])[0]
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
