"""The command line's parser: help on every option, shared options, version, import cost, and the
console script run as a real process."""

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import __version__
from harness.cli import main, make_parser
from harness.components import config

ROOT = Path(__file__).resolve().parent.parent


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommand parsers of ``parser``, by name."""
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def options_without_help(parser: argparse.ArgumentParser) -> list[str]:
    """``COMMAND: OPTION`` for every argument of the parser and its subcommands with no help."""
    missing = []
    for name, sub in {"harness": parser, **subcommands(parser)}.items():
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                missing.append(f"{name}: {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_the_readme_command_table_has_a_row_for_every_subcommand():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Command line\n", 1)[1].split("\n\n", 1)[0]
    rows = set(re.findall(r"^\| `harness (\w+)", table, re.MULTILINE))
    assert set(subcommands(make_parser())) - rows == set()


def test_every_option_of_every_subcommand_has_help():
    parser = make_parser()
    commands = {"list", "run", "report", "compare", "flops", "bench", "data", "store"}
    commands |= {"check", "new", "docs"}
    assert set(subcommands(parser)) == commands
    assert options_without_help(parser) == []


def test_the_help_check_finds_an_option_without_help():
    parser = make_parser()
    subcommands(parser)["flops"].add_argument("--undocumented")
    assert options_without_help(parser) == ["flops: --undocumented"]


def test_shared_options_have_the_same_choices_everywhere():
    subs = subcommands(make_parser())
    seen = {}
    for name, sub in subs.items():
        for action in sub._actions:
            for flag in action.option_strings:
                seen.setdefault(flag, {})[name] = action
    assert set(seen["--preset"]) == {"run", "report", "flops", "bench"}
    assert {tuple(a.choices) for a in seen["--preset"].values()} == {config.PRESETS}
    assert {tuple(a.choices) for a in seen["--device"].values()} == {("cpu", "cuda", "auto")}
    assert set(seen["--methods"]) == {"run", "flops", "bench"}
    assert set(seen["--task"]) == {"report", "flops", "bench", "check"}
    assert set(seen["--set"]) == {"run", "flops", "bench"}
    assert set(seen["--data-dir"]) == {"run", "flops", "bench", "data"}
    # every command that reads the registry
    readers = {"run", "report", "flops", "bench", "list", "data", "check", "new"}
    assert set(seen["--include"]) == readers
    assert len({(a.help, a.metavar, type(a)) for a in seen["--include"].values()}) == 1


def test_the_names_an_executor_option_may_not_take_are_harness_runs_own():
    """``RUN_OPTIONS`` is every name of ``harness run``'s namespace that is no executor's option
    (its dests and defaults; ``argv`` set by ``dispatch``, ``command`` the subcommand) and every
    key of a sweep file: an executor's option of one of them is refused when it registers."""
    from harness.executors.base import RUN_OPTIONS, declared
    from harness.planning.suites import META_KEYS, OPTION_KEYS

    run = subcommands(make_parser())["run"]
    own = {a.dest for a in run._actions} - set(declared()) | set(run._defaults)
    assert own | {"argv", "command"} | set(OPTION_KEYS) | {*META_KEYS, "part"} == RUN_OPTIONS


def test_version_matches_pyproject(capsys):
    text = (ROOT / "pyproject.toml").read_text()
    (declared,) = re.findall(r'^version = "([^"]+)"$', text, flags=re.M)
    assert __version__ == declared
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"harness {__version__}\n"


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_importing_the_cli_and_building_its_parser_does_not_import_torch():
    p = _python(
        "import sys\nfrom harness.cli import make_parser\nmake_parser()\n"
        "print(sorted(m for m in ('torch', 'numpy', 'rich') if m in sys.modules))"
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def _console_script() -> str:
    script = Path(sys.executable).with_name("harness")
    found = str(script) if script.exists() else shutil.which("harness")
    if found is None:
        pytest.skip("the harness console script is not installed")
    return found


def test_console_script(tmp_path):
    env = dict(os.environ, PYTHONWARNINGS="ignore")

    def harness(*args):
        return subprocess.run(
            [_console_script(), *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    p = harness("--version")
    assert p.returncode == 0 and p.stdout == f"harness {__version__}\n"
    p = harness("run", "--methods", "grux")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.splitlines() == [p.stderr.strip()] and "Unknown method 'grux'" in p.stderr
    p = harness("run", "--tasks", "adding", "--methods", "gru", "--out", "r.jsonl", "--no-report")
    assert p.returncode == 0, p.stderr
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 1


def test_python_dash_m_harness():
    p = subprocess.run(
        [sys.executable, "-m", "harness", "--version"], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0 and p.stdout == f"harness {__version__}\n"


def test_the_program_freezes_its_objects_at_exit_and_a_caller_goes_on_collecting(
    monkeypatch, capsys
):
    """Called as the program (no argv), ``main`` freezes the garbage collector's objects as it
    returns, so that the interpreter's exit does not traverse all that torch's imports made; a
    caller that passes argv (a test, a script that goes on) is left as it was."""
    import gc

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    assert main(["list", "tasks"]) == 0
    assert frozen == []
    monkeypatch.setattr(sys, "argv", ["harness", "list", "tasks"])
    assert main() == 0
    assert frozen == [True]
    capsys.readouterr()
