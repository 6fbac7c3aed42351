"""Frozen configuration dataclasses, presets, and typed ``key=value`` overrides.

A ``RunConfig`` describes a run fully; its ``run_id`` hashes it all. An override (``--set``)
names ``section.field`` (``train``, ``model``, ``method``, ``task``) or a bare ``field`` that one
section has; values are coerced to the field's type.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from harness.components.plugins import after_load
from harness.components.registry import METHODS, REFERENCES, TASKS, PresetError
from harness.errors import ConfigError
from harness.persistence.records import Identified, config_hash  # noqa: F401  (config_hash: bench)

PRESETS = ("smoke", "quick", "paper")
DEVICES = ("cpu", "cuda", "auto")  # auto: CUDA when available (harness.env.resolve_device)
from harness.components.knobs import (  # noqa: E402, F401  (methods and tasks import them here)
    MAX_DATA_STEPS,
    MAX_LAYERS,
    MAX_PENALTY,
    MAX_SEED,
    MAX_SEQ_LEN,
    MAX_SPLIT,
    MAX_WIDTH,
    Bounds,
    bounds_of,
    check_data_steps,
    check_knob,
    check_knobs,
    knob,
)


@functools.cache
def legacy_values(method: str, task: str) -> dict[str, dict[str, Any]]:
    """``{record section: {field: legacy value}}`` of a (method, task) pair's config fields."""
    classes = {"train": TrainConfig, "model": ModelConfig}
    if method in METHODS:
        classes["method_cfg"] = METHODS.get(method).config_cls
    if task in TASKS:
        classes["task_cfg"] = TASKS.get(task).config_cls
    return {
        sec: {
            f.name: f.metadata["legacy"] for f in dataclasses.fields(cls) if "legacy" in f.metadata
        }
        for sec, cls in classes.items()
    }


@dataclass(frozen=True)
class TrainConfig:
    """Settings of the one training loop (``harness.training.train``).

    Attributes:
        epochs: passes over the training split.
        batch_size: training batch size.
        lr: Adam learning rate.
        clip: global gradient-norm clip (0 disables).
        weight_decay: Adam L2 weight decay.
        eval_batch_size: batch size for validation and test passes.
        patience: stop after this many epochs without validation improvement (0: never).
        max_train_batches: cap on training batches per epoch (0: no cap).
        compile: train with ``Method.compile_step`` (methods that define one). The float
            rounding differs from eager training, so compiled runs are their own variant;
            Inductor needs a C++ compiler and compiles again in each process (tens of seconds).
    """

    epochs: int = knob(1, ge=1, le=100_000)
    batch_size: int = knob(32, ge=1, le=1_000_000)
    lr: float = knob(1e-3, gt=0)
    clip: float = knob(1.0, ge=0)
    weight_decay: float = knob(0.0, ge=0)
    eval_batch_size: int = knob(256, ge=1, le=1_000_000)
    patience: int = knob(0, ge=0, le=100_000)
    max_train_batches: int = knob(0, ge=0, le=10**9)
    compile: bool = knob(False, legacy=False)  # added 2026-11-25; eager before

    def __post_init__(self) -> None:
        check_knobs(self, "train")


@dataclass(frozen=True)
class ModelConfig:
    """Settings of the generic wrapper around a method (``harness.components.model.SeqModel``).

    Attributes:
        hidden_size: D of every layer.
        num_layers: stacked layers of the method.
        embed_size: embedding size for token inputs (0: same as hidden_size).
        tie_embeddings: share the embedding with the output layer when sizes allow.
    """

    hidden_size: int = knob(32, ge=1, le=MAX_WIDTH)
    num_layers: int = knob(1, ge=1, le=MAX_LAYERS)
    embed_size: int = knob(0, ge=0, le=MAX_WIDTH)
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        check_knobs(self, "model")


@dataclass(frozen=True)
class Preset:
    """A task's settings for one preset: trainer, model, task knobs, per-method overrides."""

    train: TrainConfig = field(default_factory=TrainConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: dict[str, Any] = field(default_factory=dict)
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class DataIdentity:
    """Which data files a run read: their digest, and whether they match the published sums."""

    digest: str
    verified: bool


@dataclass(frozen=True)
class RunConfig(Identified):
    """Everything that determines one run (``data``: None for generated data, ids unchanged)."""

    method: str
    task: str
    seed: int
    preset: str
    train: TrainConfig
    model: ModelConfig
    method_cfg: Any
    task_cfg: Any
    data: DataIdentity | None = None


# --- typed overrides -----------------------------------------------------------------------------

# the words a boolean field takes
_WORDS = dict.fromkeys(("1", "true", "yes", "on"), True)
_WORDS |= dict.fromkeys(("0", "false", "no", "off"), False)


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Coerce ``value`` (a string from the CLI or a Python value) to the annotated type ``tp``."""
    if isinstance(tp, str):  # postponed annotations
        tp = eval(tp, {"typing": typing, "Any": Any})  # noqa: S307 - our own dataclass annotations
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        return coerce(value, args[0], key)
    if tp is Any:
        return value
    if tp is bool:
        truth = value if isinstance(value, bool) else _WORDS.get(str(value).strip().lower())
        if truth is None:
            raise ConfigError(f"'{key}' expects true/false, got '{value}'")
        return truth
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        with contextlib.suppress(ValueError):  # "3", "3.0", "1e3"; not "3.5", "nan" or True
            if (f := float(str(value))).is_integer() and not isinstance(value, bool):
                return int(f)
        raise ConfigError(f"'{key}' expects an integer, got '{value}'")
    if tp is float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"'{key}' expects a number, got '{value}'") from None
        if not math.isfinite(number):  # a record stores it as null: it would not say what ran
            raise ConfigError(f"'{key}' expects a finite number, got '{value}'")
        return number
    if tp is str:
        return str(value)
    raise ConfigError(f"'{key}' has a type ({tp}) that cannot be set from the command line")


def _fields(obj_or_cls: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls))
    return {f.name: hints[f.name] for f in dataclasses.fields(obj_or_cls)}


def apply_overrides(
    sections: dict[str, Any], overrides: dict[str, Any], owners: dict[str, str] | None = None
) -> dict[str, Any]:
    """Apply ``{key: value}`` overrides to a dict of frozen config dataclasses by section.

    Each value is coerced and checked against its field's bounds; ``owners`` (each section's
    method or task) are named in the messages. ConfigError: an unknown or ambiguous key, a bad
    value, or two spellings of one field (``lr``, ``train.lr``) with different values.
    """
    changes: dict[str, dict[str, Any]] = {s: {} for s in sections}
    spelled: dict[tuple[str, str], str] = {}  # (section, field) -> the key that set it
    for key, value in overrides.items():
        sec, fld = _locate(sections, key)
        coerced = coerce(value, _fields(sections[sec])[fld], key)
        check_knob(sections[sec], fld, coerced, key, (owners or {}).get(sec, ""))
        first = spelled.setdefault((sec, fld), key)
        if first != key and changes[sec][fld] != coerced:
            raise ConfigError(
                f"'{first}={overrides[first]}' and '{key}={value}' set {sec}.{fld} to "
                "different values; give one"
            )
        changes[sec][fld] = coerced
    out = dict(sections)
    for sec, fields in changes.items():
        try:
            out[sec] = dataclasses.replace(out[sec], **fields) if fields else out[sec]
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{sec}: {e}") from None
    return out


def _locate(sections: dict[str, Any], key: str) -> tuple[str, str]:
    sec, fld = key.split(".", 1) if "." in key else ("", key)
    if sec and sec not in sections:
        raise ConfigError(f"Unknown config section '{sec}' in '{key}'. Sections: {list(sections)}")
    owners = [s for s, obj in sections.items() if sec in ("", s) and fld in _fields(obj)]
    if not owners:
        raise ConfigError(f"Unknown key '{key}'. Valid keys: {', '.join(valid_keys(sections))}")
    if len(owners) > 1:
        raise ConfigError(
            f"Key '{key}' is ambiguous; write one of: {', '.join(f'{s}.{key}' for s in owners)}"
        )
    return owners[0], fld


def valid_keys(sections: dict[str, Any]) -> list[str]:
    """Every settable ``section.field`` key."""
    return [f"{s}.{f}" for s, obj in sections.items() for f in _fields(obj)]


def parse_set(items: list[str]) -> dict[str, str]:
    """Parse ``["a=1", "train.lr=0.01"]`` into a dict; a malformed item is a ConfigError."""
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ConfigError(f"--set expects key=value, got '{item}'")
        k, v = (part.strip() for part in item.split("=", 1))
        if out.get(k, v) != v:
            raise ConfigError(f"--set {k}={out[k]} and --set {k}={v} conflict; give one value")
        out[k] = v
    return out


def resolve(
    method: str,
    task: str,
    seed: int,
    preset: str,
    overrides: dict[str, Any] | None = None,
) -> RunConfig:
    """The resolved RunConfig: the task preset, its per-method overrides, the user's (which win)."""
    if preset not in PRESETS:
        raise ConfigError(f"Unknown preset '{preset}'. Available: {', '.join(PRESETS)}")
    owners = {"method": method, "task": task}
    sections = default_sections(method, task, preset)
    if (ref := _reference(method)) is not None:  # no trainer, no model: its own sections
        make = ref.run_config
    else:
        method_cls = METHODS.get(method)
        own = TASKS.get(task).preset(preset).methods.get(method, {})
        sections, make = apply_overrides(sections, own, owners), RunConfig
    sections = apply_overrides(sections, overrides or {}, owners)
    for sec, obj in sections.items():  # the preset's values and the defaults too
        check_knobs(obj, sec, owners.get(sec, ""))
    if not 0 <= int(seed) <= MAX_SEED:
        raise ConfigError(f"seed {seed} is out of range: expected an integer in [0, {MAX_SEED}]")
    if ref is None and sections["train"].compile and not method_cls.compiles():
        able = ", ".join(n for n, cls in METHODS.items() if cls.compiles()) or "none"
        raise ConfigError(
            f"train.compile: method '{method}' has no compiled step (those with one: {able})"
        )
    fields = {
        {"method": "method_cfg", "task": "task_cfg"}.get(k, k): v for k, v in sections.items()
    }
    return make(method=method, task=task, seed=int(seed), preset=preset, **fields)


def task_config(task: str, preset: str | None = None) -> Any:
    """The task config ``preset`` gives ``task`` (None: its config class's defaults)."""
    task_cls = TASKS.get(task)
    given = {} if preset is None else dict(task_cls.preset(preset).task)
    return build_config(task_cls.config_cls, given, task)


def _reference(name: Any) -> Any:
    """The reference predictor registered as ``name`` (``harness.references``), else None."""
    return REFERENCES.get(name) if isinstance(name, str) and name in REFERENCES else None


def from_dict(d: dict[str, Any]) -> RunConfig:
    """Rebuild a RunConfig from ``RunConfig.to_dict()``, trusted: ``resolve`` checked it once."""
    if (ref := _reference(d.get("method"))) is not None:
        return trusted(ref.run_config, d, ref.config_cls)
    method_cls = METHODS.get(d.get("method")).config_cls
    return trusted(RunConfig, d, method_cls, train=TrainConfig, model=ModelConfig)


def trusted(cls: type, d: dict[str, Any], method_cls: type, **sections: type) -> Any:
    """The run config ``cls`` whose ``to_dict()`` is ``d``, as it was: nothing validated again."""
    task_cls = TASKS.get(d.get("task")).config_cls
    sections.update(method_cfg=method_cls, task_cfg=task_cls, data=DataIdentity)
    try:
        given = {k: _as_is(c, d[k]) for k, c in sections.items() if d.get(k) is not None}
        return _as_is(cls, {**d, **given})
    except (KeyError, TypeError) as e:
        raise ConfigError(f"malformed run config: {e}") from None


def _as_is(cls: type, values: dict[str, Any]) -> Any:
    obj = object.__new__(cls)  # no __init__: nothing checked
    for f in dataclasses.fields(cls):
        given = f.name in values or f.default is dataclasses.MISSING
        object.__setattr__(obj, f.name, values[f.name] if given else f.default)
    return obj


def default_sections(method: str, task: str, preset: str | None = None) -> dict[str, Any]:
    """The config sections of a (method, task) pair: ``preset``'s, else the defaults."""
    if (ref := _reference(method)) is not None:
        return ref.config_sections(task, preset)
    method_cfg = build_config(METHODS.get(method).config_cls, {})
    p = TASKS.get(task).preset(preset) if preset is not None else Preset()
    return {
        "train": p.train,
        "model": p.model,
        "method": method_cfg,
        "task": task_config(task, preset),
    }


def accepts(method: str, task: str, key: str) -> bool:
    """Whether an override key names a field of this (method, task) pair."""
    try:
        _locate(default_sections(method, task), key)
        return True
    except ConfigError as e:
        if "ambiguous" in str(e):
            raise
        return False


def key_type(method: str, task: str, key: str) -> Any:
    """The annotated type of the field an override key names for a (method, task) pair."""
    sections = default_sections(method, task)
    sec, fld = _locate(sections, key)
    return _fields(sections[sec])[fld]


def build_config(cls: type, values: dict[str, Any], owner: str = "") -> Any:
    """Instantiate a config dataclass, each value checked against its bounds first (ConfigError)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"unknown field(s) {unknown} for {cls.__name__}; valid: {sorted(names)}")
    for name, value in values.items():
        check_knob(cls, name, value, name, owner)
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{cls.__name__}: {e}") from None


@after_load
def check_presets() -> None:
    """Check that every task preset's per-method overrides name registered methods and keys.

    A misspelt key would silently run the method without them. PresetError: one line.
    """
    import difflib

    for task, task_cls in sorted(TASKS.registered().items()):
        for preset, p in getattr(task_cls, "presets", {}).items():
            where = f"task '{task}', preset '{preset}'"
            for method, overrides in p.methods.items():
                if method not in METHODS.registered():
                    raise PresetError(f"{where}: {METHODS.unknown(method)}")
                for key in overrides:
                    try:
                        ok = accepts(method, task, key)
                    except ConfigError as e:  # a bare key that two sections own
                        raise PresetError(f"{where}, method '{method}': {e}") from None
                    if not ok:
                        keys = valid_keys(default_sections(method, task))
                        short = [k.split(".", 1)[1] for k in keys]
                        close = difflib.get_close_matches(key, keys + short, n=3, cutoff=0.6)
                        hint = f" Did you mean: {', '.join(close)}?" if close else ""
                        raise PresetError(
                            f"{where}, method '{method}': unknown key '{key}'.{hint} "
                            f"Valid keys: {', '.join(keys)}"
                        )
