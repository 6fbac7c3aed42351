"""Records -> frames: one row per run, per method variant over seeds, and the failed runs.

A variant is a set of runs that differ only by seed, labelled by the config values that vary among
its method's variants. pandas is imported inside the functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.components.metrics import METRICS, get_metric, higher_is_better
from harness.persistence.records import flat_config, latest
from harness.reporting.text import ci95, commit_label, value_text
from harness.training.events import derive_events

if TYPE_CHECKING:
    import pandas as pd

# Where a record keeps the registered measures that are not among its ``metrics`` (and its
# training time, the leaderboard's Train s).
WHERE = {"flops": ("flops", "effective"), "dense_flops": ("flops", "dense")}
WHERE.update(params=("params", "total"), hidden_size=("config", "model", "hidden_size"))
WHERE.update(train_s=("time", "train_s"))


def measure(rec: dict[str, Any], key: str) -> Any:
    """The value of the registered measure ``key`` in a record (None: it holds none)."""
    if key in (rec.get("metrics") or {}):
        return rec["metrics"][key]
    value: Any = rec
    for part in WHERE.get(key, ("metrics", key)):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def measures(records: Sequence[dict[str, Any]]) -> list[str]:
    """The registered measures, details aside, in registry order (``records``' own registered)."""
    for k in {k for r in records for k in (r.get("metrics") or {})}:
        get_metric(k)
    return [m.name for m in METRICS.values() if m.group != "detail"]


def variant_label(group: list[dict[str, Any]], all_method_runs: list[dict[str, Any]]) -> str:
    """The config fields (other than seed) that vary among a method's runs in one table."""
    here = flat_config(group[0])
    varying = _varying([flat_config(r) for r in all_method_runs])
    return ", ".join(f"{k}={here.get(k)}" for k in varying)


def _varying(configs: Sequence[dict[str, Any]]) -> list[str]:
    """The keys whose values differ among flat ``configs`` (sorted)."""
    fields = {k for c in configs for k in c}  # a key one config lacks varies too (old records)
    return sorted(k for k in fields if len({repr(c.get(k)) for c in configs}) > 1)


def dirty(rec: dict[str, Any]) -> bool:
    """Whether a record was made from a tree with uncommitted changes (unknown: not)."""
    return (rec.get("env") or {}).get("git_dirty") is True


@dataclass(frozen=True)
class Failed:
    """One failed record, its variant's label, and its run's latest status (``rerun``)."""

    record: dict[str, Any]
    label: str
    rerun: str

    def line(self) -> str:
        """The record as one line: method, variant, task, preset, seed, run id, commit, error."""
        r = self.record
        sha = commit_label([r])
        what = "rerun: its latest record is ok and tabulated"
        if self.rerun != "ok":
            what = "not rerun successfully: its latest record failed"
        return (
            f"{r['method']}{f' ({self.label})' if self.label else ''} on {r['task']} "
            f"({r['preset']}, seed {r['seed']}, run {r['run_id']}, commit {sha}): "
            f"{r.get('error')} ({what})"
        )


def failed_records(records: Sequence[dict[str, Any]]) -> list[Failed]:
    """Every failed record among ``records`` (in store order), superseded ones included."""
    last = {r["run_id"]: r for r in latest(records)}
    out = []
    for r in records:
        if r.get("status") == "ok":
            continue
        key = (r["method"], r["task"], r["preset"])
        same = [x for x in last.values() if (x["method"], x["task"], x["preset"]) == key]
        rerun = "ok" if last[r["run_id"]].get("status") == "ok" else "failed"
        out.append(Failed(r, variant_label([r], same), rerun))
    return out


def failed_summary(failed: Sequence[Failed]) -> str:
    """``4 failed records (3 runs), all rerun``: the count a table's notes give."""
    if not failed:
        return "0 failed records"
    runs = {f.record["run_id"] for f in failed}
    open_runs = {f.record["run_id"] for f in failed if f.rerun != "ok"}
    text = f"{_count(len(failed), 'failed record')} ({_count(len(runs), 'run')})"
    if not open_runs:
        return text + ", all rerun (their latest records are ok and tabulated)"
    if len(open_runs) == len(runs):
        return text + ", none rerun successfully (not tabulated)"
    return text + f", {len(runs) - len(open_runs)} rerun, {len(open_runs)} not (not tabulated)"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def ranges(values: Iterable[int], sep: str = ", ") -> str:
    """``36-40, 42, 50-51``: sorted values, consecutive ones as ranges (``--seeds``: sep ",")."""
    out: list[list[int]] = []
    for e in sorted(set(values)):
        if out and e == out[-1][1] + 1:
            out[-1][1] = e
        else:
            out.append([e, e])
    return sep.join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def events_text(runs: Sequence[dict[str, Any]]) -> str:
    """The events of a variant's runs: ``seed 0: loss_spike at epochs 92-99; ...`` ("": none)."""
    parts = []
    for r in sorted(runs, key=lambda r: r["seed"]):
        kinds: dict[str, list[int]] = {}
        for ev in derive_events(r):
            kinds.setdefault(ev["kind"], []).append(int(ev["epoch"]))
        if kinds:
            what = ", ".join(
                f"{k} at epoch{'s' if len(set(es)) > 1 else ''} {ranges(es)}"
                for k, es in kinds.items()
            )
            parts.append(f"seed {r['seed']}: {what}")
    return "; ".join(parts)


def runs_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per ok run (the latest record of each run id): identity, config, measures.

    Columns: ``task``, ``preset``, ``method``, ``variant_id``, ``seed``, ``primary``, ``higher``,
    ``record``, ``config`` (flat), each recorded metric and each measure of ``WHERE``.
    """
    import pandas as pd

    rows = []
    for r in latest(records):
        if r.get("status") != "ok":
            continue
        cfg = flat_config(r)
        row = {k: r[k] for k in ("task", "preset", "method", "variant_id", "seed", "primary")}
        row.update(higher=higher_is_better(r), record=r, config=cfg)
        row.update({k: math.nan if v is None else v for k, v in (r.get("metrics") or {}).items()})
        row.update({k: math.nan if (v := measure(r, k)) is None else v for k in WHERE})
        rows.append(row)
    return pd.DataFrame(rows)


def _sort_key(v: Any) -> tuple[int, Any]:
    return (0, float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, str(v))


def solved_split(skip: dict[Any, float], solved: dict[Any, float]) -> dict[str, Any]:
    """Skip % over the solved runs and, apart, over the unsolved ones (S-SA Table 4's rule).

    A run that never learnt the task can skip anything: ``skip_pct_solved`` and
    ``skip_pct_unsolved`` are ``(mean, std, n)``; empty when no seed recorded ``solved``.
    """
    both = [
        (s, v, solved[s])
        for s, v in skip.items()
        if not math.isnan(v) and s in solved and not math.isnan(solved[s])
    ]
    if not both:
        return {}

    return {
        "skip_pct_solved": _stats([v for _, v, ok in both if ok > 0]),
        "skip_pct_unsolved": _stats([v for _, v, ok in both if ok <= 0]),
    }


def _stats(vals: list[float]) -> tuple[float, float, int]:
    """Mean (NaN for none), sample std (0 for fewer than 2) and count of ``vals``."""
    std = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return statistics.fmean(vals) if vals else math.nan, std, len(vals)


def aggregate(runs: pd.DataFrame, keys: Sequence[str], order: Sequence[str] = ()) -> pd.DataFrame:
    """Aggregate runs over seeds into one row per method variant (methods in ``order`` first).

    Each row has ``method``, ``label`` (``parts`` by key), ``seeds``, ``seed_list``, ``config``,
    ``records``, ``commit``, ``events``, ``event_runs`` and per key ``k`` the mean, ``k_std``,
    ``k_vals`` (finite values) and ``k_by_seed``; with ``solved``, ``solved_split``'s columns.
    """
    import pandas as pd

    rows = []
    for _, m_runs in runs.groupby("method", sort=False):
        groups = list(m_runs.groupby("variant_id", sort=False))
        cfgs = [g["config"].iloc[0] for _, g in groups]
        varying = _varying(cfgs)
        for (_, g), cfg in zip(groups, cfgs, strict=True):
            g = g.sort_values("seed")
            row = {
                "method": g["method"].iloc[0],
                "parts": {k: f"{k}={value_text(cfg.get(k))}" for k in varying},
                "sort": tuple(_sort_key(cfg.get(k)) for k in varying),
                "seeds": g["seed"].nunique(),
                "seed_list": [int(x) for x in g["seed"]],
                "variant_id": g["variant_id"].iloc[0],
                "config": cfg,
                "records": list(g["record"]),
                "commit": commit_label(list(g["record"])),
                "events": events_text(list(g["record"])),
                "event_runs": sum(1 for r in g["record"] if derive_events(r)),
            }
            for k in keys:
                col = [float(v) for v in g[k]] if k in g else [math.nan] * len(g)
                vals = [v for v in col if not math.isnan(v)]
                row[k], row[f"{k}_std"], _ = _stats(vals)
                row[f"{k}_vals"] = vals
                row[f"{k}_by_seed"] = dict(zip(row["seed_list"], col, strict=True))
            outcome = next((k for k in keys if get_metric(k).form == "yes-no"), None)
            if outcome and "skip_pct" in keys:
                row.update(solved_split(row["skip_pct_by_seed"], row[f"{outcome}_by_seed"]))
            rows.append(row)
    agg = pd.DataFrame(rows)
    agg["label"] = [", ".join(p.values()) for p in agg["parts"]]
    rank = {m: i for i, m in enumerate(order)}
    agg["rank"] = [
        (rank.get(m, len(rank)), m, s) for m, s in zip(agg["method"], agg["sort"], strict=True)
    ]
    return agg.sort_values("rank").drop(columns=["rank", "sort"]).reset_index(drop=True)


def tidy(
    agg: pd.DataFrame,
    task: str,
    preset: str,
    picked: dict[str, str] | None,
    keys: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """One row per variant of ``agg`` with numbers, not text: a table's csv / parquet rows.

    Per measure of ``keys`` (None: every registered one ``agg`` holds) its mean, ``_std``, ``_ci95``
    (half-width), then ``k_seed<s>`` for every seed of the table.
    """
    seeds = sorted({s for ss in agg["seed_list"] for s in ss}) if len(agg) else []
    rows = []
    for _, r in agg.iterrows():
        row = {"task": task, "preset": preset, "method": r["method"], "variant": r["label"]}
        row.update({k: r[k] for k in ("variant_id", "seeds", "commit")})
        row["picked_by"] = (picked or {}).get(r["variant_id"], "")
        ks = [m.name for m in METRICS.values() if m.name in r] if keys is None else keys
        for k in ks:
            vals = r[f"{k}_vals"]
            row[k], row[f"{k}_std"] = r[k], r[f"{k}_std"] if len(vals) > 1 else math.nan
            row[f"{k}_ci95"] = ci95(vals) or math.nan
        for k in ks:
            row.update({f"{k}_seed{s}": r[f"{k}_by_seed"].get(s, math.nan) for s in seeds})
        rows.append(row)
    return rows
