"""Sweeps: the run configs of a selection, checked before anything runs, and S-SA's selection.

A sweep is methods x tasks x grid points x seeds (``build_configs``), whose models are all built
once before the first run (``validate``); ``match_skip`` is S-SA's "tune every method to skip
about as much" selection (``--match-skip``).
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
    """Every (task, method, grid point, seed) config of a sweep, in that nesting order.

    An override or grid key applies to the (method, task) pairs that have it (a method's own knob
    reaches that method and leaves the others alone); configs that resolve identically (a grid
    key a method lacks) are kept once.

    Args:
        methods: registered method and reference (``ref:NAME``) names.
        tasks: registered task names.
        seeds: the seeds of every variant.
        preset: the preset (``harness.components.config.PRESETS``).
        overrides: ``key -> value`` strings, as ``--set`` gives them.
        grid: ``key -> values`` to sweep (cartesian product), as ``parse_grid`` gives them.

    Returns:
        The ``RunConfig`` of every distinct run.

    Raises:
        ConfigError: a key that no selected (method, task) pair has (the message lists the valid
            keys), a key given to both ``overrides`` and ``grid``, a bad value, an unknown
            preset, or more than ``MAX_RUNS`` runs.
    """
    points = math.prod(len(v) for v in (grid or {}).values())
    size = len(tasks) * len(methods) * points * len(seeds)
    if size > MAX_RUNS:  # counted before anything is resolved
        raise ConfigError(
            f"the sweep has {size:,} runs ({len(tasks)} tasks x {len(methods)} methods x "
            f"{points:,} grid points x {len(seeds):,} seeds); at most {MAX_RUNS:,} are allowed"
        )
    both = [k for k in grid or {} if k in overrides]
    if both:
        raise ConfigError(f"'{both[0]}' is given to both --set and --grid; give one")
    combos = itertools.product(*(grid or {}).values())  # one empty point for an empty grid
    grid_points = [dict(zip(grid or {}, combo, strict=True)) for combo in combos]
    cfgs: list[config.RunConfig] = []
    used: set[str] = set()
    seen: set[str] = set()
    for t in tasks:
        for m in methods:
            for point in grid_points:
                ov = {k: v for k, v in {**overrides, **point}.items() if config.accepts(m, t, k)}
                used |= set(ov)
                for s in seeds:
                    cfg = config.resolve(m, t, s, preset, ov)
                    if cfg.run_id not in seen:
                        seen.add(cfg.run_id)
                        cfgs.append(cfg)
    unused = [k for k in [*overrides, *(grid or {})] if k not in used]
    if unused:
        sections = [config.default_sections(m, t) for t in tasks for m in methods]
        keys = sorted({k for s in sections for k in config.valid_keys(s)})
        raise ConfigError(
            f"Unknown key '{unused[0]}' for the selected methods and tasks. "
            f"Valid keys: {', '.join(keys)}"
        )
    return cfgs


def validate(cfgs: list[config.RunConfig], data_dir: str | None = None) -> None:
    """Build each distinct model of a sweep once, before any run starts.

    A bad combination (e.g. a hidden size a method cannot take) is then reported at once, not in
    the middle of the sweep.

    Args:
        cfgs: run configs (``build_configs``); each variant is checked once, as the training
            step will run it (``harness.training.train.Fitting.check``).
        data_dir: dataset root for real-data tasks.

    Raises:
        ConfigError: the first config whose task or model cannot be built, named in the message.
    """
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
    """Per run id, the config fields (not the seed) that vary among its method's runs on its task.

    Three runs of one method at three lambda values are labelled ``lam=0``, ``lam=0.001``, ...;
    a method run once per seed gets an empty label.
    """
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
    """MACs, FLOPs and parameters per sequence of freshly initialised models (seed 0) on a task.

    Each model runs in eval mode on the first ``batch`` sequences of the task's test split
    (``harness.components.flops.model_costs``: a shorter sequence is charged its own steps); nothing
    is trained.

    Args:
        methods: names or globs, a list or comma-separated (``"all"``).
        task: the task whose data and preset sizes are used.
        preset: the preset.
        overrides: config overrides (``{"hidden_size": "64"}``), as ``--set``.
        batch: test sequences the effective MACs are averaged over.
        data_dir: dataset root for real-data tasks (else ``$HARNESS_DATA_DIR``).

    Returns:
        One row per method: method, task, preset and the fields of ``model_costs``.

    Raises:
        HarnessError: unknown methods or task, missing data, bad overrides or preset.
    """
    from harness.components.flops import model_costs
    from harness.training.train import build, out_of_memory_as_error

    if batch < 1:
        raise ConfigError(f"batch must be >= 1 (got {batch})")
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
    """The time each run in ``todo`` would take, from the recorded times of runs like them.

    A run is estimated by the mean ``time.train_s + time.eval_s`` of the recorded ok runs of
    its variant (same config, any seed); failing that, by the recorded ok runs of its method on
    its task and preset (other knobs), per epoch run (``epochs_run``) times the run's epochs
    (a record without ``epochs_run`` counts as is); failing that, it is not estimated. The times
    are what the records say: one process at the recorded ``--threads``, on the recorded
    machine, under whatever load it had.

    Compilation (``train.compile``) is counted once per variant, not once per run: a run's
    recorded ``time.compile_s`` is taken out of its time, and each variant of ``todo`` that
    compiles adds the largest ``compile_s`` recorded for it (else for its method on its task and
    preset), what a cold cache costs; its other seeds load the compiled graphs from inductor's
    cache (``harness.training.timing.CompileClock``).

    Returns:
        ``(per_run, counts)``: the seconds of each run of ``todo`` (None where no run like it is
        recorded; a compiling variant's compilation on its first run), and how many runs were
        estimated each way, ``{"variant": ..., "method": ..., "unknown": ...}``.
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
                compile_variant[r["variant_id"]] = max(
                    compiling, compile_variant.get(r["variant_id"], 0)
                )
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
    """The wall time of runs of these durations on ``workers`` parallel workers.

    Runs are independent, each on one worker: the longest first, each to the worker free
    soonest (LPT scheduling, within 4/3 of the best schedule). With at least as many workers as
    runs it is the longest run. Runs without an estimate (None) are left out.
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

    This choice reads the test set; ``harness.components.selection`` chooses on validation data
    only. Both take the variant as ``harness.components.selection.nearest_variant`` does (ties: the
    variant id; a variant without a test Skip % on every seed is no candidate).

    Args:
        records: run records (ok runs are used; the latest line per run id).
        target: Skip % to match.
        swept: config keys to show for each chosen variant (e.g. ``["lam"]``).

    Returns:
        One row per (task, preset, method) with the chosen variant, its mean Skip % (activity
        sparsity % for an activity-sparse method, ``budget`` says which), its primary metric
        (under its own name, which ``primary`` holds) and the number of candidate variants; a
        (task, preset, method) none of whose variants recorded a test Skip % has no row.
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
