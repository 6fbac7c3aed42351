"""Plugins: methods from installed packages (entry points), from ``--include`` files and folders and
from a sweep file's ``include``; clashes with the built-ins; where records say a method came from
(``method_source``) and its code version (``method_code``) for a plugin.

Entry points are tested with a fake distribution (``importlib.metadata.entry_points`` replaced):
installing a package in a test would write site-packages. The example package (examples/plugin)
is loaded the same way, from its own pyproject.toml, with its folder on ``sys.path``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from plugins import ROOT, FakeDist, FakeEntryPoint, installed, isolated_registry

from harness.authoring.scaffold import render
from harness.components import code, plugins, registry
from harness.components.plugins import PluginError, include
from harness.components.registry import METHODS, method_source
from harness.persistence import records
from harness.planning import resume

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

EXAMPLE = ROOT / "examples" / "plugin"
BROKEN = (
    "from harness.components.registry import register_method\n\n"
    "raise ImportError('no such weights')\n"
)


@pytest.fixture(autouse=True)
def _scratch_registry():
    with isolated_registry():
        yield


def write_method(folder: Path, name: str, kind: str = "dense", module: str | None = None) -> Path:
    """The scaffold's method ``name`` written into ``folder`` (as ``module``.py if given)."""
    folder.mkdir(parents=True, exist_ok=True)
    (file_name, text), _ = render(name, kind).items()
    path = folder / (f"{module}.py" if module else file_name)
    path.write_text(text)
    return path


def clash_file(folder: Path, key: str, module: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{module}.py"
    path.write_text(
        "from harness.components.method import Method\n"
        "from harness.components.registry import register_method\n\n\n"
        f'@register_method("{key}")\nclass Clash(Method):\n    """Takes a taken key."""\n'
    )
    return path


# --- --include --------------------------------------------------------------------------------


def test_an_included_file_registers_its_method_and_says_where_from(tmp_path):
    path = write_method(tmp_path, "incl-one")
    assert "incl-one" not in METHODS
    assert include([path]) == [path]
    assert "incl-one" in METHODS and METHODS.get("incl-one").__module__ == "incl_one"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert method_source("incl-one") == {"kind": "include", "path": str(path), "sha256": digest}
    assert method_source("gru") == {"kind": "builtin"}
    assert include([path]) == [path]  # twice: imported once
    assert plugins.INCLUDE_ENV in os.environ  # spawned workers import it too


def test_a_folder_gives_its_files_but_not_tests_or_shared_pieces(tmp_path):
    write_method(tmp_path, "incl-a")
    (tmp_path / "_incl_shared.py").write_text("def bound(d):\n    return d**-0.5\n")
    text = (tmp_path / "incl_a.py").read_text()
    shared = "import math\n\nfrom _incl_shared import bound\n"
    (tmp_path / "incl_a.py").write_text(text.replace("import math\n", shared, 1))
    write_method(tmp_path, "incl-b", "skip")
    (tmp_path / "test_incl_a.py").write_text("raise RuntimeError('a test file was imported')\n")
    (tmp_path / "notes.txt").write_text("not python\n")
    files = include([tmp_path])
    assert [f.name for f in files] == ["incl_a.py", "incl_b.py"]
    assert {"incl-a", "incl-b"} <= set(METHODS.names())
    # the code version of an included method covers the files of its folder it uses
    used = {Path(f).name for f in code.source_files(sys.modules["incl_a"])}
    assert used == {"incl_a.py", "_incl_shared.py"}
    before = resume.method_code("incl-a")
    (tmp_path / "_incl_shared.py").write_text("def bound(d):\n    return 1 / d**0.5\n")
    resume.method_code.cache_clear()
    assert resume.method_code("incl-a") != before
    assert resume.method_code("incl-b") == resume.method_code("incl-b")


def put(path: Path, text: str | None) -> Path:
    """``path`` holding ``text`` (None: an empty folder)."""
    if text is None:
        path.mkdir()
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda d: d / "missing.py", "no such file or folder"),
        (lambda d: put(d / "a.txt", "x"), "expects a .py file"),
        (lambda d: put(d / "empty", None), "no .py file to import there"),
        (
            lambda d: put(d / "incl_broken.py", BROKEN),
            r"incl_broken.py failed to import: ImportError: no such weights \(.*incl_broken.py:3\)",
        ),
        (
            lambda d: put(d / "incl_syntax.py", "def (:\n"),
            r"failed to import: SyntaxError: .*incl_syntax.py:1\)",
        ),
        (lambda d: put(d / "json.py", ""), "a module named 'json' is already imported from"),
        (lambda d: put(d / "tabnanny.py", ""), "its module name 'tabnanny' is taken by"),
    ],
    ids=["missing", "not-py", "empty-folder", "raises", "syntax-error", "imported", "shadows"],
)
def test_a_bad_include_is_one_line_naming_it(tmp_path, harness, setup, message):
    path = setup(tmp_path)
    code, out, err = harness("list", "methods", "--include", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: --include {path.resolve()}")
    assert re.search(message, err), err
    assert "Traceback" not in err


def test_a_key_taken_by_a_builtin_is_an_error_naming_both(tmp_path, harness):
    path = clash_file(tmp_path, "gru", "incl_clash")
    code, _, err = harness("list", "methods", "--include", str(path))
    assert code == 2 and err.count("\n") == 1
    assert "method 'gru' is registered twice: by built-in module baselines.gru and by " in err
    assert f"--include {path}" in err
    assert "incl_clash" not in sys.modules and "gru" in METHODS  # nothing half-registered
    assert METHODS.get("gru").__module__ == "baselines.gru"


def test_two_included_files_with_one_key_name_both(tmp_path):
    first = write_method(tmp_path / "a", "incl-twice", module="incl_first")
    second = write_method(tmp_path / "b", "incl-twice", module="incl_second")
    include([first])
    with pytest.raises(PluginError, match=rf"--include {first} and by --include {second}"):
        include([second])
    assert METHODS.get("incl-twice").__module__ == "incl_first"


def test_include_on_every_command_that_reads_the_registry():
    from harness.cli import make_parser

    sub = next(a for a in make_parser()._actions if a.dest == "command")
    for command in ("run", "report", "flops", "bench", "list", "data", "check", "new"):
        assert "--include" in sub.choices[command]._option_string_actions, command


def test_list_names_where_a_plugin_comes_from(tmp_path, harness):
    path = write_method(tmp_path, "incl-listed")
    out = harness("list", "methods", "--include", str(path), check=True).stdout
    assert f"  incl-listed      (--include {path}) InclListed:" in out
    assert "  gru              GRU" in out  # built-ins carry no tag


def test_the_environment_variable_includes_too(tmp_path, monkeypatch):
    path = write_method(tmp_path, "incl-env")
    monkeypatch.setenv(plugins.INCLUDE_ENV, str(path))
    plugins._loaded = False
    assert "incl-env" in METHODS


def test_a_sweep_file_includes_paths_relative_to_itself(tmp_path, harness, monkeypatch):
    write_method(tmp_path / "mine", "incl-swept")
    (tmp_path / "sweep.toml").write_text(
        'include = "mine"\ntasks = "adding"\nmethods = ["incl-swept", "gru"]\n'
    )
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    res = harness(
        "run",
        "--config",
        str(tmp_path / "sweep.toml"),
        "--dry-run",
        "--out",
        str(tmp_path / "runs.jsonl"),
    )
    assert res.returncode == 0, res.stderr
    assert "incl-swept" in res.stdout and "2 runs" in res.stderr
    (tmp_path / "bad.toml").write_text("include = 3\n")
    code, _, err = harness("run", "--config", str(tmp_path / "bad.toml"), "--dry-run")
    assert code == 2 and "'include' expects a path or a list of paths" in err


# --- entry points -------------------------------------------------------------------------------


def test_entry_points_register_methods_and_a_broken_one_is_one_line(tmp_path, monkeypatch, capsys):
    write_method(tmp_path / "fakeplug_pkg", "ep-method", module="methods")
    (tmp_path / "fakeplug_pkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    dist = FakeDist("fakeplug", "1.2.3")
    good = FakeEntryPoint("ep-method", "fakeplug_pkg.methods", "condrnn_harness.methods", dist)
    bad = FakeEntryPoint("broken", "fakeplug_missing", "condrnn_harness.methods", dist)
    installed(monkeypatch, good, bad)
    capsys.readouterr()
    assert "ep-method" in METHODS and "gru" in METHODS  # the built-ins still work
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "warning: plugin 'broken' of fakeplug 1.2.3 (fakeplug_missing) failed to import and is "
        "skipped: ModuleNotFoundError: No module named 'fakeplug_missing'"
    )
    assert method_source("ep-method") == {
        "kind": "entry-point",
        "package": "fakeplug",
        "version": "1.2.3",
    }
    plugins._loaded = False
    METHODS.names()
    assert capsys.readouterr().err == ""  # said once
    assert {Path(f).name for f in code.source_files(sys.modules["fakeplug_pkg.methods"])} == {
        "methods.py"
    }


def test_an_entry_point_that_takes_a_builtin_key_is_an_error(tmp_path, monkeypatch, harness):
    clash_file(tmp_path, "skip-rnn", "fakeplug_clash")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = FakeEntryPoint("x", "fakeplug_clash", "condrnn_harness.methods", FakeDist("clashy", "0.1"))
    installed(monkeypatch, ep)
    code, _, err = harness("list", "methods")
    assert code == 2 and err.count("\n") == 1
    assert "'skip-rnn' is registered twice: by built-in module baselines.skip_rnn and by " in err
    assert "plugin package clashy 0.1 (module fakeplug_clash)" in err


def test_an_entry_point_that_calls_sys_exit_is_one_line_and_skipped(tmp_path, monkeypatch, harness):
    (tmp_path / "fakeplug_exits.py").write_text("import sys\n\nsys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = FakeEntryPoint("x", "fakeplug_exits", "condrnn_harness.methods", FakeDist("exity", "0.2"))
    installed(monkeypatch, ep)
    code, out, err = harness("list", "methods")
    assert code == 0 and "  gru " in out  # the command goes on, without the plugin
    assert err.count("\n") == 1 and err.startswith(
        "warning: plugin 'x' of exity 0.2 (fakeplug_exits) failed to import and is skipped: "
        "SystemExit: 0 ("
    )


def test_what_registers_as_a_method_is_checked_wherever_it_comes_from(
    tmp_path, monkeypatch, harness
):
    """One check (``check_method``) for a built-in, an entry point, an included file (in
    tests/test_reliability.py) and ``register_method`` called directly."""
    from harness.components.method import Method, NoConfig

    class Loose(Method):
        """A config that is not a frozen dataclass, no cost, no recurrence."""

        config_cls = dict

    for obj, says in [
        (Loose, "class test_what_registers_as_a_method_is_checked_wherever_it_comes_from.<locals>"
         ".Loose its config_cls dict is not a frozen dataclass (@dataclass(frozen=True)); does "
         "not override cost(); overrides neither forward() nor init_state() and step(); see "),
        (NoConfig, "class NoConfig is not a subclass of harness.components.method.Method: it lacks "
         "config_cls, cost(), init_state(), step(), forward()"),
        (len, "is a builtin_function_or_method, not a class"),
    ]:  # fmt: skip
        with pytest.raises(PluginError, match=re.escape(says)):
            registry.register_method("loose-direct")(obj)
    assert "loose-direct" not in METHODS
    clash_file(tmp_path, "half-plugin", "fakeplug_half")  # a Method with no cost, no step
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = FakeEntryPoint("x", "fakeplug_half", "condrnn_harness.methods", FakeDist("halfy", "0.3"))
    installed(monkeypatch, ep)
    code, _, err = harness("list", "methods")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        "error: method 'half-plugin' (plugin package halfy 0.3 (module fakeplug_half)): class "
        "Clash does not override cost(); overrides neither forward() nor init_state() and step()"
    )


def test_the_example_package_loads_through_its_entry_point(monkeypatch, harness):
    """What CI does after ``pip install -e examples/plugin``, without installing it."""
    from harness.authoring import conformance
    from harness.cli.listing import KINDS as LISTED

    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    dist = FakeDist(project["name"], project["version"])
    groups = project["entry-points"]
    assert set(groups) <= set(plugins.ENTRY_POINT_GROUPS.values())
    eps = [FakeEntryPoint(n, v, g, dist) for g, found in groups.items() for n, v in found.items()]
    monkeypatch.syspath_prepend(str(EXAMPLE))
    installed(monkeypatch, *eps)
    assert [ep.group.rpartition(".")[2] for ep in eps] == [
        "methods",
        "tasks",
        "metrics",
        "references",
    ]
    assert "example-skip" in METHODS
    package = {"kind": "entry-point", "package": "condrnn-plugin-example", "version": "0.1.0"}
    assert method_source("example-skip") == package
    module = sys.modules[METHODS.get("example-skip").__module__]
    assert {Path(f).name for f in code.source_files(module)} == {"example_skip.py"}
    results = conformance.run_checks("example-skip", only=["forward", "cost", "fast-path"])
    assert [r.status for r in results] == ["pass"] * 3, [r.line() for r in results]
    # every kind it declares is listed, saying it comes from the package
    for kind, name in [
        ("methods", "example-skip"),
        ("tasks", "example-mean"),
        ("metrics", "mae"),
        ("references", "ref:example-median"),
    ]:
        assert plugins.source_of(LISTED[kind].get(name)) == package
        listed = harness("list", kind, check=True).stdout.splitlines()
        (line,) = [x for x in listed if x.startswith(f"  {name} ")]
        assert "(plugin package condrnn-plugin-example 0.1.0 (module condrnn_plugin_" in line
    # its task, metric and reference work: a smoke sweep records the package's MAE
    args = ["--tasks", "example-mean", "--methods", "example-skip,ref:example-median"]
    harness("run", *args, "--preset", "smoke", "--out", "r.jsonl", "--no-report", check=True)
    recs = [json.loads(line) for line in Path("r.jsonl").read_text().splitlines()]
    assert [(r["method"], r["status"]) for r in recs] == [
        ("example-skip", "ok"),
        ("ref:example-median", "ok"),
    ]
    assert all(r["metrics"]["mae"] >= 0 and r["method_source"] == package for r in recs)


# --- records ------------------------------------------------------------------------------------


def test_records_keep_the_method_source(tmp_path):
    from harness.components import config

    cfg = config.resolve("gru", "adding", 0, "smoke")
    assert "method_source" not in records.start_record(cfg, "c0de")  # the default: left out
    rec = records.start_record(cfg, "c0de", method_source("gru"))
    assert rec["method_source"] == {"kind": "builtin"}
    assert not any("method_source" in p for p in records.validate({**rec, "status": "failed"}))
    bad = {**rec, "status": "failed", "method_source": "builtin"}
    (problem,) = records.validate(bad)
    assert problem.startswith("method_source: expected an object, got a string")


def test_a_run_records_where_its_method_came_from(tmp_path, harness):
    path = write_method(tmp_path / "mine", "incl-recorded")
    res = harness(
        "run",
        "--tasks",
        "adding",
        "--methods",
        "incl-recorded,gru",
        "--preset",
        "smoke",
        "--set",
        "epochs=1",
        "--out",
        str(tmp_path / "r.jsonl"),
        "--no-report",
        "--include",
        str(path),
    )
    assert res.returncode == 0, res.stderr
    recs = {r["method"]: r for r in map(json.loads, (tmp_path / "r.jsonl").open())}
    assert recs["gru"]["method_source"] == {"kind": "builtin"}
    assert recs["incl-recorded"]["method_source"] == method_source("incl-recorded")
    assert recs["incl-recorded"]["method_source"]["path"] == str(path)


def test_resume_reruns_the_runs_of_an_edited_included_method(tmp_path, harness):
    path = write_method(tmp_path / "mine", "incl-resumed")
    run = (
        "run",
        "--tasks",
        "adding",
        "--methods",
        "incl-resumed",
        "--preset",
        "smoke",
        "--set",
        "epochs=1",
        "--out",
        str(tmp_path / "runs.jsonl"),
        "--no-report",
        "--include",
        str(path),
    )
    assert harness(*run).returncode == 0
    (rec,) = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert rec["status"] == "ok" and rec["method_code"] == resume.method_code("incl-resumed")
    assert "0 already recorded" not in harness(*run).stderr  # nothing changed: nothing rerun
    path.write_text(path.read_text() + "\n# edited\n")
    resume.method_code.cache_clear()
    res = harness(*run)
    assert res.returncode == 0 and "made by other code" in res.stderr, res.stderr
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 2


@pytest.mark.slow  # two spawned worker processes: 6 s
def test_worker_processes_import_the_included_files(tmp_path, harness):
    path = write_method(tmp_path / "mine", "incl-pooled")
    res = harness(
        "run",
        "--tasks",
        "adding",
        "--methods",
        "incl-pooled,gru",
        "--preset",
        "smoke",
        "--set",
        "epochs=1",
        "--workers",
        "2",
        "--out",
        str(tmp_path / "r.jsonl"),
        "--no-report",
        "--include",
        str(path),
    )
    assert res.returncode == 0, res.stderr
    recs = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert sorted((r["method"], r["status"]) for r in recs) == [
        ("gru", "ok"),
        ("incl-pooled", "ok"),
    ]


def test_plugins_load_lazily():
    code = (
        "import sys, harness, harness.components.registry, harness.authoring.conformance, "
        "harness.authoring.scaffold, "
        "harness.cli\nprint(sorted(m for m in ('torch', 'baselines', 'tasks', 'importlib.metadata')"
        " if m in sys.modules))"
    )
    env = {**os.environ, plugins.INCLUDE_ENV: "/no/such/file.py"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
