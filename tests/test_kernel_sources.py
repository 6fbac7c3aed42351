"""A method's code version covers every kernel family its modules use: each family module of
``baselines/ops`` declares its ``Kernel`` (the C++ source it runs), and the discovery
(``harness.components.code.method_kernels``) reaches it however the method holds the family,
a function of its module or a method of its kernel (``x_kernel.for_tensors``). No build."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from baselines.ops import library
from harness.components.code import method_kernels, source_files
from harness.components.registry import METHODS

SHARED = {"__init__", "library", "inference"}  # the package's shared modules, no family of theirs


def families() -> dict[str, object]:
    """``stem -> module`` of every family module of baselines/ops (one per C++ source)."""
    stems = set(library.kernel_stems())  # both parts: csrc/*.cpp (but ops.cpp), csrc/infer/*.cpp
    folder = library.CSRC.parent
    assert {p.stem for p in folder.glob("*.py")} - SHARED == stems  # one module per source
    return {s: importlib.import_module(f"baselines.ops.{s}") for s in stems}


def test_every_family_module_declares_the_kernel_of_its_own_source():
    for stem, module in families().items():
        kernels = [v for v in vars(module).values() if isinstance(v, library.Kernel)]
        assert [k.stem for k in kernels] == [stem], stem
        assert kernels[0].__module__ == module.__name__


def test_a_methods_code_version_holds_the_kernels_of_every_family_it_uses():
    families()
    for name in METHODS.names():
        cls = METHODS.get(name)
        if hasattr(cls, "code_version"):
            continue
        files = {str(p) for p in source_files(sys.modules[cls.__module__])}
        used = {
            p.split("/")[-1][:-3] for p in files if "/baselines/ops/" in p and p.endswith(".py")
        }
        used -= SHARED
        assert {k.stem for k in method_kernels(name)} == used, name
        for stem in used:  # its C++ source is in the code version
            folder = library.CSRC / "infer" if library.part_of(stem) == "infer" else library.CSRC
            assert str(folder / f"{stem}.cpp") in files, (name, stem)
        # read independently of the discovery: the families its module imports from
        text = Path(sys.modules[cls.__module__].__file__).read_text()
        imported = set(re.findall(r"^from baselines\.ops\.(\w+) import", text, re.M)) - SHARED
        assert imported <= used, (name, imported - used)
