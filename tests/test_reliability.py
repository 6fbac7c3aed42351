"""Reliability: no output can overwrite records, tampered data never pass, no input stops a sweep
halfway, the drift gate cannot pass on nothing, empty and odd values are refused.

One table, one row per case: the files the case starts from, the command (called in-process, as
the shell would), the exit code, what the last stderr line says, which files must keep their
bytes, and for a sweep in which a run fails, the records that must be in the store afterwards.
Bad input (exit 2) is exactly one stderr line.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from plugins import isolated_registry

from harness.cli import main

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "smoke.jsonl"
RECORDS = [json.loads(line) for line in REFERENCE.read_text().splitlines()]
GRU_ADDING = next(r for r in RECORDS if (r["method"], r["task"], r["seed"]) == ("gru", "adding", 0))
STORE = json.dumps(GRU_ADDING) + "\n"  # a store holding one real record
RUN = ["run", "--tasks", "adding", "--methods", "gru"]
SPEEDUP = ["bench", "--speedup", "--methods", "sa-rnn", "--hidden", "8", "--batches", "1"]
SPEEDUP += ["--skips", "0.5", "--seq-len", "4"]
REGISTER = "from harness.method import Method\nfrom harness.registry import register_method\n\n\n"
NOT_A_METHOD = REGISTER + '@register_method("not-a-method")\nclass NotAMethod:\n    """No."""\n'
HALF_METHOD = (
    REGISTER + '@register_method("half-method")\nclass Half(Method):\n    """No cost."""\n'
)
EXITS = "import sys\n\nsys.exit(0)\n"  # a plugin that ends the process as it is imported


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
        says: a text the last stderr line contains.
        files: the files the case starts from (name -> text); ``base.jsonl`` is always there.
        unchanged: files whose bytes must not change.
        records: for a sweep with a failed run, ``(method, task, status)`` of every record the
            store must hold afterwards (its --out is ``s.jsonl``).
        patch: a fault injected before the command (``_FAULTS``).
    """

    id: str
    argv: list[str]
    code: int
    says: str
    files: dict[str, str] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    records: list[tuple[str, str, str]] | None = None
    patch: str | None = None


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
    # 6. plugins and options (issue 50, section 2)
    Case(
        "6 --paper --against a method with no records, LaTeX on",
        ["report", "base.jsonl", "--paper", "--against", "lstm", "--out-dir", "p", "--no-figures"],
        0,
        "warning: --against lstm: no ok record of it in these records, so no comparison",
        unchanged=["base.jsonl"],
    ),
    Case(
        "6 --include registers a class that is not a Method",
        ["run", "--tasks", "adding", "--methods", "not-a-method", "--include", "nm.py"]
        + ["--out", "s.jsonl"],
        2,
        "method 'not-a-method' (--include ",
        files={"nm.py": NOT_A_METHOD},
        records=[],
    ),
    Case(
        "6 --include registers a Method that lacks its parts",
        ["run", "--tasks", "adding", "--methods", "half-method", "--include", "half.py"]
        + ["--out", "s.jsonl"],
        2,
        "class Half does not override cost(); overrides neither forward() nor init_state() and",
        files={"half.py": HALF_METHOD},
        records=[],
    ),
    Case(
        "6 an included file calls sys.exit(0): list",
        ["list", "methods", "--include", "exits.py"],
        2,
        "exits.py failed to import: SystemExit: 0 (",
        files={"exits.py": EXITS},
    ),
    Case(
        "6 an included file calls sys.exit(0): run",
        [*RUN, "--include", "exits.py", "--out", "s.jsonl"],
        2,
        "exits.py failed to import: SystemExit: 0 (",
        files={"exits.py": EXITS},
        records=[],
    ),
    Case(
        "6 an included file calls sys.exit(0): check",
        ["check", "gru", "--only", "config", "--include", "exits.py"],
        2,
        "exits.py failed to import: SystemExit: 0 (",
        files={"exits.py": EXITS},
    ),
    Case(
        "6 run --select a band of width 0",
        [*RUN, "--select", "val-skip-band:50:0", "--out", "s.jsonl"],
        2,
        "selection rule 'val-skip-band:50:0': expects val-skip-band:TARGET:WIDTH",
        records=[],
    ),
    Case(
        "6 report --select a band of width 0",
        ["report", "base.jsonl", "--select", "val-skip-band:50:0", "--out", "x.md"],
        2,
        "WIDTH a number above 0",
        unchanged=["x.md"],  # not written
    ),
    Case(
        "6 run --select a nearest target above 100",
        [*RUN, "--select", "val-skip-nearest:150", "--out", "s.jsonl"],
        2,
        "selection rule 'val-skip-nearest:150': expects val-skip-nearest:TARGET, TARGET a Skip %",
        records=[],
    ),
    Case(
        "6 report --select a nearest target below 0",
        ["report", "base.jsonl", "--select", "val-skip-nearest:-5", "--out", "x.md"],
        2,
        "TARGET a Skip % from 0 to 100",
        unchanged=["x.md"],
    ),
    Case(
        "6 check --task without its data",
        ["check", "gru", "--only", "training", "--task", "ptb"],
        2,
        "task 'ptb': missing data file ",
        patch="no_data",
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


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_reliability(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("harness.data_sums._SUM_CACHES", {})
    (tmp_path / "blocker").write_text("a file, not a folder")
    files = {"base.jsonl": STORE, **case.files}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    if case.patch:
        _inject(case.patch, tmp_path, monkeypatch)
    before = {name: _digest(tmp_path / name) for name in case.unchanged}
    capsys.readouterr()
    with isolated_registry():  # what an --include registers stays in this case
        try:
            code = main(case.argv)
        except SystemExit as e:  # argparse's usage errors
            code = e.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == case.code, "\n".join(err)
    assert err and case.says in err[-1], "\n".join(err)
    assert not any("Traceback" in line for line in err)
    if case.code == 2:
        assert len(err) == 1, "\n".join(err)
    for name in case.unchanged:
        assert _digest(tmp_path / name) == before[name], f"{name} changed"
    if case.records is not None:
        store = tmp_path / "s.jsonl"
        recs = [json.loads(x) for x in store.read_text().splitlines()] if store.exists() else []
        assert sorted((r["method"], r["task"], r["status"]) for r in recs) == sorted(case.records)
        for r in recs:
            if r["status"] == "failed":
                assert r["error"] and "\n" not in r["error"]


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
    assert no_row in out  # the leaderboard it prints
