"""A component's code: the files it covers, its version (``method_code``), what changed since.

Records keep the version, a resumed sweep reruns the runs other code made, and the timing
reports say when they were measured with other code.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.components.plugins import file_of, included_file
from harness.components.registry import METHODS, REFERENCES, UnknownNameError


def component(name: str) -> Any:
    """The method or reference predictor registered as ``name`` (UnknownNameError: neither)."""
    return next((r for r in (METHODS, REFERENCES) if name in r), METHODS).get(name)


@functools.cache
def method_code(method: str) -> str:
    """The code version of a registered method: 16 hex digits of a digest of ``source_files``."""
    cls = component(method)
    if hasattr(cls, "code_version"):
        return cls.code_version()
    return code_digest(source_files(sys.modules[cls.__module__]))


def method_kernels(method: str) -> list[Any]:
    """The loaders of the compiled kernels whose sources are part of ``method``'s code version."""
    cls = component(method)
    return [] if hasattr(cls, "code_version") else _uses(sys.modules[cls.__module__])[1]


def current_code(method: str) -> str | None:
    """``method_code`` of a registered method; None for another name (torch's fused cell)."""
    try:
        return method_code(method)
    except UnknownNameError:
        return None


def code_changes(rows: Iterable[dict[str, Any]]) -> list[str]:
    """``METHOD: measured with CODE, now CODE`` per method whose code changed since ``rows``."""
    seen: dict[str, set[str]] = {}
    for r in rows:
        if r.get("method_code"):
            seen.setdefault(r["method"], set()).add(r["method_code"])
    out = []
    for method, codes in sorted(seen.items()):
        now = current_code(method)
        if now is not None and codes != {now}:
            out.append(f"{method}: measured with {', '.join(sorted(codes))}, now {now}")
    return out


def source_files(module: Any) -> set[str]:
    """The source files of ``module`` and of the modules of its package it uses, transitively.

    Not the package's ``__init__`` (which imports every module); with the C++ sources of the
    kernels those modules hold (``kernel_source_files()``). An included file's package is its
    folder (its shared ``_*.py`` pieces count).
    """
    modules, loaders = _uses(module)
    extra = {str(p) for loader in loaders for p in loader.kernel_source_files()}
    return extra | {m.__file__ for m in modules if getattr(m, "__file__", None)}


def _uses(module: Any) -> tuple[list[Any], list[Any]]:
    """The modules of ``source_files`` and the kernel loaders they hold, each once."""
    pkg = module.__name__.partition(".")[0]
    included = included_file(module.__name__)
    folder = None if included is None else included.parent
    seen: dict[str, Any] = {}
    loaders: dict[int, Any] = {}
    todo = [module]
    while todo:
        mod = todo.pop()
        if mod.__name__ in seen:
            continue
        seen[mod.__name__] = mod
        for obj in vars(mod).values():
            owner = getattr(obj, "__self__", None)  # a kernel's method (``kernel.for_tensors``):
            if callable(getattr(owner, "kernel_source_files", None)):  # the kernel, whose
                obj = owner  # ``__module__`` is its family's module
            name = obj.__name__ if type(obj) is type(sys) else getattr(obj, "__module__", None)
            if not isinstance(name, str) or name == pkg:
                continue
            other = sys.modules.get(name)
            here = file_of(other)  # an included file's package is its folder
            if name.partition(".")[0] != pkg and (here is None or here.parent != folder):
                continue
            loader = getattr(obj, "kernel_source_files", None)  # a compiled kernel's loader
            if callable(loader) and not isinstance(obj, type):  # a kernel, not its class
                loaders.setdefault(id(obj), obj)
            if other is not None and name not in seen:
                todo.append(other)
    return list(seen.values()), list(loaders.values())


def code_digest(files: Iterable[str]) -> str:
    """A component's code version: 16 hex digits of the SHA-256 of its files' names and contents."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(Path(path).name.encode() + b"\0")
        h.update(Path(path).read_bytes() + b"\0")
    return h.hexdigest()[:16]
