"""Resuming a sweep: which of its runs the store already holds, and the code that made them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.components.code import method_code
from harness.persistence.records import latest


@dataclass
class ResumePlan:
    """Which runs of a sweep to run, given the records (the latest of each) in the store."""

    todo: list[Any]  # the configs to run
    done: int = 0  # how many are recorded and kept
    failed: list[dict[str, Any]] = field(default_factory=list)  # rerun (retry_failed)
    kept_failed: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)  # made by other method code
    kept_stale: bool = False


def plan_resume(
    configs: Sequence[Any],
    records: Iterable[dict[str, Any]],
    *,
    force: bool = False,
    retry_failed: bool = False,
    keep_stale: bool = False,
) -> ResumePlan:
    """Decide what a (resumed) sweep runs: the runs without a record, and the reruns.

    ``force`` reruns everything, ``retry_failed`` the runs not ``ok``; a record made by other
    ``method_code`` is stale and reruns unless ``keep_stale`` (one without a code is kept).
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
