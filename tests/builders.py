"""The one builder of run records for tests: ``make_record(**overrides)``.

Built by the functions that build a real run's record (``harness.persistence.records``), from the
config ``harness.components.config.resolve`` gives, so a test record has every key a report reads
and a real run id; a test states only what it is about.
"""

from __future__ import annotations

from typing import Any

from harness.components.config import resolve
from harness.persistence import records


def make_record(set: dict[str, Any] | None = None, **overrides: Any) -> records.RunRecord:
    """A complete, valid ok record, by default a GRU on ``adding`` (smoke preset, seed 0).

    For tests and examples. Its config is the one ``harness.components.config.resolve`` gives for
    its method, task, seed and preset (with ``set``, as ``--set`` would), so its run and variant ids
    are a real run's; the measured parts are plausible placeholders. Any other key is set as given;
    a key with dots sets a nested value (``**{"metrics.mse": 0.1}``). ``run_id`` and ``variant_id``
    may be given to override the computed ones.

    Args:
        set: config overrides (``{"lam": "1e-3", "hidden_size": 16}``).
        **overrides: ``method``, ``task``, ``seed``, ``preset`` and any record field.
    """
    who = {k: overrides.pop(k) for k in ("method", "task", "seed", "preset") if k in overrides}
    who = {"method": "gru", "task": "adding", "seed": 0, "preset": "smoke", **who}
    cfg = resolve(who["method"], who["task"], who["seed"], who["preset"], dict(set or {}))
    rec = records.start_record(cfg, None)
    rec.update(
        env={"git_sha": "0123456789abcdef", "git_dirty": False, "torch": "2.13.0"},
        primary="mse",
        higher_is_better=False,
        selection="test metrics at the epoch with the lowest validation mse",
        params={"total": 100, "method": 90},
        data={"n_train": 64, "n_val": 32, "n_test": 32},
    )
    records.finish_ok(
        rec,
        best_epoch=0,
        history=[{"epoch": 0, "train_loss": 0.5, "val_mse": 0.2}],
        metrics={"mse": 0.2, "skip_pct": 0.0},
        val_metrics={"mse": 0.2, "skip_pct": 0.0},
        macs={"dense": 1000.0, "effective": 1000.0},
        flops_per_mac=2,
        diagnostics={},
        trace={},
        train_s=1.0,
        eval_s=0.1,
    )
    rec["time"].update(start="2026-01-01T00:00:00+00:00", end="2026-01-01T00:00:01+00:00")
    for key, value in overrides.items():
        *path, last = key.split(".")
        node: Any = rec
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    problems = records.validate(rec)
    if problems:
        raise ValueError(f"make_record: {'; '.join(problems)}")
    return rec
