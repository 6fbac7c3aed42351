"""A component's code version, as a record keeps it (``method_code``), and what changed since.

A method's version is a digest of its source files (``harness.components.registry.code_digest``
over ``source_files``); a component with a ``code_version`` of its own (a reference predictor) is
asked for it. The training loop records it, a lost run's record too (``harness.executors``), a
resumed sweep reruns the runs other code made (``harness.planning.resume``), and the timing
reports say when they were measured with other code.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable
from typing import Any

from harness.components.registry import (
    UnknownNameError,
    code_digest,
    kernel_loaders,
    source_files,
)
from harness.references import component


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

    The same discovery as ``method_code`` (``harness.components.registry.kernel_loaders``): each
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
