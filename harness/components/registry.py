"""One ``Registry`` type for every kind of component, and the plugins that fill them.

A component (a method, a task, a reference predictor, a metric, an executor) registers itself
under its name in its kind's registry (``METHODS``, ``TASKS``, ``REFERENCES`` here,
``harness.components.metrics.METRICS``, ``harness.executors.EXECUTORS``), which checks it against
the kind's protocol; the harness looks components up by name and never imports one directly.
``load_plugins()`` imports, once, when a registry is first read:

1. the built-in packages (``PLUGIN_PACKAGES``), whose ``__init__`` modules import every file
   explicitly, so a file nobody imported cannot silently miss its registration (tests check that
   every file registered under its own name);
2. the installed plugins: every entry point of the groups ``condrnn_harness.<kind>s``
   (``ENTRY_POINT_GROUPS``) is loaded, which imports its module. A plugin that fails to import
   (an exception, or ``sys.exit``) is skipped with one line on stderr naming it; the rest work;
3. the files named by ``include`` (``--include PATH``, ``include = [...]`` in a sweep file, or
   ``$HARNESS_INCLUDE``): ``.py`` files, or folders whose ``.py`` files are all imported (except
   ``test_*.py`` and the shared pieces ``_*.py``, which the others import). Each is imported as a
   top-level module named after its file, with its folder on ``sys.path``. A file that fails to
   import (an exception, or ``sys.exit``) is an error (``PluginError``): it was asked for by
   name.

A key registered from two sources (a plugin's key that a built-in, another plugin or an included
file already has) is a ``PluginError`` naming both; so is a component that lacks what its kind
must have (``check_method``, ``needs``), wherever it registers from. Then every task preset's
per-method overrides are checked against the registered methods and their keys. ``source_of``
says where an entry came from (records keep a method's as ``method_source``).
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import functools
import hashlib
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.errors import HarnessError, failure_reason

_KEY = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SNAKE_KEY = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)*$")  # a metric's name, an executor option's
MAX_KEY = 64  # the longest name a registry takes (it names files, table rows, flags' values)


class UnknownNameError(HarnessError):
    """A name that no registry entry matches."""


class PresetError(HarnessError):
    """A task preset whose per-method overrides name an unknown method or key."""


class PluginError(HarnessError):
    """A key registered from two sources, or an included file that cannot be imported."""


class Registry:
    """A name -> component registry of one kind, with "did you mean" lookup.

    Args:
        kind: what the registry holds, used in messages and to find its built-in module
            (``PLUGIN_PACKAGES``) and entry-point group (``ENTRY_POINT_GROUPS``).
        check: ``check(obj)``: what ``obj`` lacks of the kind's protocol, a phrase each; the
            registry refuses it in one line (``PluginError``) naming where it came from.
        protocol: the class that says what the kind must have, for that line.
        prefix: what every key starts with (``ref:`` for the reference predictors).
        key: the form of a name (kebab-case; a metric's is snake_case, as records keep it).
        light: until the plugins are loaded, a lookup loads only the kind's built-in module and
            entry points, not the torch-importing rest (the executors: the parser reads them).
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
        _REGISTRIES.append(self)

    def _load(self) -> None:
        if self._light and not _loaded:
            importlib.import_module(PLUGIN_PACKAGES[self.kind])
            _load_entry_points([ENTRY_POINT_GROUPS[self.kind]])
        else:
            load_plugins()

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator registering ``obj`` under ``name`` (and setting a class's ``name``).

        Raises:
            PluginError: ``name`` is registered already by another object (the message names
                where each comes from: a built-in module, a plugin package, an included file),
                or ``obj`` lacks what the kind must have, its name's form and length
                (``key_problems``) included.
        """
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

    def registered(self) -> Mapping[str, Any]:
        """What is registered so far, read-only, without loading any plugin.

        For code that runs while they load, or that must not load them.
        """
        return MappingProxyType(self._items)

    def values(self) -> list[Any]:
        """Every registered object, in registration order."""
        self._load()
        return list(self._items.values())


def key_problems(name: str, form: re.Pattern[str] = _KEY) -> list[str]:
    """What is wrong with ``name`` as a registry key of the form ``form`` (kebab-case).

    Returns:
        A phrase each (``has a name not of the form ...``, ``has a name of 300 characters (at
        most 64)``); empty when nothing is.
    """
    out = [] if form.match(name) else [f"has a name not of the form {form.pattern}"]
    if len(name) > MAX_KEY:
        out.append(f"has a name of {len(name)} characters (at most {MAX_KEY})")
    return out


def check_method(obj: Any) -> list[str]:
    """What ``obj`` lacks of what a registered method must have, checked without building it.

    A method is a ``harness.components.method.Method`` subclass (found among its bases by name, as
    ``needs`` finds a protocol) whose ``config_cls`` is a frozen dataclass, that implements
    ``cost`` and either ``init_state`` and ``step`` or its own ``forward``. The registry refuses a
    class that lacks any of these, before any run starts; what needs a model built (shapes, costs,
    gradients) is ``harness.authoring.conformance``'s.

    Returns:
        One phrase per missing part (``does not override cost()``); empty when nothing lacks.
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

    ``base``: a class's dotted name, found among the object's bases by name, as the protocols
    live above the registry (``""``: any class). A member is defined when the class's is not the
    base's (``a|b``: one of them).
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


_REGISTRIES: list[Registry] = []  # every registry, for a plugin that fails half-way (_restore)
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
    """Run ``check`` each time the plugins have been loaded (``load_plugins``).

    How a module above the registry checks what registered
    (``harness.components.config.check_presets``) without the registry importing it.
    """
    _AFTER_LOAD.append(check)
    return check


def load_plugins() -> None:
    """Import the built-in packages, the installed plugins and the included files, once.

    Raises:
        PluginError: a key registered from two sources, or an included file that cannot be
            imported.
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
        _load_entry_points(ENTRY_POINT_GROUPS.values())
        for path in _env_paths():
            for file in _files_of(path):
                _import_file(file)
        for check in _AFTER_LOAD:
            check()
    except BaseException:
        _loaded = False
        raise


# --- plugins: installed packages ------------------------------------------------------------------


def _load_entry_points(groups: Iterable[str]) -> None:
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
    """Import the components of ``.py`` files or folders of them (``--include``).

    A folder gives each of its ``.py`` files except ``test_*.py`` and ``_*.py``, in name order.
    The paths are imported when the registry loads (at once if it has loaded) and are added to
    ``$HARNESS_INCLUDE``, so that the worker processes of a sweep import them too.

    Args:
        paths: files or folders (relative paths are taken from the current directory).

    Returns:
        The files they give.

    Raises:
        PluginError: a path that does not exist, a file that is not ``.py``, a folder with no
            file to import, or (when the registry has loaded) a file that cannot be imported.
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
    """Forget, after the block, what the files it includes (``include``) register and import.

    How ``harness docs`` runs each block's command in one process as its command line would
    alone: afterwards the registries, the included files, ``$HARNESS_INCLUDE``, ``sys.path`` and
    the modules imported from the included files' folders are as before.
    """
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
            file = _file_of(sys.modules[name])
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
        if _file_of(mod) == file:  # imported already (by its own test, or included before)
            _INCLUDED[name] = file
            return
        raise PluginError(
            f"--include {file}: a module named '{name}' is already imported from "
            f"{_file_of(mod) or 'elsewhere'}; rename the file"
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


def _file_of(module: Any) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def _snapshot() -> dict[Registry, dict[str, Any]]:
    return {r: dict(r._items) for r in _REGISTRIES}


def _restore(snapshot: dict[Registry, dict[str, Any]]) -> None:
    """Forget what registered since ``snapshot`` (a plugin that failed half-way)."""
    for registry, items in snapshot.items():
        registry._items.clear()
        registry._items.update(items)


# --- where an entry came from -------------------------------------------------------------------


def source_of(obj: Any) -> dict[str, str]:
    """Where a registered class comes from, as records keep it (``method_source``).

    Returns:
        ``{"kind": "builtin"}`` (the built-in packages), ``{"kind": "entry-point", "package":
        NAME, "version": V}`` (an installed distribution), ``{"kind": "include", "path": P,
        "sha256": D}`` (an included file and the digest of its content), or ``{"kind":
        "module", "module": M}`` (imported some other way, e.g. by a test or a notebook).
    """
    module = getattr(obj, "__module__", None) or "?"
    top = module.partition(".")[0]
    if top in {p.partition(".")[0] for p in PLUGIN_PACKAGES.values()}:
        return {"kind": "builtin"}
    if module in _INCLUDED:
        path = _INCLUDED[module]
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:  # removed since it was imported: the record says so
            digest = "unreadable"
        return {"kind": "include", "path": str(path), "sha256": digest}
    dist = _PLUGIN_DISTS.get(top) or _installed_distribution(top)
    if dist is not None:
        return {"kind": "entry-point", "package": dist[0], "version": dist[1]}
    return {"kind": "module", "module": module}


def method_source(name: str) -> dict[str, str]:
    """``source_of`` the method ``name`` (a record's ``method_source``); UnknownNameError: none."""
    return source_of(METHODS.get(name))


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
        try:
            return dist_name, metadata.version(dist_name)
        except metadata.PackageNotFoundError:
            continue
    return None


def included_file(module: str) -> Path | None:
    """The file an included module (``include``) was imported from; None for any other."""
    return _INCLUDED.get(module)


def file_of(module: Any) -> Path | None:
    """The resolved source file of a module, or None (a namespace package, a built-in)."""
    return _file_of(module)
