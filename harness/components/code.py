"""A component's code: the files it covers, its version (``method_code``), what changed since.

A method's version is a digest (``code_digest``) of its source files (``source_files``): the
module that registers it and the modules of its package it uses, transitively, with the C++
sources of the compiled kernels those modules hold (``kernel_loaders``); a component with a
``code_version`` of its own (a reference predictor) is asked for it. The training loop records
it, a lost run's record too (``harness.executors``), a resumed sweep reruns the runs other code
made (``harness.planning.resume``), a sweep builds the kernels before its first run, and the
timing reports say when they were measured with other code.
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
    holders = [r for r in (METHODS, REFERENCES) if name in r]
    return (holders[0] if holders else METHODS).get(name)


@functools.cache
def method_code(method: str) -> str:
    """The code version of a registered method: a digest of its source files.

    The files are the module that registers the method and the modules of its package that it
    uses (shared cells, kernels), transitively; not the harness itself. The same for a plugin
    package (its own files) and an included file (it and the files of its folder it uses).

    A component with a ``code_version`` of its own (a reference predictor) is asked for it.

    Args:
        method: the registry key.

    Returns:
        16 hex digits of the SHA-256 of the files' names and contents.
    """
    cls = component(method)
    if hasattr(cls, "code_version"):
        return cls.code_version()
    return code_digest(source_files(sys.modules[cls.__module__]))


def method_kernels(method: str) -> list[Any]:
    """The loaders of the compiled kernels whose sources are part of ``method``'s code version.

    The same discovery as ``method_code`` (``kernel_loaders``): each
    loader, called, builds or loads its kernel (``baselines.ops.library``); none for a component
    with a ``code_version`` of its own.
    """
    cls = component(method)
    return [] if hasattr(cls, "code_version") else kernel_loaders(sys.modules[cls.__module__])


def current_code(method: str) -> str | None:
    """``method_code`` of a registered method; None for a name the registry does not hold.

    (A timing reference such as torch's fused cell has no code version of the harness's.)
    """
    try:
        return method_code(method)
    except UnknownNameError:
        return None


def code_changes(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The methods whose code changed since ``rows`` (records or report rows) were measured.

    A row names its ``method`` and the ``method_code`` it ran with; one line per method whose
    code today differs: ``METHOD: measured with CODE, now CODE``. Rows without a code version
    (measured before it was kept) are not judged.
    """
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

    The package's ``__init__`` (which imports every module) is left out. An object of those
    modules with a ``kernel_source_files()`` (a ``baselines.ops.library.Kernel``)
    adds the files it names: the C++ sources the method runs. A file imported by
    ``--include`` is a top-level module of its own: its package is its folder, whose modules it
    uses (shared ``_*.py`` pieces) count.
    """
    modules, loaders = _uses(module)
    extra = {str(p) for loader in loaders for p in loader.kernel_source_files()}
    return extra | {m.__file__ for m in modules if getattr(m, "__file__", None)}


def kernel_loaders(module: Any) -> list[Any]:
    """The compiled kernels' loaders that ``source_files(module)`` counts the C++ sources of.

    Each is an object of the modules ``module`` uses with a ``kernel_source_files()``; called,
    it builds (or loads) its kernel (``baselines.ops.library``).
    """
    return _uses(module)[1]


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
