"""One reference run: fit on the training split, score validation and test, build its record.

``harness.training.train.run`` hands a ``ref:`` config here, so every executor
(``harness.executors``) runs references as it runs methods. The record is built by
``harness.persistence.records`` like a method's: ``metrics`` (test) and ``val_metrics`` from the
task's own scoring, ``params`` the numbers the fit produced, no MACs, no trace and no epochs
(``history`` empty, ``best_epoch`` -1). References run on the CPU, whatever device the sweep trains
on: they are deterministic there.
"""

from __future__ import annotations

import time
from typing import Any

from harness import env
from harness.components.metrics import FLOPS_PER_MAC
from harness.components.registry import TASKS, source_of
from harness.errors import ConfigError, HarnessError, failure_reason
from harness.persistence import records
from harness.references import REFERENCES, RefConfig, cannot_serve

# what a reference's record says chose its test metrics (``selection``)
SELECTION = "reference predictors: fitted once on the training split, no epochs to choose from"
EVAL_BATCH = 64  # sequences scored at once, at most: a language model's logits are V wide


def run_reference(cfg: RefConfig, data_dir: str | None = None) -> records.RunRecord:
    """Fit and score one reference; its record (status ``ok``, or ``failed`` with the reason).

    Args:
        cfg: the reference run's config (``Reference.resolve_config``).
        data_dir: where real-data tasks look for their files.
    """
    cls = REFERENCES.get(cfg.method)
    rec = records.start_record(cfg, cls.code_version(), source_of(cls))
    try:
        return _fit_and_score(cfg, data_dir, rec)
    except HarnessError as e:
        return records.finish_failed(rec, f"{type(e).__name__}: {e}")
    except Exception as e:  # recorded as a failed run; the sweep goes on
        return records.finish_failed(rec, failure_reason(e))


def _fit_and_score(cfg: RefConfig, data_dir: str | None, rec: Any) -> records.RunRecord:
    import torch

    rec["env"] = env.environment(torch.device("cpu"))
    task = TASKS.get(cfg.task)(cfg.task_cfg, data_dir)
    cls = REFERENCES.get(cfg.method)
    why = cls.serves(task)
    if why is not None:
        raise ConfigError(cannot_serve(cfg.method, task, why))
    env.set_seed(cfg.seed)
    splits = task.splits(cfg.seed)
    records.describe_task(rec, task, SELECTION)
    records.describe_data(rec, splits.info, cfg.data)
    batch = min(task.preset(cfg.preset).train.eval_batch_size, EVAL_BATCH)
    ref = cls(cfg.method_cfg)
    t0 = time.perf_counter()
    ref.fit(task, splits.train, cfg.seed)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    val = ref.score(task, splits.val, batch)
    test = ref.score(task, splits.test, batch)
    eval_s = time.perf_counter() - t0
    rec["params"] = {"total": ref.num_params(), "method": ref.num_params()}
    return records.finish_ok(
        rec,
        best_epoch=-1,
        history=[],
        metrics=test,
        val_metrics=val,
        macs={},
        flops_per_mac=FLOPS_PER_MAC,
        diagnostics={},
        trace={},
        train_s=train_s,
        eval_s=eval_s,
    )
