"""Name -> class registries for methods and tasks.

Methods (``baselines/``) and tasks (``tasks/``) register themselves with a decorator; the harness
looks them up by name and never imports one directly. ``load_plugins()`` imports the two packages,
whose ``__init__`` modules import every file explicitly, so a file nobody imported cannot silently
miss its registration (tests check that every file registered under its own name). It then checks
that every task preset's per-method overrides name registered methods and their keys.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import re
from collections.abc import Callable, Iterable
from typing import Any

from harness.errors import HarnessError

_KEY = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class UnknownNameError(HarnessError):
    """A name that no registry entry matches."""


class PresetError(HarnessError):
    """A task preset whose per-method overrides name an unknown method or key."""


class Registry:
    """A kebab-case name -> object registry with "did you mean" lookup.

    Args:
        kind: what the registry holds, used in messages ("method", "task").
        plugins: look up only once the method and task packages are imported
            (``load_plugins``); False for a registry whose entries register themselves when
            their own module is imported (the executors).
    """

    def __init__(self, kind: str, plugins: bool = True) -> None:
        self.kind = kind
        self._items: dict[str, Any] = {}
        self._plugins = plugins

    def _load(self) -> None:
        if self._plugins:
            load_plugins()

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator registering ``obj`` under ``name`` and setting ``obj.name``."""
        if not _KEY.match(name):
            raise ValueError(f"{self.kind} key {name!r} is not kebab-case")

        def deco(obj: Any) -> Any:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            obj.name = name
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> Any:
        """The object registered as ``name``; raises UnknownNameError with suggestions."""
        self._load()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self._unknown(name)) from None

    def _unknown(self, name: str) -> str:
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
        """Expand comma-separated names and globs, keeping order and dropping repeats.

        A plain name that is not registered, or a glob that matches nothing, is an error.
        """
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


METHODS = Registry("method")
TASKS = Registry("task")
register_method = METHODS.register
register_task = TASKS.register

# The packages whose modules register the methods and the tasks (their __init__ imports each).
PLUGIN_PACKAGES = {"method": "baselines", "task": "tasks"}

_loaded = False
_AFTER_LOAD: list[Callable[[], None]] = []


def after_load(check: Callable[[], None]) -> Callable[[], None]:
    """Run ``check`` each time the plugins have been loaded (``load_plugins``).

    How a module above the registry checks what registered (``harness.config.check_presets``)
    without the registry importing it.
    """
    _AFTER_LOAD.append(check)
    return check


def load_plugins() -> None:
    """Import the ``baselines`` and ``tasks`` packages once, which registers everything.

    Raises:
        HarnessError: a check registered with ``after_load`` failed (``PresetError``: a task
            preset names an unknown method or key); every later call raises it again.
    """
    global _loaded
    if _loaded:
        return
    _loaded = True  # before the imports: a module that looks a name up must not recurse here
    try:
        for pkg in PLUGIN_PACKAGES.values():
            importlib.import_module(pkg)
        for check in _AFTER_LOAD:
            check()
    except BaseException:
        _loaded = False
        raise
