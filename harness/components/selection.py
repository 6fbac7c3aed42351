"""Choosing one variant per (task, preset, method) from a sweep, on the validation split only.

The rules (``harness report --select RULE``) are docs/reports.md's "Selection on validation".
Only ``val_metrics`` are read; a tie is broken by the variant id, never by a test number.
``nearest_variant`` is the one "Skip % nearest a target" rule: on validation for
``val-skip-nearest``, on test for ``--match-skip`` and the update-pattern figure.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.components.metrics import higher_is_better
from harness.errors import ConfigError
from harness.persistence.records import latest

RULES = ("best-val", "val-skip-band:TARGET:WIDTH", "val-skip-nearest:TARGET")


@dataclass(frozen=True)
class Rule:
    """A selection rule (``best-val``, ``val-skip-band``, ``val-skip-nearest``) and its numbers."""

    name: str
    target: float | None = None
    width: float | None = None

    def __str__(self) -> str:
        if self.name == "best-val":
            return "best-val"
        if self.name == "val-skip-nearest":
            return f"val-skip-nearest:{self.target:g}"
        return f"val-skip-band:{self.target:g}:{self.width:g}"

    def label(self) -> str:
        """What picked a row under this rule, in a few words (``at matched budget 76 %``)."""
        if self.name == "best-val":
            return "at the best validation score"
        if self.name == "val-skip-nearest":
            return f"at matched budget {self.target:g} %"
        return f"in the Skip % band {self.target:g} ± {self.width:g}"

    def describe(self) -> str:
        """One sentence for a report's notes."""
        if self.name == "best-val":
            return (
                "best-val: per method, the variant with the best mean validation primary metric "
                "over its seeds (ties: variant id; the test set is never read)"
            )
        if self.name == "val-skip-nearest":
            return (
                f"val-skip-nearest:{self.target:g}: per method, the variant whose mean validation "
                f"Skip % is nearest {self.target:g} (ties: the best mean validation primary "
                "metric, then variant id), after variants that differ only in training settings "
                "(learning rate, ...) are reduced to the best on validation; an activity-sparse "
                "method (its Skip % 0 at every variant: Delta GRU, EGRU) by its mean validation "
                "activity sparsity % instead; the test set is never read"
            )
        return (
            f"val-skip-band:{self.target:g}:{self.width:g}: per method, among the variants whose "
            f"mean validation Skip % is within {self.target:g} ± {self.width:g}, the one with "
            "the best mean validation primary metric (ties: variant id; the test set is never "
            "read)"
        )


def parse_rule(text: str) -> Rule:
    """A rule of ``RULES`` (TARGET a Skip % from 0 to 100, WIDTH above 0), else ConfigError."""
    if text == "best-val":
        return Rule("best-val")
    name, _, rest = text.partition(":")
    if name not in ("val-skip-nearest", "val-skip-band"):
        raise ConfigError(f"unknown selection rule {text!r}; use one of {', '.join(RULES)}")
    band = name == "val-skip-band"
    parts = rest.split(":")
    try:
        numbers = [float(p) for p in parts] if len(parts) == 1 + band else []
    except ValueError:
        numbers = []
    if numbers and 0 <= numbers[0] <= 100 and (not band or 0 < numbers[1] < math.inf):
        return Rule(name, *numbers)
    form, example = ("TARGET:WIDTH", "75:5") if band else ("TARGET", "76")
    width = ", WIDTH a number above 0" if band else ""
    raise ConfigError(
        f"selection rule {text!r}: expects {name}:{form}, TARGET a Skip % from 0 to 100{width} "
        f"(e.g. {name}:{example})"
    )


SPLITS = {"val": "val_metrics", "test": "metrics"}  # the record key of each split's metrics


def split_mean(runs: Sequence[dict[str, Any]], key: str, split: str = "val") -> float:
    """Mean of metric ``key`` on ``split`` over ``runs``; NaN unless every run recorded it."""
    vals = [(r.get(SPLITS[split]) or {}).get(key) for r in runs]
    vals = [float(v) for v in vals if v is not None and not math.isnan(v)]
    return statistics.fmean(vals) if len(vals) == len(runs) and vals else math.nan


BUDGETS = {"skip_pct": "Skip %", "read_skip_pct": "activity sparsity %"}  # measure -> label


def budget_measure(runs: Sequence[dict[str, Any]], split: str = "val") -> str:
    """The measure a method's budget is matched on: ``skip_pct``, or ``read_skip_pct``.

    ``read_skip_pct`` (an activity-sparse method, whose Skip % is 0 whatever its thresholds)
    when every run of ``runs`` recorded one on ``split`` and none skipped an update.
    """
    key = SPLITS[split]
    for r in runs:
        m = r.get(key) or {}
        read, skip = m.get("read_skip_pct"), m.get("skip_pct")
        if read is None or math.isnan(read) or skip is None or skip != 0:
            return "skip_pct"
    return "read_skip_pct" if runs else "skip_pct"


def by_variant(
    records: Iterable[dict[str, Any]], by: Sequence[str] = ("task", "preset", "method")
) -> dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]]:
    """``records`` grouped by their ``by`` values (a tuple), then by ``variant_id``, in order."""
    groups: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    for r in records:
        groups.setdefault(tuple(r[k] for k in by), {}).setdefault(r["variant_id"], []).append(r)
    return groups


def nearest_skip(
    records: Sequence[dict[str, Any]],
    target: float,
    split: str,
    by: Sequence[str] = ("task", "preset", "method"),
    tie: Callable[[list[dict[str, Any]]], float] | None = None,
) -> dict[tuple[Any, ...], tuple[str, float]]:
    """Per group of ``records`` (ok, latest), the variant whose mean Skip % is nearest ``target``.

    Args:
        records: ok run records, the latest of each run id.
        target: the Skip % to match.
        split: ``val`` or ``test``.
        by: the record keys whose values form a group (``()``: one group of all records).
        tie: a variant's runs -> a number, lower first among equally near variants; then the
            variant id, never the order of the records.

    Returns:
        ``{group: (variant_id, mean Skip % or activity sparsity %)}`` (``budget_measure``); a
        group with no variant that recorded it on every run has no entry.
    """
    groups = by_variant(records, by).items()
    nearest = {key: nearest_variant(variants, target, split, tie) for key, variants in groups}
    return {key: near[:2] for key, near in nearest.items() if near is not None}


def nearest_variant(
    variants: dict[str, list[dict[str, Any]]],
    target: float,
    split: str,
    tie: Callable[[list[dict[str, Any]]], float] | None = None,
) -> tuple[str, float, str] | None:
    """``nearest_skip`` for one group (variant id -> runs): ``(variant_id, mean, measure)``."""
    measure = budget_measure([r for runs in variants.values() for r in runs], split)
    means = {vid: split_mean(runs, measure, split) for vid, runs in variants.items()}
    cands = [vid for vid, mean in means.items() if not math.isnan(mean)]
    if not cands:
        return None
    vid = min(
        cands,
        key=lambda v: (abs(means[v] - target), tie(variants[v]) if tie else 0.0, v),
    )
    return vid, means[vid], measure


def _best_training(
    variants: dict[str, list[dict[str, Any]]], primary: str, higher: bool
) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Per group of variants that differ only in ``train.*``, the best on validation.

    Returns the kept variants and how many were dropped (a group with no validation metric
    keeps them all): a learning rate picked for its Skip % would be picked for the wrong reason.
    """
    groups: dict[str, list[str]] = {}
    for vid, runs in variants.items():  # keyed by the config less its training settings and seed
        cfg = runs[0].get("config") or {}
        knobs = {k: v for k, v in cfg.items() if k not in ("train", "seed")}
        groups.setdefault(json.dumps(knobs, sort_keys=True), []).append(vid)
    kept: dict[str, list[dict[str, Any]]] = {}
    for vids in groups.values():
        scored = [(vid, split_mean(variants[vid], primary)) for vid in vids]
        scored = [(vid, v) for vid, v in scored if not math.isnan(v)]
        if not scored:
            kept.update({vid: variants[vid] for vid in vids})
            continue
        vid, _ = min(scored, key=lambda s: (-s[1] if higher else s[1], s[0]))
        kept[vid] = variants[vid]
    return kept, len(variants) - len(kept)


def seed_count(runs: Sequence[dict[str, Any]]) -> int:
    """How many seeds a variant's runs have."""
    return len({r["seed"] for r in runs})


def choose(variants: dict[str, list[dict[str, Any]]], rule: Rule) -> tuple[str | None, str]:
    """The variant id ``rule`` picks among ``variants`` (those with the most seeds), and why."""
    first = next(iter(variants.values()))[0]
    primary, higher = first["primary"], higher_is_better(first)
    n = len(variants)
    pool = dict(variants)
    within = ""
    if rule.name == "val-skip-band":
        pool = {
            vid: runs
            for vid, runs in variants.items()
            if abs(split_mean(runs, "skip_pct") - rule.target) <= rule.width
        }
        if not pool:
            return None, f"{rule}: no variant of {n} in the band"
        within = f", {len(pool)} in the band"
    for key in (primary, "skip_pct") if rule.name == "val-skip-nearest" else (primary,):
        pool = {vid: runs for vid, runs in pool.items() if not math.isnan(split_mean(runs, key))}
        if not pool:
            return None, f"{rule}: no validation {key} recorded"
    top = max(seed_count(runs) for runs in pool.values())
    fewer = sum(seed_count(runs) < top for runs in pool.values())
    pool = {vid: runs for vid, runs in pool.items() if seed_count(runs) == top}
    if fewer:
        within += f", {fewer} with fewer than {top} seeds not eligible"
    score = {vid: split_mean(runs, primary) for vid, runs in pool.items()}
    if rule.name == "val-skip-nearest":
        pool, tuned = _best_training(pool, primary, higher)
        sign = -1.0 if higher else 1.0  # ties: the best mean validation primary first
        vid, skip, measure = nearest_variant(
            pool, rule.target, "val", lambda runs: sign * split_mean(runs, primary)
        )
        if tuned:
            within += f", {tuned} beaten on validation by the same knobs' other training settings"
        return vid, (
            f"{rule} of {n}{within} (val {BUDGETS[measure]} {skip:.1f}, "
            f"val {primary} {score[vid]:.4g})"
        )
    best = min(score.items(), key=lambda s: (-s[1] if higher else s[1], s[0]))
    return best[0], f"{rule} of {n}{within} (val {primary} {best[1]:.4g})"


def select(
    records: Sequence[dict[str, Any]], rule: Rule
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The records of the variant ``rule`` picks per (task, preset, method), and the reasons.

    Failed runs are kept (the reports count them). ``reasons``: per chosen variant id (``"best-val
    of 4 (val mse 0.0012)"``), or ``"task/preset/method"`` for a group with none. A reference
    predictor keeps its best-val variant whatever the rule.
    """
    recs = latest(records)
    reasons: dict[str, str] = {}
    groups = by_variant(r for r in recs if r.get("status") == "ok")
    for key, variants in sorted(groups.items()):
        # no trainer (``config.train``), no Skip % to match: a reference predictor's best on val
        if "train" not in next(iter(variants.values()))[0]["config"]:
            vid, why = choose(variants, Rule("best-val"))
            why = f"reference predictor, {why}"
        else:
            vid, why = choose(variants, rule)
        reasons[vid if vid is not None else "/".join(key)] = why
    kept = [r for r in recs if r.get("status") != "ok" or r["variant_id"] in reasons]
    return kept, reasons


def empty_tables(
    records: Sequence[dict[str, Any]], kept: Sequence[dict[str, Any]]
) -> list[tuple[str, str]]:
    """The (task, preset) tables whose methods ran in ``records`` but have no row in ``kept``."""

    def tables(recs: Sequence[dict[str, Any]]) -> set[tuple[str, str]]:
        ok = (r for r in latest(recs) if r.get("status") == "ok" and "train" in r["config"])
        return {(r["task"], r["preset"]) for r in ok}

    return sorted(tables(records) - tables(kept))


def no_row_line(rule: Rule) -> str:
    """What a table says where ``rule`` keeps no variant of any of its methods."""
    return f"No method row: {rule} keeps no variant of any method here (why, per method, below)."
