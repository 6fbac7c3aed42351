"""Every kind of component through the one ``Registry`` type: a wrong object is refused in one
line naming where it came from; each kind registers from an installed package (entry point) and
from ``--include``; ``harness list KIND`` shows each with its origin."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
from plugins import FakeDist, FakeEntryPoint, installed, isolated_registry

from harness.authoring.scaffold import render
from harness.cli.listing import KINDS
from harness.components import plugins
from harness.components.method import Method
from harness.components.metrics import METRICS, Metric, register_metric
from harness.components.plugins import PluginError
from harness.components.registry import register_method, register_task
from harness.components.task import Task, TaskKind
from harness.executors import EXECUTORS, register_executor
from harness.references import Reference, register_reference


@pytest.fixture(autouse=True)
def _scratch_registry():
    with isolated_registry():
        yield


class NotATask(Method):
    """A method's class, not a task's."""


class NoSplits(Task):
    """A task without its data."""

    kind = TaskKind.REGRESSION


class NoPredict(Reference):
    """A reference that fits but neither predicts nor scores."""

    kinds = (TaskKind.REGRESSION,)

    def fit(self, task, train, seed):
        pass


class NoWait:
    """An executor that never gives its runs back."""

    in_process = True

    def slots(self):
        return 1

    def submit(self, cfg, on_epoch=None):
        return 0

    def cancel(self):
        pass

    def close(self):
        pass


def a_function():
    """Not a class."""


WRONG = [
    (register_method, "x-method", NotATask, "class NotATask does not override cost()"),
    (register_task, "x-task", NotATask, "is not a subclass of harness.components.task.Task"),
    (register_task, "x-task", NoSplits, "does not define splits; does not define input_size"),
    (register_reference, "x-ref", NoPredict, "does not define predict or score"),
    (register_reference, "x-ref", a_function, "is a function, not a class"),
    (METRICS.register, "x_metric", NoWait(), "is not a Metric"),
    (register_metric, None, Metric("x-metric", "X"), "has a name not of the form ^[a-z0-9]+(_"),
    (register_executor, "x-exec", NoWait, "class NoWait does not define wait_any"),
    (register_executor, "x-exec", a_function, "is a function, not a class"),
]


@pytest.mark.parametrize(
    "register, name, obj, says",
    WRONG,
    ids=["method", "task", "task-parts", "ref", "ref-function", "metric", "metric-key",
         "executor", "executor-function"],
)  # fmt: skip
def test_a_wrong_component_is_refused_in_one_line_naming_where_it_came_from(
    register, name, obj, says
):
    with pytest.raises(PluginError) as e:
        register(obj) if name is None else register(name)(obj)
    msg = str(e.value)
    assert "\n" not in msg and says in msg, msg
    assert re.match(r"\w+ '[\w:-]+' \(module test_components\): ", msg), msg
    key = msg.split("'")[1]
    assert not any(key in r._items for r in KINDS.values())  # nothing registered


# one component of each kind, in a module of its own (an entry point's, or an included file)
KIND_FILES = {
    "tasks": """
        from harness.components.config import Preset
        from harness.components.registry import register_task
        from harness.components.task import Task, TaskKind


        @register_task("{p}-task")
        class PlugTask(Task):
            \"\"\"A plugin's task.\"\"\"

            kind = TaskKind.REGRESSION
            presets = {{"smoke": Preset()}}
            input_size = output_size = 1

            def splits(self, seed):
                raise NotImplementedError
        """,
    "references": """
        from harness.references import Reference, register_reference
        from harness.components.task import TaskKind


        @register_reference("{p}-ref")
        class PlugRef(Reference):
            \"\"\"A plugin's reference.\"\"\"

            kinds = (TaskKind.REGRESSION,)

            def fit(self, task, train, seed):
                pass

            def score(self, task, split, batch_size):
                return {{"mse": 0.0}}
        """,
    "metrics": """
        from harness.components.metrics import Metric, register_metric

        register_metric(Metric("{p}_metric", "A plugin's measure"))
        """,
    "executors": """
        from harness.executors import register_executor
        from harness.executors.local import LocalExecutor


        @register_executor("{p}-exec")
        class PlugExec(LocalExecutor):
            \"\"\"A plugin's executor.\"\"\"
        """,
}
NAMES = {"methods": "{p}-method", "tasks": "{p}-task", "references": "ref:{p}-ref"}
NAMES |= {"metrics": "{p}_metric", "executors": "{p}-exec"}


def write_kinds(folder: Path, prefix: str) -> dict[str, Path]:
    """A module per kind in ``folder`` (named ``PREFIX_KIND.py``), each registering one."""
    folder.mkdir(parents=True, exist_ok=True)
    (_, text), _ = render(f"{prefix}-method", "dense").items()
    files = {"methods": text} | {
        k: textwrap.dedent(v).format(p=prefix) for k, v in KIND_FILES.items()
    }
    out = {}
    for kind, code in files.items():
        out[kind] = folder / f"{prefix}_{kind}.py"
        out[kind].write_text(code)
    return out


def test_every_kind_registers_from_an_entry_point(tmp_path, monkeypatch, harness):
    files = write_kinds(tmp_path / "plugpkg", "plugpkg")
    (tmp_path / "plugpkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    dist = FakeDist("plugpkg", "2.0")
    eps = [
        FakeEntryPoint(kind, f"plugpkg.{path.stem}", plugins.ENTRY_POINT_GROUPS[kind[:-1]], dist)
        for kind, path in files.items()
    ]
    installed(monkeypatch, *eps)
    assert "plugpkg-exec" in EXECUTORS.names()  # light: the executors' own group, not the rest
    assert not plugins._loaded and "plugpkg.plugpkg_methods" not in sys.modules
    for kind, name in NAMES.items():
        name = name.format(p="plugpkg")
        obj = KINDS[kind].get(name)
        assert plugins.source_of(obj) == {
            "kind": "entry-point",
            "package": "plugpkg",
            "version": "2.0",
        }
        (line,) = [
            x for x in harness("list", kind, check=True).stdout.splitlines() if f" {name} " in x
        ]
        assert f"(plugin package plugpkg 2.0 (module plugpkg.plugpkg_{kind}))" in line, line


def test_every_kind_registers_from_an_include_and_is_listed_with_it(tmp_path, harness):
    files = write_kinds(tmp_path, "inclkind")
    for kind, name in NAMES.items():
        name = name.format(p="inclkind")
        res = harness("list", kind, "--include", str(tmp_path), check=True)
        (line,) = [x for x in res.stdout.splitlines() if f" {name} " in x]
        assert f"(--include {files[kind]})" in line, line
    assert plugins.source_of(METRICS.get("inclkind_metric"))["path"] == str(files["metrics"])


def test_an_include_that_registers_a_wrong_component_is_one_line_and_leaves_nothing(
    tmp_path, harness
):
    path = tmp_path / "incl_wrong.py"
    path.write_text(
        "from harness.components.metrics import Metric, register_metric\n\n"
        'register_metric(Metric("incl_ok", "OK"))\n'
        'register_metric(Metric("mse", "Mean squared error"))\n'
    )
    code, out, err = harness("list", "metrics", "--include", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    twice = (
        "metric 'mse' is registered twice: by built-in module harness.components.metrics and by "
        "--include"
    )
    assert f"{twice} {path}" in err
    assert "incl_ok" not in METRICS and METRICS.get("mse").title == "MSE"  # rolled back


def test_harness_list_a_kind_or_an_unknown_one(harness):
    for kind, reg in KINDS.items():
        out = harness("list", kind, check=True).stdout
        assert out.startswith(f"{kind}") and all(f"  {n} " in out for n in reg.names())
    assert "metrics:" not in harness("list", check=True).stdout  # all: as before, no metrics
    code, out, err = harness("list", "widgets")
    assert code == 2 and out == "" and err.count("\n") == 1 and "invalid choice: 'widgets'" in err
