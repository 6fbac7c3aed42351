"""Resuming a sweep: which of its runs the store already holds, and the code that made them.

Records carry their method's code version (``harness.components.code.method_code``); ``plan_resume``
reruns the runs the store lacks and, unless told to keep them, those whose record was made by other
code of their method.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.components.code import method_code
from harness.persistence.records import latest


@dataclass
class ResumePlan:
    """Which runs of a sweep to run, given the records already in the store.

    Attributes:
        todo: the configs to run.
        done: how many are recorded and kept.
        failed: the latest records of failed runs that are rerun (``retry_failed``).
        kept_failed: the latest records of failed runs that are kept (not ``retry_failed``).
        stale: the latest records made by other code of their method (``method_code``).
        kept_stale: whether the stale records were kept (not rerun).
    """

    todo: list[Any]
    done: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    kept_failed: list[dict[str, Any]] = field(default_factory=list)
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
        if rec.get("status") != "ok":
            (plan.failed if retry_failed else plan.kept_failed).append(rec)
            if retry_failed:
                plan.todo.append(cfg)
                continue
        plan.done += 1
    return plan
