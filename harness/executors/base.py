"""The executor protocol, its options, the registry and ``run_one`` (see ``harness.executors``)."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar, Protocol

from harness.components import config
from harness.components.code import method_code, method_kernels
from harness.components.plugins import load_plugins
from harness.components.registry import SNAKE_KEY, Registry, needs
from harness.env import resolve_device
from harness.errors import DISK_FULL_NOTE, ConfigError, failure_reason
from harness.persistence import records
from harness.persistence.store import write_part
from harness.training.tracking import TensorBoardLogger

# The most worker processes and torch threads per run a sweep may ask for: beyond any machine
# here, and below the counts at which thread pools fail to allocate (--threads 1000000 ended in
# a segmentation fault inside the first run).
MAX_WORKERS = 1024
MAX_THREADS = 1024
# what a process's first run imports: the training code (torch), torch._dynamo, which torch's
# optimisers import at their first use (about as long as torch itself), and torch's extension
# loader, which loads the compiled kernels (a tenth of a second, once per process)
WARM = ("torch._dynamo", "harness.training.train", "torch.utils.cpp_extension")
# ``harness run``'s own options (argparse dests; a sweep file's keys are among them, with its
# ``part`` and ``description``): an executor's option may not take one of these names
# (tests/test_cli_parser.py checks the parser against them)
RUN_OPTIONS = frozenset(
    "allow_unverified_data argv checkpoint_every command config data_dir description device "
    "dry_run executor force format func grid help include keep_stale log_dir match_skip methods "
    "no_checkpoint no_report out parser part preset report retry_failed seeds select set "
    "store_mode suite tasks threads verbose".split()
)


@dataclass(frozen=True)
class RunOptions:
    """What every run of a sweep gets, whichever executor runs it.

    Attributes:
        data_dir: the dataset root (None: ``$HARNESS_DATA_DIR``, else the user cache).
        threads: torch CPU threads per run (0: torch's default).
        log_dir: TensorBoard event files per run under this folder (None: none).
        checkpoint_dir: each run keeps a checkpoint here and goes on from one it finds.
        parts_dir: a ``files``-mode store's parts folder: each run writes its record there
            itself, with ``provenance`` (``argv``, ``sweep``) added (None: the driver does).
        verbose: an executor shows its machinery's own log lines too (Ray's).
    """

    data_dir: str | None = None
    device: str = "cpu"
    threads: int = 1
    log_dir: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every_s: float = 600.0
    parts_dir: str | None = None
    provenance: dict[str, Any] | None = None
    verbose: bool = False


@dataclass(frozen=True)
class Option:
    """A setting an executor declares (its ``options``): a ``harness run`` flag and a sweep key.

    ``type``: ``str``, ``int`` (within ``bounds``), ``bool`` (a flag without a value) or ``list``
    (of strings: a repeatable flag). A value equal to ``default`` counts as not given. ``what``:
    the value in words (``a path``), an ``int``'s unit (``minutes``).
    """

    name: str
    type: type = str
    default: Any = None
    help: str = ""
    metavar: str | None = None
    bounds: tuple[int, int] | None = None
    what: str = ""

    @property
    def flag(self) -> str:
        """The ``harness run`` flag."""
        return "--" + self.name.replace("_", "-")

    def describe(self) -> str:
        """What a sweep file's value must be, in words."""
        if self.type is bool or not self.bounds:
            return "true or false" if self.type is bool else self.what
        return f"{self.what}, " * bool(self.what) + "an integer in [{}, {}]".format(*self.bounds)

    def check(self, value: Any) -> None:
        """Refuse an ``int`` out of ``bounds``, a ``list`` not of strings (one line: the flag)."""
        if self.type is list and not (
            isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        ):
            raise ConfigError(f"{self.flag} expects a list of strings (got {value!r})")
        if not self.bounds:
            return
        low, high = self.bounds
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{self.flag} must be an integer in [{low}, {high}] (got {value!r})")


# the local and pool executors' one option (local with more than one worker is the pool)
WORKERS = Option(
    "workers", int, 1, "local executor: runs in parallel processes (default: %(default)s: in this "
    f"process; at most {MAX_WORKERS}); with --dry-run, the estimate on N parallel workers too",
    "N", (1, MAX_WORKERS),
)  # fmt: skip


class ExecutorOptions(SimpleNamespace):
    """An executor's own settings, by the names its ``options`` declare (``options_for``)."""


def declared(cls: Any = None) -> dict[str, Option]:
    """The options of the executor class ``cls`` by name; None: of every registered one."""
    classes = [cls] if cls is not None else [c for _, c in EXECUTORS.items()]
    return {o.name: o for c in reversed(classes) for o in getattr(c, "options", ())}


def options_for(name: str, values: dict[str, Any]) -> ExecutorOptions:
    """``values`` checked against executor ``name``'s options (ConfigError), with its defaults."""
    own, every = declared(EXECUTORS.get(name)), declared()
    for key, value in values.items():
        option = every.get(key)
        if key in own or value is None or (option and value == option.default):
            continue
        users = " or ".join(n for n, c in EXECUTORS.items() if key in declared(c)) or "(none)"
        raise ConfigError(f"{option.flag if option else key} is only used with --executor {users}")
    given = {k: v for k, v in values.items() if k in own and v is not None}
    for key, value in given.items():
        own[key].check(value)
    return ExecutorOptions(**{o.name: o.default for o in own.values()} | given)


EpochCallback = Callable[[int, dict[str, Any]], None]


class Executor(Protocol):
    """What ``harness.api.run_sweep`` drives, made as ``cls(RunOptions, ExecutorOptions)``.

    Optional: ``options`` (a tuple of ``Option``), ``preflight(run, options)`` (a check before
    anything is planned), ``start_early(run, options)`` (a slow start-up that overlaps the
    planning; not for a dry run) and ``prepare(cfgs)`` (before the first run: ``build_kernels``).
    ``in_process``: runs train in this process (so ``submit``'s ``on_epoch`` is called).
    """

    name: ClassVar[str]
    in_process: ClassVar[bool]

    def slots(self) -> int:
        """How many runs may be in flight at once."""

    def submit(self, cfg: Any, on_epoch: EpochCallback | None = None) -> Hashable:
        """Start (or queue) one run; returns its handle."""

    def wait_any(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """Block until a run in flight finished (or poll with a pause); each ``(handle, record)``.

        Nothing returned without waiting, again and again, stops the sweep (``api.STALL_S``).
        """

    def cancel(self) -> None:
        """Stop every run in flight now (they are dropped, not recorded)."""

    def close(self) -> list[str] | None:
        """Release what it holds once nothing is in flight; lines to show after the sweep."""


_PROTOCOL = needs(
    "", *(m for m in (*Executor.__annotations__, *vars(Executor)) if m[0] != "_" and m != "name")
)


def option_problems(cls: Any) -> list[str]:
    """What is wrong with an executor class's ``options`` (``RUN_OPTIONS``...), a phrase each."""
    options = getattr(cls, "options", ())
    if not isinstance(options, tuple) or not all(isinstance(o, Option) for o in options):
        return [f"has options {options!r}, not a tuple of Option"]
    out = []
    for o in options:
        if not SNAKE_KEY.match(o.name):
            out.append(f"has the option {o.name!r}, not of the form {SNAKE_KEY.pattern}")
        if o.name in RUN_OPTIONS:
            out.append(f"has the option {o.name!r} ({o.flag}), one of harness run's own")
        for n, c in EXECUTORS.registered().items():
            if declared(c).get(o.name, o) != o:
                out.append(f"has the option {o.name!r}, which executor '{n}' declares otherwise")
    return out


EXECUTORS = Registry(
    "executor",
    lambda cls: _PROTOCOL(cls) + option_problems(cls),
    "harness.executors.Executor",
    light=True,
)
register_executor = EXECUTORS.register


def run_one(
    cfg_dict: dict[str, Any], run: RunOptions, callbacks: tuple[EpochCallback, ...] = ()
) -> dict[str, Any]:
    """Run one config (as its dict: configs cross so, rebuilt trusted) and return its record.

    ``callbacks`` (in-process runs) are called after every epoch. Anything raised around the run
    is its failed record too; only an interrupt propagates. With ``run.parts_dir`` the record is
    also written to its own file there, named under ``PART`` (an unwritten one is the driver's).
    """
    try:
        rec = _run_config(cfg_dict, run, callbacks)
    except Exception as e:  # an interrupt is no Exception: it propagates
        rec = lost_record(cfg_dict, failure_reason(e))
    if run.parts_dir:
        full = {k: v for k, v in rec.items() if k != DISK_FULL_NOTE} | (run.provenance or {})
        with contextlib.suppress(OSError):
            rec[PART] = str(write_part(run.parts_dir, full))
    return rec


PART = "_part"  # the key of run_one's record naming the file it wrote its record to


def _run_config(
    cfg_dict: dict[str, Any], run: RunOptions, callbacks: tuple[EpochCallback, ...]
) -> dict[str, Any]:
    import torch

    from harness.training.train import run as train_run

    if run.threads:
        torch.set_num_threads(run.threads)
    cfg = config.from_dict(cfg_dict)
    saving = {"checkpoint_dir": run.checkpoint_dir, "checkpoint_every_s": run.checkpoint_every_s}
    if not run.log_dir:
        return train_run(cfg, run.data_dir, run.device, list(callbacks), **saving)

    with contextlib.closing(TensorBoardLogger(run.log_dir, cfg)) as logger:
        rec = train_run(cfg, run.data_dir, run.device, [logger, *callbacks], **saving)
        logger.finish(rec)
    return rec


def build_kernels(cfgs: Any, run: RunOptions) -> None:
    """Build (or load) the training kernels of the runs ``cfgs`` now: no run's time holds one.

    The loaders of ``part`` "train" among ``method_kernels`` (inference kernels run only in fast
    paths); the first builds the whole training library once per machine and CPU. Nothing with
    ``HARNESS_NO_KERNELS`` or where the runs do not train on the CPU (the kernels are CPU-only).
    """
    if os.environ.get("HARNESS_NO_KERNELS") or not cfgs or resolve_device(run.device).type != "cpu":
        return
    loaders = {id(k): k for m in dict.fromkeys(c.method for c in cfgs) for k in method_kernels(m)}
    for loader in loaders.values():
        if getattr(loader, "part", "train") == "train":
            loader()


def warm_up() -> None:
    """Import what a process's first run would (``WARM``) and the plugins, then freeze all.

    The collector is paused meanwhile (a third of the imports' time, 1.8 s against 1.3 s here);
    frozen (``gc.freeze``), their half a million objects are not traversed by the runs'
    collections (a few per cent of a run). The caller ends the freeze (``gc.unfreeze``).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        for module in WARM:
            importlib.import_module(module)
        load_plugins()
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def lost_record(cfg_dict: dict[str, Any], why: str) -> dict[str, Any]:
    """The failed record of a run that did not start or whose worker sent no record (``why``)."""
    code = None
    with contextlib.suppress(Exception):
        code = method_code(cfg_dict["method"])
    return records.failed_record(cfg_dict, why, code)


def require(module: str, install: str) -> None:
    """Refuse an executor whose package ``module`` is not installed: one line, ``install``."""
    found = False
    with contextlib.suppress(ImportError, ValueError):
        found = importlib.util.find_spec(module) is not None
    if not found:
        raise ConfigError(install)


def require_cuda(run: RunOptions, options: ExecutorOptions) -> None:
    """Refuse ``--device cuda`` where this machine has no CUDA device (runs that train here)."""
    if run.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda requested but no CUDA device is available")


def make_executor(name: str, run: RunOptions, options: ExecutorOptions) -> Executor:
    """The executor registered as ``name``, set up for a sweep (HarnessError: cannot start)."""
    return EXECUTORS.get(name)(run, options_for(name, vars(options)))
