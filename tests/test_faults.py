"""Faults that need real processes: two sweeps on one store, kill -9 and SIGTERM of a sweep.

Each starts ``harness run`` as a subprocess (about 3 s of torch import per process), so these
are ``slow``.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.persistence.store import Store

pytestmark = pytest.mark.slow

SWEEP = ["--tasks", "adding", "--methods", "rnn,gru", "--seeds", "0-3", "--no-report"]


def harness_process(tmp_path: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness", "run", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def session_members(sid: int) -> list[tuple[int, str]]:
    """``(pid, command line)`` of the live (not zombie) processes of session ``sid``."""
    members = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append((int(d.name), cmd))
    return members


def wait_for(predicate, timeout: float, step: float = 0.2):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


@pytest.mark.parametrize("mode", ["lock", "files"])
def test_two_sweeps_on_one_store_split_the_runs(tmp_path, mode):
    args = [*SWEEP, "--set", "train.epochs=4", "--out", "s.jsonl", "--store-mode", mode]
    procs = [harness_process(tmp_path, *args) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    recs, problems = Store(tmp_path / "s.jsonl").read()
    counts = Counter(r["run_id"] for r in recs)
    assert problems == [] and len(counts) == 8
    assert max(counts.values()) == 1, f"duplicated runs: {counts}"
    assert not (tmp_path / "s.jsonl.claims").exists()
    assert not list(tmp_path.glob("s.jsonl.parts/*")) and not (tmp_path / "s.jsonl.lock").exists()


def start_pool_sweep(tmp_path: Path) -> tuple[subprocess.Popen, list]:
    """A ``--workers 2`` sweep in its own session, once both workers are up."""
    p = harness_process(
        tmp_path,
        *SWEEP,
        "--set",
        "train.epochs=100000",  # runs far longer than the test waits
        "--workers",
        "2",
        "--out",
        "s.jsonl",
        start_new_session=True,
    )

    def workers():  # forked from the fork server, they share its command line
        ws = [m for m in session_members(p.pid) if "forkserver import main" in m[1]]
        return ws if len(ws) >= 3 else None  # the server and two workers

    found = wait_for(workers, 120)
    if not found:
        p.kill()
        pytest.fail(f"no workers appeared: {p.communicate()}")
    time.sleep(1.0)  # the workers are inside their runs
    return p, found


def test_killing_the_parent_of_a_worker_pool_leaves_no_process(tmp_path):
    # the workers are forked from the fork server, not the driver: they watch the driver itself
    p, _ = start_pool_sweep(tmp_path)
    os.kill(p.pid, signal.SIGKILL)
    try:
        p.communicate(timeout=30)  # its pipes close once the workers are gone too
        left = wait_for(lambda: not session_members(p.pid), 10)
        assert left, f"orphans: {session_members(p.pid)}"
    finally:  # a failure leaves no orphan training on
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)


def test_sigterm_stops_a_pooled_sweep_like_ctrl_c(tmp_path):
    p, _ = start_pool_sweep(tmp_path)
    os.kill(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 143, err
    assert "interrupted (SIGTERM); finished runs are recorded" in err
    assert "Traceback" not in err
    assert wait_for(lambda: not session_members(p.pid), 10), session_members(p.pid)
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert all(json.loads(x)["status"] == "ok" for x in lines)  # records intact
    assert not (tmp_path / "s.jsonl.claims").exists()  # its claims were dropped


def test_a_run_killed_mid_training_goes_on_from_its_checkpoint(tmp_path):
    """kill -9 in the middle of a run: the next sweep resumes it from its last checkpoint and
    records what an uninterrupted run records (same history and metrics)."""
    args = ["--tasks", "adding", "--methods", "gru", "--seeds", "0", "--no-report"]
    args += ["--set", "train.epochs=150", "--checkpoint-every", "0"]
    p = harness_process(tmp_path, *args, "--out", "s.jsonl", start_new_session=True)
    folder = tmp_path / "s.jsonl.checkpoints"
    if not wait_for(lambda: any(folder.glob("*.pt")), 120, 0.05):
        p.kill()
        pytest.fail(f"no checkpoint appeared: {p.communicate()}")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert Store(tmp_path / "s.jsonl").read()[0] == []  # nothing recorded yet
    again = harness_process(tmp_path, *args, "--out", "s.jsonl")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    whole = harness_process(tmp_path, *args, "--out", "whole.jsonl", "--no-checkpoint")
    assert whole.communicate(timeout=300) and whole.returncode == 0
    (rec,), _ = Store(tmp_path / "s.jsonl").read()
    (ref,), _ = Store(tmp_path / "whole.jsonl").read()
    assert rec["time"]["resumed"][0]["epoch"] > 0
    assert rec["history"] == ref["history"] and rec["metrics"] == ref["metrics"]
    assert not folder.exists() and not (tmp_path / "whole.jsonl.checkpoints").exists()


def test_a_driver_killed_in_files_mode_loses_no_run_its_jobs_finish(tmp_path):
    """--store-mode files: submitit jobs (local processes here) outlive a driver killed with
    kill -9 and write their records beside the store; the next sweep merges them and reruns
    nothing."""
    pytest.importorskip("submitit")
    args = ["--tasks", "adding", "--methods", "gru", "--seeds", "0-1", "--no-report"]
    args += ["--set", "train.epochs=60", "--out", "s.jsonl"]
    jobs = ["--executor", "submitit", "--slurm-local", "--slurm-folder", str(tmp_path / "jobs")]
    p = harness_process(tmp_path, *args, *jobs, "--store-mode", "files")
    submitted = lambda: len(list((tmp_path / "jobs").glob("*_submitted.pkl"))) == 2  # noqa: E731
    if not wait_for(submitted, 120, 0.05):
        p.kill()
        pytest.fail(f"no jobs were submitted: {p.communicate()}")
    p.kill()
    p.communicate(timeout=30)
    parts = tmp_path / "s.jsonl.parts"
    assert wait_for(lambda: len(list(parts.glob("*.json"))) == 2, 300), "the jobs wrote nothing"
    assert Store(tmp_path / "s.jsonl").path.read_text() == ""  # nothing merged by the driver
    again = harness_process(tmp_path, *args)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0 and "2 runs: 2 already recorded in s.jsonl" in err, err
    recs, problems = Store(tmp_path / "s.jsonl").read()
    assert problems == [] and sorted(r["seed"] for r in recs) == [0, 1]
    assert list(parts.iterdir()) == []
