"""Records -> pandas -> Markdown leaderboards (generated files; never edited by hand).

One table per (task, preset). Rows are method variants: runs that differ only by seed are
aggregated as mean +- std over seeds, with the number of seeds shown. Arrows give each column's
direction. The header says which records, commits, devices and torch versions the numbers come
from, the rule that chose each test metric, and the FLOP unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from harness.flops import UNIT_NOTE
from harness.metrics import mean_std
from harness.results import flat_config, latest

# (column title, metric key, higher is better); None direction means "no arrow".
TRACE_COLUMNS = [
    ("Skip %", "skip_pct", True),
    ("Mean depth", "mean_depth", None),
    ("Depth-skip %", "depth_skip_pct", True),
]
METRIC_NAMES = {
    "mse": "MSE",
    "accuracy": "Accuracy %",
    "perplexity": "Perplexity",
    "solved": "Solved",
    "geo_mean": "√(Acc×Skip)",
}
LOWER_BETTER = {"mse", "perplexity", "nll"}


def fmt(mean: float, std: float | None = None, n: int = 1, digits: int = 4) -> str:
    """``mean ± std`` with a sensible number of significant digits."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"

    def f(x: float) -> str:
        if x != 0 and (abs(x) < 1e-2 or abs(x) >= 1e4):
            return f"{x:.3g}" if abs(x) >= 1e4 else f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{max(digits - 2, 1)}f}"

    if n > 1 and std is not None and not math.isnan(std):
        return f"{f(mean)} ± {f(std)}"
    return f(mean)


def _arrow(higher: bool | None) -> str:
    return "" if higher is None else (" ↑" if higher else " ↓")


def _variant_label(group: list[dict[str, Any]], all_method_runs: list[dict[str, Any]]) -> str:
    """The config fields (other than seed) that vary among a method's runs in one table."""
    flats = [flat_config(r) for r in all_method_runs]
    varying = sorted(k for k in flats[0] if len({repr(f.get(k)) for f in flats}) > 1)
    here = flat_config(group[0])
    return ", ".join(f"{k}={here.get(k)}" for k in varying)


def leaderboard_rows(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], pd.DataFrame]:
    """``{(task, preset): DataFrame}`` of aggregated rows (ok runs only)."""
    recs = [r for r in latest(records) if r.get("status") == "ok"]
    tables: dict[tuple[str, str], pd.DataFrame] = {}
    keys = sorted({(r["task"], r["preset"]) for r in recs})
    for task, preset in keys:
        in_table = [r for r in recs if r["task"] == task and r["preset"] == preset]
        primary = in_table[0].get("primary", "")
        higher = bool(in_table[0].get("higher_is_better"))
        metric_keys = [primary] + sorted(
            {k for r in in_table for k in r["metrics"]}
            - {primary, "skip_pct", "depth_skip_pct", "mean_depth", "nll"}
        )
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in in_table:
            groups.setdefault(r["variant_id"], []).append(r)
        rows = []
        for group in groups.values():
            method = group[0]["method"]
            same_method = [r for r in in_table if r["method"] == method]
            row: dict[str, Any] = {
                "Method": method,
                "Variant": _variant_label(group, same_method),
                "D": group[0]["config"]["model"]["hidden_size"],
                "Seeds": len({r["seed"] for r in group}),
            }
            for k in metric_keys:
                h = higher if k == primary else (k not in LOWER_BETTER)
                title = METRIC_NAMES.get(k, k) + _arrow(h)
                m, s = mean_std([r["metrics"].get(k) for r in group])
                row[title] = fmt(m, s, len(group))
                if k == primary:
                    row["_sort"] = m
            for title, key, h in TRACE_COLUMNS:
                vals = [r["metrics"].get(key) for r in group if key in r["metrics"]]
                if vals or key == "skip_pct":
                    m, s = mean_std(vals)
                    row[title + _arrow(h)] = fmt(m, s, len(group), digits=3)
            for kind in ("effective", "dense"):
                m, s = mean_std([r.get("flops", {}).get(kind) for r in group])
                row[f"{kind.capitalize()} FLOPs" + (" ↓" if kind == "effective" else "")] = fmt(
                    m, s, len(group), digits=3
                )
            row["Params"] = group[0].get("params", {}).get("total", "–")
            m, _ = mean_std([r.get("time", {}).get("train_s") for r in group])
            row["Train s"] = fmt(m, None, 1, digits=3)
            rows.append(row)
        df = pd.DataFrame(rows)
        df = df.sort_values("_sort", ascending=not higher, na_position="last").drop(columns="_sort")
        if not df["Variant"].astype(bool).any():
            df = df.drop(columns="Variant")
        # Depth columns only when some method in the table has a depth trace.
        for title in list(df.columns):
            if df[title].isna().all():
                df = df.drop(columns=title)
        tables[(task, preset)] = df.fillna("–")
    return tables


def header(records: Sequence[dict[str, Any]], sources: Sequence[str], title: str) -> str:
    """Generated-file header: provenance of the numbers, selection rule, FLOP unit."""
    envs = [r.get("env", {}) for r in records]
    commits = sorted(
        {
            f"{e.get('git_sha', '?')[:10]}{'+dirty' if e.get('git_dirty') else ''}"
            for e in envs
            if e.get("git_sha")
        }
    ) or ["unknown"]
    devices = sorted({e.get("device_name", "?") for e in envs}) or ["unknown"]
    torches = sorted({e.get("torch", "?") for e in envs}) or ["unknown"]
    rules = sorted({r.get("selection", "") for r in records if r.get("selection")})
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    lines = [
        f"# {title}",
        "",
        f"<!-- Generated by `harness report` at {now}. Do not edit by hand. -->",
        "",
        f"- Generated by `harness report` from {', '.join(f'`{s}`' for s in sources)} "
        f"({len(records)} records).",
        f"- Commits: {', '.join(commits)}; devices: {', '.join(devices)}; "
        f"torch: {', '.join(torches)}.",
        f"- Metric selection: {'; '.join(rules) or 'n/a'}. Mean ± sample std over seeds.",
        f"- FLOPs: {UNIT_NOTE}. Effective = S-SA convention (updated units × full row cost + "
        "decision network); dense = no skipping.",
        "",
    ]
    return "\n".join(lines)


def leaderboard_markdown(
    records: Sequence[dict[str, Any]], sources: Sequence[str], problems: Sequence[str] = ()
) -> str:
    """The full LEADERBOARD.md text: header, one table per (task, preset), failed runs."""
    parts = [header(records, sources, "Leaderboard")]
    for (task, preset), df in leaderboard_rows(records).items():
        parts.append(f"## {task} ({preset} preset)\n")
        parts.append(df.to_markdown(index=False, disable_numparse=True) + "\n")
    failed = [r for r in latest(records) if r.get("status") != "ok"]
    if failed:
        parts.append("## Failed runs\n")
        for r in failed:
            parts.append(
                f"- {r['method']} on {r['task']} ({r['preset']}, seed {r['seed']}, run "
                f"{r['run_id']}): {r.get('error')}"
            )
        parts.append("")
    if problems:
        parts.append("## Records skipped as malformed\n")
        parts += [f"- {p}" for p in problems] + [""]
    return "\n".join(parts)
