"""docs/plugins.md works as written: every command of its ``bash`` blocks is run, in order, in
an empty folder, and must succeed.

``harness`` commands run in this process (each with a registry loaded afresh, as a new process
would have); ``pip install -e DIR`` is played by installing DIR's entry points as a fake
distribution (a test must not write site-packages), ``pip install`` of the harness itself is
skipped (it is installed); anything else runs in bash (heredocs, ``mkdir``, ``python -m pytest``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from importlib import metadata
from pathlib import Path

from plugins import ROOT, faked_entry_points, isolated_registry
from test_plugins import FakeDist, FakeEntryPoint

from harness.components import plugins, registry

DOC = ROOT / "docs" / "plugins.md"

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def commands(text: str) -> list[str]:
    """The commands of the document's ``bash`` blocks: continued lines joined, heredocs whole."""
    out: list[str] = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        lines = iter(block.splitlines())
        for line in lines:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            while line.endswith("\\"):
                line = line[:-1] + next(lines)
            heredoc = re.search(r"<<'(\w+)'$", line)
            if heredoc:
                body = []
                for more in lines:
                    body.append(more)
                    if more == heredoc.group(1):
                        break
                line = "\n".join([line, *body])
            out.append(line)
    return out


def test_the_document_has_the_walk_through():
    names = [c.split()[0] + " " + c.split()[1] for c in commands(DOC.read_text())]
    assert names[:4] == ["pip install", "harness new", "harness check", "python -m"]
    assert "harness report" in names and "harness run" in names


def test_every_command_of_the_document_runs(tmp_path, harness, monkeypatch):
    ran = []
    for command in commands(DOC.read_text()):
        words = shlex.split(command.splitlines()[0])
        if words[:2] == ["pip", "install"]:
            if words[2:] == ["-e", ".[dev]"]:
                continue  # the harness: installed
            assert words[2] == "-e", command
            install(tmp_path / words[3], monkeypatch)
        elif words[0] == "harness":
            with isolated_registry():
                plugins._loaded = False  # a new process loads the plugins afresh
                res = harness(*words[1:])
            assert res.returncode == 0, f"{command}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        else:
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            res = subprocess.run(
                ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True
            )
            assert res.returncode == 0, f"{command}\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}"
        ran.append(words[0])
    assert ran.count("harness") >= 7
    board = (tmp_path / "my_runs" / "LEADERBOARD.md").read_text()
    assert "my-skip" in board and "skip-rnn" in board
    recs = (tmp_path / "my_runs" / "runs.jsonl").read_text()
    assert '"method_code"' in recs
    assert "my-skip" not in registry.METHODS._items  # nothing leaks into the other tests


def install(folder: Path, monkeypatch) -> None:
    """``pip install -e folder``, as far as the harness can tell: its entry points installed."""
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    dist = FakeDist(project["name"], project["version"])
    eps = [
        FakeEntryPoint(name, value, group, dist)
        for group, found in project.get("entry-points", {}).items()
        for name, value in found.items()
    ]
    monkeypatch.syspath_prepend(str(folder))
    # each harness command loads the plugins afresh, so only the installed entry points change
    monkeypatch.setattr(metadata, "entry_points", faked_entry_points(eps))
