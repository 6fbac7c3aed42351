"""The import graph of harness/, baselines/ and tasks/: no cycles, and no import of a project
module inside a function unless it defers a heavy dependency (and is listed in ``DEFERRED``).

The graph holds every import of a project module, at module level (a ``TYPE_CHECKING`` block
included) and inside functions, so a cycle kept alive by an import inside a function is still
a cycle here. An import inside a function is allowed only to keep a light module light: the
command line's parser (``tests/test_cli_parser.py``), the data layer, the environment and the
reports must not load torch (or pandas, matplotlib) until a command needs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "baselines", "tasks")

# importer -> imported: the heavy dependency the import inside a function defers (what the
# imported module loads and the importer does not).
DEFERRED = {
    ("harness.api", "harness.bench.speedup"): "torch",
    ("harness.api", "harness.bench.speedup_report"): "torch",
    ("harness.api", "harness.bench.suite"): "torch",
    ("harness.bench.excerpts", "harness.bench.timing_report"): "torch",
    ("harness.authoring.conformance", "harness.bench.speedup"): "torch",
    ("harness.authoring.conformance", "harness.components.flops"): "torch",
    ("harness.authoring.conformance", "harness.components.method"): "torch",
    ("harness.authoring.conformance", "harness.components.task"): "torch",
    ("harness.authoring.conformance", "harness.training.train"): "torch",
    ("harness.executors.base", "harness.training.train"): "torch",
    ("harness.reporting.paper", "harness.reporting.figures"): "numpy and matplotlib",
    ("harness.reporting.references", "harness.reporting.figstyle"): "numpy and matplotlib",
    ("harness.reporting.reports", "harness.reporting.figures"): "numpy and matplotlib",
    ("harness.planning.sweep", "harness.components.flops"): "torch",
    ("harness.planning.sweep", "harness.training.train"): "torch",
}


def _modules() -> dict[str, Path]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    out = {}
    for p in files:
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _targets(node: ast.AST, module: str, is_package: bool, mods: dict) -> set[str]:
    """The project modules an import statement loads (a package's submodules by name)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in mods}
    base = node.module or ""
    if node.level:
        up = (module if is_package else module.rpartition(".")[0]).split(".")
        up = up[: len(up) - (node.level - 1)]
        base = ".".join(up + ([base] if base else []))
    subs = {f"{base}.{a.name}" for a in node.names} & mods.keys()
    names_left = any(f"{base}.{a.name}" not in mods for a in node.names)
    return subs | ({base} if base in mods and names_left else set())


def import_graph() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """Every project module's imports of project modules, and those made inside functions."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    inside: set[tuple[str, str]] = set()
    for m, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_function = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            found = _targets(node, m, path.name == "__init__.py", mods) - {m}
            graph[m] |= found
            if id(node) in in_function:
                inside |= {(m, t) for t in found}
    return graph, inside


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_project_has_no_import_cycle():
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_a_project_module_is_imported_inside_a_function_only_to_defer_a_heavy_dependency():
    _, inside = import_graph()
    unlisted = sorted(inside - DEFERRED.keys())
    assert not unlisted, (
        "imports inside functions that are not in DEFERRED (move them to the module top; if "
        f"one must defer a heavy dependency, list it with the dependency): {unlisted}"
    )
    stale = sorted(DEFERRED.keys() - inside)
    assert not stale, f"DEFERRED lists imports that are no longer made inside a function: {stale}"


def test_the_cycle_finder_finds_a_cycle_through_an_import_inside_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# The bottom layer: the records, the store and its claims, the file-system facts and the errors.
PERSISTENCE = {
    "harness.errors",
    "harness.persistence.files",
    "harness.persistence.records",
    "harness.persistence.store",
    "harness.persistence.claims",
}


def test_persistence_sits_at_the_bottom_and_imports_no_config_data_or_registry():
    graph, _ = import_graph()
    for module in sorted(PERSISTENCE):
        reached, todo = set(), [module]
        while todo:
            for m in graph[todo.pop()] - reached:
                reached.add(m)
                todo.append(m)
        above = sorted(reached - PERSISTENCE - {"harness"})
        assert not above, f"{module} imports {above}: persistence imports only persistence"


def package_of(module: str) -> str:
    """The layer a module belongs to: its package under ``harness`` (``harness.planning``), a
    top-level module of ``harness`` (``harness.errors``), or its top package (``baselines``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "harness" else parts[0]


def test_the_packages_are_layers_no_package_imports_one_that_imports_it_back():
    graph, _ = import_graph()
    packages: dict[str, set[str]] = {}
    for module, imported in graph.items():
        packages.setdefault(package_of(module), set()).update(
            package_of(m) for m in imported if package_of(m) != package_of(module)
        )
    for imported in list(packages.values()):
        for p in imported:
            packages.setdefault(p, set())
    assert cycles(packages) == []
