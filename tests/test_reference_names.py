"""A reference predictor is a component of its own kind: the core asks it, never tests its name.

Only ``harness/references/`` knows that a ``ref:`` name is a reference predictor (or that a config
is a ``RefConfig``); the rest of the harness asks the component (``harness.references.component``)
what it needs. The training step runs a reference as it runs a method (``train.Fitting``), and one
place builds every run's record.
"""

import ast
import re
from pathlib import Path

import pytest
from builders import make_record

from harness.components import code, config
from harness.components.registry import UnknownNameError
from harness.components.selection import empty_tables
from harness.persistence import records
from harness.references import component, unserved
from harness.training import train

ROOT = Path(__file__).resolve().parents[1]
# what tells a reference by its name: the old test and its prefix, or a test of the prefix itself
NAME_TEST = re.compile(r"is_reference|REF_PREFIX|(startswith\(|==\s*|\[:4\]\s*==\s*)[\"']ref:")
OWNER = ROOT / "harness" / "references"


def name_tests(root: Path) -> list[str]:
    """``path:line: text`` of every line outside the references package that tests a name."""
    hits = []
    for path in sorted(
        p for pkg in ("harness", "baselines", "tasks") for p in (root / pkg).rglob("*.py")
    ):
        if path.is_relative_to(OWNER):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if NAME_TEST.search(line):
                hits.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return hits


def test_only_the_references_package_tells_a_reference_by_its_name():
    assert name_tests(ROOT) == []


def test_the_scan_finds_a_name_test(tmp_path):
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "x.py").write_text('ok = 1\nif m.startswith("ref:"):\n    pass\n')
    assert name_tests(tmp_path) == ['harness/x.py:2: if m.startswith("ref:"):']


def test_each_kind_answers_for_itself():
    gru, ref = component("gru"), component("ref:mean")
    assert ref.every_part and not gru.every_part
    cfgs = [config.resolve(n, "adding", 0, "smoke") for n in ("gru", "ref:mean")]
    assert [type(train.fitting(c)).__name__ for c in cfgs] == ["ModelFit", "ReferenceFit"]
    assert code.method_code("ref:mean") == ref.code_version() != code.method_code("gru")
    with pytest.raises(UnknownNameError, match="Unknown reference 'ref:nope'"):
        component("ref:nope")
    assert code.current_code("ref:nope") is None and code.current_code("nope") is None
    assert unserved(config.resolve("gru", "adding", 0, "smoke")) is None


def test_a_trained_run_needs_its_model_and_a_reference_run_has_none():
    ref = make_record(method="ref:mean")
    assert "model" not in ref["config"] and records.validate(ref) == []
    rec = make_record()
    del rec["config"]["model"]
    assert records.validate(rec) == ["a finished (ok) run lacks config.model.hidden_size"]


def test_a_table_whose_rule_keeps_only_its_references_has_no_method_row():
    ref, gru = make_record(method="ref:mean"), make_record()
    assert empty_tables([ref, gru], [ref]) == [("adding", "smoke")]
    assert empty_tables([ref], [ref]) == []  # references alone: no method ran here


# --- one run for every component, one place that builds its record -------------------------------

BUILDERS = {"start_record", "finish_ok", "finish_failed"}  # harness.persistence.records


def _top_functions(tree: ast.Module):
    """Each function of a module (methods included) with the nodes it holds, nested ones too."""
    for node in tree.body:
        for f in [node, *(node.body if isinstance(node, ast.ClassDef) else [])]:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f.name, ast.walk(f)


def record_builders(root: Path) -> set[tuple[str, str]]:
    """``(path, function)`` of every call of a run record's builders outside ``records.py``."""
    out = set()
    for path in sorted((root / "harness").rglob("*.py")):
        if path.name == "records.py" and path.parent.name == "persistence":
            continue
        for name, nodes in _top_functions(ast.parse(path.read_text(encoding="utf-8"))):
            for n in nodes:
                if isinstance(n, ast.Call) and (
                    getattr(n.func, "attr", None) in BUILDERS
                    or getattr(n.func, "id", "") in BUILDERS
                ):
                    out.add((str(path.relative_to(root)), name))
    return out


def reference_config_checks(root: Path) -> list[str]:
    """``path:line`` of every ``isinstance`` / ``issubclass`` / ``type(..) is`` on ``RefConfig``
    (or a name it is imported as) outside the references package."""
    hits = []
    for path in sorted((root / "harness").rglob("*.py")):
        if path.is_relative_to(root / "harness" / "references"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {"RefConfig"} | {
            a.asname
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom)
            for a in n.names
            if a.name == "RefConfig" and a.asname
        }
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and getattr(n.func, "id", "") in {
                "isinstance",
                "issubclass",
            }:
                checked = n.args[1:]
            elif isinstance(n, ast.Compare) and "type(" in ast.unparse(n):
                checked = [n.left, *n.comparators]
            else:
                continue
            used = {x.id for c in checked for x in ast.walk(c) if isinstance(x, ast.Name)}
            used |= {x.attr for c in checked for x in ast.walk(c) if isinstance(x, ast.Attribute)}
            if used & names:
                hits.append((str(path.relative_to(root)), n.lineno))
    return [f"{path}:{line}" for path, line in sorted(hits)]


def test_one_function_builds_every_run_record():
    assert record_builders(ROOT) == {
        ("harness/training/train.py", "run"),
        ("harness/training/train.py", "_fit_and_test"),
    }


def test_nothing_outside_the_references_package_checks_for_a_reference_config():
    assert reference_config_checks(ROOT) == []


def test_the_scans_find_a_second_record_builder_and_a_config_check(tmp_path):
    (tmp_path / "harness" / "x").mkdir(parents=True)
    (tmp_path / "harness" / "x" / "run.py").write_text(
        "from harness.references import RefConfig as RC\n"
        "class Runner:\n"
        "    def go(self, cfg, rec):\n"
        "        if isinstance(cfg, (int, RC)):\n"
        "            return records.finish_ok(rec)\n"
        "def other(cfg, references):\n"
        "    return type(cfg) is references.RefConfig\n"
    )
    assert record_builders(tmp_path) == {("harness/x/run.py", "go")}
    assert reference_config_checks(tmp_path) == ["harness/x/run.py:4", "harness/x/run.py:7"]


def test_a_method_and_a_reference_are_recorded_by_the_same_function(monkeypatch):
    made = []
    fit_and_test = train._fit_and_test

    def spy(fit, *args):
        rec = fit_and_test(fit, *args)
        made.append((type(fit).__name__, rec["method"], rec["status"]))
        return rec

    monkeypatch.setattr(train, "_fit_and_test", spy)
    for name, sets in (("gru", {"epochs": "1"}), ("ref:mean", {})):
        train.run(config.resolve(name, "adding", 0, "smoke", sets))
    assert made == [("ModelFit", "gru", "ok"), ("ReferenceFit", "ref:mean", "ok")]
