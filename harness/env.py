"""The environment a run was measured in: code version, software, device."""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit sha, dirty) of the harness checkout; (None, None) outside a git checkout."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        return sha, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


@functools.lru_cache(maxsize=4)
def device_name(device: torch.device) -> str:
    """A human-readable device name: the GPU model, or the CPU model (architecture if unknown)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"cpu ({line.split(':', 1)[1].strip()})"
    except OSError:
        pass
    return f"cpu ({platform.processor() or platform.machine()})"


def environment(device: torch.device) -> dict[str, Any]:
    """Everything a record needs to say where its numbers came from."""
    sha, dirty = git_state()
    return {
        "git_sha": sha,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device.type,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }
