"""Sweep files (``harness run --config FILE``) and the shipped suites (``--suite NAME``).

A sweep file holds the ``harness run`` flags under their names (``_`` for ``-``), as TOML (or YAML
with PyYAML); its ``[[part]]`` tables each add their own ``methods``, ``tasks``, ``set`` and
``grid`` (over the file's, key by key), and the sweep is the union of the parts. A flag beside the
file overrides it (``--set``, ``--grid`` key by key); in a file with parts, ``--methods`` and
``--tasks`` keep in each part the names they select, and the references ``--methods`` names join
every part. The suites ship in the task package's ``suites`` folder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.components.config import DEVICES, PRESETS, accepts
from harness.components.plugins import PLUGIN_PACKAGES, include
from harness.components.registry import TASKS
from harness.components.selection import parse_rule
from harness.env import tomllib  # tomli on Python 3.10
from harness.errors import ConfigError
from harness.executors import EXECUTORS, MAX_THREADS
from harness.executors.base import declared
from harness.references import component, resolve_names

# file key -> what it holds (for the error messages); the argparse dest is the same name.
# The executors' keys (workers, ray_address, slurm_*) are their declared options: option_keys()
OPTION_KEYS = {
    "tasks": "a name, a glob or a list of them",
    "methods": "a name, a glob or a list of them",
    "seeds": "e.g. '0-4', 3 or [0, 1, 2]",
    "preset": "a preset name",
    "set": "a table of key = value",
    "grid": "a table of key = [values]",
    "match_skip": "a number",
    "select": "a selection rule: best-val or val-skip-band:TARGET:WIDTH",
    "executor": "an executor name",
    "threads": "an integer in [0, 1024]",
    "device": "a device name",
    "data_dir": "a path",
    "out": "a path",
    "report": "a path",
    "no_report": "true or false",
    "force": "true or false",
    "include": "a path or a list of paths (.py files or folders, relative to the file)",
}
PART_KEYS = ("methods", "tasks", "set", "grid", "note")
META_KEYS = ("description",)
SUFFIXES = (".toml", ".yaml", ".yml")


@dataclass
class Part:
    """One block of a sweep: its methods and tasks (specs), overrides and grid."""

    methods: str | None = None
    tasks: str | None = None
    set: dict[str, str] = field(default_factory=dict)
    grid: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class SweepFile:
    """A parsed sweep file: its options (argparse dests -> values) and its parts."""

    path: str
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    parts: list[Part] = field(default_factory=list)


def suite_dir() -> Path:
    """The folder of the shipped suite files (``suites/`` in the task package's data)."""
    from importlib.resources import files

    return Path(str(files(PLUGIN_PACKAGES["task"]))) / "suites"


def suite_names() -> list[str]:
    """The shipped suites' names (``ssa-table1``, ...), sorted."""
    return sorted(p.stem.replace("_", "-") for p in suite_dir().glob("*.toml"))


def suite_path(name: str) -> Path:
    """The file of the suite ``name`` (``ssa-table1`` or ``ssa_table1``); else a ConfigError."""
    path = suite_dir() / (name.replace("-", "_") + ".toml")
    if not path.is_file():
        raise ConfigError(
            f"Unknown suite '{name}'. Suites: {', '.join(suite_names())} ('--suite list' "
            "describes them)"
        )
    return path


def _read(path: Path) -> dict[str, Any]:
    if path.suffix not in SUFFIXES:
        raise ConfigError(f"{path}: a sweep file is .toml, .yaml or .yml")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file") from None
    if path.suffix == ".toml":
        parse, error, kind = tomllib.loads, tomllib.TOMLDecodeError, "TOML"
    else:
        try:
            import yaml
        except ModuleNotFoundError:
            raise ConfigError(
                f"{path}: YAML sweep files need PyYAML (pip install pyyaml), or write it as TOML"
            ) from None
        parse, error, kind = yaml.safe_load, yaml.YAMLError, "YAML"
    try:
        data = parse(text)
    except error as e:
        raise ConfigError(f"{path}: not valid {kind} ({' '.join(str(e).split())})") from None
    data = {} if data is None else data  # an empty YAML file
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expects a table of options at the top level")
    return data


def _scalar(value: Any, where: str) -> str:
    """A file value as the string a flag would give (what ``--set`` and ``--grid`` parse)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} expects a finite number, got {value}")
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ConfigError(f"{where} expects a number, a string or true/false, got {value!r}")


def option_keys() -> dict[str, str]:
    """Every key a sweep file may hold, with what it holds: ``OPTION_KEYS`` and the executors'."""
    return OPTION_KEYS | {o.name: o.describe() for o in declared().values()}


def _names(value: Any, where: str) -> str:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise ConfigError(f"{where} expects {OPTION_KEYS['tasks']}, got {value!r}")


def _table(value: Any, where: str, lists: bool) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} expects {OPTION_KEYS['grid' if lists else 'set']}")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if not lists:
            out[k] = _scalar(v, f"{where}.{k}")
        elif isinstance(v, list) and v:
            out[k] = [_scalar(x, f"{where}.{k}") for x in v]
        else:
            raise ConfigError(f"{where}.{k} expects a non-empty list of values, got {v!r}")
    return out


def _option(key: str, value: Any, where: str) -> Any:
    """A top-level option checked for type and turned into what the flag's parser gives."""

    def bad() -> ConfigError:
        return ConfigError(f"{where} expects {option_keys()[key]}, got {value!r}")

    if key == "include":
        v = [value] if isinstance(value, str) else value
        if not (isinstance(v, list) and v and all(isinstance(p, str) and p for p in v)):
            raise bad()
        return v
    if key in ("tasks", "methods"):
        return _names(value, where)
    if key == "seeds":
        if isinstance(value, list) and value and all(type(v) is int for v in value):
            return ",".join(str(v) for v in value)
        if type(value) not in (int, str):
            raise bad()
        return str(value)
    if key in ("set", "grid"):
        return _table(value, where, lists=key == "grid")
    choices = {"preset": PRESETS, "executor": EXECUTORS.names(), "device": DEVICES}.get(key)
    if choices:
        if value not in choices:
            raise ConfigError(f"{where} expects one of {', '.join(choices)}, got {value!r}")
        return value
    option = declared().get(key)
    bounds = (0, MAX_THREADS) if key == "threads" else option and option.bounds
    if bounds:
        low, high = bounds
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{where} expects an integer in [{low}, {high}], got {value!r}")
        return value
    if key == "select":
        if not isinstance(value, str):
            raise bad()
        parse_rule(value)  # a bad rule is one line, naming it
        return value
    if key == "match_skip":
        if type(value) not in (int, float) or not math.isfinite(value):
            raise bad()
        return float(value)
    if option and option.type is list:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise bad()
        return value
    if key in ("no_report", "force") or option and option.type is bool:
        if not isinstance(value, bool):
            raise bad()
        return value
    if not isinstance(value, str) or not value:  # paths and the address
        raise bad()
    return value


def _unknown(keys: list[str], allowed: list[str], where: str) -> None:
    if keys:
        raise ConfigError(f"{where}: unknown key '{keys[0]}' (keys: {', '.join(sorted(allowed))})")


def load(path: str | Path) -> SweepFile:
    """Read and check a sweep file: its options and parts (ConfigError: bad file, key or value)."""
    path = Path(path)
    data = _read(path)
    keys = option_keys()
    allowed = [*keys, *META_KEYS, "part"]
    _unknown([k for k in data if k not in allowed], allowed, str(path))
    sweep = SweepFile(str(path), description=str(data.get("description", "")))
    for key, value in data.items():
        if key in keys:
            sweep.options[key] = _option(key, value, f"{path}: '{key}'")
    if paths := sweep.options.get("include"):  # relative to the file
        sweep.options["include"] = [str(path.parent / Path(p).expanduser()) for p in paths]
    parts = data.get("part", [])
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise ConfigError(f"{path}: 'part' expects [[part]] tables")
    for i, raw in enumerate(parts, 1):
        where = f"{path}: part {i}"
        _unknown([k for k in raw if k not in PART_KEYS], list(PART_KEYS), where)
        given = [k for k in ("methods", "tasks", "set", "grid") if k in raw]  # not the note
        sweep.parts.append(Part(**{k: _option(k, raw[k], f"{where} '{k}'") for k in given}))
    return sweep


def plan(
    sweep: SweepFile | None,
    methods: str,
    tasks: str,
    overrides: dict[str, str],
    grid: dict[str, list[str]],
    given: set[str],
) -> list[tuple[list[str], list[str], dict[str, str], dict[str, list[str]]]]:
    """The (methods, tasks, overrides, grid) blocks of a sweep, one per part, flags applied.

    ``methods`` and ``tasks``: the flag's value, else the file's, else the default; ``overrides``
    and ``grid``: given beside the file; ``given``: the options given as flags. A part left with
    no method or task is dropped. ConfigError: unknown names, or flags that select nothing.
    """
    if sweep is not None and sweep.options.get("include"):
        include(sweep.options["include"])
    top = (sweep.options.get("set", {}), sweep.options.get("grid", {})) if sweep else ({}, {})
    if sweep is None or not sweep.parts:
        sets, grids = _layer(*top, overrides, grid)
        return [(resolve_names(methods), TASKS.resolve(tasks), sets, grids)]
    chosen_m = resolve_names(methods) if "methods" in given else None
    chosen_t = TASKS.resolve(tasks) if "tasks" in given else None
    every = [m for m in chosen_m or [] if component(m).every_part]  # a task's baselines
    blocks = []
    for part in sweep.parts:
        ms = resolve_names(part.methods or methods)
        ts = TASKS.resolve(part.tasks or tasks)
        ms = [m for m in ms if chosen_m is None or m in chosen_m]
        ms += [r for r in every if r not in ms]
        ts = [t for t in ts if chosen_t is None or t in chosen_t]
        if ms and ts:
            sets, grids = _layer(*_layer(*top, part.set, part.grid), overrides, grid)
            if all(component(m).every_part for m in ms):  # a part's knobs (lam) are not theirs
                sets = {k: v for k, v in sets.items() if _taken(k, ms, ts)}
                grids = {k: v for k, v in grids.items() if _taken(k, ms, ts)}
            blocks.append((ms, ts, sets, grids))
    if not blocks:
        raise ConfigError(f"--methods/--tasks select no run of {sweep.path}")
    return blocks


def _taken(key: str, methods: list[str], tasks: list[str]) -> bool:
    """Whether some (method, task) pair has the override ``key``."""
    return any(accepts(m, t, key) for m in methods for t in tasks)


def _layer(
    sets: dict[str, str],
    grids: dict[str, list[str]],
    new_set: dict[str, str],
    new_grid: dict[str, list[str]],
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``new_set``, ``new_grid`` over ``sets``, ``grids``: a key anew replaces it (any spelling)."""
    new = [*new_set, *new_grid]

    def kept(key: str) -> bool:  # no new key names its field: the same, or one is bare (lr)
        bare = [k for k in new if "." not in k or "." not in key]
        return key not in new and all(k.rsplit(".", 1)[-1] != key.rsplit(".", 1)[-1] for k in bare)

    sets = {k: v for k, v in sets.items() if kept(k)} | new_set
    grids = {k: v for k, v in grids.items() if kept(k)} | new_grid
    return sets, grids
