"""Records -> frames: one row per run, per method variant over seeds, and the failed runs.

The leaderboard (``harness.reporting.leaderboard``) and the paper-style report
(``harness.reporting.paper``) both build on these. A variant is a set of runs that differ only by
seed; it is labelled by the config values that vary among its method's variants. pandas is
imported inside the functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.metrics import higher_is_better
from harness.records import flat_config, latest
from harness.reporting.text import ci95, commit_label

if TYPE_CHECKING:
    import pandas as pd

# The measures aggregated per variant for the tables and their csv / parquet form, in column order.
KEYS = [
    "geo_mean",
    "skip_pct",
    "read_skip_pct",
    "accuracy",
    "solved",
    "mse",
    "perplexity",
    "flops",
    "params",
    "hidden_size",
]


def variant_label(group: list[dict[str, Any]], all_method_runs: list[dict[str, Any]]) -> str:
    """The config fields (other than seed) that vary among a method's runs in one table."""
    flats = [flat_config(r) for r in all_method_runs]
    fields = {k for f in flats for k in f}  # a key one config lacks varies too (old records)
    varying = sorted(k for k in fields if len({repr(f.get(k)) for f in flats}) > 1)
    here = flat_config(group[0])
    return ", ".join(f"{k}={here.get(k)}" for k in varying)


def failed_runs(records: Sequence[dict[str, Any]]) -> list[str]:
    """Each failed run among the latest ``records`` as one line of text.

    The line names the method, what sets its variant apart from the method's other runs on the
    same task and preset, the seed, the run id and the recorded error (a diverged run's names
    the epoch and batch).
    """
    recs = latest(records)
    lines = []
    for r in recs:
        if r.get("status") == "ok":
            continue
        same = [
            x
            for x in recs
            if (x["method"], x["task"], x["preset"]) == (r["method"], r["task"], r["preset"])
        ]
        label = variant_label([r], same)
        lines.append(
            f"{r['method']}{f' ({label})' if label else ''} on {r['task']} ({r['preset']}, "
            f"seed {r['seed']}, run {r['run_id']}): {r.get('error')}"
        )
    return lines


def runs_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per ok run (the latest line of each run id): identity, metrics, FLOPs, params.

    Columns: ``task``, ``preset``, ``method``, ``variant_id``, ``seed``, ``primary``,
    ``higher`` (the primary metric's direction, ``harness.metrics.higher_is_better``),
    ``record``, ``config`` (flat), ``hidden_size``, ``flops`` (effective), ``params`` (total)
    and one column per recorded metric.
    """
    import pandas as pd

    rows = []
    for r in latest(records):
        if r.get("status") != "ok":
            continue
        cfg = flat_config(r)
        row = {k: r[k] for k in ("task", "preset", "method", "variant_id", "seed", "primary")}
        row.update(higher=higher_is_better(r), record=r, config=cfg)
        row["hidden_size"] = cfg.get("hidden_size")
        row["flops"] = (r.get("flops") or {}).get("effective", math.nan)
        row["params"] = (r.get("params") or {}).get("total", math.nan)
        row.update({k: math.nan if v is None else v for k, v in (r.get("metrics") or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _sort_key(v: Any) -> tuple[int, Any]:
    return (0, float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v))


def aggregate(runs: pd.DataFrame, keys: Sequence[str], order: Sequence[str] = ()) -> pd.DataFrame:
    """Aggregate runs over seeds into one row per method variant.

    Each row has ``method``, ``label`` (the config values that vary among the method's variants;
    ``parts`` by key), ``seeds``, ``config``, ``records``, and per key ``k`` the mean, ``k_std``
    (sample std, 0 for one seed), ``k_vals`` (per seed). Methods in ``order`` come first.
    """
    import pandas as pd

    rows = []
    for _, m_runs in runs.groupby("method", sort=False):
        groups = list(m_runs.groupby("variant_id", sort=False))
        cfgs = [g["config"].iloc[0] for _, g in groups]
        fields = {k for c in cfgs for k in c}  # a key one config lacks varies too (old records)
        varying = sorted(k for k in fields if len({repr(c.get(k)) for c in cfgs}) > 1)
        for (_, g), cfg in zip(groups, cfgs, strict=True):
            g = g.sort_values("seed")
            row = {
                "method": g["method"].iloc[0],
                "parts": {
                    k: f"{k}={cfg[k]:g}" if isinstance(cfg.get(k), float) else f"{k}={cfg.get(k)}"
                    for k in varying
                },
                "sort": tuple(_sort_key(cfg.get(k)) for k in varying),
                "seeds": g["seed"].nunique(),
                "variant_id": g["variant_id"].iloc[0],
                "config": cfg,
                "records": list(g["record"]),
                "commit": commit_label(list(g["record"])),
            }
            for k in keys:
                vals = [float(v) for v in g[k] if not math.isnan(v)] if k in g else []
                row[k] = statistics.fmean(vals) if vals else math.nan
                row[f"{k}_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
                row[f"{k}_vals"] = vals
            rows.append(row)
    agg = pd.DataFrame(rows)
    agg["label"] = [", ".join(p.values()) for p in agg["parts"]]
    rank = {m: i for i, m in enumerate(order)}
    agg["rank"] = [
        (rank.get(m, len(rank)), m, s) for m, s in zip(agg["method"], agg["sort"], strict=True)
    ]
    return agg.sort_values("rank").drop(columns=["rank", "sort"]).reset_index(drop=True)


def tidy(agg: pd.DataFrame, task: str, preset: str, picked: dict[str, str] | None) -> pd.DataFrame:
    """One row per variant with numbers, not text: the csv / parquet form of a table."""
    import pandas as pd

    rows = []
    for _, r in agg.iterrows():
        row = {
            "task": task,
            "preset": preset,
            "method": r["method"],
            "variant": r["label"],
            "variant_id": r["variant_id"],
            "seeds": r["seeds"],
            "commit": r["commit"],
            "picked_by": (picked or {}).get(r["variant_id"], ""),
        }
        for k in KEYS:
            if k in r:
                row[k], row[f"{k}_std"] = r[k], r[f"{k}_std"] if r["seeds"] > 1 else math.nan
                row[f"{k}_ci95"] = ci95(r[f"{k}_vals"]) or math.nan
        rows.append(row)
    return pd.DataFrame(rows)
