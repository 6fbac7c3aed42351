"""Registration checks shared by the method and task tests, a scratch registry for the tests of
plugins (``isolated_registry``) and installed entry points faked (``installed``).

A module nobody imported never registers (the "Unknown model" trap). The check runs in a fresh
interpreter that imports only the package, so a module imported by some test file at collection
time cannot hide a missing line in the package's ``__init__``; modules whose names start with an
underscore hold shared pieces and register nothing.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import import_module, metadata
from pathlib import Path
from typing import Any

PROBE = """
import json, sys
import {pkg}
from harness.components.registry import {registry}
print(json.dumps({{k: v.__module__ for k, v in {registry}._items.items()}}))
"""


def public_modules(pkg: str) -> list[str]:
    """The package's module files that must register (no leading underscore; a subpackage, such
    as the kernels' ``baselines/ops``, registers nothing)."""
    path = import_module(pkg).__path__
    return sorted(
        m.name for m in pkgutil.iter_modules(path) if not m.name.startswith("_") and not m.ispkg
    )


def imported_by_init(pkg: str) -> set[str]:
    """Module names the package's ``__init__.py`` imports (``from pkg import a, b``)."""
    tree = ast.parse(Path(import_module(pkg).__file__).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == pkg:
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name.split(".", 1)[1] for a in node.names if a.name.startswith(pkg + ".")}
    return names


def registered_in_fresh_process(pkg: str, registry: str) -> dict[str, str]:
    """``{key: module}`` registered by importing ``pkg`` alone in a new interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(pkg=pkg, registry=registry)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def registration_problems(pkg: str, registry: str) -> list[str]:
    """Every way the package's files and its registry disagree, as messages (empty: all good)."""
    files = public_modules(pkg)
    problems = [] if files else [f"no module files found in {pkg}/"]
    imported = imported_by_init(pkg)
    problems += [f"{pkg}/__init__.py does not import {m}" for m in files if m not in imported]
    registered = registered_in_fresh_process(pkg, registry)
    for mod in files:
        key = mod.replace("_", "-")
        if key not in registered:
            problems.append(f"{pkg}/{mod}.py does not register '{key}' when {pkg} is imported")
        elif registered[key] != f"{pkg}.{mod}":
            problems.append(f"'{key}' is registered from {registered[key]}, not {pkg}.{mod}")
    extra = sorted(set(registered) - {m.replace("_", "-") for m in files})
    problems += [f"'{k}' is registered but matches no file name" for k in extra]
    return problems


# --- a scratch registry for the tests of plugins ------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
_OURS = [ROOT / "harness", ROOT / "baselines", ROOT / "tasks", ROOT / "tests"]


@contextlib.contextmanager
def isolated_registry() -> Iterator[None]:
    """Put back, after the block, all that loading plugins changes.

    Every registry, what ``load_plugins`` remembers (included files, plugin
    distributions, failed entry points, whether it loaded), ``$HARNESS_INCLUDE``, ``sys.path``,
    the modules the plugins added (those outside the project's packages and the installed ones)
    and the caches keyed by method name (``method_code``, ``legacy_values``).
    """
    from harness.components import config, plugins
    from harness.planning import resume

    plugins.load_plugins()
    items = plugins._snapshot()
    saved = (dict(plugins._INCLUDED), dict(plugins._PLUGIN_DISTS), set(plugins._FAILED))
    modules, path = set(sys.modules), list(sys.path)
    env = os.environ.get(plugins.INCLUDE_ENV)
    try:
        yield
    finally:
        plugins._restore(items)
        for name, now in (("_INCLUDED", saved[0]), ("_PLUGIN_DISTS", saved[1])):
            getattr(plugins, name).clear()
            getattr(plugins, name).update(now)
        plugins._FAILED.clear()
        plugins._FAILED.update(saved[2])
        plugins._loaded = True
        for name in set(sys.modules) - modules:
            if _added_by_a_plugin(sys.modules[name]):
                del sys.modules[name]
        sys.path[:] = path
        if env is None:
            os.environ.pop(plugins.INCLUDE_ENV, None)
        else:
            os.environ[plugins.INCLUDE_ENV] = env
        resume.method_code.cache_clear()
        config.legacy_values.cache_clear()
        plugins._installed_distribution.cache_clear()


def _added_by_a_plugin(module: object) -> bool:
    """Whether a module is a plugin's (a file outside the project's packages and installs)."""
    file = getattr(module, "__file__", None)
    if not file:
        return False
    path = Path(file).resolve()
    if any(path.is_relative_to(p) for p in _OURS):
        return False
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return not any(path.is_relative_to(p) for p in prefixes)


# --- entry points, faked: installing a package in a test would write site-packages ---------------


@dataclass
class FakeDist:
    name: str
    version: str

    @property
    def metadata(self) -> dict[str, str]:
        return {"Name": self.name}


@dataclass
class FakeEntryPoint:
    name: str
    value: str
    group: str
    dist: FakeDist

    def load(self):
        return metadata.EntryPoint(self.name, self.value, self.group).load()


def faked_entry_points(eps: list[FakeEntryPoint]) -> Any:
    """``importlib.metadata.entry_points`` with ``eps`` as the harness's installed plugins: the
    harness's groups (``condrnn_harness.*``) give them; any other group, or none, what is really
    installed (other packages look theirs up too: triton's backends, when torch imports it)."""
    real = metadata.entry_points

    def entry_points(group: str | None = None, **kw: Any) -> Any:
        if group is not None and group.startswith("condrnn_harness."):
            return [e for e in eps if e.group == group]
        return real(**kw) if group is None else real(group=group, **kw)

    return entry_points


def installed(monkeypatch, *eps: FakeEntryPoint) -> None:
    """Make ``eps`` the installed entry points and have the registry load again."""
    from harness.components import plugins

    monkeypatch.setattr(metadata, "entry_points", faked_entry_points(list(eps)))
    plugins._loaded = False
