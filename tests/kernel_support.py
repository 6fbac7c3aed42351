"""What the tests of the compiled kernels share (``baselines.ops.library``): whether the kernel
library is expected to build here, every training kernel the methods hold, and the bodies of the
fixtures that give a test an empty build cache or a built kernel.

Every kernel is an op of one library (of one of its two parts), each part loaded once a process
(``library.load_library``): the tests that build it for real build it into the session's cache
(``built``), once; those that give it an empty cache (``fresh_cache``) see a process that has
loaded nothing, and build with a stand-in.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils.cpp_extension

import baselines  # noqa: F401  (the package imports every method, and so every kernel)
from baselines._cells import gru_step, masked_update
from baselines.clockwork_rnn import ClockworkRNN
from baselines.ops import library
from baselines.phased_lstm import PhasedLSTM


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


def training_kernels() -> list[library.Kernel]:
    """Every training kernel the modules of ``baselines`` hold, by source name."""
    found = {
        id(obj): obj
        for name, module in list(sys.modules.items())
        if name.startswith("baselines.")
        for obj in vars(module).values()
        if isinstance(obj, library.Kernel)
    }
    return sorted(found.values(), key=lambda k: k.stem)


def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty build cache (its kernels dir is yielded) and kernels that nothing in this process
    has asked for yet, nor loaded; afterwards they are cleared again, so later tests find the
    state their environment says (and the library again, where this process had loaded it).

    A process cannot load the library twice (its ops would register twice): where this one has
    loaded it, a build here with torch's real compiler fails the test, rather than the process.
    """
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    loaded = dict(library._loaded)
    real_load = torch.utils.cpp_extension.load

    def load(*args: Any, **kwargs: Any) -> Any:
        if loaded:
            pytest.fail(f"this process loaded the kernel library ({loaded}): build it with built()")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)  # a test may stand in its own
    library._loaded.clear()
    library.forget_library()
    try:
        yield tmp_path / "condrnn-harness" / "kernels"
    finally:
        library.forget_library()
        # what this process has loaded for real (before, or here), not what a stand-in said
        really = {os.path.realpath(p) for p in torch.ops.loaded_libraries}
        now = {part: p for part, p in library._loaded.items() if os.path.realpath(p) in really}
        library._loaded.clear()
        library._loaded.update({**now, **loaded})


def built(kernel: library.Kernel) -> Iterator[Any]:
    """``kernel``'s ops, the library built (or found built) into this session's cache, once a
    process, skipping where it is not expected to build; the status cleared around the test."""
    expected = kernel_expected()
    if expected is None:
        pytest.skip("the C++ kernel is not expected to build here (no ninja, no compiler, or off)")
    kernel.cache_clear()
    assert kernel.status().state == "not tried"
    ops = kernel()
    assert ops is not None, f"the kernel did not build although {expected}: {kernel.status()}"
    yield ops
    kernel.cache_clear()


def op_node(op: str) -> str:
    """The name of the autograd node of ``condrnn::<op>``'s outputs (its backward registered with
    ``torch.library.register_autograd``)."""
    return f"GeneratedBackwardFor_{library.LIBRARY}_{op}_defaultBackward"


class OnCuda:
    """A stand-in for a CUDA tensor where this machine has none: what ``on_cpu`` and
    ``Kernel.for_tensors`` read of a tensor (its device and dtype)."""

    device = torch.device("cuda")
    dtype = torch.float32


def train_on_meta(model: Any, x_shape: tuple[int, ...]) -> set[str]:
    """One training step of ``model`` on the meta device (the model moved there, an input of
    ``x_shape``): the names of the autograd nodes its outputs hang from; every parameter has a
    gradient, on meta."""
    model = model.to("meta").train()
    out = model(torch.empty(*x_shape, device="meta"))
    (out.outputs.sum() + (0 if out.aux_loss is None else out.aux_loss)).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.device.type == "meta", name
    names, todo = set(), [out.outputs.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and type(node).__name__ not in names:
            names.add(type(node).__name__)
            todo.extend(next_fn for next_fn, _ in node.next_functions)
    return names


def per_step(cell: str, xp: Any, h: Any, weight_hh: Any, m: Any, c: Any = None) -> Any:
    """The masked-cell methods' own per-step code over a sequence, the kernels' oracle:
    ``(hs, c_T)`` (the LSTM's cell state; None for the others)."""
    hs, w_t = [], weight_hh.t()
    for xp_t, m_t in zip(xp.unbind(1), m.unbind(1), strict=True):
        if cell == "lstm":
            h, c = PhasedLSTM._step(None, xp_t, h, c, m_t, w_t)
        elif cell == "gru":
            h = masked_update(m_t, gru_step(xp_t, h, weight_hh), h)  # RandomUpdates._step
        else:
            h = ClockworkRNN._step(None, xp_t, h, m_t, w_t)
        hs.append(h)
    return torch.stack(hs, 1), c
