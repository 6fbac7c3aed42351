"""Sweeps: grids of config values expanded into runs, and S-SA's "tune every method to skip
about as much" selection (``--match-skip``)."""

from __future__ import annotations

import itertools
from typing import Any

from harness.errors import ConfigError
from harness.metrics import mean_std
from harness.results import flat_config, latest


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """``["lam=0,1e-5,1e-4", "hidden_size=32,64"]`` -> ``{"lam": [...], "hidden_size": [...]}``."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, vals = item.partition("=")
        values = [v.strip() for v in vals.split(",") if v.strip()]
        if not sep or not key.strip() or not values:
            raise ConfigError(f"--grid expects key=v1,v2,..., got '{item}'")
        grid[key.strip()] = values
    return grid


def expand_grid(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Cartesian product of a grid as override dicts (one empty dict for an empty grid)."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


def match_skip(
    records: list[dict[str, Any]], target: float, swept: list[str] | None = None
) -> list[dict[str, Any]]:
    """For each (task, preset, method), the variant whose mean Skip % is nearest ``target``.

    Args:
        records: run records (ok runs are used; the latest line per run id).
        target: Skip % to match.
        swept: config keys to show for each chosen variant (e.g. ``["lam"]``).

    Returns:
        One row per (task, preset, method) with the chosen variant, its mean Skip %, its primary
        metric and the number of candidate variants.
    """
    recs = [r for r in latest(records) if r.get("status") == "ok"]
    groups: dict[tuple[str, str, str], dict[str, list[dict[str, Any]]]] = {}
    for r in recs:
        key = (r["task"], r["preset"], r["method"])
        groups.setdefault(key, {}).setdefault(r["variant_id"], []).append(r)
    rows = []
    for (task, preset, method), variants in sorted(groups.items()):
        scored = []
        for vid, runs in variants.items():
            skip, _ = mean_std([r["metrics"].get("skip_pct") for r in runs])
            scored.append((abs(skip - target), skip, vid, runs))
        _, skip, vid, runs = min(scored, key=lambda s: (s[0], s[2]))
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
                primary: metric,
                "seeds": len(runs),
                "candidates": len(variants),
                "values": {k: flat.get(k, flat.get(k.split(".")[-1])) for k in (swept or [])},
            }
        )
    return rows
