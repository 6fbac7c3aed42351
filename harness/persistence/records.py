"""The run record (``RunRecord``): its schema, the only code that builds one, its checked reader.

Timing records share the required keys and the checks. Reading migrates (``migrate``): a record
made before a config field existed reads with the value the field declares for older records
and the ids of the same setting made today, so one setting is one variant whichever code
recorded it; the line on disk is never rewritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, TypedDict

SCHEMA_VERSION = 1
# what every record holds (run and timing records)
REQUIRED = ("schema", "run_id", "method", "task", "seed", "preset", "status", "config")
# ``(method, task) -> {record section: {field: legacy value}}``
# (``harness.components.config.legacy_values``)
Legacy = Callable[[str, str], dict[str, dict[str, Any]]]
STATUSES = ("ok", "failed")  # what a record's status can be; any other is an unusable line
# record kind (``kind``; a run record has none) -> the schema versions this harness reads
KNOWN_SCHEMAS: dict[str, tuple[int, ...]] = {"run": (1,), "timing": (1, 2)}
# what the reports read from a run that finished (status ok), beyond REQUIRED
OK_RUN_REQUIRED = ("metrics", "variant_id", "primary", "higher_is_better")


class RunRecord(TypedDict, total=False):
    """One run, as stored (one JSON line); its fields are docs/reports.md's "The run record"."""

    schema: int
    run_id: str
    variant_id: str | None
    method: str
    task: str
    seed: int
    preset: str
    status: str
    error: str | None
    config: dict[str, Any]
    method_code: str | None
    method_source: dict[str, str]
    env: dict[str, Any]
    time: dict[str, Any]
    primary: str
    higher_is_better: bool
    selection: str
    params: dict[str, float]
    data: dict[str, Any]
    best_epoch: int
    epochs_run: int
    history: list[dict[str, Any]]
    metrics: dict[str, float | None]
    val_metrics: dict[str, float | None]
    macs: dict[str, float]
    flops: dict[str, float]
    diagnostics: dict[str, float]
    trace: dict[str, Any]
    events: list[dict[str, Any]]
    argv: list[str]
    sweep: dict[str, Any]
    written_run_id: str


# --- building a record ----------------------------------------------------------------------------


def now() -> str:
    """The time stamp every record time uses: UTC, ISO 8601, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def start_record(cfg: Any, method_code: str | None, method_source: dict | None = None) -> RunRecord:
    """The record of a ``RunConfig`` about to start: its identity and config, no status yet."""
    rec = _identified(cfg.to_dict(), method_code)
    rec["events"] = []
    if method_source is not None:
        rec["method_source"] = dict(method_source)
    return rec


def _identified(cfg_dict: dict[str, Any], method_code: str | None) -> RunRecord:
    """What every record of a run starts with: its ids, names, config and code, started now."""
    run_id, variant_id = identity(cfg_dict)
    return RunRecord(
        schema=SCHEMA_VERSION,
        run_id=run_id,
        variant_id=variant_id,
        method=cfg_dict.get("method"),
        task=cfg_dict.get("task"),
        seed=cfg_dict.get("seed"),
        preset=cfg_dict.get("preset"),
        method_code=method_code,
        config=cfg_dict,
        time={"start": now()},
    )


def describe_task(rec: RunRecord, task: Any, selection: str) -> None:
    """What a record says about its task: primary metric, direction, the selection rule."""
    rec["primary"] = task.primary
    rec["higher_is_better"] = bool(task.higher_is_better)
    rec["selection"] = selection


def describe_data(rec: RunRecord, info: dict[str, Any], data: Any) -> None:
    """A record's ``data``: the splits' ``info`` and, for data files, their ``DataIdentity``."""
    rec["data"] = {**info, **({} if data is None else dataclasses.asdict(data))}


def finish_ok(
    rec: RunRecord,
    *,
    best_epoch: int,
    history: list[dict[str, Any]],
    metrics: dict[str, float],
    val_metrics: dict[str, float],
    macs: dict[str, float],
    flops_per_mac: int,
    diagnostics: dict[str, float],
    trace: dict[str, Any],
    train_s: float,
    eval_s: float,
    compiled: dict[str, float] | None = None,
) -> RunRecord:
    """Complete ``rec`` as a finished run (status ``ok``).

    ``compiled`` (``train.compile``): its ``compile_s`` (part of ``train_s``) goes to ``time``,
    the FX-graph cache hits and misses to ``diagnostics``.
    """
    rec.update(
        status="ok",
        error=None,
        best_epoch=best_epoch,
        epochs_run=len(history),
        history=history,
        metrics=metrics,
        val_metrics=val_metrics,
        macs=macs,
        flops={k: flops_per_mac * v for k, v in macs.items()},
        diagnostics=diagnostics,
        trace=trace,
    )
    rec["time"].update(train_s=train_s, eval_s=eval_s, end=now())
    if compiled:
        rec["time"]["compile_s"] = compiled["compile_s"]
        rec["diagnostics"].update({k: v for k, v in compiled.items() if k != "compile_s"})
    return rec


def finish_failed(
    rec: RunRecord,
    error: str,
    history: list[dict[str, Any]] | None = None,
    train_s: float | None = None,
) -> RunRecord:
    """Complete ``rec`` as a failed run: why (one line), and the epochs it finished if any."""
    rec.update(status="failed", error=" ".join(error.split()))
    if history is not None:
        rec.update(history=history, epochs_run=len(history))
    if train_s is not None:
        rec["time"]["train_s"] = train_s
    rec["time"]["end"] = now()
    return rec


def failed_record(cfg_dict: dict[str, Any], error: str, method_code: str | None) -> RunRecord:
    """The failed record of a run that could not start, from ``RunConfig.to_dict()``."""
    rec = _identified(cfg_dict, method_code)
    rec.update(status="failed", error=" ".join(error.split()))
    rec["time"]["end"] = rec["time"]["start"]
    return rec


def canonical_config(d: dict[str, Any]) -> dict[str, Any]:
    """A config dict in the form its ids are hashed from.

    Fields added later are left out at the value of the code before them: ``train.compile``
    when False, ``data`` when None (generated data).
    """
    out = dict(d)
    train = out.get("train")
    if isinstance(train, dict) and "compile" in train and not train["compile"]:
        out["train"] = {k: v for k, v in train.items() if k != "compile"}
    if out.get("data", 0) is None:
        del out["data"]
    return out


def config_hash(d: dict[str, Any]) -> str:
    """Stable short hash of a JSON-serialisable dict."""
    blob = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# Fields the ids leave out at the value that reproduces the code before them, though the config
# keeps them: (section, field) -> that value. ``task_cfg.split``: a task's split of its data,
# ``series`` (S-SA's split by series) being the only one before a task could split by group.
UNHASHED_AT = {("task_cfg", "split"): "series"}


class Identified:
    """A run's config dataclass (``RunConfig``, ``RefConfig``) whose ``to_dict`` gives its ids."""

    def to_dict(self) -> dict[str, Any]:
        """Every resolved value as a JSON-ready dict, in its form ``canonical_config``."""
        return canonical_config(dataclasses.asdict(self))  # type: ignore[call-overload]

    @property
    def run_id(self) -> str:
        """Hash of the fully resolved config (16 hex digits; ``identity``)."""
        return identity(self.to_dict())[0]

    @property
    def variant_id(self) -> str:
        """Hash of the config without the seed: runs that differ only by seed share it."""
        return identity(self.to_dict())[1]


def identity(cfg_dict: dict[str, Any]) -> tuple[str, str]:
    """``(run_id, variant_id)`` of a config dict: ``canonical_config`` less ``UNHASHED_AT``."""
    d = canonical_config(cfg_dict)
    for (section, name), value in UNHASHED_AT.items():
        fields = d.get(section)
        if isinstance(fields, dict) and name in fields and fields[name] == value:
            d[section] = {k: v for k, v in fields.items() if k != name}
    return config_hash(d), config_hash({k: v for k, v in d.items() if k != "seed"})


# --- one line -------------------------------------------------------------------------------------


def _clean(obj: Any) -> Any:
    """Replace NaN/inf by None so every line is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def to_json(rec: RunRecord | dict[str, Any]) -> str:
    """One record as one strict-JSON line (sorted keys, NaN/inf as null, no ``written_run_id``)."""
    data = {k: v for k, v in rec.items() if k != "written_run_id"}
    return json.dumps(_clean(data), sort_keys=True, separators=(",", ":"))


class RecordProblem(ValueError):
    """A line that is not a usable record; the message says why."""


class NotJSON(RecordProblem):
    """A line that is not strict JSON (or not UTF-8): a torn line, a NaN token."""


def _non_finite(token: str) -> Any:
    raise NotJSON(
        f"{token} is not a JSON value (the harness writes a number that is not finite as null)"
    )


def from_json(text: str | bytes, legacy: Legacy | None = None) -> RunRecord:
    """Parse and check one line (RecordProblem: unusable), then ``migrate`` it given ``legacy``."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        rec = json.loads(text, parse_constant=_non_finite)
    except UnicodeDecodeError:
        raise NotJSON("not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise NotJSON(e.msg) from None
    problems = validate(rec)
    if problems:
        raise RecordProblem("; ".join(problems))
    return migrate(rec, legacy) if legacy is not None else rec


# --- checks ---------------------------------------------------------------------------------------


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names.update({list: "an array", dict: "an object"})
    shown = json.dumps(v)[:24] if isinstance(v, (bool, int, float, str)) else ""
    return names.get(type(v), type(v).__name__) + (f" ({shown})" if shown else "")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _numbers(v: Any) -> bool:
    return isinstance(v, dict) and all(
        x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in v.values()
    )


_STRING = (lambda v: isinstance(v, str), "a string")
_OBJECT = (lambda v: isinstance(v, dict), "an object")
_STRING_OR_NULL = (lambda v: v is None or isinstance(v, str), "a string")
# key -> (check, what it expects); checked whenever the key is present
_TYPES: dict[str, tuple[Any, str]] = {
    "run_id": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    **dict.fromkeys(("method", "task", "preset"), _STRING),
    "status": (lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}"),
    "seed": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "config": _OBJECT,
}
# run records only
_RUN_TYPES: dict[str, tuple[Any, str]] = {
    **dict.fromkeys(
        ("metrics", "val_metrics", "macs", "flops", "params", "diagnostics"),
        (_numbers, "an object of numbers"),
    ),
    **dict.fromkeys(("variant_id", "primary", "error", "method_code"), _STRING_OR_NULL),
    "method_source": _OBJECT,
    "higher_is_better": (lambda v: isinstance(v, bool), "a boolean"),
    **dict.fromkeys(("env", "time", "trace"), _OBJECT),
    **dict.fromkeys(("history", "events"), (lambda v: isinstance(v, list), "an array")),
}


def validate(rec: Any) -> list[str]:
    """One short message per problem of a parsed line; empty when the reports can use it.

    The required keys and their types (``_TYPES``), a ``schema`` this harness reads for the
    ``kind``, and what the reports read from a finished run (``OK_RUN_REQUIRED``; ``config.model``
    where ``config.train`` is: a reference predictor's run has neither).
    """
    if not isinstance(rec, dict):
        return [f"not a record: {_json_type(rec)}"]
    missing = [k for k in REQUIRED if k not in rec]
    problems = [f"missing {missing}"] if missing else []
    kind = rec.get("kind", "run")
    if kind not in KNOWN_SCHEMAS:
        return [*problems, f"unknown record kind {kind!r}"]
    if "schema" in rec:
        schema, known = rec["schema"], KNOWN_SCHEMAS[kind]
        if not _is_int(schema):
            problems.append(f"schema: expected an integer, got {_json_type(schema)}")
        elif schema not in known:
            problems.append(
                f"schema version {schema} is unknown (this harness reads {kind} records of "
                f"schema {', '.join(map(str, known))}; was it written by a newer harness?)"
            )
    types = {**_TYPES, **(_RUN_TYPES if kind == "run" else {})}
    for key, (ok, want) in types.items():
        if key in rec and not ok(rec[key]):
            problems.append(f"{key}: expected {want}, got {_json_type(rec[key])}")
    if kind == "run" and isinstance(rec.get("config"), dict):
        for sec in ("train", "model", "method_cfg", "task_cfg"):
            if sec in rec["config"] and not isinstance(rec["config"][sec], dict):
                problems.append(f"config.{sec}: expected an object")
    if kind == "run" and rec.get("status") == "ok":
        lacking = [k for k in OK_RUN_REQUIRED if k not in rec]
        if lacking:
            problems.append(f"a finished (ok) run lacks {lacking}")
        cfg = rec["config"] if isinstance(rec.get("config"), dict) else {}
        model = cfg.get("model")  # a run with a trainer has a model; a reference's run neither
        if "train" in cfg and not (isinstance(model, dict) and _is_int(model.get("hidden_size"))):
            problems.append("a finished (ok) run lacks config.model.hidden_size")
    return problems


# --- migration ------------------------------------------------------------------------------------


def migrate(rec: dict[str, Any], legacy: Legacy) -> RunRecord:
    """A checked run record as the current harness would have written it (changed in place).

    Each config field it lacks gets its declared ``legacy`` value (``(method, task) ->
    {section: {field: value}}``, ``harness.components.config.legacy_values``); the ids are taken
    afresh, the written one kept in ``written_run_id`` when it changed. Timing records and
    records of unknown components are returned unchanged.
    """
    if rec.get("kind", "run") != "run":
        return rec  # type: ignore[return-value]
    filled = []  # (section, field) of each field filled from its declared legacy value
    for section, values in legacy(rec["method"], rec["task"]).items():
        have = rec["config"].get(section)
        for name, value in values.items() if isinstance(have, dict) else ():
            if name not in have:
                have[name] = value
                filled.append((section, name))
    canonical = canonical_config(rec["config"])
    if not any(name in canonical.get(sec, {}) for sec, name in filled):
        return rec  # type: ignore[return-value]  # the ids do not hash what was filled
    run_id, variant_id = identity(rec["config"])
    if run_id != rec["run_id"]:
        rec["written_run_id"] = rec["run_id"]
        rec["run_id"], rec["variant_id"] = run_id, variant_id
    return rec  # type: ignore[return-value]


# --- reading many records -------------------------------------------------------------------------


def latest(records: Iterable[RunRecord]) -> list[RunRecord]:
    """The last record of each run id (a rerun supersedes the earlier line)."""
    by_id: dict[str, RunRecord] = {}
    for r in records:
        by_id.pop(r["run_id"], None)
        by_id[r["run_id"]] = r
    return list(by_id.values())


def flat_config(rec: RunRecord | dict[str, Any]) -> dict[str, Any]:
    """A record's resolved config as one flat dict, keyed as ``--set`` and ``--grid`` accept."""
    c = rec["config"]
    out = {**c.get("method_cfg", {}), **c.get("model", {})}
    out.update({f"train.{k}": v for k, v in c.get("train", {}).items()})
    out.update({f"task.{k}": v for k, v in c.get("task_cfg", {}).items()})
    return out


def label(rec: RunRecord | dict[str, Any]) -> str:
    """A record's run as ``method/task/preset/seedN``."""
    return f"{rec['method']}/{rec['task']}/{rec['preset']}/seed{rec['seed']}"
