"""Records -> pandas -> Markdown leaderboards (generated files; never edited by hand).

One table per (task, preset). Rows are method variants: runs that differ only by seed are
aggregated as mean +- std over seeds, with the number of seeds shown. Arrows give each column's
direction. The header (``harness.reporting.text.header``) says which records, commits, devices and
torch versions the numbers come from, the rule that chose each test metric, and the FLOP unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.metrics import mean_std
from harness.reporting.text import TITLES, arrow, fmt, header
from harness.results import flat_config, latest

# (column title, metric key, higher is better); None direction means "no arrow".
TRACE_COLUMNS = [
    ("Skip %", "skip_pct", True),
    ("Mean depth", "mean_depth", None),
    ("Depth-skip %", "depth_skip_pct", True),
]
LOWER_BETTER = {"mse", "perplexity", "nll"}


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
                title = TITLES.get(k, k) + arrow(h)
                m, s = mean_std([r["metrics"].get(k) for r in group])
                row[title] = fmt(m, s, len(group))
                if k == primary:
                    row["_sort"] = m
            for title, key, h in TRACE_COLUMNS:
                vals = [r["metrics"].get(key) for r in group if key in r["metrics"]]
                if vals or key == "skip_pct":
                    m, s = mean_std(vals)
                    row[title + arrow(h)] = fmt(m, s, len(group), digits=3)
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
