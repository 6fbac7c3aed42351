"""``--executor submitit`` on a real Slurm (marker ``slurm``): CI starts a one-node one with
``scripts/slurm-local up``; elsewhere these tests run where ``sbatch`` reaches a Slurm, and skip
saying why where none does.

A sweep as jobs (two runs to a job) records what the serial executor does; a run longer than its
``--slurm-time`` is requeued and goes on from its checkpoint to the same record; a job cancelled
with ``scancel`` is its run's failed record, naming the job and its state; ``--slurm-opt`` in
sbatch's spelling, a ``--slurm-setup`` line that ends the job, ``--retry-failed`` and a refused
submission as a user meets them, from the shell.
"""

import functools
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("submitit", reason="the slurm extra (submitit) is not installed")

from harness import api
from harness.executors import ExecutorOptions, RunOptions, make_executor
from harness.executors import submitit as sub


@functools.cache
def no_slurm() -> str | None:
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
        return "no Slurm here: sbatch is not on PATH (scripts/slurm-local up starts one)"
    done = subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, text=True, timeout=60)
    if done.returncode or "up" not in done.stdout.split():
        said = (done.stderr or done.stdout or "no partition up").strip().splitlines()[-1]
        return f"Slurm is not reachable: sinfo says {said[:200]!r}"
    return None


pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def _slurm():
    if why := no_slurm():
        pytest.skip(why)


SMALL = ("run", "--tasks", "adding", "--methods", "gru,sa-rnn", "--seeds", "0-1", "--preset",
         "smoke", "--no-report")  # fmt: skip
# a run of 1.5-2 s an epoch (2 cores): 14 epochs outlast the poll of the scancel test; 40, some
# 60-80 s, outlast what a job of --slurm-time 1 gets before Slurm signals it (45 s) on a faster
# machine too (14 epochs took 21 s on an idle one, and were never requeued)
ONE = ("run", "--tasks", "adding", "--methods", "gru", "--preset", "smoke", "--no-report")
LONG = {"train.epochs": 14, "task.n_train": 4000, "task.seq_len": 100}
LONGER = {**LONG, "train.epochs": 40}


def bare(rec):
    """A record less what differs between two processes running the same run."""
    return {k: v for k, v in rec.items() if k not in ("time", "argv", "sweep")}


def stored(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_sweep_as_slurm_jobs_two_runs_each_records_what_the_serial_run_does(harness, tmp_path):
    assert no_slurm() is None  # _slurm skips these tests where there is no Slurm
    harness(*SMALL, "--out", "serial", check=True)
    p = harness(*SMALL, "--out", "jobs", "--executor", "submitit", "--slurm-folder", "folder",
                "--runs-per-job", "2", check=True)  # fmt: skip
    assert "submitit kept" not in p.stdout + p.stderr
    serial = {r["run_id"]: bare(r) for r in stored(tmp_path / "serial" / "runs.jsonl")}
    jobs = {r["run_id"]: bare(r) for r in stored(tmp_path / "jobs" / "runs.jsonl")}
    assert len(serial) == 4 and jobs == serial
    assert list((tmp_path / "folder").iterdir()) == []  # the jobs' files removed


def test_a_run_longer_than_its_time_limit_is_requeued_and_goes_on_from_its_checkpoint(tmp_path):
    sweep = api.plan_sweep(api.SweepSpec.of("gru", "adding", seeds=[0], set=LONGER))
    serial = api.run_sweep(sweep, tmp_path / "serial.jsonl").records
    options = ExecutorOptions(slurm_folder=str(tmp_path / "jobs"), slurm_time=1,
                              slurm_requeue_max=6)  # fmt: skip
    run = RunOptions(checkpoint_dir=str(tmp_path / "checkpoints"), checkpoint_every_s=0.0)
    store = tmp_path / "r.jsonl"
    result = api.run_sweep(sweep, store, make_executor("submitit", run, options))
    (rec,) = stored(store)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["time"].get("resumed"), "the run was never requeued"
    assert bare(rec) == bare(serial[0]) and result.exit_code == 0
    assert not (tmp_path / "checkpoints").exists()  # removed once it is recorded


def test_a_job_cancelled_with_scancel_is_its_runs_failed_record_naming_it(tmp_path):
    # the driver asks squeue every SQUEUE_EVERY_S and waits for a result file up to submitit's
    # 15 s: a cancelled job is a record within a minute
    assert sub.SQUEUE_EVERY_S + 15 + sub.POLL_MAX_S < 60
    sweep = api.plan_sweep(api.SweepSpec.of("gru", "adding", seeds=[0], set=LONG))
    ex = make_executor("submitit", RunOptions(), ExecutorOptions(slurm_folder=str(tmp_path)))
    out = []
    sweeping = threading.Thread(target=lambda: out.append(api.run_sweep(sweep, tmp_path / "r", ex)))
    sweeping.start()
    while not (ex._jobs and next(iter(ex._jobs)).paths.stdout.exists()) and sweeping.is_alive():
        time.sleep(0.2)  # until the job runs
    (job,) = ex._jobs
    subprocess.run(["scancel", job.job_id], check=True, timeout=60)
    sweeping.join(timeout=300)
    assert not sweeping.is_alive(), "the sweep did not see its job cancelled"
    (rec,) = out[0].records
    assert rec["status"] == "failed" and out[0].exit_code == 1
    assert f"the submitit job {job.job_id} ended without sending its record" in rec["error"]
    assert "(state CANCELLED)" in rec["error"], rec["error"]


def test_slurm_options_a_setup_line_that_fails_a_retry_and_a_refusal_as_a_user_meets_them(
    tmp_path,
):
    def harness(*extra, out="r"):
        cmd = [sys.executable, "-m", "harness", *ONE, "--executor", "submitit", "--slurm-folder",
               "jobs", "--out", out]  # fmt: skip
        return subprocess.run([*cmd, *extra], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)  # fmt: skip

    show = 'echo "cpus $SLURM_CPUS_PER_TASK name $SLURM_JOB_NAME" >&2'  # in the job's error log
    p = harness("--slurm-opt", "cpus-per-task=2", "--slurm-opt", "job-name=mine",
                "--slurm-setup", show, "--slurm-setup", "exit 3")  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert "sacct" not in p.stderr and "accounting" not in p.stderr, p.stderr  # no accounting
    (rec,) = stored(tmp_path / "r" / "runs.jsonl")
    assert "the --slurm-setup line 'exit 3' ended the job with exit status 3" in rec["error"]
    log = Path(rec["error"].rsplit("; logs: ", 1)[1])
    assert "cpus 2 name mine" in log.read_text()  # the user's values, not the harness's
    p = harness("--retry-failed")
    assert p.returncode == 0, p.stderr
    assert list((tmp_path / "jobs").iterdir()) == []  # the failed job's files went with it
    p = harness("--slurm-partition", "no-such-partition", out="refused")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert lines[-1].startswith("error: submitit could not submit 1 job(s) (slurm): "), p.stderr
    assert not [line for line in lines[:-1] if "sbatch" in line], p.stderr  # said once
    assert list((tmp_path / "jobs").iterdir()) == [] and not (tmp_path / "refused").exists()
