"""Reliability: no output can overwrite records, tampered data never pass, no input stops a sweep
halfway, the drift gate cannot pass on nothing, empty and odd values are refused, a full disk
loses no finished run.

One table, one row per case: the files the case starts from, the command (called in-process, as
the shell would), the exit code, what the last stderr line says, which files must keep their
bytes, and for a sweep in which a run fails, the records that must be in the store afterwards.
Bad input (exit 2) is exactly one stderr line; so is a sweep a full disk stopped, beside the
progress lines of the runs it finished.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from plugins import isolated_registry

from harness.cli import main
from harness.planning.resume import method_code

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "smoke.jsonl"
RECORDS = [json.loads(line) for line in REFERENCE.read_text().splitlines()]
GRU_ADDING = next(r for r in RECORDS if (r["method"], r["task"], r["seed"]) == ("gru", "adding", 0))
STORE = json.dumps(GRU_ADDING) + "\n"  # a store holding one real record
RUN = ["run", "--tasks", "adding", "--methods", "gru"]
SPEEDUP = ["bench", "--speedup", "--methods", "sa-rnn", "--hidden", "8", "--batches", "1"]
SPEEDUP += ["--skips", "0.5", "--seq-len", "4"]
# a sweep into a store already holding STORE (seed 0), so that it runs seeds 1
SWEEP = ["run", "--tasks", "adding", "--seeds", "1", "--out", "s.jsonl", "--methods"]
BASE = ("gru", "adding", "ok")  # STORE's record
# STORE's run, failed earlier, by today's code of its method (else resume would rerun it)
FAILED = dict(GRU_ADDING, status="failed", error="diverged: a non-finite loss")
FAILED = json.dumps(dict(FAILED, method_code=method_code("gru"))) + "\n"
# another sweep's claim, on another host and fresh: it must survive this sweep's release
CLAIM = json.dumps({"host": "elsewhere", "pid": 1, "run_id": "f" * 16, "started": None,
                    "time": time.time()}, sort_keys=True) + "\n"  # fmt: skip
PROGRESS = re.compile(r"^\d+ runs: |^[✓✗] |━")  # the lines a sweep prints as it goes
REGISTER = (
    "from harness.components.method import Method\n"
    "from harness.components.registry import register_method\n\n\n"
)
NOT_A_METHOD = REGISTER + '@register_method("not-a-method")\nclass NotAMethod:\n    """No."""\n'
HALF_METHOD = (
    REGISTER + '@register_method("half-method")\nclass Half(Method):\n    """No cost."""\n'
)
# a docs file with CRLF line endings around a block
CRLF_DOC = "# D\r\n\r\n<!-- generated: harness report base.jsonl --print count -->\r\n{body}"
CRLF_DOC += "<!-- end -->\r\nthe end, without a line ending"
COUNT = "1 records (0 failed, 0 from a dirty tree), 1 runs"  # --print count of base.jsonl
EXITS = "import sys\n\nsys.exit(0)\n"  # a plugin that ends the process as it is imported
# an executor plugin (its name, its options) whose wait_any returns nothing, at once, forever
EXECUTOR = """from harness.executors.base import Option, register_executor


@register_executor("{name}")
class Stub:
    in_process = False
    options = {options}

    def __init__(self, run, options):
        self.n = 0

    def slots(self):
        return 1

    def submit(self, cfg, on_epoch=None):
        self.n += 1
        return self.n

    def wait_any(self):
        return []

    def cancel(self):
        pass

    def close(self):
        pass
"""
CLASH = EXECUTOR.format(name="clash", options='(Option("out"),)')  # harness run's --out
INVERTED = (
    "from harness.components.metrics import Metric, register_metric\n\n"
    'register_metric(Metric("my_score", "My score", higher=True, range=(1.0, 0.0)))\n'
)


def _swap(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


@dataclass
class Case:
    """One row of the table.

    Attributes:
        id: the issue's item and a short name.
        argv: the command after ``harness``.
        code: the exit code.
        says: a text the last stderr line contains ("": stderr stays empty).
        files: the files the case starts from (name -> text); ``base.jsonl`` is always there.
        unchanged: files whose bytes must not change.
        records: for a sweep with a failed run, ``(method, task, status)`` of every record the
            store must hold afterwards (its --out is ``s.jsonl``).
        patch: a fault injected before the command (``_FAULTS``).
        full: a full disk: ``(glob, n)``: writes to the files the glob matches fail with ENOSPC
            after the first ``n`` (``_full_disk``). Then every run that finished is in the store
            or in the fallback file, which holds ``kept``; the store keeps its first bytes, the
            claims file is as before, and the stderr line besides progress is one.
        kept: with ``full``, ``(method, task, status)`` of the records kept in the fallback file.
        env: environment variables set for the command.
        after: files whose bytes must be these afterwards.
        needs: the module of the optional extra the case needs (skipped without it; not
            imported here: Ray must be imported by its executor, tensorboard by the run).
    """

    id: str
    argv: list[str]
    code: int
    says: str
    files: dict[str, str] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    records: list[tuple[str, str, str]] | None = None
    patch: str | None = None
    full: tuple[str, int] | None = None
    kept: list[tuple[str, str, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    needs: str | None = None


CASES = [
    # 1. no output option writes over a records store or over an input of the same command
    Case(
        "1 run --report is the store of --out",
        [*RUN, "--out", "base.jsonl", "--report", "base.jsonl"],
        2,
        "--report base.jsonl is the records store (--out) of this command",
        unchanged=["base.jsonl"],
    ),
    Case(
        "1 run --report is another store",
        [*RUN, "--out", "s.jsonl", "--report", "other.jsonl"],
        2,
        "--report other.jsonl holds run records (a records store)",
        files={"other.jsonl": STORE},
        unchanged=["other.jsonl"],
    ),
    Case(
        "1 report --out is its input",
        ["report", "--out", "results/runs.jsonl", "--no-figures"],
        2,
        "--out results/runs.jsonl is an input (records) of this command",
        files={"results/runs.jsonl": STORE},
        unchanged=["results/runs.jsonl"],
    ),
    Case(
        "1 report --out is another store",
        ["report", "other.jsonl", "--out", "base.jsonl", "--no-figures"],
        2,
        "--out base.jsonl holds run records",
        files={"other.jsonl": STORE},
        unchanged=["base.jsonl"],
    ),
    Case(
        "1 report --format writes a store beside --out",
        ["report", "other.jsonl", "--out", "x.md", "--format", "md,csv", "--no-figures"],
        2,
        "--out (x.csv) x.csv holds run records",
        files={"other.jsonl": STORE, "x.csv": STORE},
        unchanged=["x.csv"],
    ),
    Case(
        "1 report's curves are a store",
        ["report", "other.jsonl", "--out", "x.md"],
        2,
        "x_curves.png holds run records",
        files={"other.jsonl": STORE, "x_curves.png": STORE},
        unchanged=["x_curves.png"],
    ),
    Case(
        "1 report --paper --out-dir holds a store under a table's name",
        ["report", "other.jsonl", "--paper", "--out-dir", "p", "--no-figures"],
        2,
        "--out-dir p: p/paper_adding_smoke.md holds run records",
        files={"other.jsonl": STORE, "p/paper_adding_smoke.md": STORE},
        unchanged=["p/paper_adding_smoke.md"],
    ),
    Case(
        "1 compare --markdown is REFERENCE",
        ["compare", "base.jsonl", "cur.jsonl", "--markdown", "base.jsonl"],
        2,
        "--markdown base.jsonl is the reference (REFERENCE) of this command",
        files={"cur.jsonl": STORE},
        unchanged=["base.jsonl", "cur.jsonl"],
    ),
    Case(
        "1 compare --markdown is CURRENT",
        ["compare", "base.jsonl", "cur.jsonl", "--markdown", "cur.jsonl"],
        2,
        "--markdown cur.jsonl is CURRENT of this command",
        files={"cur.jsonl": STORE},
        unchanged=["base.jsonl", "cur.jsonl"],
    ),
    Case(
        "1 compare --markdown is an empty REFERENCE",
        ["compare", "empty.jsonl", "cur.jsonl", "--markdown", "empty.jsonl"],
        2,
        "--markdown empty.jsonl is the reference (REFERENCE) of this command",
        files={"cur.jsonl": STORE, "empty.jsonl": ""},
        unchanged=["empty.jsonl"],
    ),
    Case(
        "1 bench --speedup --report is a store",
        [*SPEEDUP, "--report", "base.jsonl"],
        2,
        "--report base.jsonl holds run records",
        unchanged=["base.jsonl"],
    ),
    Case(
        "1 bench --speedup's raw timings beside --report are a store",
        [*SPEEDUP, "--report", "base.md"],
        2,
        "--report's raw timings base.jsonl holds run records",
        unchanged=["base.jsonl"],
    ),
    Case(
        "1 bench --report is a store",
        ["bench", "--task", "adding", "--methods", "gru", "--report", "base.jsonl", "--out", "b"],
        2,
        "--report base.jsonl holds run records",
        unchanged=["base.jsonl"],
    ),
    Case(
        "1 bench --report is its own timing store",
        ["bench", "--task", "adding", "--methods", "gru", "--out", "b"]
        + ["--report", "b/timing.jsonl"],
        2,
        "--report b/timing.jsonl is the timing records (--out) of this command",
    ),
    # 2. data that differ never pass as the published data
    Case(
        "2 data verify hashes a file whose mtime was set back",
        ["data", "verify", "ptb", "--data-dir", "d"],
        2,
        "sha256 differs for ptb.valid.txt",
        patch="tampered_ptb",
    ),
    Case(
        "2 run refuses a file whose mtime was set back",
        ["run", "--tasks", "ptb", "--methods", "gru", "--data-dir", "d", "--out", "s.jsonl"],
        2,
        "do not match the published checksums (sha256 differs for ptb.valid.txt)",
        patch="tampered_ptb",
    ),
    # 3. no input stops a sweep in the middle: (a) refused before the first run ...
    Case("3 data_seed=-1", [*RUN, "--set", "data_seed=-1"], 2, "data_seed=-1 is out of range"),
    Case(
        "3 noise_std=-1 on two tasks",
        ["run", "--tasks", "adding,synthetic", "--methods", "gru,lstm", "--set", "noise_std=-1"]
        + ["--out", "s.jsonl"],
        2,
        "noise_std=-1 is out of range for synthetic",
    ),
    Case("3 seq_len=1e10", [*RUN, "--set", "seq_len=10000000000"], 2, "seq_len=10000000000 is"),
    Case("3 n_train=1e12", [*RUN, "--set", "n_train=1000000000000"], 2, "n_train=1000000000000"),
    Case(
        "3 regular_ms=1e-9",
        ["run", "--tasks", "freq-discrimination", "--methods", "gru", "--set", "regular_ms=1e-9"],
        2,
        "regular_ms",
    ),
    Case(
        "3 update_bias=1e308",
        ["run", "--tasks", "adding", "--methods", "skip-rnn", "--set", "update_bias=1e308"],
        2,
        "update_bias=1e+308 is out of range for skip-rnn",
    ),
    Case(
        "3 seed 2**64",
        [*RUN, "--seeds", "18446744073709551616"],
        2,
        "seed 18446744073709551616 is out of range",
    ),
    Case(
        "3 sweep file workers 1e20",
        ["run", "--config", "w.toml", "--out", "s.jsonl"],
        2,
        "w.toml: 'workers' expects an integer in [1, 1024], got 100000000000000000000",
        files={"w.toml": 'tasks = "adding"\nmethods = "gru"\nworkers = 100000000000000000000\n'},
    ),
    Case(
        "3 num_layers=100000",
        [*RUN, "--set", "num_layers=100000"],
        2,
        "num_layers=100000 is out of range",
    ),
    Case(
        "3 rhn depth=100000",
        ["run", "--tasks", "adding", "--methods", "rhn", "--set", "depth=100000"],
        2,
        "depth=100000 is out of range for rhn",
    ),
    Case("3 threads 1e6", [*RUN, "--threads", "1000000"], 2, "--threads: must be <= 1024"),
    # ... and (b) a run that fails inside is its failed record; the sweep goes on, exit 1
    Case(
        "3 an allocation failure inside a run",
        ["run", "--tasks", "adding,synthetic", "--methods", "gru", "--out", "s.jsonl"],
        1,
        "1 run(s) failed",
        records=[("gru", "adding", "failed"), ("gru", "synthetic", "ok")],
        patch="adding_out_of_memory",
    ),
    Case(
        "3 a thread pool that cannot start",
        ["run", "--tasks", "adding,synthetic", "--methods", "gru", "--out", "s.jsonl"],
        1,
        "2 run(s) failed",
        records=[("gru", "adding", "failed"), ("gru", "synthetic", "failed")],
        patch="threads_fail",
    ),
    Case(
        "3 bad input met inside a run",
        ["run", "--tasks", "adding,synthetic", "--methods", "gru", "--out", "s.jsonl"],
        1,
        "1 run(s) failed",
        records=[("gru", "adding", "ok"), ("gru", "synthetic", "failed")],
        patch="synthetic_data_error",
    ),
    # 4. the gate cannot pass on nothing
    Case(
        "4 compare with an empty reference",
        ["compare", "empty.jsonl", "base.jsonl"],
        1,
        "FAIL: 0 matched, 0 drifted, 0 missing, 1 new",
        files={"empty.jsonl": ""},
    ),
    Case(
        "4 compare with no run in both",
        ["compare", "base.jsonl", "other.jsonl"],
        1,
        "FAIL: 0 matched, 0 drifted, 1 missing, 1 new",
        files={"other.jsonl": json.dumps(dict(GRU_ADDING, run_id="0" * 16)) + "\n"},
    ),
    Case(
        "4 compare --allow-empty",
        ["compare", "empty.jsonl", "base.jsonl", "--allow-empty"],
        0,
        "PASS: 0 matched",
        files={"empty.jsonl": ""},
    ),
    Case(
        "4 --tol naming no measure",
        ["compare", "base.jsonl", "base.jsonl", "--tol", "bogus=1"],
        2,
        "--tol bogus: no measure of the records is bogus",
    ),
    # 5. empty and odd values
    Case("5 --config ''", ["run", "--config", ""], 2, "argument --config: expects a non-empty"),
    Case("5 --suite ''", ["run", "--suite", ""], 2, "argument --suite: expects a non-empty"),
    Case("5 --out ''", [*RUN, "--out", ""], 2, "argument --out: expects a non-empty value"),
    Case("5 --select ''", [*RUN, "--select", ""], 2, "argument --select: expects a non-empty"),
    Case(
        "5 a NaN token in a record",
        ["report", "nan.jsonl", "--out", "n.md", "--no-figures"],
        2,
        "nan.jsonl:1: malformed record skipped (NaN is not a JSON value",
        files={"nan.jsonl": _swap(STORE, '"mse": ', '"mse": NaN, "was": ')},
    ),
    Case(
        "5 an Infinity token in a record",
        ["report", "inf.jsonl", "--out", "n.md", "--no-figures"],
        2,
        "inf.jsonl:1: malformed record skipped (Infinity is not a JSON value",
        files={"inf.jsonl": _swap(STORE, '"mse": ', '"mse": Infinity, "was": ')},
    ),
    Case(
        "5 a record with an unknown status",
        ["report", "st.jsonl", "--out", "n.md", "--no-figures"],
        2,
        "status: expected one of ok, failed",
        files={"st.jsonl": _swap(STORE, '"status": "ok"', '"status": "weird"')},
    ),
    Case(
        "5 run --report unwritable, before training",
        [*RUN, "--out", "s.jsonl", "--report", "blocker/x.md"],
        2,
        "cannot write blocker/x.md: blocker is a file, not a folder",
        records=[],
    ),
    Case(
        "5 --out below a file",
        [*RUN, "--out", "blocker/x.jsonl", "--no-report"],
        2,
        "cannot write results to blocker/x.jsonl: blocker is a file, not a folder",
    ),
    Case(
        "5 --out /dev/null",
        [*RUN, "--out", "/dev/null"],
        2,
        "--out /dev/null: it is a character device, not a folder",
    ),
    Case(
        "5 --out a .jsonl device",
        [*RUN, "--out", "fifo.jsonl", "--no-report"],
        2,
        "cannot write results to fifo.jsonl: it is a named pipe, not a regular file",
        patch="fifo",
    ),
    Case("5 harness data", ["data"], 2, "the following arguments are required: action ("),
    Case(
        "5 one changed Bonn file is named",
        ["data", "verify", "seizures", "--data-dir", "d"],
        2,
        "sha256 differs for bonn_eeg/S/S001.txt",
        patch="tampered_bonn",
    ),
    # 6. a full disk, wherever a sweep meets it, loses no finished run: the sweep stops (no run
    # starts any more), one line names the filesystem and where the records are, exit 2
    Case(
        "6 a full disk at the record append",
        [*SWEEP, "gru,rnn,lstm"],
        2,
        "(ENOSPC: No space left on device) writing s.jsonl; 1 finished run(s) recorded in "
        "s.jsonl; 1 finished run(s) kept in ",
        files={"s.jsonl": STORE},
        records=[BASE, ("gru", "adding", "ok")],
        full=("s.jsonl", 1),
        kept=[("rnn", "adding", "ok")],
    ),
    Case(
        "6 a full disk at the claims file",
        [*SWEEP, "gru,rnn"],
        2,
        "writing s.jsonl.claims; 1 finished run(s) recorded in s.jsonl; 1 run(s) not started",
        files={"s.jsonl": STORE, "s.jsonl.claims": CLAIM},
        records=[BASE, ("gru", "adding", "ok")],
        full=(".s.jsonl.claims.*", 1),
    ),
    Case(
        "6 a full disk at the leaderboard",
        [*SWEEP, "gru"],
        2,
        "writing s.md; the leaderboard was not written, the sweep's records are in s.jsonl",
        files={"s.jsonl": STORE},
        records=[BASE, ("gru", "adding", "ok")],
        full=(".s.md.*", 0),
    ),
    Case(
        "6 a full disk at a checkpoint",
        [*SWEEP, "gru,rnn", "--checkpoint-every", "0"],
        2,
        "writing s.jsonl.checkpoints/",
        files={"s.jsonl": STORE},
        records=[BASE, ("gru", "adding", "ok")],
        full=("s.jsonl.checkpoints/*", 0),
    ),
    Case(
        "6 a full disk at the TensorBoard events",
        [*SWEEP, "gru,rnn", "--log-dir", "tb"],
        2,
        "writing tb/adding_smoke/gru/",
        files={"s.jsonl": STORE},
        records=[BASE, ("gru", "adding", "ok")],
        full=("tb/*", 0),
        needs="tensorboard",
    ),
    Case(
        "6 a full disk at submitit's folder",
        [*SWEEP, "gru,rnn", "--executor", "submitit", "--slurm-local", "--slurm-folder", "sub"]
        + ["--slurm-array-parallelism", "1"],
        2,
        "writing sub; 1 finished run(s) recorded in s.jsonl; 1 run(s) not started",
        files={"s.jsonl": STORE},
        records=[BASE, ("gru", "adding", "ok")],
        full=("sub/*.pkl", 1),
        needs="submitit",
    ),
    # 7. plugins and options (issue 50, section 2)
    Case(
        "7 --paper --against a method with no records, LaTeX on",
        ["report", "base.jsonl", "--paper", "--against", "lstm", "--out-dir", "p", "--no-figures"],
        0,
        "warning: --against lstm: no ok record of it in these records, so no comparison",
        unchanged=["base.jsonl"],
    ),
    Case(
        "7 --include registers a class that is not a Method",
        ["run", "--tasks", "adding", "--methods", "not-a-method", "--include", "nm.py"]
        + ["--out", "s.jsonl"],
        2,
        "method 'not-a-method' (--include ",
        files={"nm.py": NOT_A_METHOD},
        records=[],
    ),
    Case(
        "7 --include registers a Method that lacks its parts",
        ["run", "--tasks", "adding", "--methods", "half-method", "--include", "half.py"]
        + ["--out", "s.jsonl"],
        2,
        "class Half does not override cost(); overrides neither forward() nor init_state() and",
        files={"half.py": HALF_METHOD},
        records=[],
    ),
    Case(
        "7 an included file calls sys.exit(0): list",
        ["list", "methods", "--include", "exits.py"],
        2,
        "exits.py failed to import: SystemExit: 0 (",
        files={"exits.py": EXITS},
    ),
    Case(
        "7 an included file calls sys.exit(0): run",
        [*RUN, "--include", "exits.py", "--out", "s.jsonl"],
        2,
        "exits.py failed to import: SystemExit: 0 (",
        files={"exits.py": EXITS},
        records=[],
    ),
    Case(
        "7 an included file calls sys.exit(0): check",
        ["check", "gru", "--only", "config", "--include", "exits.py"],
        2,
        "exits.py failed to import: SystemExit: 0 (",
        files={"exits.py": EXITS},
    ),
    Case(
        "7 run --select a band of width 0",
        [*RUN, "--select", "val-skip-band:50:0", "--out", "s.jsonl"],
        2,
        "selection rule 'val-skip-band:50:0': expects val-skip-band:TARGET:WIDTH",
        records=[],
    ),
    Case(
        "7 report --select a band of width 0",
        ["report", "base.jsonl", "--select", "val-skip-band:50:0", "--out", "x.md"],
        2,
        "WIDTH a number above 0",
        unchanged=["x.md"],  # not written
    ),
    Case(
        "7 run --select a nearest target above 100",
        [*RUN, "--select", "val-skip-nearest:150", "--out", "s.jsonl"],
        2,
        "selection rule 'val-skip-nearest:150': expects val-skip-nearest:TARGET, TARGET a Skip %",
        records=[],
    ),
    Case(
        "7 report --select a nearest target below 0",
        ["report", "base.jsonl", "--select", "val-skip-nearest:-5", "--out", "x.md"],
        2,
        "TARGET a Skip % from 0 to 100",
        unchanged=["x.md"],
    ),
    Case(
        "7 check --task without its data",
        ["check", "gru", "--only", "training", "--task", "ptb"],
        2,
        "task 'ptb': missing data file ",
        patch="no_data",
    ),
    # 8. plugins of every kind refuse nonsense at registration (issue 63, section 1)
    Case(
        "8 --include an executor with an option of harness run's own: list",
        ["list", "executors", "--include", "clash.py"],
        2,
        "executor 'clash' (--include ",
        files={"clash.py": CLASH},
    ),
    Case(
        "8 --include an executor with an option of harness run's own: run",
        [*RUN, "--include", "clash.py", "--out", "s.jsonl"],
        2,
        "class Stub has the option 'out' (--out), one of harness run's own",
        files={"clash.py": CLASH},
        records=[],
    ),
    Case(
        "8 --include an executor with an option another executor declares otherwise",
        ["list", "executors", "--include", "w.py"],
        2,
        "has the option 'workers', which executor 'local' declares otherwise",
        files={"w.py": EXECUTOR.format(name="w", options='(Option("workers"),)')},
    ),
    Case(
        "8 --include a metric whose range is inverted",
        [*RUN, "--include", "m.py", "--out", "s.jsonl"],
        2,
        "metric 'my_score': range must be (low, high), each a finite number or None",
        files={"m.py": INVERTED},
        records=[],
    ),
    Case(
        "8 new method with a 300-character name",
        ["new", "method", "a" * 300, "--kind", "skip"],
        2,
        "is not a method name: lower-case letters and digits, words joined by '-' or '_', "
        "starting with a letter, at most 64 characters",
    ),
    Case(
        "8 new method into a folder whose name is too long",
        ["new", "method", "my-skip", "--kind", "skip", "--out", "a" * 300],
        2,
        "cannot write into aaa",
    ),
    # 9. reports, docs blocks and --where filters (issue 63, section 1)
    Case(
        "9 --print against without --against",
        ["report", "base.jsonl", "--paper", "--print", "against"],
        2,
        "--print against needs --against METHOD",
    ),
    Case(
        "9 --where a float field given a word",
        ["report", "base.jsonl", "--print", "count", "--where", "train.lr=abc"],
        2,
        "--where train.lr=abc: 'train.lr' expects a number, got 'abc', so no record can match",
    ),
    Case(
        "9 --where a float field given nan",
        ["report", "base.jsonl", "--print", "count", "--where", "train.lr=nan"],
        2,
        "--where train.lr=nan: 'train.lr' expects a finite number, got 'nan', so no record can",
    ),
    Case(
        "9 --where an integer field given a fraction",
        ["report", "base.jsonl", "--print", "count", "--where", "hidden_size=1.5"],
        2,
        "--where hidden_size=1.5: 'hidden_size' expects an integer, got '1.5'",
    ),
    Case(
        "9 --where a method not registered",
        ["report", "base.jsonl", "--print", "count", "--where", "method=gru,nosuch"],
        2,
        "--where method=gru,nosuch: Unknown method 'nosuch'.",
    ),
    Case(
        "9 --where a task not registered",
        ["report", "base.jsonl", "--print", "count", "--where", "task=nosuch"],
        2,
        "--where task=nosuch: Unknown task 'nosuch'.",
    ),
    Case(
        "9 --where a well-formed filter that matches nothing",
        ["report", "base.jsonl", "--print", "count", "--where", "train.lr=0.5"],
        0,
        "warning: --where train.lr=0.5: no record matches it",
    ),
    Case(
        "9 --where filters that match nothing together",
        ["report", "two.jsonl", "--print", "count", "--where", "task=synthetic"]
        + ["--where", "method=gru"],
        0,
        "warning: --where task=synthetic --where method=gru: no record matches all",
        files={
            "two.jsonl": STORE
            + json.dumps(
                next(r for r in RECORDS if r["task"] == "synthetic" and r["method"] == "lstm")
            )
            + "\n"
        },
    ),
    Case(
        "9 docs: a block's --include that raises",
        ["docs", "d.md"],
        2,
        "d.md:3: `harness report base.jsonl --include boom.py --print count` failed (exit 2): "
        "--include ",
        files={
            "d.md": "# D\n\n<!-- generated: harness report base.jsonl --include boom.py --print "
            "count -->\n<!-- end -->\n",
            "boom.py": "raise RuntimeError('boom')\n",
        },
        unchanged=["d.md"],
    ),
    Case(
        "9 docs --check: a block's --include that raises",
        ["docs", "--check", "d.md"],
        2,
        "boom.py failed to import: RuntimeError: boom (",
        files={
            "d.md": "# D\n\n<!-- generated: harness report base.jsonl --include boom.py --print "
            "count -->\n<!-- end -->\n",
            "boom.py": "raise RuntimeError('boom')\n",
        },
        unchanged=["d.md"],
    ),
    Case(
        "9 docs: a block that prints against without --against",
        ["docs", "d.md"],
        2,
        "d.md:3: `harness report base.jsonl --paper --print main,against` failed (exit 2): "
        "--print against needs --against",
        files={
            "d.md": "# D\n\n<!-- generated: harness report base.jsonl --paper --print "
            "main,against -->\nthe old table\n<!-- end -->\n",
        },
        unchanged=["d.md"],
    ),
    Case(
        "9 docs --check: a block whose filter matches nothing",
        ["docs", "--check", "d.md"],
        2,
        "d.md:3: `harness report base.jsonl --where train.lr=0.5 --print count`: warning: "
        "--where train.lr=0.5: no record matches it",
        files={
            "d.md": "# D\n\n<!-- generated: harness report base.jsonl --where train.lr=0.5 "
            "--print count -->\n\n1 records (0 failed, 0 from a dirty tree), 1 runs\n\n"
            "<!-- end -->\n",
        },
        unchanged=["d.md"],
    ),
    Case(
        "9 docs: a file with CRLF line endings",
        ["docs", "d.md"],
        0,
        "",
        files={"d.md": CRLF_DOC.format(body="the old count\r\n")},
        after={"d.md": CRLF_DOC.format(body=f"\r\n{COUNT}\r\n\r\n")},  # CRLF kept, no end added
    ),
    # 10. environment variables, leases and reruns (issue 63, section 1)
    Case(
        "10 a claim lease too long for the heartbeat",
        [*RUN, "--out", "s.jsonl"],
        2,
        "HARNESS_CLAIM_LEASE_S must be a number of seconds from 1 to 172800 (48 h) (got '1e308')",
        env={"HARNESS_CLAIM_LEASE_S": "1e308"},
        records=[],
    ),
    Case(
        "10 a rerun whose only runs left failed earlier",
        [*RUN, "--out", "s.jsonl"],
        1,
        "1 runs: 0 already recorded in s.jsonl, 1 failed earlier (kept; --retry-failed reruns",
        files={"s.jsonl": FAILED},
        unchanged=["s.jsonl"],
        records=[BASE[:2] + ("failed",)],
    ),
    # 11. Slurm and Ray options as a cluster user meets them (issue 63, section 2)
    Case(  # the kernel refuses at once: no Ray is imported or started, no timeout waited for
        "11 --ray-address at a port nothing listens on",
        [*RUN, "--executor", "ray", "--ray-address", "127.0.0.1:1", "--out", "s.jsonl"],
        2,
        "cannot connect to Ray at 127.0.0.1:1: Connection refused",
        records=[],
        needs="ray",
    ),
]


def _digest(p: Path) -> str | None:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


def _ptb(root: Path, monkeypatch) -> None:
    """Small PTB files under ``root/d/ptb`` whose sums the task publishes (patched)."""
    d = root / "d" / "ptb"
    d.mkdir(parents=True)
    sums = {}
    for i, name in enumerate(("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt")):
        text = " ".join(f"w{(7 * j + i) % 13}" for j in range(400)) + "\n"
        (d / name).write_text(text)
        sums[name] = hashlib.sha256(text.encode()).hexdigest()
    monkeypatch.setattr("tasks.ptb.SHA256", sums)


def _tamper(path: Path) -> None:
    """Change three bytes of ``path`` and set its mtime back (as ``cp -p`` or ``touch -r`` do)."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    for i in [i for i, b in enumerate(data) if chr(b).isdigit()][:3]:  # still numbers, or words
        data[i] = ord("0") + (data[i] - ord("0") + 1) % 10
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def _inject(fault: str, root: Path, monkeypatch) -> None:
    from harness import data

    if fault == "tampered_ptb":
        _ptb(root, monkeypatch)
        rows = data.status_rows(root / "d", verify=True, tasks=["ptb"])  # fills the sum cache
        assert rows[0]["status"] == "found", rows
        _tamper(root / "d" / "ptb" / "ptb.valid.txt")
    elif fault == "tampered_bonn":
        src = data.data_root() / "epileptic_seizure"
        if not (src / "bonn_eeg").is_dir():
            pytest.skip(f"the Bonn recordings are absent under {src.parent}")
        import shutil

        shutil.copytree(src, root / "d" / "epileptic_seizure")
        _tamper(root / "d" / "epileptic_seizure" / "bonn_eeg" / "S" / "S001.txt")
    elif fault == "adding_out_of_memory":

        def no_memory(self, seed):
            np.empty((2**62,), dtype=np.float64)  # numpy's MemoryError, as a huge split gives

        monkeypatch.setattr("tasks.adding.Adding.splits", no_memory)
    elif fault == "threads_fail":

        def no_threads(n):
            raise RuntimeError("OpenBLAS : Program is Terminated. Because you tried to allocate")

        monkeypatch.setattr("torch.set_num_threads", no_threads)
    elif fault == "synthetic_data_error":
        from harness.errors import DataError

        def gone(self, seed):
            raise DataError("missing data file synthetic.bin (deleted during the sweep)")

        monkeypatch.setattr("tasks.synthetic.Synthetic.splits", gone)
    elif fault == "fifo":
        os.mkfifo(root / "fifo.jsonl")
    elif fault == "no_data":
        (root / "empty").mkdir()
        monkeypatch.setenv("HARNESS_DATA_DIR", str(root / "empty"))
    else:
        raise AssertionError(fault)


def _full_disk(root: Path, pattern: str, after: int, monkeypatch) -> None:
    """Writes to the files under ``root`` matching ``pattern`` fail with ENOSPC after ``after``.

    Every way a sweep (or a library it uses) writes a file is caught: opened by name (``open``,
    ``io.open``, pathlib) or descriptor (``os.fdopen``) for writing, then pointed at
    ``/dev/full``, which fails writes with ENOSPC in the kernel, at the flush where a full disk
    fails them (a full disk still creates files); ``os.write`` on a descriptor (the store's
    appends). Each such write, or opening for writing, counts; opening for appending does not
    (the harness opens its store so to check it), it is only caught once the count is over.
    """
    real_open, real_write, seen = io.open, os.write, [0]

    def hit(fd: int, count: bool = True) -> bool:
        path = os.path.realpath(f"/proc/self/fd/{fd}")
        if not path.startswith(f"{root}/"):
            return False
        if not fnmatch.fnmatch(os.path.relpath(path, root), pattern):
            return False
        seen[0] += count
        return seen[0] > after

    def to_dev_full(fd: int) -> None:
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, fd)
        os.close(full)

    def full_open(file, mode="r", *args, **kwargs):
        writing = isinstance(file, (str, bytes, os.PathLike, int)) and set(mode) & set("wax+")
        count = "a" not in mode
        if isinstance(file, int) and writing and hit(file, count):
            to_dev_full(file)
        f = real_open(file, mode, *args, **kwargs)
        if not isinstance(file, int) and writing and hit(f.fileno(), count):
            to_dev_full(f.fileno())
        return f

    def full_write(fd, data):
        if hit(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    for target in ("builtins.open", "io.open"):
        monkeypatch.setattr(target, full_open)
    monkeypatch.setattr(os, "write", full_write)
    monkeypatch.setattr("harness.persistence.store.APPEND_RETRY_DELAYS_S", (0.0, 0.0))


def _finished_runs(monkeypatch) -> list[str]:
    """The run ids of every record an executor of a sweep gives back, as they come."""
    from harness import api

    finished: list[str] = []
    make = api.make_executor

    def tracked(*args, **kwargs):
        ex = make(*args, **kwargs)
        wait = ex.wait_any

        def wait_any():
            done = wait()
            finished.extend(rec["run_id"] for _, rec in done)
            return done

        ex.wait_any = wait_any
        return ex

    monkeypatch.setattr(api, "make_executor", tracked)
    return finished


def _check_nothing_lost(
    store: Path, cache: Path, line: str, finished: list[str], start: bytes
) -> list[dict]:
    """Every finished run is in the store (which began with ``start``) or in the one fallback
    file (under the harness's ``cache``), which ``line`` names; returns the fallback's records.
    """
    data = store.read_bytes()
    assert data.startswith(start), "the store lost bytes it held"
    stored = [json.loads(x) for x in data[len(start) :].decode().splitlines()]
    files = sorted((cache / "condrnn-harness" / "unwritten").glob("*.jsonl"))
    assert len(files) <= 1, files
    kept = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    if kept:
        assert f"kept in {files[0]} (once there is room: cat {files[0]} >> " in line, line
    assert sorted(finished) == sorted(r["run_id"] for r in stored + kept)
    return kept


# a thread's traceback (tensorboard's writer on a full disk) would be a stderr line too
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_reliability(case, tmp_path, monkeypatch, capsys):
    if case.needs and importlib.util.find_spec(case.needs) is None:  # found, not imported
        pytest.skip(f"the extra that gives {case.needs} is not installed")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("harness.data.sums._SUM_CACHES", {})
    (tmp_path / "blocker").write_text("a file, not a folder")
    files = {"base.jsonl": STORE, **case.files}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    if case.patch:
        _inject(case.patch, tmp_path, monkeypatch)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    before = {name: _digest(tmp_path / name) for name in case.unchanged}
    if case.full:
        finished = _finished_runs(monkeypatch)
        _full_disk(tmp_path, *case.full, monkeypatch)
    capsys.readouterr()
    with isolated_registry():  # what an --include registers stays in this case
        try:
            code = main(case.argv)
        except SystemExit as e:  # argparse's usage errors
            code = e.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == case.code, "\n".join(err)
    assert (err and case.says in err[-1]) if case.says else not err, "\n".join(err)
    assert not any("Traceback" in line for line in err)
    if case.full:
        err = [line for line in err if not PROGRESS.search(line)]
        assert "ENOSPC" in err[-1]
        store, cache = tmp_path / "s.jsonl", tmp_path / "cache"
        kept = _check_nothing_lost(store, cache, err[-1], finished, STORE.encode())
        assert sorted((r["method"], r["task"], r["status"]) for r in kept) == sorted(case.kept)
        claims = tmp_path / "s.jsonl.claims"  # released: as before the sweep
        assert (claims.read_text() if claims.exists() else None) == case.files.get(claims.name)
    if case.code == 2:
        assert len(err) == 1, "\n".join(err)
    for name in case.unchanged:
        assert _digest(tmp_path / name) == before[name], f"{name} changed"
    for name, text in case.after.items():
        assert (tmp_path / name).read_bytes() == text.encode(), name
    if case.records is not None:
        store = tmp_path / "s.jsonl"
        recs = [json.loads(x) for x in store.read_text().splitlines()] if store.exists() else []
        assert sorted((r["method"], r["task"], r["status"]) for r in recs) == sorted(case.records)
        for r in recs:
            if r["status"] == "failed":
                assert r["error"] and "\n" not in r["error"]


class _TwoSlots:
    """An executor of two slots whose runs finish one per ``wait_any``, in order."""

    in_process = False

    def __init__(self) -> None:
        self.queue: list[str] = []
        self.cancelled = False

    def slots(self) -> int:
        return 2

    def submit(self, cfg: str, on_epoch=None) -> str:
        self.queue.append(cfg)
        return cfg

    def wait_any(self) -> list:
        handle = self.queue.pop(0)
        return [(handle, {"run_id": handle})]

    def cancel(self) -> None:
        self.cancelled = True


def test_a_claim_that_meets_a_full_disk_lets_the_runs_in_flight_finish():
    from harness import api
    from harness.errors import WriteFailed

    full = WriteFailed("s.jsonl.claims", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    def todo():  # claims "a" and "b", then the claims file cannot be written
        yield "a"
        yield "b"
        raise full

    ex, got = _TwoSlots(), []
    with pytest.raises(WriteFailed) as raised:
        for cfg, _ in api._pull(ex, todo(), lambda event: None):
            got.append(cfg)
    assert got == ["a", "b"] and not ex.cancelled  # "b" was in flight when "c" met the disk
    assert raised.value is full


@pytest.fixture
def small_fs(tmp_path):
    """A 200 KiB tmpfs at ``tmp_path/fs`` (root only; skipped where it cannot be mounted)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if shutil.which("mount") is None or not Path("/proc/self/mounts").exists():
        pytest.skip("no mount command here")
    fs = tmp_path / "fs"
    fs.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(fs)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield fs
    finally:
        subprocess.run(["umount", "-l", str(fs)], capture_output=True)


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("free_pages", [1, 3])
def test_the_reported_sweep_into_a_full_tmpfs_loses_no_finished_run(
    free_pages, small_fs, tmp_path, monkeypatch, capsys
):
    """The reported sweep, into a store on a real full filesystem (a filler file leaves it
    ``free_pages`` pages): its records go to the store or the fallback, one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("harness.persistence.store.APPEND_RETRY_DELAYS_S", (0.0, 0.0))
    store = small_fs / "store" / "runs.jsonl"
    store.parent.mkdir()
    start = json.dumps(dict(GRU_ADDING, run_id="0" * 16)) + "\n"  # a run of no other sweep
    store.write_text(start)
    fs = os.statvfs(small_fs)
    (small_fs / "filler").write_bytes(bytes((fs.f_bavail - free_pages) * fs.f_frsize))
    finished = _finished_runs(monkeypatch)
    capsys.readouterr()
    code = main(
        ["run", "--tasks", "adding", "--methods", "gru,skip-rnn,sa-rnn", "--seeds", "0-3"]
        + ["--preset", "smoke", "--out", str(store.parent)]
    )
    err = capsys.readouterr().err.splitlines()
    said = [line for line in err if line.strip() and not PROGRESS.search(line)]
    assert code == 2 and len(said) == 1, "\n".join(err)
    assert said[0].startswith(f"error: the sweep stopped: no space on the filesystem at {small_fs}")
    assert "(ENOSPC: No space left on device)" in said[0] and "run(s) not started" in said[0]
    assert finished  # a run finished before the disk was full
    _check_nothing_lost(store, tmp_path / "cache", said[0], finished, start.encode())
    assert not store.with_name("runs.jsonl.claims").exists()
    assert not store.with_name("LEADERBOARD.md").exists()


def test_a_selection_that_keeps_no_row_says_so_in_the_table_and_on_stderr(tmp_path, harness):
    """A valid rule that no variant meets: exit 0, one warning line, the table says why."""
    (tmp_path / "s.jsonl").write_text(STORE)  # gru: Skip % 0, outside the band
    warning = (
        "warning: --select val-skip-band:50:5 keeps no method row of adding (smoke): no variant "
        "qualifies (the report says why, per method)\n"
    )
    rule = ["--select", "val-skip-band:50:5", "--no-figures"]
    code, _, err = harness("report", "s.jsonl", "--out", "x.md", "--format", "md,tex", *rule)
    assert (code, err) == (0, warning)
    table = (tmp_path / "x.md").read_text().split("## adding (smoke preset)\n")[1]
    no_row = "No method row: val-skip-band:50:5 keeps no variant of any method here"
    assert table.lstrip().startswith(no_row)  # where the rows would be
    assert "- gru: no row (val-skip-band:50:5: no variant of 1 in the band)." in table
    assert f"% adding (smoke preset): {no_row}" in (tmp_path / "x.tex").read_text()
    code, _, err = harness("report", "s.jsonl", "--paper", "--out-dir", "p", *rule)
    assert (code, err) == (0, warning)
    assert f"- {no_row}" in (tmp_path / "p" / "paper_adding_smoke.md").read_text()
    code, out, err = harness(*RUN, "--out", "r.jsonl", "--select", "val-skip-band:50:5")
    assert code == 0 and err.splitlines()[-1] == warning.strip()
    assert "--select val-skip-band:50:5 keeps no row: no table" in out  # the table it prints


def test_an_executor_option_of_harness_runs_own_is_refused_through_harness_include(
    tmp_path, monkeypatch, harness
):
    """``$HARNESS_INCLUDE`` is ``--include``: the clash is one line, exit 2, whatever the command;
    an option that clashes with nothing is a flag of ``harness run``, as through --include."""
    from harness.components import plugins

    (tmp_path / "clash.py").write_text(CLASH)
    (tmp_path / "mine.py").write_text(EXECUTOR.format(name="mine", options='(Option("my_x"),)'))
    line = "error: executor 'clash' (--include "
    for argv in (["list", "executors"], [*RUN, "--executor", "clash", "--out", "s.jsonl"]):
        with isolated_registry():
            monkeypatch.setenv(plugins.INCLUDE_ENV, str(tmp_path / "clash.py"))
            plugins._loaded = False  # a new process: nothing imported yet
            code, _, err = harness(*argv)
        assert code == 2 and err.startswith(line) and err.count("\n") == 1, err
        assert "has the option 'out' (--out), one of harness run's own" in err
    assert not (tmp_path / "s.jsonl").exists()
    with isolated_registry():
        monkeypatch.setenv(plugins.INCLUDE_ENV, str(tmp_path / "mine.py"))
        plugins._loaded = False
        code, out, _ = harness("run", "--help")
    assert code == 0 and "--executor mine:\n  --my-x MY_X" in out


def test_an_executor_that_makes_no_progress_stops_the_sweep_and_releases_its_claims(
    tmp_path, monkeypatch, harness
):
    """``wait_any`` returning nothing at once, forever: after ``STALL_S`` one line naming the
    executor, exit 2, the run cancelled, the claims file as before the sweep, no record."""
    monkeypatch.setattr("harness.api.STALL_S", 0.5)
    (tmp_path / "stuck.py").write_text(EXECUTOR.format(name="stuck", options="()"))
    (tmp_path / "s.jsonl.claims").write_text(CLAIM)
    with isolated_registry():
        code, _, err = harness(
            *RUN, "--executor", "stuck", "--include", "stuck.py", "--out", "s.jsonl"
        )
    bar = re.compile(r" 0/1 *$")  # the progress line: run 0 of 1, no bar drawn
    said = [x for x in err.splitlines() if x.strip() and not bar.search(x)]
    said = [x for x in said if not PROGRESS.search(x)]
    assert code == 2 and len(said) == 1, err
    assert said[0].startswith("error: executor 'stuck' (--include ") and "no progress" in said[0]
    assert (tmp_path / "s.jsonl.claims").read_text() == CLAIM
    store = tmp_path / "s.jsonl"
    assert not store.exists() or store.read_text() == ""  # no record


class _Slow(_TwoSlots):
    """``_TwoSlots`` polling: ``wait_any`` waits a while and returns nothing, three times a run."""

    polls = 0

    def wait_any(self) -> list:
        self.polls += 1
        time.sleep(0.05)
        return [] if self.polls % 4 else super().wait_any()


def test_an_executor_that_waits_is_not_taken_for_one_that_makes_no_progress(monkeypatch):
    """Empty returns that wait (``MIN_WAIT_S``) are progress however long the runs take; at once,
    again and again, they are not: the loop stops with the executor's name, its runs cancelled."""
    from harness import api
    from harness.errors import HarnessError

    monkeypatch.setattr(api, "STALL_S", 0.1)  # under the 0.15 s of three polls in a row
    monkeypatch.setattr(api, "MIN_WAIT_S", 0.01)
    ex = _Slow()
    got = [cfg for cfg, _ in api._pull(ex, iter("abc"), lambda event: None)]
    assert got == ["a", "b", "c"] and ex.polls == 12 and not ex.cancelled
    stuck = _TwoSlots()
    stuck.wait_any = list  # returns [] at once
    with pytest.raises(HarnessError, match=r"^executor '_TwoSlots' \(module test_reliability\) "):
        list(api._pull(stuck, iter("ab"), lambda event: None))
    assert stuck.cancelled
