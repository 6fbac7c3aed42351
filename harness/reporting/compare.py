"""The drift gate: current records against a committed reference, with a tolerance per measure.

Runs are matched by run id; every test metric, MAC/FLOP and parameter count of a matched pair is
compared: parameters and dense counts exactly, effective counts within a small relative tolerance (a
mask can flip on the last bit of a float across CPUs), a test metric within its registry entry's
tolerance. A status change and a missing reference run fail the gate; new runs and a different torch
or device are reported, not failures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.components.config import legacy_values
from harness.components.metrics import DEFAULT_TOLERANCE, get_metric
from harness.errors import HarnessError
from harness.persistence.records import latest
from harness.persistence.store import load
from harness.reporting.render import pipe_table

# (absolute, relative) per measure prefix; a test metric's own is its registry entry's tolerance.
DEFAULT_TOLERANCES = {
    "params": (0.0, 0.0),
    "macs.dense": (0.0, 0.0),
    "flops.dense": (0.0, 0.0),
    "macs": (0.0, 1e-3),
    "flops": (0.0, 1e-3),
    "metrics": DEFAULT_TOLERANCE,
}


@dataclass
class Drift:
    """One measure of one run that differs beyond its tolerance (or a changed status)."""

    run_id: str
    label: str
    measure: str
    reference: Any
    current: Any
    tolerance: str


@dataclass
class Comparison:
    """The outcome of the drift gate: drifted measures, missing and new runs, environment."""

    drifted: list[Drift] = field(default_factory=list)
    missing: list[dict[str, Any]] = field(default_factory=list)
    new: list[dict[str, Any]] = field(default_factory=list)
    matched: int = 0
    environment: list[str] = field(default_factory=list)  # environment_differences(...)
    left_out: tuple[int, int] = (0, 0)  # only_present: (reference runs, current runs) not in both
    allow_empty: bool = False

    @property
    def empty(self) -> str | None:
        """Why the comparison checked nothing (None when some run was compared).

        An empty reference, or no run in both, must not let the gate pass on nothing.
        """
        if self.matched:
            return None
        if not (self.missing or self.left_out[0]):
            return "the reference holds no run record"
        return "no run is in both the reference and the current records"

    @property
    def ok(self) -> bool:
        """Whether the gate passes: nothing drifted or missing, something compared (or allowed)."""
        if self.drifted or self.missing:
            return False
        return self.empty is None or self.allow_empty


def label(r: dict[str, Any]) -> str:
    """A record's run as ``method/task/preset/seedN``, for the report."""
    return f"{r['method']}/{r['task']}/{r['preset']}/seed{r['seed']}"


def _tolerance(
    measure: str, tols: dict[str, tuple[float, float]], given: Sequence[str] = ()
) -> tuple[float, float]:
    """The tolerance of ``measure``: its most specific prefix in ``tols``, or its registry's.

    A test metric that no key of ``given`` (``--tol``) covers has its registry entry's tolerance.
    """
    keys = [k for k in tols if measure == k or measure.startswith(k + ".")]
    best = max(keys, key=len, default="")
    if measure.startswith("metrics.") and best not in given:
        return get_metric(measure.removeprefix("metrics.")).tolerance
    return tols.get(best, (0.0, 0.0))


def _measures(r: dict[str, Any]) -> dict[str, Any]:
    groups = ("metrics", "macs", "flops", "params")
    return {f"{g}.{k}": v for g in groups for k, v in (r.get(g) or {}).items()}


def _differs(a: Any, b: Any, tol: tuple[float, float]) -> bool:
    if a is None or b is None:
        return a is not b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) or math.isnan(b):
            return not (math.isnan(a) and math.isnan(b))
        return abs(a - b) > tol[0] + tol[1] * abs(a)
    return a != b


# (record env key, name in the report)
ENV_FIELDS = (("torch", "torch"), ("device_name", "device"))


def environment_differences(
    reference: list[dict[str, Any]], current: list[dict[str, Any]]
) -> list[str]:
    """One line per environment field (torch, device) that differs between two record sets."""
    lines = []
    for key, name in ENV_FIELDS:
        ref, cur = (
            sorted({str((r.get("env") or {}).get(key) or "unknown") for r in latest(recs)})
            for recs in (reference, current)
        )
        if ref != cur:
            lines.append(f"{name}: reference {' / '.join(ref)}, current {' / '.join(cur)}")
    return lines


def compare(
    reference: list[dict[str, Any]],
    current: list[dict[str, Any]],
    tolerances: dict[str, tuple[float, float]] | None = None,
    only_present: bool = False,
    allow_empty: bool = False,
) -> Comparison:
    """Compare two record lists (the latest record of each run id counts).

    ``tolerances``: ``{measure prefix: (abs, rel)}`` over ``DEFAULT_TOLERANCES`` and the registry's;
    ``only_present``: only the runs in both (the others counted in ``left_out``); ``allow_empty``:
    pass a comparison of nothing. HarnessError for a tolerance no measure has (it would be ignored).
    """
    check_tolerances(tolerances or {}, [*reference, *current])
    tols = {**DEFAULT_TOLERANCES, **(tolerances or {})}
    ref = {r["run_id"]: r for r in latest(reference)}
    cur = {r["run_id"]: r for r in latest(current)}
    res = Comparison(
        environment=environment_differences(reference, current), allow_empty=allow_empty
    )
    res.missing = [ref[k] for k in ref if k not in cur]
    res.new = [cur[k] for k in cur if k not in ref]
    if only_present:
        res.left_out = (len(res.missing), len(res.new))
        res.missing, res.new = [], []
    for k in ref.keys() & cur.keys():
        a, b = ref[k], cur[k]
        res.matched += 1
        if a.get("status") != b.get("status"):
            res.drifted.append(Drift(k, label(a), "status", a.get("status"), b.get("status"), "="))
            continue
        ma, mb = _measures(a), _measures(b)
        for m in sorted(ma.keys() | mb.keys()):
            tol = _tolerance(m, tols, list(tolerances or {}))
            if _differs(ma.get(m), mb.get(m), tol):
                res.drifted.append(
                    Drift(k, label(a), m, ma.get(m), mb.get(m), f"abs {tol[0]:g} rel {tol[1]:g}")
                )
    res.drifted.sort(key=lambda d: (d.label, d.measure))
    return res


def check_tolerances(
    tolerances: dict[str, tuple[float, float]], records: list[dict[str, Any]]
) -> None:
    """Refuse (HarnessError) a tolerance whose measure or prefix no measure of the records has."""
    measures = {m for r in records for m in _measures(r)}
    for key in tolerances:
        if not any(m == key or m.startswith(key + ".") for m in measures):
            groups = sorted({m.split(".")[0] for m in measures})
            raise HarnessError(
                f"--tol {key}: no measure of the records is {key} or starts with '{key}.' "
                f"(measures: {', '.join(groups) or 'none'}, e.g. metrics.skip_pct)"
            )


def parse_tolerances(items: list[str]) -> dict[str, tuple[float, float]]:
    """``["metrics.mse=1e-3", "macs=0:1e-2"]`` -> {measure: (abs, rel)}.

    Raises HarnessError for a malformed item, or a tolerance negative or not finite (``nan`` would
    switch the gate off).
    """
    out = {}
    for item in items:
        usage = f"--tol expects MEASURE=ABS or MEASURE=ABS:REL, got '{item}'"
        key, sep, val = item.partition("=")
        a, _, r = val.partition(":")
        try:
            tol = (float(a), float(r or 0.0))
        except ValueError:
            raise HarnessError(usage) from None
        if not sep or not key.strip():
            raise HarnessError(usage)
        if not all(math.isfinite(t) and t >= 0 for t in tol):
            raise HarnessError(f"--tol '{item}': tolerances must be finite numbers >= 0")
        out[key.strip()] = tol
    return out


def load_strict(path: str) -> list[dict[str, Any]]:
    """Records of a store; for the gate an unreadable line is a HarnessError, not a warning."""
    records, problems = load([path], legacy_values)
    if problems:  # one line: the first three, and the way out
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise HarnessError(
            f"{len(problems)} unreadable record(s): {'; '.join(problems[:3])}{more}. The "
            "drift gate needs well-formed records: move bad lines aside with 'harness store "
            "repair FILE', or pass --skip-malformed to compare without them"
        )
    return records


def markdown(res: Comparison, ref_path: str, cur_path: str) -> str:
    """The comparison as Markdown."""
    verdict = "PASS" if res.ok else "FAIL"
    lines = [
        f"# Drift gate: {verdict}",
        "",
        f"Reference `{ref_path}` vs current `{cur_path}`: {res.matched} matched runs, "
        f"{len(res.drifted)} drifted measures, {len(res.missing)} missing, {len(res.new)} new.",
        "",
    ]
    if res.empty:
        allowed = "accepted (--allow-empty)" if res.allow_empty else "a failure"
        lines += [f"Nothing was compared: {res.empty}; {allowed}.", ""]
    if res.left_out != (0, 0):
        lines += [
            f"Compared only the runs in both: left out {res.left_out[0]} reference and "
            f"{res.left_out[1]} current run(s).",
            "",
        ]
    if res.environment:
        lines += ["## Environment differs", ""] + [f"- {e}" for e in res.environment] + [""]
    if res.drifted:
        titles = ["run", "measure", "reference", "current", "tolerance"]
        cells = [
            [d.label, d.measure, str(d.reference), str(d.current), d.tolerance] for d in res.drifted
        ]
        lines += ["## Drifted", "", *pipe_table(titles, cells), ""]
    for title, rows in (("Missing from current", res.missing), ("New in current", res.new)):
        if rows:
            lines += [f"## {title}", ""] + [f"- {label(r)} ({r['run_id']})" for r in rows] + [""]
    return "\n".join(lines)
