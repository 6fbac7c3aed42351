"""What the tests of the compiled kernels share (``baselines._kernels``): whether a kernel is
expected to build here, every training kernel the methods hold, and the bodies of the fixtures
that give a test an empty build cache or a built kernel."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import baselines  # noqa: F401  (the package imports every method, and so every kernel)
from baselines import _kernels


def kernel_expected() -> str | None:
    """Why the kernels are expected to build here, or None."""
    if os.environ.get("HARNESS_EXPECT_KERNELS"):
        return "HARNESS_EXPECT_KERNELS is set"
    if os.environ.get("HARNESS_NO_KERNELS"):
        return None  # switched off for the whole run (tests/conftest.py)
    compiler = shutil.which("c++") or shutil.which("g++")
    if importlib.util.find_spec("ninja") and compiler:
        return f"ninja is importable and {compiler} is on PATH"
    return None


def training_kernels() -> list[_kernels.TrainingKernel]:
    """Every training kernel the modules of ``baselines`` hold, by source name."""
    found = {
        id(obj): obj
        for name, module in list(sys.modules.items())
        if name.startswith("baselines.")
        for obj in vars(module).values()
        if isinstance(obj, _kernels.TrainingKernel)
    }
    return sorted(found.values(), key=lambda k: k.stem)


def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty build cache (its kernels dir is yielded) and kernels that nothing in this process
    has asked for yet; afterwards they are cleared again, so later tests find the state their
    environment says."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    loaders = [*training_kernels(), _kernels.sarnn_kernel, _kernels.vcrnn_kernel]
    for loader in loaders:
        loader.cache_clear()
    yield tmp_path / "condrnn-harness" / "kernels"
    for loader in loaders:
        loader.cache_clear()


def built(kernel: _kernels.TrainingKernel) -> Iterator[Any]:
    """``kernel`` built (or found built) into this session's cache, skipping where it is not
    expected to build; cleared around the test."""
    expected = kernel_expected()
    if expected is None:
        pytest.skip("the C++ kernel is not expected to build here (no ninja, no compiler, or off)")
    kernel.cache_clear()
    assert kernel.status().state == "not tried"
    module = kernel()
    assert module is not None, f"the kernel did not build although {expected}: {kernel.status()}"
    yield module
    kernel.cache_clear()


MATMULS = {"gemm512": 0, "blas": 1, "aten-mm": 2}  # csrc/gemm.h's ``Matmul``


def with_matmul(module: Any, name: str) -> Iterator[Any]:
    """The built kernel ``module`` with its matmuls by ``name`` (a key of ``MATMULS``: its own
    AVX-512 gemm in float32, the BLAS, ATen's mm), skipping where that cannot run here; set back
    to the default (gemm512 where it can) afterwards."""
    mode = MATMULS[name]
    if module.matmul(mode) != mode:
        pytest.skip(f"{name} cannot run here (no AVX-512, or no sgemm_/dgemm_ exported)")
    yield module
    module.matmul(0)
