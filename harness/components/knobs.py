"""The valid values of a config field, declared next to it: ``knob``, ``Bounds``, the limits.

``resolve`` checks every run of a sweep against them before the first starts; methods and tasks
import these names from ``harness.components.config``.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import typing
from dataclasses import dataclass, field
from typing import Any

from harness.errors import ConfigError

# The most stacked layers (and highway micro-steps) a model may have: far beyond any seed paper
# (2 layers, depth 40), and below the depth at which a training graph's recursive teardown
# overflows the C++ stack (SIGABRT, no record: 100,000 layers did, after 100 s of training).
MAX_LAYERS = 64
MAX_SEED = 2**32 - 1  # numpy's seeds; torch's would go to 2**64 - 1
MAX_WIDTH = 65_536  # units of a layer (hidden, embedding, hypernetwork): 54x S-EI's PTB 1,200
# The sizes of a task's data: the longest sequence a task may give a model (and the most tokens a
# language-model window may hold), the most sequences in one split, and the most time steps all
# splits of a generated task may hold together. 80x the longest preset sequence (high-res
# frequency discrimination, 1,250) and 100x the largest generated data (7.5 million steps), yet a
# run at these limits needs tens of GiB, not terabytes.
MAX_SEQ_LEN = 100_000
MAX_SPLIT = 10_000_000
MAX_DATA_STEPS = 1_000_000_000
# The largest weight of a method's regulariser (lambda, gamma, beta): far above any paper's (S-SA
# sweeps SA-RNN's lambda up to 5), far below what would overflow a float32 loss.
MAX_PENALTY = 1e6


# --- the valid values of a config field, declared next to it -----------------------------------

NO_LEGACY = object()  # knob(legacy=...) not given: every record holds the field


@dataclass(frozen=True)
class Bounds:
    """The values a config field accepts: an interval (either end open or closed) or a set."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None

    def admits(self, value: Any) -> bool:
        """Whether ``value`` lies within the bounds (a non-finite number never does)."""
        if self.choices is not None:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        ops = (operator.ge, operator.gt, operator.le, operator.lt)
        ends = zip((self.ge, self.gt, self.le, self.lt), ops, strict=True)
        return all(end is None or op(value, end) for end, op in ends)

    def describe(self, kind: type | None = None) -> str:
        """``an integer in [1, 4096]``, ``a number in (0, 1)``, ``one of after, before``."""
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        noun = "an integer" if kind is int else "a number"

        def num(x: float) -> str:  # an integer bound in full: 4294967295, not 4.29497e+09
            return str(int(x)) if kind is int and float(x).is_integer() else f"{x:g}"

        low = "(-inf" if self.gt is None else f"({num(self.gt)}"
        low = low if self.ge is None else f"[{num(self.ge)}"
        high = "inf)" if self.lt is None else f"{num(self.lt)})"
        high = high if self.le is None else f"{num(self.le)}]"
        return f"{noun} in {low}, {high}"


def knob(
    default: Any,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[Any, ...] | None = None,
    legacy: Any = NO_LEGACY,
) -> Any:
    """A config dataclass field with its valid values: ``knob(32, ge=1, le=65_536)``.

    ``ge``, ``gt``, ``le``, ``lt`` bound an interval, ``choices`` a set (booleans need none).
    ``legacy``: for a field added after records existed, the value that reproduces the code
    before it, which a record lacking the field reads as (``records.migrate``). Bounds that tie
    fields together stay in ``__post_init__``, after its ``check_knobs`` call.
    """
    meta: dict[str, Any] = {}
    if choices is not None or any(b is not None for b in (ge, gt, le, lt)):
        meta["bounds"] = Bounds(ge, gt, le, lt, tuple(choices) if choices else None)
    if legacy is not NO_LEGACY:
        meta["legacy"] = legacy
    return field(default=default, metadata=meta)


def bounds_of(cls_or_obj: Any, name: str) -> Bounds | None:
    """The ``Bounds`` a config field declares (None: a boolean, or none declared)."""
    f = next((f for f in dataclasses.fields(cls_or_obj) if f.name == name), None)
    return None if f is None else f.metadata.get("bounds")


def check_knob(cls_or_obj: Any, name: str, value: Any, key: str, owner: str = "") -> None:
    """ConfigError (``KEY=VALUE is out of range for OWNER: ...``) outside ``name``'s bounds."""
    b = bounds_of(cls_or_obj, name)
    if b is None or b.admits(value):
        return
    hints = typing.get_type_hints(cls_or_obj if isinstance(cls_or_obj, type) else type(cls_or_obj))
    kind = hints.get(name)
    where = f" for {owner}" if owner else ""
    if isinstance(value, (str, float)):  # a string quoted, a float in short
        value = f"'{value}'" if isinstance(value, str) else f"{value:g}"
    raise ConfigError(f"{key}={value} is out of range{where}: expected {b.describe(kind)}")


def check_knobs(obj: Any, section: str, owner: str = "") -> None:
    """``check_knob`` for every field of a config dataclass instance (``section.field`` keys)."""
    for f in dataclasses.fields(obj):
        check_knob(obj, f.name, getattr(obj, f.name), f"{section}.{f.name}", owner)


def check_data_steps(owner: str, formula: str, steps: int) -> None:
    """ConfigError when a generated task's splits would hold over ``MAX_DATA_STEPS`` steps."""
    if steps > MAX_DATA_STEPS:
        raise ConfigError(
            f"{owner}: {formula} = {steps:,} time steps, more than {MAX_DATA_STEPS:,}; use fewer "
            "or shorter sequences"
        )
