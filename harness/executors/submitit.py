"""``submitit``: the runs of a sweep as Slurm jobs (or local processes where there is no Slurm).

Needs the ``slurm`` extra; nothing of submitit is imported until this executor is made.
``submit`` only queues a run; ``wait_any`` sends what is queued as one job array, then polls.
A job runs ``runs_per_job`` runs (``Pack``), each record to its own file as the run ends. How
it behaves on a cluster, and why arrays are filled per refill: docs/clusters.md.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
import shlex
import signal
import subprocess
import time
import uuid
from collections.abc import Hashable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from harness.data.files import cache_dir
from harness.errors import HarnessError, WriteFailed, failure_reason, is_disk_full
from harness.executors.base import (
    MAX_THREADS,
    MAX_WORKERS,
    EpochCallback,
    ExecutorOptions,
    Option,
    RunOptions,
    lost_record,
    register_executor,
    require,
    run_one,
)
from harness.persistence.files import write_atomically
from harness.persistence.records import identity

INSTALL = "--executor submitit needs submitit: pip install 'condrnn-harness[slurm]'"
CLUSTERS = ("slurm", "local", "debug")
DEFAULT_TIME_MIN = 24 * 60  # Slurm's own default would be submitit's 5 minutes
DEFAULT_REQUEUE_MAX = 3  # as submitit's max_num_timeout
SLURM_PARALLELISM = 256  # submitit's default array parallelism
OPTIONS = (  # name, type, default, help, metavar, bounds, what (a str's words, an int's unit)
    Option("slurm_partition", str, None, "the jobs' Slurm partition (default: the cluster's)",
           "NAME", None, "a partition name"),
    Option("slurm_time", int, None, "each job's time limit (default: 1440, a day; at most 43200)",
           "MINUTES", (1, 43200), "minutes"),  # 30 days
    Option("slurm_cpus", int, None, "CPUs per job (default: --threads)", "N", (1, MAX_THREADS)),
    Option("slurm_gpus", int, None, "GPUs per job (default: 1 with --device cuda, else 0)", "N",
           (0, 64)),
    Option("slurm_mem", int, None, "memory per job (default: the partition's)", "GB",
           (1, 65536), "GB"),
    Option("slurm_array_parallelism", int, None, "jobs queued or running at once, submitted as "
           "job arrays (default: 256 on Slurm; without Slurm, as many as this machine's CPUs "
           "hold at --slurm-cpus each)", "N", (1, MAX_WORKERS)),
    Option("slurm_folder", str, None, "the jobs' pickles and logs, on a filesystem the nodes "
           "share (default: $XDG_CACHE_HOME/condrnn-harness/submitit, else "
           "~/.cache/condrnn-harness/submitit: outside the checkout, in the home directory that "
           "clusters share)", "DIR", None, "a path"),
    Option("slurm_opt", list, None, "any other sbatch option, as KEY=VALUE without its dashes "
           "(account=abc, qos=high, cpus-per-task=2; repeatable; wins over the --slurm-* options "
           "above and the harness's own, job-name=harness)", "KEY=VALUE", None,
           "a list of KEY=VALUE strings (sbatch options)"),
    Option("slurm_setup", list, None, "a line the job script runs before the run (module load "
           "cuda, source venv/bin/activate; repeatable, in order)", "LINE", None,
           "a list of shell lines"),
    Option("slurm_requeue_max", int, None, "times a job is requeued at its time limit (or when "
           f"preempted), each run going on from its checkpoint, before the run in progress is "
           f"recorded as failed, its checkpoint kept for --retry-failed (default: "
           f"{DEFAULT_REQUEUE_MAX})", "N", (0, 100)),
    Option("runs_per_job", int, None, "runs one job runs one after the other (each its own "
           "record and checkpoint): a job's start paid once per N runs (default: 1)", "N",
           (1, 10_000)),
    Option("slurm_local", bool, False, "run the jobs as processes on this machine even where "
           "Slurm is installed (default: submitted with sbatch wherever srun is on PATH)"),
    Option("submitit_cluster", str, None, "submitit's backend: slurm, local (as --slurm-local) "
           "or debug (in this process) (default: slurm where srun is on PATH, else local)",
           "NAME", None, "slurm, local or debug"),
)  # fmt: skip
# polling the jobs in flight: every 0.25 s at first, then less often, up to every 10 s (every
# second without Slurm, where a poll is a check on a local process and a file)
POLL_FIRST_S, POLL_MAX_S, POLL_MAX_LOCAL_S = 0.25, 10.0, 1.0
FAILED_RUNS = "_failed_runs"  # beside a failed job's files: the ids of its failed runs
SQUEUE_EVERY_S = 15.0  # how often the driver asks squeue which jobs ended without a result
# squeue's states of a job that will still run (the others: it ended)
LIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED",
        "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT"}  # fmt: skip


def preflight(run: RunOptions, options: ExecutorOptions) -> None:
    """Refuse no submitit, an unknown cluster, ``cuda`` with no GPU per job, a bad --slurm-opt."""
    require("submitit", INSTALL)
    if options.submitit_cluster not in (None, *CLUSTERS):
        got = options.submitit_cluster
        raise HarnessError(f"submitit_cluster must be one of {', '.join(CLUSTERS)} (got {got!r})")
    if run.device == "cuda" and options.slurm_gpus == 0:
        raise HarnessError("--device cuda with --slurm-gpus 0: the jobs would have no GPU")
    sbatch_options(options.slurm_opt)


def sbatch_options(pairs: list[str] | None) -> dict[str, str]:
    """``--slurm-opt`` values as submitit's ``slurm_additional_parameters`` (``{"qos": "high"}``).

    A key is spelt as submitit spells its own (``cpus_per_task``), so that the user's value
    replaces the harness's (submitit would write both). HarnessError: not KEY=VALUE.
    """
    found = {}
    for pair in pairs or ():
        key, eq, value = pair.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z][\w-]*", key):
            raise HarnessError(
                f"--slurm-opt expects KEY=VALUE, an sbatch option without its dashes "
                f"(account=abc), got {pair!r}"
            )
        found[key.replace("-", "_")] = value
    return found


def setup_lines(lines: list[str] | None) -> list[str] | None:
    """``--slurm-setup`` lines as the job script runs them: a line that ends the job says so.

    A trap on the script's exit, set while the setup runs, writes to the job's error log which
    line ended it (``exit 3``) and with what status; else the job's log would be empty.
    """
    if not lines:
        return None
    said = "the --slurm-setup line '$harness_setup' ended the job with exit status $s"
    script = ["trap " + shlex.quote(f's=$?; echo "{said}" >&2') + " EXIT"]
    for line in lines:
        script += [f"harness_setup={shlex.quote(line)}", line]
    return [*script, "trap - EXIT"]


def lost_why(job_id: str, state: str, err: BaseException, log: Path | None = None) -> str:
    """Why a job has no record, in one line: the job, its state, submitit's last telling line."""
    from submitit.core.utils import FailedJobError

    lines = [ln.strip() for ln in str(err).splitlines()]
    said = [
        ln for ln in lines if ln.strip("-") and not ln.startswith(("You can check", "- ", "-\t"))
    ]
    last = re.sub(r"^submitit \w+ \(.*?\) - ", "", said[-1]) if said else ""  # its log prefix
    if isinstance(err, FailedJobError):
        what = f"it failed outside the run: {last}"
    else:
        what = "it produced no result" + (f" (its last log line: {last})" if last else "")
    where = f"; logs: {log}" if log else ""
    return (
        f"the submitit job {job_id} ended without sending its record (state {state}): "
        f"{what[:300]}{where}"
    )


class OutOfTime(BaseException):
    """Raised in a job at its time limit once it was requeued ``--slurm-requeue-max`` times.

    Not an ``Exception``: it passes the run's own error handling, so its checkpoint stays.
    """


class Pack:
    """What a job runs: its runs one after the other, each record to a file as the run ends.

    ``items`` are ``(handle, config dict)``; a record goes to ``records/HANDLE.pkl`` (written
    whole, then renamed). submitit calls ``checkpoint`` when Slurm signals the job before its
    time limit: the runs not recorded yet are the requeued job's; past ``requeue_max`` requeues
    (``requeues`` so far) they are recorded as failed, saying how far the first one got.
    """

    def __init__(self, run: RunOptions, records: str, requeue_max: int, requeues: int = 0) -> None:
        self.run, self.records = run, records
        self.requeue_max, self.requeues = requeue_max, requeues
        self.train = run_one  # the module's, as the driver sees it (a test replaces it)
        self.left: list[tuple[int, dict[str, Any]]] = []

    def __call__(self, items: list[tuple[int, dict[str, Any]]]) -> int:
        """Run ``items`` in order, each record to its file; how many runs there were."""
        self.left = list(items)
        held = {signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM}  # submitit's signals
        try:
            while self.left:
                handle, cfg_dict = self.left[0]
                rec = self.train(cfg_dict, self.run)
                signal.pthread_sigmask(signal.SIG_BLOCK, held)  # a record sent is a run done
                self._send(handle, rec)
                self.left.pop(0)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
        except OutOfTime:
            n = self.requeues + 1
            times = f"{n} time" + "s" * (n > 1)
            why = f"out of time: its job reached its time limit (or was preempted) {times}"
            for i, (handle, cfg_dict) in enumerate(self.left):
                got = progress(cfg_dict, self.run) if i == 0 else "it had not started"
                self._send(handle, lost_record(cfg_dict, f"{why}; {got}"))
        return len(items)

    def checkpoint(self, items: list[tuple[int, dict[str, Any]]]) -> Any:
        """The job to requeue (submitit's protocol): the runs not recorded yet (or OutOfTime)."""
        from submitit.helpers import DelayedSubmission

        if self.requeues >= self.requeue_max:
            raise OutOfTime
        return DelayedSubmission(
            Pack(self.run, self.records, self.requeue_max, self.requeues + 1), self.left
        )

    def _send(self, handle: int, rec: dict[str, Any]) -> None:
        write_atomically(
            Path(self.records) / f"{handle}.pkl", pickle.dumps(rec), None, durable=True
        )


def progress(cfg_dict: dict[str, Any], run: RunOptions) -> str:
    """How far a run out of time got: the epochs its checkpoint holds, of how many."""
    epochs = (cfg_dict.get("train") or {}).get("epochs", "?")
    if run.checkpoint_dir is None:
        return f"no checkpoint (--no-checkpoint): --retry-failed starts its {epochs} epochs again"
    path = Path(run.checkpoint_dir) / f"{identity(cfg_dict)[0]}.pt"
    try:
        import torch

        done = int(torch.load(path, map_location="cpu", weights_only=False)["epoch"]) + 1
    except Exception:  # none written yet (a first epoch longer than the time), or unreadable
        return f"0 of {epochs} epochs done (no checkpoint was written in time)"
    return (
        f"{done} of {epochs} epochs done, kept in its checkpoint {path}: --retry-failed (and, "
        f"say, a larger --slurm-time) goes on from there"
    )


@register_executor("submitit")
class SubmititExecutor:
    """submitit jobs: Slurm where there is Slurm, else local processes (``submitit_cluster``)."""

    in_process: ClassVar[bool] = False
    options = OPTIONS
    preflight = staticmethod(preflight)

    def __init__(self, run: RunOptions, options: ExecutorOptions) -> None:
        preflight(run, options)
        try:
            import submitit
        except ImportError:
            raise HarnessError(INSTALL) from None
        folder = Path(options.slurm_folder or cache_dir() / "submitit").expanduser()
        cluster = options.submitit_cluster or ("local" if options.slurm_local else None)
        n = options.slurm_requeue_max
        self.requeue_max = DEFAULT_REQUEUE_MAX if n is None else n
        most = dict.fromkeys(("slurm_max_num_timeout", "local_max_num_timeout"), self.requeue_max)
        try:  # submitit's own count of time-outs never ends a job before Pack's does
            self._ex = submitit.AutoExecutor(folder=folder, cluster=cluster, **most)
        except (OSError, RuntimeError, ValueError) as e:
            raise HarnessError(f"cannot set up submitit in {folder}: {e}") from None
        minutes = options.slurm_time or DEFAULT_TIME_MIN
        # a checkpoint at least every quarter of the time limit: a requeued job goes on from it
        every = min(run.checkpoint_every_s, 15.0 * minutes)
        self.run, self.folder = replace(run, checkpoint_every_s=every), folder
        self.cluster: str = self._ex.cluster
        self.per_job = options.runs_per_job or 1
        cpus = options.slurm_cpus or max(run.threads, 1)
        gpus = int(run.device == "cuda") if options.slurm_gpus is None else options.slurm_gpus
        local = 1 if self.cluster == "debug" else max((os.cpu_count() or 1) // cpus, 1)
        slurm = SLURM_PARALLELISM if self.cluster == "slurm" else local
        self.size = options.slurm_array_parallelism or slurm
        params: dict[str, Any] = {
            "name": "harness",
            "timeout_min": minutes,
            "cpus_per_task": cpus,
            "gpus_per_node": gpus or None,  # none asked: Slurm's own default, no GPU
            "mem_gb": options.slurm_mem,  # None: the partition's default
            "slurm_partition": options.slurm_partition,
            "slurm_array_parallelism": self.size,
            "slurm_additional_parameters": sbatch_options(options.slurm_opt) or None,
            "slurm_setup": setup_lines(options.slurm_setup),
            # the signal before the limit (Slurm may send it up to a minute early): Pack's
            # checkpoint needs no time of its own, the runs' checkpoints are on disk already
            "slurm_signal_delay_s": min(90, 15 * minutes),
        }
        try:
            self._ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
        except (AssertionError, NameError, ValueError, TypeError) as e:
            why = failure_reason(e, where=False)
            raise HarnessError(f"submitit refuses the --slurm-* options: {why}") from None
        self.records = folder / f"records-{uuid.uuid4().hex[:12]}"  # the runs' records (Pack)
        self._queued: list[tuple[int, dict[str, Any]]] = []
        self._runs: dict[int, tuple[dict[str, Any], Any]] = {}  # handle -> (config dict, job)
        self._jobs: dict[Any, list[int]] = {}  # the jobs with runs not yet recorded: handles
        self._ended: set[Any] = set()  # of those, the ones squeue says ended
        self._asked = float("-inf")  # when squeue was last asked
        self._states: dict[str, str] = {}  # what it said: job id -> state
        self._ok: list[Any] = []  # the jobs whose runs all succeeded
        self._failed: dict[Any, list[str]] = {}  # the others: their failed runs' ids
        self._succeeded: set[str] = set()  # the ids of the runs that succeeded
        self._next = 0

    def slots(self) -> int:
        """The runs in flight and the runs ``runs_per_job`` each job not in flight may take."""
        return len(self._runs) + self.per_job * (self.size - len(self._jobs))

    def submit(self, cfg: Any, on_epoch: EpochCallback | None = None) -> Hashable:
        """Queue the run; ``wait_any`` submits what is queued as one job array. Its handle."""
        self._next += 1
        self._queued.append((self._next, cfg.to_dict()))
        return self._next

    def _flush(self) -> None:
        """Submit the queued runs, ``runs_per_job`` to a job, as one array (WriteFailed: full)."""
        if not self._queued:
            return
        queued, self._queued = self._queued, []
        n = self.per_job
        packs = [queued[i : i + n] for i in range(0, len(queued), n)]
        try:
            self.records.mkdir(parents=True, exist_ok=True)
            pack = Pack(self.run, str(self.records), self.requeue_max)
            with contextlib.redirect_stderr(io.StringIO()):  # sbatch's lines: in the error too
                jobs = self._ex.map_array(pack, packs)
        except Exception as e:  # sbatch refused: every run would be refused alike
            self._drop_unsent()
            if is_disk_full(e):  # the folder is full: no job of them started (on Slurm)
                raise WriteFailed(self.folder, e, [h for h, _ in queued]) from None
            raise HarnessError(
                f"submitit could not submit {len(packs)} job(s) ({self.cluster}): "
                f"{failure_reason(e, where=False)}"
            ) from None
        for items, job in zip(packs, jobs, strict=True):
            if self.cluster != "slurm":
                # the local backend writes the result before its process ends: no shared
                # filesystem to wait for (submitit would wait 15 s for a job that left none)
                job._results_timeout_s = 0
            self._jobs[job] = [h for h, _ in items]
            self._runs.update((h, (d, job)) for h, d in items)

    def _drop_unsent(self) -> None:
        """Remove what submitit left of a submission that failed: its pickles and script.

        Its pickles name this executor's records folder; the script goes only where no other
        submission's pickle is there (another sweep's in the folder, whose script it could be).
        """
        mine = str(self.records).encode()
        with contextlib.suppress(OSError):
            temp = list(self.folder.glob("[0-9a-f]" * 32 + ".pkl"))  # submitit's uuid4().hex
            ours = [p for p in temp if mine in p.read_bytes()]
            scripts = self.folder.glob(".submission_file_*.sh") if ours == temp else ()
            for path in [*ours, *(p for p in scripts if not p.is_symlink())]:
                path.unlink(missing_ok=True)

    def wait_any(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """Submit what is queued, then poll until some runs end; each ``(handle, record)``."""
        self._flush()
        delay, most = POLL_FIRST_S, POLL_MAX_S if self.cluster == "slurm" else POLL_MAX_LOCAL_S
        while self._runs:
            ended = [job for job in self._jobs if self._has_ended(job)]
            done = self._delivered()
            for job in ended:
                done += self._lost(job)
            if done:
                return done
            time.sleep(delay)
            delay = min(delay * 1.5, most)
        return []

    def _delivered(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """The records the jobs wrote since the last look, their files removed."""
        done = []
        with contextlib.suppress(FileNotFoundError):
            for path in self.records.glob("*.pkl"):
                handle = int(path.stem)
                if handle in self._runs:
                    with open(path, "rb") as f:
                        done.append((handle, self._took(handle, pickle.load(f))))
                path.unlink()  # a record sent twice (a job requeued as it sent it) is dropped
        return done

    def _took(self, handle: int, rec: Any) -> dict[str, Any]:
        cfg_dict, job = self._runs.pop(handle)
        handles = self._jobs[job]
        if not isinstance(rec, dict):
            why = f"the submitit job {job.job_id} sent a {type(rec).__name__}, not a record"
            rec = lost_record(cfg_dict, why)
        if rec.get("status") == "ok":
            self._succeeded.add(str(rec.get("run_id")))
        else:
            self._failed.setdefault(job, []).append(str(rec.get("run_id")))
        if not any(h in self._runs for h in handles):  # its last run: the job is free
            del self._jobs[job]
            self._ended.discard(job)
            if job not in self._failed:
                self._ok.append(job)
        return rec

    def _lost(self, job: Any) -> list[tuple[Hashable, dict[str, Any]]]:
        """The runs of ``job``, which ended, that sent no record: failed, saying why."""
        err = self._outcome(job)
        done = self._delivered()  # what it sent before it ended
        for handle in [h for h in self._jobs.get(job, ()) if h in self._runs]:
            if err is None:
                why = f"the submitit job {job.job_id} ended without sending the record of this run"
            else:
                why = lost_why(job.job_id, self._state(job), err, _log(job))
            done.append((handle, self._took(handle, lost_record(self._runs[handle][0], why))))
        return done

    def _outcome(self, job: Any) -> BaseException | None:
        """What the ended ``job`` raised (None: it returned), from its result file.

        Not through submitit's wait, which asks sacct (warnings on a cluster without accounting):
        the file is waited for ``_results_timeout_s``; no result is the tail of the job's logs.
        """
        from submitit.core.utils import FailedJobError, UncompletedJobError

        try:
            if self.cluster == "debug":  # the debug backend runs the job here
                job.result()
                return None
            paths = job.paths
            paths.folder.chmod(paths.folder.stat().st_mode)  # as submitit: a fresh directory
            deadline = time.monotonic() + job._results_timeout_s
            while not paths.result_pickle.exists() and time.monotonic() < deadline:
                time.sleep(1)
            if not paths.result_pickle.exists():  # killed, cancelled, out of time, its setup
                return UncompletedJobError(_tail(paths.stderr) or _tail(paths.stdout))
            outcome, value = job._get_outcome_and_result()
        except Exception as e:  # its result unreadable
            return e
        return FailedJobError(value) if outcome == "error" else None

    def _has_ended(self, job: Any) -> bool:
        """Whether ``job`` ended: its result is there, or (Slurm) squeue says it ended."""
        if self.cluster != "slurm":
            return job.done()
        if job.paths.result_pickle.exists():
            return True
        if time.monotonic() - self._asked >= SQUEUE_EVERY_S:
            self._asked = time.monotonic()
            self._ended |= set(self._jobs) - set(self._squeue())
        return job in self._ended

    def _squeue(self) -> dict[Any, str]:
        """The jobs in flight squeue (not sacct) says will still run; all if it does not answer."""
        ids = {job.job_id.split("_")[0] for job in self._jobs}
        cmd = ["squeue", "-h", "-r", "--states=all", "-o", "%i|%T", "-j", ",".join(ids)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return dict.fromkeys(self._jobs, "UNKNOWN")
        if out.returncode and "Invalid job id" not in out.stderr:  # the controller is away
            return dict.fromkeys(self._jobs, "UNKNOWN")
        states = dict(ln.split("|", 1) for ln in out.stdout.split() if "|" in ln)
        self._states = states
        return {job: s for job in self._jobs if (s := states.get(job.job_id, "")) in LIVE}

    def _state(self, job: Any) -> str:
        if self.cluster != "slurm":
            with contextlib.suppress(Exception):
                return str(job.state)
            return "UNKNOWN"
        if job.job_id not in self._states:  # ended before squeue was asked about it
            self._squeue()
        return self._states.get(job.job_id, "ended, gone from squeue")

    def cancel(self) -> None:
        """Cancel every job in flight (``scancel`` on Slurm) and drop the queued runs."""
        self._queued.clear()
        for job in self._jobs:
            with contextlib.suppress(Exception):
                job.cancel(check=False)
        self._jobs.clear()
        self._runs.clear()

    def close(self) -> list[str]:
        """Remove the files of the jobs whose runs succeeded; a line naming the failed ones' logs.

        A failed job's files stay, with ``JOB_failed_runs`` naming its runs, until each has
        succeeded in a later sweep with this folder; an array's script while one of its jobs' do.
        """
        deadline = time.monotonic() + 10.0  # the last jobs' results, written as they exit
        for job in self._ok:
            while not job.paths.result_pickle.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            _remove_job(self.folder, job.job_id)
        for kept in self.folder.glob(f"*{FAILED_RUNS}") if self._succeeded else ():
            with contextlib.suppress(OSError):  # an earlier sweep's failed job
                runs = kept.read_text().split()
                if not set(runs) - self._succeeded:
                    _remove_job(self.folder, kept.name.removesuffix(FAILED_RUNS))
        for job, runs in self._failed.items():
            with contextlib.suppress(OSError):
                (self.folder / f"{job.job_id}{FAILED_RUNS}").write_text("\n".join(runs) + "\n")
        for link in self.folder.glob(".submission_file_*.sh"):  # submitit's links to the scripts
            if link.is_symlink() and not link.exists():
                with contextlib.suppress(OSError):
                    link.unlink()
        with contextlib.suppress(OSError):  # not there, or records of runs cancelled in it
            self.records.rmdir()
        logs = [str(_log(job)) for job in self._failed]
        self._ok, self._failed, self._succeeded = [], {}, set()
        if not logs:
            return []
        more = f" and {len(logs) - 10} more" * (len(logs) > 10)
        return [
            f"submitit kept the logs of {len(logs)} failed run(s): {', '.join(logs[:10])}{more}"
        ]


def _remove_job(folder: Path, job_id: str) -> None:
    """Remove a job's files; its array's script too once no other file of the array is left."""
    from submitit.core.utils import JobPaths

    p = JobPaths(folder, job_id, 0)
    for path in (p.submitted_pickle, p.result_pickle, p.stdout, p.stderr):
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (folder / f"{job_id}{FAILED_RUNS}").unlink(missing_ok=True)
        script = p.submission_file.name  # by name: JobPaths' folder is absolute, folder may not be
        if all(f.name == script for f in folder.glob(script.removesuffix("submission.sh") + "*")):
            p.submission_file.unlink(missing_ok=True)


def _tail(path: Path) -> str:
    """The last lines of a job's log ("" where there is none)."""
    with contextlib.suppress(OSError), open(path, "rb") as f:
        f.seek(max(f.seek(0, os.SEEK_END) - 4096, 0))
        return f.read().decode(errors="replace")
    return ""


def _log(job: Any) -> Path | None:
    with contextlib.suppress(Exception):
        return Path(job.paths.stderr)
    return None
