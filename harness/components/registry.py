"""One ``Registry`` type for every kind of component, and the method, task and reference ones.

A component registers under its name in its kind's registry, which checks it against the kind's
protocol (a ``PluginError`` naming where it came from); the harness looks components up by name
and never imports one directly. A registry's first lookup loads the plugins that fill it.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from harness.components.plugins import (
    REGISTRIES,
    PluginError,
    describe_source,
    load_kind,
    load_plugins,
    source_of,
)
from harness.errors import HarnessError

_KEY = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SNAKE_KEY = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)*$")  # a metric's name, an executor option's
MAX_KEY = 64  # the longest name a registry takes (it names files, table rows, flags' values)


class UnknownNameError(HarnessError):
    """A name that no registry entry matches."""


class PresetError(HarnessError):
    """A task preset whose per-method overrides name an unknown method or key."""


class Registry:
    """A name -> component registry of one kind, with "did you mean" lookup.

    Args:
        kind: what it holds, for messages and its plugins (``PLUGIN_PACKAGES``).
        check: ``check(obj)``: what ``obj`` lacks of the kind's protocol, a phrase each.
        protocol: the class that says what the kind must have, named in the refusal.
        prefix: what every key starts with (``ref:`` for the reference predictors).
        key: the form of a name (kebab-case; a metric's is snake_case, as records keep it).
        light: until the plugins are loaded, a lookup loads only this kind's (the executors:
            the parser reads them without importing torch).
    """

    def __init__(
        self,
        kind: str,
        check: Callable[[Any], list[str]],
        protocol: str,
        prefix: str = "",
        key: re.Pattern[str] = _KEY,
        light: bool = False,
    ) -> None:
        self.kind = kind
        self.prefix = prefix
        self._items: dict[str, Any] = {}
        self._check, self._protocol, self._key, self._light = check, protocol, key, light
        REGISTRIES.append(self)

    def _load(self) -> None:
        if self._light:
            load_kind(self.kind)
        else:
            load_plugins()

    def snapshot(self) -> dict[str, Any]:
        """What is registered now, to ``restore`` (a plugin that fails half-way)."""
        return dict(self._items)

    def restore(self, items: dict[str, Any]) -> None:
        """Forget what registered since ``snapshot`` gave ``items``."""
        self._items.clear()
        self._items.update(items)

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator registering ``obj`` under ``name`` (PluginError: name taken, or lacking)."""
        key = self.prefix + name

        def deco(obj: Any) -> Any:
            old = self._items.get(key)
            if old is not None and old != obj:
                raise PluginError(
                    f"{self.kind} '{key}' is registered twice: by {describe_source(old)} and by "
                    f"{describe_source(obj)}; a key names one {self.kind}, rename one of them"
                )
            lacks = key_problems(name, self._key) + self._check(obj)
            if lacks:
                what = f"class {obj.__qualname__}" if isinstance(obj, type) else repr(obj)
                raise PluginError(
                    f"{self.kind} '{key}' ({describe_source(obj)}): {' '.join(what.split())} "
                    f"{'; '.join(lacks)}; see {self._protocol}"
                )
            if isinstance(obj, type):
                obj.name = key
            self._items[key] = obj
            return obj

        return deco

    def get(self, name: str) -> Any:
        """The object registered as ``name``; raises UnknownNameError with suggestions."""
        self._load()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.unknown(name)) from None

    def unknown(self, name: str) -> str:
        """The message for a name that is not registered: the close names, every name."""
        avail = sorted(self._items)
        close = difflib.get_close_matches(name.replace("_", "-").lower(), avail, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        return f"Unknown {self.kind} '{name}'.{hint} Available: {', '.join(avail)}"

    def names(self, pattern: str = "*") -> list[str]:
        """Registered names matching a glob, sorted; ``all`` means ``*``."""
        self._load()
        pattern = "*" if pattern == "all" else pattern
        return sorted(n for n in self._items if fnmatch.fnmatchcase(n, pattern))

    def resolve(self, spec: str | Iterable[str]) -> list[str]:
        """Expand comma-separated names and globs, in order, once each (UnknownNameError: none)."""
        parts = spec.split(",") if isinstance(spec, str) else list(spec)
        out: list[str] = []
        for part in (p.strip() for p in parts):
            if not part:
                continue
            if any(c in part for c in "*?[") or part == "all":
                found = self.names(part)
                if not found:
                    raise UnknownNameError(
                        f"No {self.kind} matches '{part}'. Available: {', '.join(self.names())}"
                    )
            else:
                self.get(part)
                found = [part]
            out.extend(n for n in found if n not in out)
        if not out:
            raise UnknownNameError(f"No {self.kind} given. Available: {', '.join(self.names())}")
        return out

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._items

    def items(self) -> list[tuple[str, Any]]:
        """Every ``(name, registered object)`` pair, sorted by name."""
        self._load()
        return sorted(self._items.items())

    def registered(self) -> Mapping[str, Any]:
        """What is registered so far, read-only, without loading any plugin."""
        return MappingProxyType(self._items)

    def values(self) -> list[Any]:
        """Every registered object, in registration order."""
        self._load()
        return list(self._items.values())


def key_problems(name: str, form: re.Pattern[str] = _KEY) -> list[str]:
    """What is wrong with ``name`` as a registry key of the form ``form``, a phrase each."""
    out = [] if form.match(name) else [f"has a name not of the form {form.pattern}"]
    if len(name) > MAX_KEY:
        out.append(f"has a name of {len(name)} characters (at most {MAX_KEY})")
    return out


def check_method(obj: Any) -> list[str]:
    """What ``obj`` lacks of a registered method, a phrase each, checked without building it.

    A ``Method`` subclass (found among its bases by name) with a frozen dataclass ``config_cls``
    that implements ``cost`` and either ``init_state`` and ``step`` or its own ``forward``; what
    needs a model built is ``harness.authoring.conformance``'s.
    """
    method = "harness.components.method.Method"
    if not isinstance(obj, type):
        return [f"is a {type(obj).__name__}, not a class (subclass {method})"]
    base = base_named(obj, method)
    if base is None:
        wanted = ("config_cls", "cost", "init_state", "step", "forward")
        lacks = [a if a == "config_cls" else f"{a}()" for a in wanted if not hasattr(obj, a)]
        return [f"is not a subclass of {method}" + f": it lacks {', '.join(lacks)}" * bool(lacks)]
    out = []
    params = getattr(obj.config_cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        name = getattr(obj.config_cls, "__name__", repr(obj.config_cls))
        out.append(f"its config_cls {name} is not a frozen dataclass (@dataclass(frozen=True))")
    if obj.cost is base.cost:
        out.append("does not override cost()")
    own_loop = obj.step is not base.step and obj.init_state is not base.init_state
    if obj.forward is base.forward and not own_loop:
        out.append("overrides neither forward() nor init_state() and step()")
    return out


def base_named(cls: type, dotted: str) -> type | None:
    """The class among ``cls``'s bases (itself included) whose dotted name is ``dotted``."""
    return next((c for c in cls.__mro__ if f"{c.__module__}.{c.__qualname__}" == dotted), None)


def needs(base: str, *members: str) -> Callable[[Any], list[str]]:
    """A registry's static check: a class deriving from ``base`` that defines ``members``.

    ``base`` is found among the bases by dotted name (the protocols live above the registry;
    ``""``: any class); a member is defined when it is not the base's (``a|b``: one of them).
    """

    def check(obj: Any) -> list[str]:
        if not isinstance(obj, type):
            return [f"is a {type(obj).__name__}, not a class"]
        top = base_named(obj, base) if base else object
        if top is None:
            return [f"is not a subclass of {base}"]
        return [
            f"does not define {' or '.join(m.split('|'))}"
            for m in members
            if all(getattr(obj, a, None) is getattr(top, a, None) for a in m.split("|"))
        ]

    return check


METHODS = Registry("method", check_method, "harness.components.method.Method")
TASKS = Registry(
    "task",
    needs("harness.components.task.Task", "splits", "input_size", "output_size", "presets"),
    "harness.components.task.Task",
)
# The reference predictors (``harness.references``): ``ref:NAME``, built in or declared by a task.
REFERENCES = Registry(
    "reference",
    needs("harness.references.Reference", "kinds", "fit", "predict|score"),
    "harness.references.Reference",
    prefix="ref:",
)
register_method = METHODS.register
register_task = TASKS.register
register_reference = REFERENCES.register


def method_source(name: str) -> dict[str, str]:
    """``source_of`` the method ``name`` (a record's ``method_source``); UnknownNameError: none."""
    return source_of(METHODS.get(name))
