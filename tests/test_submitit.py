"""``--executor submitit``: runs as Slurm jobs, tested without Slurm.

submitit's local backend (one process per job) runs real sweeps: the serial executor's records,
a job killed mid-run as that run's failed record, resume and ``--retry-failed``. A fake Slurm
(``srun``, ``sbatch``, ``squeue``, ``scancel`` as shell scripts on ``PATH``) checks what would be
sent to a cluster: one job array per fill with the ``--slurm-*`` options, a job the scheduler
killed (``OUT_OF_MEMORY``) as a failed record, ``scancel`` on an interrupt. On a real Slurm:
tests/test_slurm.py.
"""

import json
import os
import pickle
import shutil
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("submitit", reason="the slurm extra (submitit) is not installed")

from harness import api
from harness.errors import HarnessError
from harness.executors import ExecutorOptions, RunOptions, make_executor
from harness.executors import submitit as sub
from harness.reporting.compare import compare

SPEC = api.SweepSpec.of("gru,sa-rnn", "adding", seeds=[0, 1], set={"train.epochs": 1})
ONE_RUN = ("run", "--tasks", "adding", "--methods", "gru", "--set", "train.epochs=1")


@pytest.fixture(scope="module")
def sweep():
    return api.plan_sweep(SPEC)


@pytest.fixture(scope="module")
def serial(sweep, tmp_path_factory):
    result = api.run_sweep(sweep, tmp_path_factory.mktemp("serial") / "r.jsonl")
    assert result.exit_code == 0
    return result.records


def local_jobs(tmp_path, **options):
    """The submitit executor on submitit's local backend: each run a process, two at once."""
    folder = str(tmp_path / "jobs")
    opts = ExecutorOptions(
        submitit_cluster="local", slurm_folder=folder, slurm_array_parallelism=2, **options
    )
    return make_executor("submitit", RunOptions(), opts)


def stored(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_smoke_sweep_as_local_jobs_gives_the_serial_records_one_array_per_fill(
    sweep, serial, tmp_path, monkeypatch
):
    ex = local_jobs(tmp_path)
    assert ex.cluster == "local" and ex.slots() == 2 and not ex.in_process
    sizes = []
    real_map = ex._ex.map_array
    monkeypatch.setattr(
        ex._ex, "map_array", lambda f, *a: sizes.append(len(a[0])) or real_map(f, *a)
    )
    result = api.run_sweep(sweep, tmp_path / "r.jsonl", ex)
    assert result.exit_code == 0 and len(result.records) == 4
    res = compare(serial, stored(tmp_path / "r.jsonl"))
    assert res.ok and res.matched == 4, res.drifted
    # the first fill (both slots) went as one array; each run was a job of its own
    assert sizes[0] == 2 and sum(sizes) == 4
    assert sorted((tmp_path / "jobs").iterdir()) == [] and result.notes == []  # all succeeded


def test_a_killed_job_is_its_runs_failed_record_and_retry_failed_reruns_only_it(
    sweep, serial, tmp_path, monkeypatch
):
    victim = sweep.configs[0]
    doomed, real = victim.to_dict(), sub.run_one

    def job(cfg_dict, run):  # a closure: cloudpickle sends it to the job by value
        if cfg_dict == doomed:  # as the kernel's (or Slurm's) out-of-memory killer would
            os.kill(os.getpid(), signal.SIGKILL)
        return real(cfg_dict, run)

    monkeypatch.setattr(sub, "run_one", job)
    store = tmp_path / "r.jsonl"
    result = api.run_sweep(sweep, store, local_jobs(tmp_path))
    assert result.exit_code == 1  # the sweep went on
    status = {r["run_id"]: r["status"] for r in result.records}
    assert status.pop(victim.run_id) == "failed" and list(status.values()) == ["ok"] * 3
    (lost,) = [r for r in stored(store) if r["status"] == "failed"]
    assert lost["run_id"] == victim.run_id and lost["method"] == "gru" and lost["seed"] == 0
    assert (
        "the submitit job" in lost["error"] and "ended without sending its record" in lost["error"]
    )
    assert (
        "(state FINISHED): it produced no result" in lost["error"] and "_log.err" in lost["error"]
    )
    assert "\n" not in lost["error"]
    # the jobs of the runs that succeeded left nothing; the lost one's logs are kept and named
    log = lost["error"].rsplit("; logs: ", 1)[1]
    job_id = os.path.basename(log).split("_")[0]
    left = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert left == [f"{job_id}_0_log.err", f"{job_id}_0_log.out", f"{job_id}_failed_runs",
                    f"{job_id}_submitted.pkl"]  # fmt: skip
    assert (tmp_path / "jobs" / f"{job_id}_failed_runs").read_text() == f"{victim.run_id}\n"
    assert result.notes == [f"submitit kept the logs of 1 failed run(s): {log}"]

    again = api.run_sweep(sweep, store, local_jobs(tmp_path))  # resume: a failed record counts
    assert (
        again.todo == []
        and again.records == []
        and [r["run_id"] for r in again.resume.kept_failed] == [victim.run_id]
    )
    monkeypatch.setattr(sub, "run_one", real)
    retried = api.run_sweep(sweep, store, local_jobs(tmp_path), retry_failed=True)
    assert [c.run_id for c in retried.todo] == [victim.run_id] and retried.exit_code == 0
    assert list((tmp_path / "jobs").iterdir()) == []  # the failed job's files went with it
    res = compare(serial, stored(store))  # the latest record of each run counts
    assert res.ok and res.matched == 4, res.drifted


def test_the_command_line_runs_a_sweep_as_jobs(harness, serial, tmp_path):
    # local processes, also where a Slurm client is installed (tests/test_slurm.py: a real one)
    p = harness(*ONE_RUN, "--executor", "submitit", "--slurm-local", "--slurm-folder", "jobs",
                "--out", "r")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "1 runs: 0 already recorded" in p.stderr and "wrote r/LEADERBOARD.md" in p.stdout
    recs = stored(tmp_path / "r" / "runs.jsonl")
    assert recs[0]["argv"][:3] == ["harness", "run", "--tasks"]
    res = compare(serial, recs, only_present=True)
    assert res.ok and res.matched == 1, res.drifted
    assert (tmp_path / "jobs").is_dir() and not list((tmp_path / "jobs").iterdir())  # removed


def one_line_error(p, needle):
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], p.stderr


def test_slurm_flags_are_refused_without_the_executor_and_checked_with_it(
    harness, tmp_path, monkeypatch
):
    cases = [
        (["--slurm-partition", "gpu"], "--slurm-partition is only used with --executor submitit"),
        (["--slurm-array-parallelism", "4"], "--slurm-array-parallelism is only used with"),
        (["--slurm-local"], "--slurm-local is only used with --executor submitit"),
        (
            ["--executor", "submitit", "--workers", "2"],
            "--workers is only used with --executor local or",
        ),
        (["--executor", "submitit", "--slurm-time", "43201"], "--slurm-time: must be <= 43200"),
        (["--executor", "submitit", "--slurm-cpus", "0"], "--slurm-cpus: must be >= 1"),
        (["--executor", "submitit", "--slurm-mem", "x"], "--slurm-mem: expects an integer"),
        (
            ["--executor", "submitit", "--device", "cuda", "--slurm-gpus", "0"],
            "--device cuda with --slurm-gpus 0",
        ),
        (["--slurm-opt", "qos=high"], "--slurm-opt is only used with --executor submitit"),
        (["--executor", "submitit", "--slurm-opt", "account"], "--slurm-opt expects KEY=VALUE"),
        (["--executor", "submitit", "--slurm-opt", "=abc"], "got '=abc'"),
    ]
    for extra, needle in cases:
        one_line_error(harness(*ONE_RUN, *extra), needle)
    (tmp_path / "s.toml").write_text('tasks = "adding"\nslurm_partition = "gpu"\n')
    one_line_error(harness("run", "--config", "s.toml"), "--slurm-partition is only used with")
    (tmp_path / "t.toml").write_text('executor = "submitit"\nslurm_time = 0\n')
    one_line_error(harness("run", "--config", "t.toml"), "expects an integer in [1, 43200], got 0")
    (tmp_path / "u.toml").write_text('executor = "submitit"\nslurm_opt = "qos=high"\n')
    one_line_error(harness("run", "--config", "u.toml"), "expects a list of KEY=VALUE strings")
    (tmp_path / "v.toml").write_text('executor = "submitit"\nslurm_opt = ["qos:high"]\n')
    one_line_error(harness("run", "--config", "v.toml"), "got 'qos:high'")
    monkeypatch.setitem(sys.modules, "submitit", None)  # the slurm extra not installed
    p = harness(*ONE_RUN, "--executor", "submitit")
    one_line_error(p, "--executor submitit needs submitit: pip install 'condrnn-harness[slurm]'")
    assert not (tmp_path / "results").exists()  # nothing ran, nothing was written


def test_a_sweep_file_holds_the_slurm_options():
    from harness.planning import suites

    path = "sweep.toml"
    data = {"executor": "submitit", "slurm_partition": "gpu", "slurm_time": 240, "slurm_gpus": 1}
    data |= {"slurm_local": True, "slurm_opt": ["account=abc"], "slurm_setup": ["module load x"]}
    options = {k: suites._option(k, v, f"{path}: '{k}'") for k, v in data.items()}
    assert options == data
    with pytest.raises(HarnessError, match="expects true or false, got 'yes'"):
        suites._option("slurm_local", "yes", "slurm_local")
    with pytest.raises(HarnessError, match="expects a list of shell lines, got 'module load x'"):
        suites._option("slurm_setup", "module load x", "slurm_setup")
    for key, (low, high) in {o.name: o.bounds for o in sub.OPTIONS if o.bounds}.items():
        assert f"[{low}, {high}]" in suites.option_keys()[key]
        with pytest.raises(HarnessError, match=rf"expects an integer in \[{low}, {high}\]"):
            suites._option(key, high + 1, key)


def test_the_library_refuses_bad_options_in_one_line(tmp_path):
    with pytest.raises(HarnessError, match=r"--slurm-time must be an integer in \[1, 43200\]"):
        local_jobs(tmp_path, slurm_time=0)
    with pytest.raises(HarnessError, match="submitit_cluster must be one of slurm, local, debug"):
        make_executor("submitit", RunOptions(), ExecutorOptions(submitit_cluster="lsf"))
    with pytest.raises(HarnessError, match="--slurm-opt expects a list of strings"):
        local_jobs(tmp_path, slurm_opt="account=abc")
    if shutil.which("srun") is None:  # Slurm forced where there is none
        with pytest.raises(HarnessError, match="cannot set up submitit in .*srun"):
            make_executor("submitit", RunOptions(), ExecutorOptions(submitit_cluster="slurm"))


def test_the_debug_backend_runs_in_this_process(sweep, serial, tmp_path):
    ex = make_executor(
        "submitit",
        RunOptions(),
        ExecutorOptions(submitit_cluster="debug", slurm_folder=str(tmp_path)),
    )
    assert ex.slots() == 1
    recs = [rec for _, rec in api._pull(ex, sweep.configs[:1], lambda event: None)]
    res = compare(serial, recs, only_present=True)
    assert res.ok and res.matched == 1


def test_lost_why_keeps_the_line_that_says_what_happened():
    from submitit.core.utils import FailedJobError, UncompletedJobError

    failed = FailedJobError(
        "Job (task=0) failed during processing with trace:\n----------------------\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "ModuleNotFoundError: No module named 'harness'\n\n----------------------\n"
        "You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:\n"
        "  - /jobs/7_0_log.err\n  - /jobs/7_0_log.out"
    )
    why = sub.lost_why("7", "FAILED", failed)
    assert why == (
        "the submitit job 7 ended without sending its record (state FAILED): it failed outside "
        "the run: ModuleNotFoundError: No module named 'harness'"
    )
    lost = UncompletedJobError("Job 8 (task: 0) with path /j/8_0_result.pkl\nhas not produced")
    assert "(state TIMEOUT): it produced no result" in sub.lost_why("8", "TIMEOUT", lost)


# --- a fake Slurm ------------------------------------------------------------------------------


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """``srun``, ``sbatch``, ``squeue`` and ``scancel`` on ``PATH``, writing and reading files."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {
        "srun": "exit 0",
        "sbatch": f'cp "$1" {tmp_path}/sbatch.sh; echo "Submitted batch job $(cat {tmp_path}/id)"',
        "squeue": f"cat {tmp_path}/squeue.txt",
        "scancel": f'echo "$@" >> {tmp_path}/scancel.txt',
        # as on a cluster without accounting: the driver never asks (it reads squeue)
        "sacct": f'echo "$@" >> {tmp_path}/sacct.txt; echo "sacct: error: Slurm accounting '
        'storage is disabled" >&2; exit 1',
    }
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    from submitit.slurm.slurm import SlurmJob

    monkeypatch.setattr(SlurmJob, "_results_timeout_s", 0)  # no shared filesystem to wait for
    monkeypatch.setattr(sub, "SQUEUE_EVERY_S", 0.0)
    return tmp_path


def sent(ex, handle, rec):
    """As a job's ``Pack`` sends a run's record."""
    ex.records.mkdir(parents=True, exist_ok=True)
    (ex.records / f"{handle}.pkl").write_bytes(pickle.dumps(rec))


def test_on_slurm_a_fill_is_one_array_with_the_options_and_a_killed_job_is_a_failed_record(
    fake_slurm, sweep
):
    from submitit.core.utils import JobPaths

    folder = fake_slurm / "jobs"
    options = ExecutorOptions(
        slurm_partition="gpu", slurm_time=240, slurm_mem=4, slurm_array_parallelism=2,
        slurm_folder=str(folder),
    )  # fmt: skip
    ex = make_executor("submitit", RunOptions(threads=2), options)
    assert ex.cluster == "slurm" and ex.slots() == 2
    (fake_slurm / "id").write_text("4242")
    (fake_slurm / "squeue.txt").write_text("4242_0|COMPLETED\n4242_1|OUT_OF_MEMORY\n")
    handles = [ex.submit(cfg) for cfg in sweep.configs[:2]]
    sent(ex, handles[0], {"run_id": "ran", "status": "ok"})  # element 0 ran and sent its record
    done = dict(ex.wait_any())
    assert set(done) == set(handles)
    assert done[handles[0]] == {"run_id": "ran", "status": "ok"}
    lost = done[handles[1]]
    assert lost["status"] == "failed" and lost["run_id"] == sweep.configs[1].run_id
    assert (
        "the submitit job 4242_1 ended without sending its record (state OUT_OF_MEMORY)"
        in (lost["error"])
    )
    script = (fake_slurm / "sbatch.sh").read_text()
    for line in ("--array=0-1%2", "--partition=gpu", "--time=240", "--mem=4GB"):
        assert f"#SBATCH {line}\n" in script
    assert "#SBATCH --cpus-per-task=2\n" in script and "gpus" not in script

    (fake_slurm / "id").write_text("4343")  # an interrupt cancels the jobs in flight
    (fake_slurm / "squeue.txt").write_text("4343|RUNNING\n")
    ex.submit(sweep.configs[2])
    ex._flush()
    ex.cancel()
    assert (fake_slurm / "scancel.txt").read_text().split() == ["4343"]
    assert "--array" not in (fake_slurm / "sbatch.sh").read_text()  # one run: a plain job
    lost_log = JobPaths(folder, "4242_1", 0).stderr
    assert ex.close() == [f"submitit kept the logs of 1 failed run(s): {lost_log}"]
    # element 0's files are gone; the array's script stays with element 1's files, and the
    # cancelled job's (4343: it neither succeeded nor failed) stay
    assert not JobPaths(folder, "4242_0", 0).submitted_pickle.exists()
    assert (folder / "4242_submission.sh").exists() and (folder / "4242_1_submitted.pkl").exists()
    assert (folder / "4343_submitted.pkl").exists()


def test_on_slurm_the_files_of_a_job_whose_run_succeeded_are_removed_at_the_end(fake_slurm, sweep):
    import cloudpickle
    from submitit.core.utils import JobPaths

    folder = fake_slurm / "jobs"
    ex = make_executor("submitit", RunOptions(), ExecutorOptions(slurm_folder=str(folder)))
    (fake_slurm / "id").write_text("4545")
    (fake_slurm / "squeue.txt").write_text("4545|COMPLETED\n")
    result = JobPaths(folder, "4545", 0).result_pickle
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_bytes(cloudpickle.dumps(("success", 1)))
    sent(ex, ex.submit(sweep.configs[0]), {"run_id": "ran", "status": "ok"})
    assert [rec for _, rec in ex.wait_any()] == [{"run_id": "ran", "status": "ok"}]
    assert (folder / "4545_submission.sh").exists() and list(folder.glob(".submission_file_*"))
    assert ex.close() == [] and list(folder.iterdir()) == []  # submitit's link to it too


def test_slurm_local_runs_the_jobs_here_where_slurm_is_installed(fake_slurm, harness, serial):
    p = harness(*ONE_RUN, "--executor", "submitit", "--slurm-local", "--slurm-folder", "jobs")
    assert p.returncode == 0, p.stderr
    assert not (fake_slurm / "sbatch.sh").exists()  # nothing was submitted
    recs = stored(fake_slurm / "results" / "runs.jsonl")
    res = compare(serial, recs, only_present=True)
    assert res.ok and res.matched == 1, res.drifted
    assert "submitit kept" not in p.stdout + p.stderr
    assert (fake_slurm / "jobs").is_dir() and not list((fake_slurm / "jobs").iterdir())


def test_slurm_opt_and_setup_lines_reach_the_job_script_from_flags_and_sweep_files(
    fake_slurm, harness
):
    (fake_slurm / "id").write_text("4444")  # the job is lost: a failed record ends the sweep
    (fake_slurm / "squeue.txt").write_text("4444|FAILED\n")
    flags = ["--slurm-opt", "account=abc", "--slurm-opt", "qos=high", "--slurm-opt", "time=30"]
    flags += ["--slurm-opt", "cpus-per-task=2", "--slurm-opt", "job-name=mine"]  # as sbatch's
    flags += ["--slurm-setup", "module load cuda", "--slurm-setup", "source venv/bin/activate"]
    p = harness(*ONE_RUN, "--executor", "submitit", "--slurm-folder", "jobs", *flags)
    assert p.returncode == 1, p.stderr
    assert "submitit kept the logs of 1 failed run(s): " in p.stdout + p.stderr
    assert "jobs/4444_0_log.err" in p.stdout + p.stderr
    (fake_slurm / "s.toml").write_text(
        'executor = "submitit"\nslurm_folder = "jobs"\nslurm_opt = ["account=abc", "qos=high", '
        '"time=30", "cpus_per_task=2", "job_name=mine"]\n'  # as submitit's
        'slurm_setup = ["module load cuda", "source venv/bin/activate"]\n'
    )
    first = (fake_slurm / "sbatch.sh").read_text()
    (fake_slurm / "sbatch.sh").unlink()
    p = harness(*ONE_RUN, "--config", "s.toml", "--out", "from-file")
    assert p.returncode == 1, p.stderr
    for script in (first, (fake_slurm / "sbatch.sh").read_text()):
        options = [line.split("=")[0] for line in script.splitlines() if line.startswith("#SBATCH")]
        assert len(options) == len(set(options)), options  # each once: sbatch keeps the last
        # the user's values win over the harness's (a day, --threads, harness)
        for line in ("--account=abc", "--qos=high", "--time=30", "--cpus-per-task=2",
                     "--job-name=mine"):  # fmt: skip
            assert f"#SBATCH {line}\n" in script
        setup = script.split("\n# setup\n")[1].split("\n# command\n")[0].splitlines()
        assert [line for line in setup if not line.startswith(("trap", "harness_setup="))] == [
            "module load cuda", "source venv/bin/activate"
        ]  # fmt: skip


def test_a_setup_line_that_ends_the_job_is_named_in_its_record_without_asking_sacct(
    fake_slurm, harness
):
    (fake_slurm / "id").write_text("4646")
    (fake_slurm / "squeue.txt").write_text("4646|FAILED\n")
    sbatch = fake_slurm / "bin" / "sbatch"  # runs the script here, its stderr where Slurm would
    run = f'; bash "$1" >/dev/null 2>>{fake_slurm}/jobs/4646_0_log.err; echo'
    sbatch.write_text(sbatch.read_text().replace("; echo", run))
    p = harness(*ONE_RUN, "--executor", "submitit", "--slurm-folder", "jobs", "--slurm-setup",
                "echo ready", "--slurm-setup", "exit 3", "--out", "r")  # fmt: skip
    assert p.returncode == 1, p.stderr
    (rec,) = stored(fake_slurm / "r" / "runs.jsonl")
    assert rec["status"] == "failed"
    assert (
        "the submitit job 4646 ended without sending its record (state FAILED): it produced no "
        "result (its last log line: the --slurm-setup line 'exit 3' ended the job with exit "
        "status 3); logs: "
    ) in rec["error"]
    assert not (fake_slurm / "sacct.txt").exists()  # its warnings would go to the terminal


def test_a_refused_submission_is_one_line_and_leaves_no_file(fake_slurm, harness):
    (fake_slurm / "bin" / "sbatch").write_text(
        "#!/bin/sh\necho 'sbatch: error: invalid partition specified: nope' >&2\n"
        "echo 'sbatch: error: Batch job submission failed: Invalid partition name specified' >&2\n"
        "exit 1\n"
    )
    p = harness(*ONE_RUN, "--executor", "submitit", "--slurm-folder", "jobs", "--out", "r")
    assert p.returncode == 2, p.stderr
    said = [line for line in p.stderr.splitlines() if "sbatch" in line]
    assert len(said) == 1 and said == p.stderr.splitlines()[-1:], p.stderr
    assert said[0].startswith("error: submitit could not submit 1 job(s) (slurm): ")
    assert said[0].endswith("Batch job submission failed: Invalid partition name specified")
    assert list((fake_slurm / "jobs").iterdir()) == []  # neither its pickle nor its script
    assert not (fake_slurm / "r").exists()  # nor an empty store


# --- several runs to a job; a job out of time -----------------------------------------------


def test_runs_per_job_packs_the_runs_and_a_lost_job_fails_only_its_runs_not_yet_recorded(
    sweep, serial, tmp_path, monkeypatch
):
    doomed, real = sweep.configs[1].to_dict(), sub.run_one

    def job(cfg_dict, run):  # the second run of the first job kills its process
        if cfg_dict == doomed:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(cfg_dict, run)

    monkeypatch.setattr(sub, "run_one", job)
    ex = local_jobs(tmp_path, runs_per_job=2)
    assert ex.slots() == 4  # two jobs of two runs
    packs = []
    real_map = ex._ex.map_array
    monkeypatch.setattr(ex._ex, "map_array", lambda f, *a: packs.extend(a[0]) or real_map(f, *a))
    result = api.run_sweep(sweep, tmp_path / "r.jsonl", ex)
    assert [[cfg["seed"] for _, cfg in pack] for pack in packs] == [[0, 1], [0, 1]]
    status = {r["run_id"]: r["status"] for r in result.records}
    assert status.pop(sweep.configs[1].run_id) == "failed" and len(status) == 3
    assert set(status.values()) == {"ok"}  # the first run of the killed job was recorded
    (lost,) = [r for r in result.records if r["status"] == "failed"]
    assert "ended without sending its record" in lost["error"]
    ok = [r for r in stored(tmp_path / "r.jsonl") if r["status"] == "ok"]
    res = compare(serial, ok, only_present=True)
    assert res.ok and res.matched == 3, res.drifted
    assert not list(ex.records.parent.glob("records-*"))  # the records' folder is removed


def test_a_job_out_of_time_past_its_requeues_fails_its_run_keeping_the_checkpoint(
    sweep, serial, tmp_path
):
    from submitit.helpers import DelayedSubmission

    cfgs = [c.to_dict() for c in sweep.configs[:2]]
    items = [(7, cfgs[0]), (8, cfgs[1])]
    run = RunOptions(checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every_s=0.0)
    (tmp_path / "rec").mkdir()
    pack = sub.Pack(run, str(tmp_path / "rec"), requeue_max=1)
    pack.left = items[1:]  # the first run recorded: the requeued job gets the second alone
    again = pack.checkpoint(items)
    assert isinstance(again, DelayedSubmission) and again.args == (items[1:],)
    assert again.function.requeues == 1 and again.function.requeue_max == 1

    cfgs[0]["train"]["epochs"] = 3
    full = sub.run_one(cfgs[0], RunOptions())

    def limit(epoch, row):  # Slurm's signal at the time limit, during epoch 1's callback
        if epoch == 1:
            again.function.checkpoint(items)  # as submitit's handler calls it

    again.function.train = lambda cfg_dict, run: sub.run_one(cfg_dict, run, (limit,))
    assert again.function(items) == 2
    recs = {h: pickle.loads((tmp_path / "rec" / f"{h}.pkl").read_bytes()) for h in (7, 8)}
    assert recs[7]["status"] == recs[8]["status"] == "failed"
    assert recs[7]["error"].startswith(
        "out of time: its job reached its time limit (or was preempted) 2 times; "
    )
    # the checkpoint is saved after the callbacks: epoch 0's, of 3
    assert "1 of 3 epochs done, kept in its checkpoint" in recs[7]["error"]
    assert "--retry-failed" in recs[7]["error"] and "it had not started" in recs[8]["error"]
    (kept,) = (tmp_path / "ckpt").iterdir()
    resumed = sub.run_one(cfgs[0], run)  # as --retry-failed runs it
    assert resumed["time"]["resumed"][0]["epoch"] == 1 and not kept.exists()
    for key in ("history", "metrics", "val_metrics", "best_epoch", "diagnostics", "trace"):
        assert resumed[key] == full[key], key


def test_the_last_job_of_an_array_takes_its_script_with_it_in_a_relative_folder(
    tmp_path, monkeypatch
):
    """Slurm's array jobs (``7_0``, ``7_1``) share one script, ``7_submission.sh``: removed with
    the last of them, also where ``--slurm-folder`` is relative (submitit's paths are absolute)."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "jobs"
    folder.mkdir()
    for job in ("7_0", "7_1"):
        for name in (f"{job}_submitted.pkl", f"{job}_0_result.pkl", f"{job}_0_log.out"):
            (folder / name).write_text("")
    (folder / "7_submission.sh").write_text("#!/bin/bash\n")
    (folder / "70_submission.sh").write_text("#!/bin/bash\n")  # another array's: kept
    sub._remove_job(Path("jobs"), "7_0")
    assert (folder / "7_submission.sh").exists()  # 7_1's files are still there
    sub._remove_job(Path("jobs"), "7_1")
    assert sorted(p.name for p in folder.iterdir()) == ["70_submission.sh"]
