"""``submitit``: the runs of a sweep as Slurm jobs (or local processes where there is no Slurm).

Needs the ``slurm`` extra (``pip install 'condrnn-harness[slurm]'``); nothing of submitit is
imported until this executor is made. ``submitit.AutoExecutor`` picks Slurm where ``srun`` is
found, else its local backend (one process per job on this machine); ``submitit_cluster``
forces ``slurm``, ``local`` or ``debug`` (in this process, for tests). Each run is one job
calling ``run_one`` on its config; the job's record comes back through submitit's result file.
The ``--slurm-*`` options set each job's partition, time limit, CPUs, GPUs and memory, and how
many jobs are in flight at once (``slots``); ``--slurm-opt KEY=VALUE`` passes any other sbatch
option (``account=abc``) and ``--slurm-setup LINE`` a line the job script runs first. Jobs
pickle their config into the submitit folder and import the harness on the node: the folder and
the Python environment must be on a filesystem the compute nodes share.

Arrays, and why runs are still claimed one by one: the pull loop (``harness.api._pull``) claims
a run just before it hands it to ``submit``, and fills every free slot before it calls
``wait_any``. ``submit`` only queues the run; ``wait_any`` first sends everything queued as one
Slurm job array (``map_array``: one ``sbatch`` for the first fill, which is ``slots`` runs, and
one for each refill), then polls. So scheduler load is that of arrays while claims stay per run
and just in time, and each array element is its own job with its own result: a lost element is
that run's failed record, as with the other executors. What this does not do is submit the whole
sweep as one array up front and let Slurm's ``%N`` throttle run it: that would claim every run at
once, hold claims for runs queued for hours, and leave nothing for a second sweep on the store.

A job that ends without a record (killed by the scheduler: cancelled, out of memory, a node
lost; or failing outside the run: the harness not importable on the node) is that run's failed
record naming the job, its state and submitit's message, and the sweep goes on;
``--retry-failed`` reruns it. At the end of the sweep (``close``) the files of the jobs whose run
succeeded are removed; a failed run's job keeps its logs, which a line names. A run out of time
is failed too: Slurm signals the job before its limit, and submitit's handler raises inside the
run ("timed-out and not checkpointable"), which the run records as its failure. A submission
that the scheduler refuses (an unknown partition, a time over the partition's limit) stops the
sweep with one line: it would refuse every run alike. A submission that meets a full disk (the
folder's) starts none of its runs (``WriteFailed``): the jobs in flight finish and are recorded,
then the sweep stops.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any, ClassVar

from harness.data.files import cache_dir
from harness.errors import HarnessError, WriteFailed, is_disk_full
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

INSTALL = "--executor submitit needs submitit: pip install 'condrnn-harness[slurm]'"
CLUSTERS = ("slurm", "local", "debug")
DEFAULT_TIME_MIN = 24 * 60  # Slurm's own default would be submitit's 5 minutes
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
           "(account=abc, qos=high, constraint=a100; repeatable; wins over the --slurm-* options "
           "above)", "KEY=VALUE", None, "a list of KEY=VALUE strings (sbatch options)"),
    Option("slurm_setup", list, None, "a line the job script runs before the run (module load "
           "cuda, source venv/bin/activate; repeatable, in order)", "LINE", None,
           "a list of shell lines"),
    Option("slurm_local", bool, False, "run the jobs as processes on this machine even where "
           "Slurm is installed (default: submitted with sbatch wherever srun is on PATH)"),
    Option("submitit_cluster", str, None, "submitit's backend: slurm, local (as --slurm-local) "
           "or debug (in this process) (default: slurm where srun is on PATH, else local)",
           "NAME", None, "slurm, local or debug"),
)  # fmt: skip
LIMITS = {o.name: o.bounds for o in OPTIONS if o.bounds}  # the numeric --slurm-* options
# polling the jobs in flight: every 0.25 s at first, then less often, up to every 10 s (every
# second without Slurm, where a poll is a check on a local process and a file)
POLL_FIRST_S, POLL_MAX_S, POLL_MAX_LOCAL_S = 0.25, 10.0, 1.0


def default_folder() -> Path:
    """Where jobs keep their pickles and logs without ``--slurm-folder``: the user cache.

    ``$XDG_CACHE_HOME/condrnn-harness/submitit`` (else ``~/.cache/...``): outside the checkout and
    the records, and in the home directory, which the compute nodes of a cluster usually share.
    """
    return cache_dir() / "submitit"


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

    Raises:
        HarnessError: a value that is not KEY=VALUE with a KEY of letters, digits, ``-``, ``_``.
    """
    found = {}
    for pair in pairs or ():
        key, eq, value = pair.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z][\w-]*", key):
            raise HarnessError(
                f"--slurm-opt expects KEY=VALUE, an sbatch option without its dashes "
                f"(account=abc), got {pair!r}"
            )
        found[key] = value
    return found


def lost_why(job_id: str, state: str, err: BaseException, log: Path | None = None) -> str:
    """Why a job has no record, in one line: the job, its state and submitit's message.

    submitit's messages run over many lines (a traceback, the tail of the job's log); the line
    kept is the last one that says something: the exception of a traceback, or the last line the
    job logged.
    """
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


@register_executor("submitit")
class SubmititExecutor:
    """submitit jobs: Slurm where there is Slurm, else local processes (``submitit_cluster``).

    Args:
        run: what every run gets, as the jobs see it (``data_dir``, ``log_dir`` must be paths the
            nodes can reach).
        options: the ``slurm_*`` fields: partition, time (minutes; default a day), CPUs per job
            (default ``--threads``), GPUs per job (default 1 with ``--device cuda``, else 0),
            memory (GB; default the partition's), array parallelism (jobs in flight; default 256
            on Slurm, on the local backend as many as the CPUs hold), the folder of the jobs'
            pickles and logs (default ``default_folder()``), other sbatch options
            (``sbatch_options``) and the job script's setup lines; ``submitit_cluster``.

    Raises:
        HarnessError: submitit is not installed, an option is out of range, or submitit cannot
            be set up with them (the folder not writable, Slurm refusing a parameter).
    """

    in_process: ClassVar[bool] = False
    options = OPTIONS
    preflight = staticmethod(preflight)

    def __init__(self, run: RunOptions, options: ExecutorOptions) -> None:
        preflight(run, options)
        try:
            import submitit
        except ImportError:
            raise HarnessError(INSTALL) from None
        folder = Path(options.slurm_folder or default_folder()).expanduser()
        cluster = options.submitit_cluster or ("local" if options.slurm_local else None)
        try:
            self._ex = submitit.AutoExecutor(folder=folder, cluster=cluster)
        except (OSError, RuntimeError, ValueError) as e:
            raise HarnessError(f"cannot set up submitit in {folder}: {e}") from None
        self.run, self.cluster, self.folder = run, self._ex.cluster, folder
        cpus = options.slurm_cpus or max(run.threads, 1)
        gpus = options.slurm_gpus
        if gpus is None:
            gpus = 1 if run.device == "cuda" else 0
        self.size = options.slurm_array_parallelism or (
            SLURM_PARALLELISM
            if self.cluster == "slurm"
            else 1
            if self.cluster == "debug"
            else max((os.cpu_count() or 1) // cpus, 1)
        )
        params: dict[str, Any] = {
            "name": "harness",
            "timeout_min": options.slurm_time or DEFAULT_TIME_MIN,
            "cpus_per_task": cpus,
            "gpus_per_node": gpus or None,  # none asked: Slurm's own default, no GPU
            "mem_gb": options.slurm_mem,  # None: the partition's default
            "slurm_partition": options.slurm_partition,
            "slurm_array_parallelism": self.size,
            "slurm_additional_parameters": sbatch_options(options.slurm_opt) or None,
            "slurm_setup": list(options.slurm_setup or ()) or None,
        }
        try:
            self._ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
        except (AssertionError, NameError, ValueError, TypeError) as e:
            raise HarnessError(f"submitit refuses the --slurm-* options: {_one_line(e)}") from None
        self._queued: list[tuple[int, dict[str, Any]]] = []
        self._jobs: dict[int, tuple[Any, dict[str, Any]]] = {}  # handle -> (job, config dict)
        self._ok: list[Any] = []  # the finished jobs whose run succeeded, and the others
        self._failed: list[Any] = []
        self._next = 0

    def slots(self) -> int:
        """The array parallelism: how many jobs are queued or running at once."""
        return self.size

    def submit(self, cfg: Any, on_epoch: EpochCallback | None = None) -> Hashable:
        """Queue the run; ``wait_any`` submits what is queued as one job array. Its handle."""
        self._next += 1
        self._queued.append((self._next, cfg.to_dict()))
        return self._next

    def _flush(self) -> None:
        """Submit the queued runs: one job array (a single job for one run).

        Raises:
            WriteFailed: their pickles met a full disk; none of them started (``dropped``).
            HarnessError: the scheduler refused them.
        """
        if not self._queued:
            return
        queued, self._queued = self._queued, []
        cfgs = [d for _, d in queued]
        try:
            jobs = self._ex.map_array(run_one, cfgs, [self.run] * len(cfgs))
        except Exception as e:  # sbatch refused: every run would be refused alike
            if is_disk_full(e):  # the folder is full: no job of them started (on Slurm)
                raise WriteFailed(self.folder, e, [h for h, _ in queued]) from None
            raise HarnessError(
                f"submitit could not submit {len(cfgs)} job(s) ({self.cluster}): {_one_line(e)}"
            ) from None
        for (handle, cfg_dict), job in zip(queued, jobs, strict=True):
            if self.cluster != "slurm":
                # the local backend writes the result before its process ends: no shared
                # filesystem to wait for (submitit would wait 15 s for a job that left none)
                job._results_timeout_s = 0
            self._jobs[handle] = (job, cfg_dict)

    def wait_any(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """Submit what is queued, then poll until some jobs end; each ``(handle, record)``.

        A job that ended without a record (``lost_why``) gives its run a failed record.
        """
        self._flush()
        if not self._jobs:
            return []
        delay, most = POLL_FIRST_S, POLL_MAX_S if self.cluster == "slurm" else POLL_MAX_LOCAL_S
        while True:
            done = [h for h, (job, _) in self._jobs.items() if job.done()]
            if done:
                return [(h, self._record(h)) for h in done]
            time.sleep(delay)
            delay = min(delay * 1.5, most)

    def _record(self, handle: int) -> dict[str, Any]:
        job, cfg_dict = self._jobs.pop(handle)
        try:
            rec = job.result()
        except Exception as e:  # killed, timed out, or failed outside run_one
            rec = lost_record(cfg_dict, lost_why(job.job_id, _state(job), e, _log(job)))
        if not isinstance(rec, dict):
            why = f"the submitit job {job.job_id} returned {type(rec).__name__}, not a record"
            rec = lost_record(cfg_dict, why)
        (self._ok if rec.get("status") == "ok" else self._failed).append(job)
        return rec

    def cancel(self) -> None:
        """Cancel every job in flight (``scancel`` on Slurm) and drop the queued runs."""
        self._queued.clear()
        for job, _ in self._jobs.values():
            with contextlib.suppress(Exception):
                job.cancel(check=False)
        self._jobs.clear()

    def close(self) -> list[str]:
        """Remove the files of the jobs whose run succeeded; a line naming the failed ones' logs.

        The pickles and logs of a job whose run failed (or that sent no record) stay in the
        folder, and so does the script of a job array while one of its jobs' files do (and
        submitit's link to a script while the script is there).
        """
        kept = {job.paths.submission_file for job in self._failed}
        for job in self._ok:
            p = job.paths
            script = {p.submission_file} - kept  # a job array's: one for all its jobs
            for path in (p.submitted_pickle, p.result_pickle, p.stdout, p.stderr, *script):
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
        for link in self.folder.glob(".submission_file_*.sh"):  # submitit's links to the scripts
            if link.is_symlink() and not link.exists():
                with contextlib.suppress(OSError):
                    link.unlink()
        logs = [str(_log(job)) for job in self._failed]
        self._ok, self._failed = [], []
        if not logs:
            return []
        more = f" and {len(logs) - 10} more" * (len(logs) > 10)
        return [
            f"submitit kept the logs of {len(logs)} failed run(s): {', '.join(logs[:10])}{more}"
        ]


def _state(job: Any) -> str:
    try:
        return str(job.state)
    except Exception:
        return "UNKNOWN"


def _log(job: Any) -> Path | None:
    with contextlib.suppress(Exception):
        return Path(job.paths.stderr)
    return None


def _one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:400]
