"""The command line stays thin, and an executor brings its own flags and sweep-file keys.

Each ``cmd_*`` function of ``harness/cli`` parses, calls the api and prints: at most 40 lines,
and no CLI module opens the store or picks an executor itself (it imports neither
``harness.persistence.store`` nor ``harness.executors``, at module level or inside a function). An
executor registered in an ``--include`` file with an option of its own gets a ``harness run`` flag
and a sweep-file key from that declaration alone, and the value reaches the executor.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

CLI = Path(__file__).resolve().parents[1] / "harness" / "cli"
MAX_LINES = 40
FORBIDDEN = ("harness.persistence.store", "harness.executors")


def _imports(tree: ast.AST) -> set[str]:
    """Every module an ``import`` or ``from ... import`` of the tree names (with its names)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def test_every_command_function_is_short_and_no_cli_module_opens_the_store_or_an_executor():
    files = sorted(CLI.glob("*.py"))
    assert len(files) > 5
    long, forbidden = [], []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("cmd_"):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.name}:{node.name} ({lines} lines)")
        forbidden += [
            f"{path.name}: {m}"
            for m in sorted(_imports(tree))
            if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)
        ]
    assert not long, long
    assert not forbidden, forbidden


TOY = '''
from pathlib import Path

from harness.executors.base import Option, register_executor
from harness.executors.local import LocalExecutor


@register_executor("toy")
class ToyExecutor(LocalExecutor):
    """Runs as local does; writes its option where the test reads it."""

    options = (Option("toy_opt", help="the toy's word", metavar="X", what="a word"),)

    def __init__(self, run, options):
        super().__init__(run, options)
        Path("toy_opt.txt").write_text(repr(options.toy_opt))
'''
ONE_RUN = ("run", "--tasks", "adding", "--methods", "gru", "--set", "train.epochs=1")


def _harness(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI in a process of its own: the toy's registration stays there."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "harness", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_an_included_executor_gets_a_flag_and_a_sweep_key_from_its_declared_option(tmp_path):
    (tmp_path / "toy.py").write_text(TOY)
    p = _harness(tmp_path, *ONE_RUN, "--include", "toy.py", "--executor", "toy", "--toy-opt", "hi")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "toy_opt.txt").read_text() == "'hi'"  # the flag's value reached it
    assert len((tmp_path / "results" / "runs.jsonl").read_text().splitlines()) == 1
    (tmp_path / "toy_opt.txt").unlink()
    sweep = 'tasks = "adding"\nmethods = "gru"\nexecutor = "toy"\ntoy_opt = "from-file"\n'
    (tmp_path / "s.toml").write_text(sweep)
    p = _harness(tmp_path, "run", "--config", "s.toml", "--include", "toy.py", "--out", "r2",
                 "--set", "train.epochs=1", "--no-report")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "toy_opt.txt").read_text() == "'from-file'"  # the sweep key reached it
    p = _harness(tmp_path, *ONE_RUN, "--include", "toy.py", "--toy-opt", "hi", "--out", "r3")
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "error: --toy-opt is only used with --executor toy"
    ], p.stderr
    assert not (tmp_path / "r3").exists()
