"""Sweeps: the run configs of a selection, checked before anything runs, estimates, match-skip.

``match_skip`` is S-SA's "tune every method to skip about as much" selection (``--match-skip``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from harness.components import config
from harness.components.metrics import mean_std
from harness.components.registry import METHODS
from harness.components.selection import BUDGETS, by_variant, nearest_variant
from harness.errors import ConfigError, HarnessError
from harness.persistence.records import flat_config, latest

MAX_RUNS = 100_000  # a bigger sweep is a typo, and would take minutes just to resolve


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """``["lam=0,1e-5,1e-4", "hidden_size=32,64"]`` -> ``{"lam": [...], "hidden_size": [...]}``."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, vals = item.partition("=")
        values = [v.strip() for v in vals.split(",") if v.strip()]
        if not sep or not key.strip() or not values:
            raise ConfigError(f"--grid expects key=v1,v2,..., got '{item}'")
        key = key.strip()
        if grid.get(key, values) != values:
            raise ConfigError(
                f"--grid {key}={','.join(grid[key])} and --grid {item.strip()} conflict; give one"
            )
        grid[key] = values
    return grid


def build_configs(
    methods: list[str],
    tasks: list[str],
    seeds: list[int],
    preset: str,
    overrides: dict[str, str],
    grid: dict[str, list[str]] | None = None,
) -> list[config.RunConfig]:
    """Every distinct (task, method, grid point, seed) config of a sweep, in that nesting order.

    A ``--set`` or ``--grid`` key applies to the (method, task) pairs that have it. ConfigError:
    a key no pair has, a key both set and swept, a bad value or preset, over ``MAX_RUNS`` runs.
    """
    points = math.prod(len(v) for v in (grid or {}).values())
    size = len(tasks) * len(methods) * points * len(seeds)
    if size > MAX_RUNS:  # counted before anything is resolved
        raise ConfigError(
            f"the sweep has {size:,} runs ({len(tasks)} tasks x {len(methods)} methods x "
            f"{points:,} grid points x {len(seeds):,} seeds); at most {MAX_RUNS:,} are allowed"
        )
    if both := [k for k in grid or {} if k in overrides]:
        raise ConfigError(f"'{both[0]}' is given to both --set and --grid; give one")
    combos = itertools.product(*(grid or {}).values())  # one empty point for an empty grid
    grid_points = [dict(zip(grid or {}, combo, strict=True)) for combo in combos]
    cfgs: dict[str, config.RunConfig] = {}  # by run id: the first of equal ones
    used: set[str] = set()
    for t in tasks:
        for m in methods:
            for point in grid_points:
                ov = {k: v for k, v in {**overrides, **point}.items() if config.accepts(m, t, k)}
                used |= set(ov)
                for s in seeds:
                    cfg = config.resolve(m, t, s, preset, ov)
                    cfgs.setdefault(cfg.run_id, cfg)
    if unused := [k for k in [*overrides, *(grid or {})] if k not in used]:
        sections = [config.default_sections(m, t) for t in tasks for m in methods]
        keys = sorted({k for s in sections for k in config.valid_keys(s)})
        raise ConfigError(
            f"Unknown key '{unused[0]}' for the selected methods and tasks. "
            f"Valid keys: {', '.join(keys)}"
        )
    return list(cfgs.values())


def validate(cfgs: list[config.RunConfig], data_dir: str | None = None) -> None:
    """Build each variant's model once (``Fitting.check``); a ConfigError names a bad one."""
    from harness.training.train import fitting

    seen = set()
    for cfg in cfgs:
        if cfg.variant_id not in seen:
            seen.add(cfg.variant_id)
            try:
                fitting(cfg, data_dir).check()
            except HarnessError as e:
                raise ConfigError(f"{cfg.method} on {cfg.task} ({cfg.preset}): {e}") from None


def variant_labels(cfgs: list[Any]) -> dict[str, str]:
    """Per run id, the fields (not the seed) that vary among its method's runs on its task."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for c in cfgs:
        groups.setdefault((c.method, c.task), []).append(c)
    labels = {}
    for group in groups.values():
        flats = {c.run_id: flat_config({"config": c.to_dict()}) for c in group}
        first = next(iter(flats.values()))
        varying = [k for k in first if len({repr(f.get(k)) for f in flats.values()}) > 1]
        for rid, flat in flats.items():
            labels[rid] = " ".join(f"{k}={flat.get(k)}" for k in varying)
    return labels


def fresh_costs(
    methods: str | Sequence[str],
    task: str,
    preset: str = "smoke",
    overrides: dict[str, str] | None = None,
    batch: int = 16,
    data_dir: str | None = None,
) -> list[dict[str, Any]]:
    """MACs, FLOPs and parameters per sequence of fresh models (seed 0) of ``methods`` on a task.

    Each runs in eval mode on the first ``batch`` test sequences (``model_costs``); a row each.
    """
    from harness.components.flops import model_costs
    from harness.training.train import build, out_of_memory_as_error

    rows = []
    for cfg in build_configs(METHODS.resolve(methods), [task], [0], preset, dict(overrides or {})):
        try:
            with out_of_memory_as_error(cfg):
                task_obj, model = build(cfg, data_dir)
                test = task_obj.splits(0).test
                lengths, times = (
                    None if v is None else v[:batch] for v in (test.lengths, test.times)
                )
                costs = model_costs(model, test.x[:batch], lengths, times)
        except ConfigError as e:
            raise ConfigError(f"{cfg.method} on {cfg.task} ({cfg.preset}): {e}") from None
        rows.append({"method": cfg.method, "task": cfg.task, "preset": cfg.preset} | costs)
    return rows


def estimate_runs(
    todo: Sequence[config.RunConfig], records: Sequence[dict[str, Any]]
) -> tuple[list[float | None], dict[str, int]]:
    """The seconds each run in ``todo`` would take (None: unknown), and the counts of each way.

    The mean recorded ``train_s + eval_s`` of its variant's ok runs, else its method's on its
    task and preset per epoch times its epochs. Compilation counts once per variant (the largest
    recorded): later seeds load the compiled graphs from inductor's cache.
    """
    by_variant: dict[str, list[float]] = {}
    # (seconds, epochs run or None) of the runs of each (method, task, preset)
    by_method: dict[tuple[str, str, str], list[tuple[float, int | None]]] = {}
    compile_variant: dict[str, float] = {}  # the most a run of the variant spent compiling
    compile_method: dict[tuple[str, str, str], float] = {}
    for r in latest(records):
        got = _took(r) if r.get("status") == "ok" else None
        if got is not None:
            s, compiling = got
            key = (r["method"], r["task"], r["preset"])
            by_variant.setdefault(r["variant_id"], []).append(s)
            e = r.get("epochs_run")
            e = e if isinstance(e, int) and e > 0 else None
            by_method.setdefault(key, []).append((s, e))
            if compiling > 0:
                vid = r["variant_id"]
                compile_variant[vid] = max(compiling, compile_variant.get(vid, 0.0))
                compile_method[key] = max(compiling, compile_method.get(key, 0.0))
    per_run: list[float | None] = []
    counts = {"variant": 0, "method": 0, "unknown": 0}
    compiled: set[str] = set()  # variants of todo whose compilation is counted (once)
    for c in todo:
        same = by_variant.get(c.variant_id) or []
        like = by_method.get((c.method, c.task, c.preset)) or []
        extra = 0.0
        if getattr(getattr(c, "train", None), "compile", False) and (same or like):
            if c.variant_id not in compiled:
                compiled.add(c.variant_id)
                key = (c.method, c.task, c.preset)
                extra = compile_variant.get(c.variant_id, compile_method.get(key, 0.0))
        if same:
            per_run.append(sum(same) / len(same) + extra)
            counts["variant"] += 1
        elif like:
            epochs = c.train.epochs if hasattr(c, "train") else None  # a reference has none
            mean = sum(s * epochs / e if e and epochs else s for s, e in like) / len(like)
            per_run.append(mean + extra)
            counts["method"] += 1
        else:
            per_run.append(None)
            counts["unknown"] += 1
    return per_run, counts


def _seconds(t: dict[str, Any], key: str) -> float:
    v = float(t.get(key) or 0.0)
    if not math.isfinite(v) or v < 0:
        raise ValueError(key)
    return v


def _took(r: dict[str, Any]) -> tuple[float, float] | None:
    """(seconds less compilation, compilation seconds) of a recorded run (``estimate_runs``)."""
    t = r.get("time") or {}
    try:
        s = float(t["train_s"]) + _seconds(t, "eval_s")
        compiling = min(_seconds(t, "compile_s"), s)
    except (KeyError, TypeError, ValueError):
        return None
    return (s - compiling, compiling) if math.isfinite(s) and s >= 0 else None


def wall_seconds(per_run: Sequence[float | None], workers: int) -> float:
    """The wall time of runs of these durations (None: left out) on ``workers``, LPT-scheduled.

    The longest first, each to the worker free soonest: within 4/3 of the best schedule.
    """
    import heapq

    loads = [0.0] * max(workers, 1)
    for s in sorted((s for s in per_run if s is not None), reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + s)
    return max(loads)


def match_skip(
    records: list[dict[str, Any]], target: float, swept: list[str] | None = None
) -> list[dict[str, Any]]:
    """For each (task, preset, method), the variant whose mean TEST Skip % is nearest ``target``.

    This choice reads the test set (``harness.components.selection`` chooses on validation data),
    as ``nearest_variant`` does. A row: the variant, its mean Skip % (``budget`` says which
    measure), its primary metric, the candidates, and the ``swept`` keys' values.
    """
    groups = by_variant(r for r in latest(records) if r.get("status") == "ok")
    rows = []
    for (task, preset, method), variants in sorted(groups.items()):
        near = nearest_variant(variants, target, "test")
        if near is None:
            continue
        vid, skip, measure = near
        runs = variants[vid]
        primary = runs[0]["primary"]
        metric, _ = mean_std([r["metrics"].get(primary) for r in runs])
        flat = flat_config(runs[0])
        rows.append(
            {
                "task": task,
                "preset": preset,
                "method": method,
                "variant_id": vid,
                "skip_pct": skip,
                "budget": BUDGETS[measure],
                "primary": primary,
                primary: metric,
                "seeds": len(runs),
                "candidates": len(variants),
                "values": {k: flat.get(k, flat.get(k.split(".")[-1])) for k in (swept or [])},
            }
        )
    return rows
