"""The command line stays thin, and an executor brings its own flags and sweep-file keys.

Each ``cmd_*`` function of ``harness/cli`` parses, calls the api and prints: at most 40 lines.
The API is the only door: a CLI module imports nothing of the project but ``harness.api``,
``harness.errors`` and other CLI modules, and of the rest only the standard library and ``rich``
(every import statement, at module level or inside a function). An executor registered in an
``--include`` file with an option of its own gets a ``harness run`` flag and a sweep-file key from
that declaration alone, and the value reaches the executor.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

CLI = Path(__file__).resolve().parents[1] / "harness" / "cli"
MAX_LINES = 40
ALLOWED = ("harness.api", "harness.errors", "harness.cli", "rich")


def _imports(tree: ast.AST) -> set[str]:
    """Every module an ``import`` or ``from ... import`` of the tree loads.

    ``from harness import api`` loads ``harness.api``: a name imported from a package counts as
    its submodule (``from harness import __version__`` counts as ``harness.__version__``).
    """
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, "a relative import in harness/cli"
            package = node.module in ("harness", "harness.cli")
            found |= {f"{node.module}.{a.name}" for a in node.names} if package else {node.module}
    return found


def _allowed(module: str) -> bool:
    top = module.partition(".")[0]
    if top in sys.stdlib_module_names or top == "__future__":
        return True
    return any(module == a or module.startswith(a + ".") for a in ALLOWED)


def test_every_command_function_is_short_and_cli_modules_import_only_the_api():
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
        forbidden += [f"{path.name}: {m}" for m in sorted(_imports(tree)) if not _allowed(m)]
    assert not long, long
    assert not forbidden, forbidden


def test_the_import_rule_sees_every_kind_of_import():
    tree = ast.parse(
        "import os\nfrom harness import api, errors\nfrom harness.cli.common import console\n"
        "def f():\n    import torch\n    from harness.planning import sweep\n"
        "    from harness import __version__\n    from harness.api import TASKS\n"
    )
    found = _imports(tree)
    assert sorted(m for m in found if not _allowed(m)) == [
        "harness.__version__",
        "harness.planning",
        "torch",
    ]


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
