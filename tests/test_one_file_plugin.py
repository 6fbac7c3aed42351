"""One plugin file adds a method, a task, a metric, a reference predictor and an executor.

The file is ``my_plugin.py`` of docs/plugins.md (section 9), taken from the document itself, so
the page and this test cannot drift apart. Loaded with ``--include`` and no file of the project
touched, every kind is listed with its origin, a sweep runs through the plugin's executor (its
declared option a flag whose value reaches it), and the plugin's metric reaches the terminal
table and the Markdown, LaTeX and csv leaderboards, beside its task's reference predictor.
"""

from __future__ import annotations

import csv
import json
import re

from plugins import ROOT, isolated_registry
from test_plugins_doc import commands

from harness.components import plugins

KEYS = [("methods", "my-leaky"), ("tasks", "my-recall"), ("metrics", "my_abs_err"),
        ("references", "ref:my-half"), ("executors", "my-serial")]  # fmt: skip


def plugin_source() -> str:
    """The body of the ``cat > my_plugin.py <<'EOF'`` heredoc of docs/plugins.md."""
    (cmd,) = [
        c for c in commands((ROOT / "docs" / "plugins.md").read_text()) if "my_plugin.py <<" in c
    ]
    return cmd.split("\n", 1)[1].rsplit("\nEOF", 1)[0] + "\n"


def test_one_plugin_file_adds_every_kind_and_runs_a_sweep_through_its_executor(tmp_path, harness):
    (tmp_path / "my_plugin.py").write_text(plugin_source())
    inc = ("--include", "my_plugin.py")
    with isolated_registry():
        plugins._loaded = False  # a new process loads the plugins afresh
        for kind, key in KEYS:
            res = harness("list", kind, *inc)
            line = next((l for l in res.stdout.splitlines() if l.split()[:1] == [key]), "")
            assert res.returncode == 0 and f"--include {tmp_path / 'my_plugin.py'}" in line, res

        res = harness("run", *inc, "--executor", "my-serial", "--my-note", "hello", "--tasks",
                      "my-recall", "--methods", "my-leaky,gru,ref:my-half", "--preset", "smoke",
                      "--seeds", "0,1", "--out", "my_runs", "--format", "table")  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert res.stderr.splitlines()[0] == "my-serial: hello"  # the declared option reached it
        terminal = [
            l for l in res.stdout.splitlines() if "|error|" in l or l.lstrip().startswith("ref:")
        ]
        assert terminal and "ref:my-half" in res.stdout.split("my-leaky")[0], res.stdout

        recs = [
            json.loads(l) for l in (tmp_path / "my_runs" / "runs.jsonl").read_text().splitlines()
        ]
        assert sorted((r["method"], r["seed"], r["status"]) for r in recs) == sorted(
            (m, s, "ok") for m in ("my-leaky", "gru", "ref:my-half") for s in (0, 1)
        )
        assert {r["method_source"]["kind"] for r in recs if r["method"] == "my-leaky"} == {
            "include"
        }
        assert all("my_abs_err" in r["metrics"] for r in recs)

        res = harness("report", "my_runs", *inc, "--format", "md,tex,csv")
        assert res.returncode == 0, res.stderr
    board = tmp_path / "my_runs" / "LEADERBOARD"
    md = board.with_suffix(".md").read_text()
    header = next(l for l in md.splitlines() if l.startswith("| Method"))
    assert "|error| ↓" in header
    rows = [l for l in md.splitlines() if re.match(r"^\| (ref:my-half|my-leaky|gru) ", l)]
    assert rows[0].startswith("| ref:my-half (reference)") and len(rows) == 3
    assert "|error|" in board.with_suffix(".tex").read_text()
    table = list(csv.DictReader(board.with_suffix(".csv").open()))
    assert {r["method"] for r in table} == {"ref:my-half", "my-leaky", "gru"}
    assert all(float(r["my_abs_err"]) > 0 for r in table)
