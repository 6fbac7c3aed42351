"""The seed papers' published tables, read from a data file, for the "paper vs harness" tables.

The numbers live in ``paper_results.toml``, package data of the task package (layout:
docs/papers.md); the file states values as the papers print them, with a scale per column,
multiplied out here into the harness's units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.components.plugins import PLUGIN_PACKAGES
from harness.errors import HarnessError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# The package whose data holds the default file: the task plugins' package.
DATA_PACKAGE = PLUGIN_PACKAGES["task"]
DATA_FILE = "paper_results.toml"


@dataclass(frozen=True)
class PaperRow:
    """One row of a paper table: by column, ``values`` and ``std`` in the harness's units."""

    method: str  # our method key
    label: str  # what the paper prints
    values: dict[str, float]
    std: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # its knobs: a variant with all fills it
    printed: dict[str, str] = field(default_factory=dict)  # as the paper prints them
    printed_std: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PaperTable:
    """A seed table; ``columns`` are keys of ``values`` (metrics, ``flops``, ``params``)."""

    key: str
    task: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[PaperRow, ...]
    note: str = ""
    scale: dict[str, int] = field(default_factory=dict)  # printed in 10^k: ``flops: 4``, "x10^4"
    # the paper's setting shared by all rows, keyed like ``--set`` (``train.lr``, ``hidden_size``)
    # plus ``seeds`` (how many runs a std is over); a string (``"n.s."``: not stated) shown as is
    setting: dict[str, Any] = field(default_factory=dict)
    spread: str = "± x"  # how the paper prints a row's spread (``(x)``, ``± x``: x the number)
    spread_name: str = ""  # what the paper calls it (its ``[papers]`` entry; "": prints none)

    def spread_text(self, std: str) -> str:
        """A printed spread as the paper prints it: ``(0.8)``, ``± 0.01``."""
        return self.spread.replace("x", std)


class _Malformed(Exception):
    """A problem in the file; ``load_tables`` adds the file name and raises HarnessError."""


def _keys(obj: dict[str, Any], where: str, required: set[str], optional: set[str]) -> None:
    missing = sorted(required - obj.keys())
    unknown = sorted(obj.keys() - required - optional)
    if missing:
        raise _Malformed(f"{where}: missing entry {', '.join(map(repr, missing))}")
    if unknown:
        raise _Malformed(f"{where}: unknown entry {', '.join(map(repr, unknown))}")


_KINDS = {dict: "table", list: "list", str: "string"}


def _typed(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    if not isinstance(value, kind):
        name = _KINDS.get(kind, "string, number or boolean")
        raise _Malformed(f"{where}: {what} must be a {name}")
    return value


def _number(value: Any, where: str) -> float:
    """A finite number; booleans (a "Solved" Yes / No) become 1 / 0; a string is parsed."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str):  # a number written as a string keeps its printed form ("0.50")
        try:
            value = float(value)
        except ValueError:
            raise _Malformed(f"{where}: {value!r} is not a finite number") from None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Malformed(f"{where}: {value!r} is not a finite number")
    return value


def printed(value: Any) -> str:
    """A number of the file as the paper prints it: a string as written, ``Yes`` / ``No``."""
    if isinstance(value, bool):
        return "Yes" if value else "No"
    return value if isinstance(value, str) else str(value)


def _numbers(
    raw: Any, where: str, columns: tuple[str, ...], scale: dict[str, float]
) -> tuple[dict[str, float], dict[str, str]]:
    """Printed numbers by column, multiplied by the column's scale; and their printed text."""
    _typed(raw, dict, where, "it")
    out, text = {}, {}
    for k, v in raw.items():
        if k not in columns:
            raise _Malformed(f"{where}: '{k}' is not one of the table's columns")
        x = _number(v, f"{where}.{k}")
        out[k] = x * scale[k] if k in scale else x
        text[k] = printed(v)
    return out, text


def _row(raw: Any, where: str, columns: tuple[str, ...], scale: dict[str, float]) -> PaperRow:
    _typed(raw, dict, where, "a row")
    _keys(raw, where, {"method", "label", "values"}, {"std", "config"})
    values, text = _numbers(raw["values"], f"{where}.values", columns, scale)
    if missing := [c for c in columns if c not in values]:
        raise _Malformed(f"{where}.values: no value for column {', '.join(missing)}")
    config = _typed(raw.get("config", {}), dict, where, "config")
    for k, v in config.items():
        _typed(v, (str, int, float, bool), f"{where}.config.{k}", "its value")
    std, std_text = _numbers(raw.get("std", {}), f"{where}.std", columns, scale)
    return PaperRow(
        _typed(raw["method"], str, where, "method"),
        _typed(raw["label"], str, where, "label"),
        values,
        std,
        dict(config),
        text,
        std_text,
    )


def _table(raw: Any, where: str, papers: dict[str, Any]) -> PaperTable:
    _typed(raw, dict, where, "a table")
    required = {"key", "task", "title", "source", "columns", "row"}
    _keys(raw, where, required, {"scale", "note", "setting"})
    where = f"{where} ({raw['key']!r})"
    source = _typed(raw["source"], dict, where, "source")
    _keys(source, f"{where}.source", {"paper", "where"}, set())
    if source["paper"] not in papers:
        raise _Malformed(f"{where}.source: paper {source['paper']!r} is not under [papers]")
    columns = _typed(raw["columns"], list, where, "columns")
    if not columns or not all(isinstance(c, str) for c in columns):
        raise _Malformed(f"{where}: columns must be a non-empty list of measure keys")
    columns = tuple(columns)
    scale = {
        k: _number(v, f"{where}.scale.{k}")
        for k, v in _typed(raw.get("scale", {}), dict, where, "scale").items()
    }
    if unknown := sorted(scale.keys() - set(columns)):
        raise _Malformed(f"{where}.scale: '{unknown[0]}' is not one of the table's columns")
    for k, v in scale.items():
        if v <= 0 or not math.isclose(math.log10(v), round(math.log10(v))):
            raise _Malformed(f"{where}.scale.{k}: {v!r} is not a power of ten")
    setting = _typed(raw.get("setting", {}), dict, where, "setting")
    for k, v in setting.items():
        _typed(v, (str, int, float, bool), f"{where}.setting.{k}", "its value")
    rows = _typed(raw["row"], list, where, "row")
    out = tuple(_row(r, f"{where} row {j + 1}", columns, scale) for j, r in enumerate(rows))
    paper = f"[papers.{source['paper']}]"
    spread = _typed(papers[source["paper"]], dict, paper, "it").get("spread")
    if spread is not None:
        _keys(_typed(spread, dict, paper, "spread"), f"{paper}.spread", {"form", "name"}, set())
        if not all(isinstance(spread[k], str) for k in spread) or "x" not in spread["form"]:
            raise _Malformed(f"{paper}.spread: form (with x for the number) and name are strings")
    elif any(r.std for r in out):
        raise _Malformed(f"{where}: its rows print spreads, but {paper} names none (spread)")
    spread = spread or {"form": "± x", "name": ""}
    names = [_typed(raw[k], str, where, k) for k in ("key", "task", "title")]
    note = _typed(raw.get("note", ""), str, where, "note")
    powers = {k: round(math.log10(v)) for k, v in scale.items()}
    form, name = spread["form"], spread["name"]
    return PaperTable(*names, columns, out, note, powers, dict(setting), form, name)


def default_path() -> Path:
    """The file shipped with the task package."""
    from importlib.resources import files

    return Path(str(files(DATA_PACKAGE) / DATA_FILE))


def load_tables(path: str | Path | None = None) -> tuple[PaperTable, ...]:
    """Every table of a published-results file (None: the shipped one), in the harness's units.

    HarnessError (one line naming the file and the problem) if it cannot be read or is malformed.
    """
    return _load(Path(path) if path is not None else default_path())


@lru_cache(maxsize=8)
def _load(path: Path) -> tuple[PaperTable, ...]:
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
        _keys(data, "top level", {"papers", "table"}, set())
        papers = _typed(data["papers"], dict, "[papers]", "it")
        tables = _typed(data["table"], list, "top level", "table")
        out = tuple(_table(t, f"table {i + 1}", papers) for i, t in enumerate(tables))
    except OSError as e:
        raise HarnessError(f"cannot read the published results {path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, _Malformed) as e:
        raise HarnessError(f"malformed published results {path}: {e}") from None
    keys = [t.key for t in out]
    if dupes := sorted({k for k in keys if keys.count(k) > 1}):
        raise HarnessError(f"malformed published results {path}: table key {dupes[0]!r} twice")
    return out


def tables_for(task: str, path: str | Path | None = None) -> list[PaperTable]:
    """The published tables that cover ``task`` (``path``: as ``load_tables``)."""
    return [t for t in load_tables(path) if t.task == task]
