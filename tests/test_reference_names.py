"""A reference predictor is a component of its own kind: the core asks it, never tests its name.

Only ``harness/references/`` knows that a ``ref:`` name is a reference predictor; the rest of
the harness asks the component (``harness.references.component``) what it needs.
"""

import re
from pathlib import Path

import pytest
from builders import make_record

from harness.components import config
from harness.components.registry import UnknownNameError
from harness.components.selection import empty_tables
from harness.persistence import records
from harness.references import component, unserved
from harness.training import code

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
    assert gru.trains and not ref.trains
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
