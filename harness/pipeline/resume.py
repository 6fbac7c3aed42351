"""Resuming a sweep: which of its runs the store already holds, and the code that made them.

Records carry their method's code version (``method_code``: a digest of the method's source
files); ``plan_resume`` reruns the runs the store lacks and, unless told to keep them, those whose
record was made by other code of their method.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.components.registry import UnknownNameError, code_digest, source_files
from harness.persistence.records import latest
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


@dataclass
class ResumePlan:
    """Which runs of a sweep to run, given the records already in the store.

    Attributes:
        todo: the configs to run.
        done: how many are recorded and kept.
        failed: the latest records of failed runs that are rerun (``retry_failed``).
        stale: the latest records made by other code of their method (``method_code``).
        kept_stale: whether the stale records were kept (not rerun).
    """

    todo: list[Any]
    done: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)
    kept_stale: bool = False


def plan_resume(
    configs: Sequence[Any],
    records: Iterable[dict[str, Any]],
    *,
    force: bool = False,
    retry_failed: bool = False,
    keep_stale: bool = False,
) -> ResumePlan:
    """Decide what a (resumed) sweep runs.

    A config whose run id has no record runs. With a record (the latest line of that id), it is
    skipped, except: ``force`` reruns everything; ``retry_failed`` reruns runs whose record is not
    ``ok``; a record whose ``method_code`` differs from the method's code now is stale and reruns
    unless ``keep_stale`` (records without a code version, older than it, are kept).

    Args:
        configs: the sweep's ``RunConfig``s.
        records: the store's records.
        force: rerun every run.
        retry_failed: rerun the failed runs.
        keep_stale: keep the records made by other code instead of rerunning them.

    Returns:
        The plan; the reruns append records and the latest line of a run id wins (``latest``).
    """
    if force:
        return ResumePlan(list(configs))
    by_id = {r["run_id"]: r for r in latest(records)}
    plan = ResumePlan([], kept_stale=keep_stale)
    for cfg in configs:
        rec = by_id.get(cfg.run_id)
        if rec is None:
            plan.todo.append(cfg)
            continue
        code = rec.get("method_code")
        if code is not None and code != method_code(cfg.method):
            plan.stale.append(rec)
            if not keep_stale:
                plan.todo.append(cfg)
                continue
        if retry_failed and rec.get("status") != "ok":
            plan.failed.append(rec)
            plan.todo.append(cfg)
            continue
        plan.done += 1
    return plan
