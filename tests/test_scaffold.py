"""``harness new method``: each kind's template, untouched, passes ``harness check``, trains on the
smoke preset and lints clean; nothing is ever overwritten; bad names are one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from plugins import ROOT, isolated_registry

from harness.authoring.scaffold import KINDS, names, render

# the checks a kind's template does not concern (SKIP is right for them)
NOT_APPLICABLE = {
    "dense": {"at_skip reaches its target"},
    "skip": set(),
    "depth": {"forward == step loop (train and eval, masks exact)"},
    "activity": {
        "forward == step loop (train and eval, masks exact)",
        "at_skip reaches its target",
    },
}


@pytest.fixture(autouse=True)
def _scratch_registry():
    with isolated_registry():
        yield


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_fresh_template_passes_the_checks_and_trains(kind, tmp_path, harness):
    name = f"fresh-{kind}"
    res = harness("new", "method", name, "--kind", kind, "--out", "mine")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == [
        f"fresh_{kind}.py",
        f"test_fresh_{kind}.py",
    ]
    assert f"  harness check {name} --include mine\n" in res.stdout
    assert f"  harness run --tasks adding --methods {name} --preset smoke --include mine" in (
        res.stdout
    )
    res = harness("check", name, "--include", "mine")
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()[1:-1]
    assert not [line for line in lines if line.startswith("FAIL")]
    skipped = {line[6:].split(":")[0] for line in lines if line.startswith("SKIP")}
    assert skipped == NOT_APPLICABLE[kind]
    res = harness(
        "run",
        "--tasks",
        "adding",
        "--methods",
        name,
        "--preset",
        "smoke",
        "--include",
        "mine",
        "--out",
        "runs.jsonl",
        "--no-report",
    )
    assert res.returncode == 0, res.stderr
    (rec,) = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert rec["status"] == "ok" and rec["method"] == name and rec["method_code"]
    assert rec["macs"]["effective"] <= rec["macs"]["dense"]


def test_the_generated_files_lint_clean(tmp_path):
    """With the project's ruff settings, for names up to about 25 characters."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    for kind in KINDS:
        for file_name, text in render(f"my-long-method-name-{kind}", kind).items():
            (tmp_path / file_name).write_text(text)
    config = str(ROOT / "pyproject.toml")
    for args in (["check"], ["format", "--check"]):
        res = subprocess.run(
            [ruff, *args, "--config", config, str(tmp_path)], capture_output=True, text=True
        )
        assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow  # 7 s; tests/test_plugins_doc.py runs the skip kind's by default
def test_the_generated_test_files_pass_under_pytest(tmp_path):
    for kind in KINDS:
        for file_name, text in render(f"tested-{kind}", kind).items():
            (tmp_path / file_name).write_text(text)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    assert res.returncode == 0, res.stdout[-3000:]
    assert f"{4 * 11} passed, 4 skipped" in res.stdout  # 11 checks each; the paper test to write


def test_nothing_is_ever_overwritten(tmp_path, harness):
    assert harness("new", "method", "mine", "--kind", "skip").returncode == 0
    before = (tmp_path / "mine.py").read_text()
    (tmp_path / "mine.py").write_text("# my edits\n")
    code, out, err = harness("new", "method", "mine", "--kind", "dense")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err == "error: mine.py, test_mine.py exist already; nothing was written\n"
    assert (tmp_path / "mine.py").read_text() == "# my edits\n" != before
    (tmp_path / "test_other.py").write_text("# mine\n")
    code, _, err = harness("new", "method", "other", "--kind", "dense")
    assert code == 2 and "test_other.py exists already" in err
    assert not (tmp_path / "other.py").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["My-Skip", "--kind", "skip"], "'My-Skip' is not a method name"),
        (["1skip", "--kind", "skip"], "'1skip' is not a method name"),
        (["a--b", "--kind", "skip"], "'a--b' is not a method name"),
        (["skip-rnn", "--kind", "skip"], "method 'skip-rnn' is registered already (built-in"),
        (["skip_rnn", "--kind", "skip"], "method 'skip-rnn' is registered already (built-in"),
        (["json", "--kind", "dense"], "a module named 'json' exists already"),
        (["mine", "--kind", "sparse"], "argument --kind: invalid choice: 'sparse'"),
        (["mine"], "the following arguments are required: --kind"),
    ],
)
def test_a_bad_name_or_kind_is_one_line(tmp_path, harness, args, message):
    code, out, err = harness("new", "method", *args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert message in err
    assert list(tmp_path.iterdir()) == []


def test_names_give_key_module_and_class():
    assert names("my-skip") == ("my-skip", "my_skip", "MySkip")
    assert names("my_skip2") == ("my-skip2", "my_skip2", "MySkip2")


def test_the_example_plugin_is_the_skip_template():
    """examples/plugin's method is the skip template with its docstring filled in: the template
    cannot drift from what CI installs and checks."""
    text = (ROOT / "examples/plugin/condrnn_plugin_example/example_skip.py").read_text()
    template = render("example-skip", "skip")["example_skip.py"]
    start = "from __future__ import annotations\n"
    assert text[text.index(start) :] == template[template.index(start) :]
