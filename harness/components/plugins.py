"""The plugins that fill the registries (``harness.components.registry``); where entries came from.

``load_plugins()`` imports, once: the built-in packages (``PLUGIN_PACKAGES``, whose ``__init__``
imports every file), the installed entry points (one that fails is said on stderr and skipped),
the included files (one that fails is a ``PluginError``: it was asked for by name), then runs the
``after_load`` checks (docs/plugins.md). A plugin that fails half-way leaves no entry behind
(every registry is snapshotted and restored). The registry imports this module, never the
other way.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, failure_reason


class PluginError(HarnessError):
    """A key registered from two sources, or an included file that cannot be imported."""


REGISTRIES: list[Any] = []  # every registry (``Registry``), for a plugin that fails half-way

# The built-in package or module of each kind: importing it registers its components.
PLUGIN_PACKAGES = {
    "method": "baselines",
    "task": "tasks",
    "reference": "harness.references.predictors",
    "metric": "harness.components.metrics",
    "executor": "harness.executors",
}
# The entry-point group an installed plugin package declares each kind in
# (``[project.entry-points."condrnn_harness.methods"]``); loading an entry point imports its module.
ENTRY_POINT_GROUPS = {k: f"condrnn_harness.{k}s" for k in PLUGIN_PACKAGES}
# The included paths, os.pathsep-separated: set by ``include`` so that worker processes spawned
# by a sweep import them too; a user may set it instead of passing --include.
INCLUDE_ENV = "HARNESS_INCLUDE"

_loaded = False
_AFTER_LOAD: list[Callable[[], None]] = []
_INCLUDED: dict[str, Path] = {}  # module name -> the included file it was imported from
_PLUGIN_DISTS: dict[str, tuple[str, str]] = {}  # top-level module -> (distribution, version)
_FAILED: set[str] = set()  # entry points that failed to import (said once)


def after_load(check: Callable[[], None]) -> Callable[[], None]:
    """Run ``check`` (a module above the registry's) each time the plugins have been loaded."""
    _AFTER_LOAD.append(check)
    return check


def loaded() -> bool:
    """Whether the plugins have been loaded (``load_plugins``) in this process."""
    return _loaded


def load_kind(kind: str) -> None:
    """Until the plugins are loaded, load one kind's built-in module and entry points only."""
    if not _loaded:
        importlib.import_module(PLUGIN_PACKAGES[kind])
        load_entry_points([ENTRY_POINT_GROUPS[kind]])


def load_plugins() -> None:
    """Import the built-in packages, installed plugins and included files, once (PluginError)."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # before the imports: a module that looks a name up must not recurse here
    try:
        for pkg in PLUGIN_PACKAGES.values():
            importlib.import_module(pkg)
        load_entry_points(ENTRY_POINT_GROUPS.values())
        for path in _env_paths():
            for file in _files_of(path):
                _import_file(file)
        for check in _AFTER_LOAD:
            check()
    except BaseException:
        _loaded = False
        raise


# --- plugins: installed packages ------------------------------------------------------------------


def load_entry_points(groups: Iterable[str]) -> None:
    """Load every entry point of ``groups``; one that fails is said once, skipped."""
    from importlib import metadata

    for group in groups:
        eps = sorted(metadata.entry_points(group=group), key=lambda e: (e.value, e.name))
        for ep in eps:
            dist = getattr(ep, "dist", None)
            package = (dist.metadata["Name"], dist.version) if dist is not None else ("?", "?")
            ident = f"{group}:{ep.name}={ep.value}"
            if ident in _FAILED:
                continue
            top = ep.value.partition(":")[0].strip().partition(".")[0]
            _PLUGIN_DISTS.setdefault(top, package)
            before = _snapshot()
            try:
                ep.load()
            except (PluginError, KeyboardInterrupt):
                _restore(before)
                raise
            except BaseException as e:  # SystemExit too: a plugin does not end the command
                _restore(before)
                _FAILED.add(ident)
                sys.stderr.write(
                    f"warning: plugin '{ep.name}' of {package[0]} {package[1]} ({ep.value}) "
                    f"failed to import and is skipped: {failure_reason(e)}\n"
                )


# --- plugins: included files ----------------------------------------------------------------------


def include(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Import the components of ``.py`` files or folders of them (``--include``); the files.

    A folder gives its ``.py`` files but ``test_*.py`` and ``_*.py``, in name order. They are
    imported when the registry loads (at once if it has) and added to ``$HARNESS_INCLUDE``, so
    that a sweep's worker processes import them too. PluginError: a bad path or import.
    """
    new = [Path(p).expanduser().resolve() for p in paths]
    files = [f for p in new for f in _files_of(p)]
    if _loaded:  # else they are imported when the registry loads
        before = _snapshot()
        try:
            for file in files:
                _import_file(file)
            for check in _AFTER_LOAD:
                check()
        except BaseException:
            _restore(before)
            raise
    known = _env_paths()
    merged = known + [p for p in dict.fromkeys(new) if p not in known]
    os.environ[INCLUDE_ENV] = os.pathsep.join(str(p) for p in merged)
    return files


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Forget, after the block, what the files it includes register, import and set."""
    load_plugins()
    items, included, env = _snapshot(), dict(_INCLUDED), os.environ.get(INCLUDE_ENV)
    path, modules = list(sys.path), set(sys.modules)
    try:
        yield
    finally:
        _restore(items)
        folders = {f.parent for name, f in _INCLUDED.items() if name not in included}
        _INCLUDED.clear()
        _INCLUDED.update(included)
        for name in set(sys.modules) - modules:
            file = file_of(sys.modules[name])
            if file is not None and any(file.is_relative_to(d) for d in folders):
                del sys.modules[name]
        sys.path[:] = path
        if env is None:
            os.environ.pop(INCLUDE_ENV, None)
        else:
            os.environ[INCLUDE_ENV] = env


def _env_paths() -> list[Path]:
    raw = os.environ.get(INCLUDE_ENV, "")
    return list(dict.fromkeys(Path(p).expanduser().resolve() for p in raw.split(os.pathsep) if p))


def _files_of(path: Path) -> list[Path]:
    """The files an included path gives (a ``.py`` file, or a folder's importable files)."""
    if path.is_dir():
        files = sorted(
            p
            for p in path.glob("*.py")
            if p.is_file() and not p.name.startswith(("_", "test_")) and p.name != "conftest.py"
        )
        if not files:
            raise PluginError(
                f"--include {path}: no .py file to import there (test_*.py and _*.py are not "
                "imported)"
            )
        return files
    if not path.exists():
        raise PluginError(f"--include {path}: no such file or folder")
    if path.suffix != ".py":
        raise PluginError(f"--include {path}: expects a .py file or a folder of them")
    return [path]


def _import_file(file: Path) -> None:
    """Import one included file as the top-level module named after it (once)."""
    import importlib.util

    name = file.stem
    if not name.isidentifier():
        raise PluginError(f"--include {file}: '{name}' is not a Python module name; rename it")
    mod = sys.modules.get(name)
    if mod is not None:
        if file_of(mod) == file:  # imported already (by its own test, or included before)
            _INCLUDED[name] = file
            return
        raise PluginError(
            f"--include {file}: a module named '{name}' is already imported from "
            f"{file_of(mod) or 'elsewhere'}; rename the file"
        )
    found = importlib.util.find_spec(name)
    if found is not None and found.origin and Path(found.origin).resolve() != file:
        raise PluginError(
            f"--include {file}: its module name '{name}' is taken by {found.origin}; rename "
            "the file"
        )
    if str(file.parent) not in sys.path:  # the files it imports from its folder (``_*.py``)
        sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _INCLUDED[name] = file
    before = _snapshot()
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[name]
        del _INCLUDED[name]
        _restore(before)
        if isinstance(e, (PluginError, KeyboardInterrupt)):
            raise
        # SystemExit too: an included file does not end the command (nor give its exit code)
        raise PluginError(f"--include {file} failed to import: {failure_reason(e)}") from None


def file_of(module: Any) -> Path | None:
    """The resolved source file of a module, or None (a namespace package, a built-in)."""
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def _snapshot() -> dict[Any, dict[str, Any]]:
    return {r: r.snapshot() for r in REGISTRIES}


def _restore(snapshot: dict[Any, dict[str, Any]]) -> None:
    """Forget what registered since ``snapshot`` (a plugin that failed half-way)."""
    for registry, items in snapshot.items():
        registry.restore(items)


# --- where an entry came from -------------------------------------------------------------------


def source_of(obj: Any) -> dict[str, str]:
    """Where a registered class comes from, as records keep it (``method_source``).

    ``{"kind": "builtin"}``, ``{"kind": "entry-point", "package": NAME, "version": V}``,
    ``{"kind": "include", "path": P, "sha256": D}`` or ``{"kind": "module", "module": M}``.
    """
    module = getattr(obj, "__module__", None) or "?"
    top = module.partition(".")[0]
    if top in {p.partition(".")[0] for p in PLUGIN_PACKAGES.values()}:
        return {"kind": "builtin"}
    if module in _INCLUDED:
        path = _INCLUDED[module]
        digest = "unreadable"  # removed since it was imported: the record says so
        with contextlib.suppress(OSError):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return {"kind": "include", "path": str(path), "sha256": digest}
    dist = _PLUGIN_DISTS.get(top) or _installed_distribution(top)
    if dist is not None:
        return {"kind": "entry-point", "package": dist[0], "version": dist[1]}
    return {"kind": "module", "module": module}


def describe_source(obj: Any) -> str:
    """``source_of`` in words, for messages: ``built-in module baselines.x``, ``--include P``..."""
    src, module = source_of(obj), getattr(obj, "__module__", "?")
    return {
        "builtin": f"built-in module {module}",
        "include": f"--include {src.get('path')}",
        "entry-point": f"plugin package {src.get('package')} {src.get('version')} "
        f"(module {module})",
    }.get(src["kind"], f"module {module}")


@functools.cache
def _installed_distribution(top: str) -> tuple[str, str] | None:
    """The installed distribution providing the top-level module ``top``, with its version."""
    from importlib import metadata

    names = metadata.packages_distributions().get(top) or []
    for dist_name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return dist_name, metadata.version(dist_name)
    return None


def included_file(module: str) -> Path | None:
    """The file an included module (``include``) was imported from; None for any other."""
    return _INCLUDED.get(module)
