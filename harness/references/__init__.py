"""Reference predictors (``ref:NAME``): trivial, non-recurrent baselines of a task.

A reference (no recurrent model, no epochs, no Skip %) says whether a task separates the methods
at all. Fitted on the training split, it is scored by the task's own ``batch_stats`` and
``finalize``; the training step runs and records it as a method (``ReferenceFit``). No torch here.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from harness import env
from harness.components.code import code_digest, source_files
from harness.components.config import build_config, task_config
from harness.components.registry import METHODS, REFERENCES, TASKS
from harness.components.registry import register_reference as register_reference
from harness.errors import ConfigError
from harness.persistence.records import Identified


@dataclass(frozen=True)
class RefConfig(Identified):
    """Everything that determines a reference run (its ``RunConfig``: no trainer, no model)."""

    method: str
    task: str
    seed: int
    preset: str
    method_cfg: Any
    task_cfg: Any
    data: Any = None  # harness.components.config.DataIdentity of real data, None for generated data


# what a reference's record says chose its test metrics (``selection``)
SELECTION = "reference predictors: fitted once on the training split, no epochs to choose from"
EVAL_BATCH = 64  # sequences scored at once, at most: a language model's logits are V wide


class ReferenceFit:
    """One reference run as the training step runs it (``harness.training.train.Fitting``).

    Its record has no MACs, trace or epochs (``best_epoch`` -1); it runs on the CPU.
    """

    def __init__(self, cfg: RefConfig, data_dir: str | None = None) -> None:
        self.cfg, self.data_dir = cfg, data_dir
        self.params: dict[str, int] | None = None  # known once fitted

    def check(self) -> None:
        """Nothing to build: whether it serves its task is checked as a sweep resolves."""

    def device(self) -> Any:
        """The CPU, whatever device the sweep trains on."""
        return env.resolve_device("cpu")

    def setup(self, device: Any) -> tuple[Any, Any, str]:
        """Its task (one it serves, else ConfigError) and the splits of the run's seed."""
        cfg = self.cfg
        self.task = TASKS.get(cfg.task)(cfg.task_cfg, self.data_dir)
        cls = REFERENCES.get(cfg.method)
        if (why := cls.serves(self.task)) is not None:
            raise ConfigError(cannot_serve(cfg.method, self.task, why))
        env.set_seed(cfg.seed)
        self.splits = self.task.splits(cfg.seed)
        self.ref = cls(cfg.method_cfg)
        return self.task, self.splits, SELECTION

    def fit(self, callbacks: Any = (), events: Any = None, checkpoint: Any = None) -> dict:
        """Fit on the training split (no epochs: no callbacks, events or checkpoint)."""
        t0 = time.perf_counter()
        self.ref.fit(self.task, self.splits.train, self.cfg.seed)
        train_s = time.perf_counter() - t0
        self.params = {"total": self.ref.num_params(), "method": self.ref.num_params()}
        return {"best_epoch": -1, "history": [], "train_s": train_s}

    def evaluate(self) -> dict[str, Any]:
        """The validation and test metrics of its predictions (``Reference.score``)."""
        batch = min(self.task.preset(self.cfg.preset).train.eval_batch_size, EVAL_BATCH)
        val = self.ref.score(self.task, self.splits.val, batch)
        test = self.ref.score(self.task, self.splits.test, batch)
        return {"metrics": test, "val_metrics": val, "macs": {}, "diagnostics": {}, "trace": {}}


@dataclass(frozen=True)
class NoReferenceConfig:
    """Config of a reference with no knobs."""


class Reference:
    """Base class of a reference predictor: ``kinds`` it serves, ``fit`` and ``predict``.

    ``config_cls`` holds its knobs, ``description`` says what it is (one sentence). ``bound``: a
    bound the task computes (it overrides ``score``), which the tables judge no method against.
    """

    name: ClassVar[str] = "ref:?"
    kinds: ClassVar[tuple[str, ...]] = ()
    config_cls: ClassVar[type] = NoReferenceConfig
    bound: ClassVar[bool] = False
    run_config: ClassVar[type] = RefConfig  # its runs' config (``config.resolve`` makes one)
    fitting: ClassVar[type] = ReferenceFit  # how the training step runs it
    every_part: ClassVar[bool] = True  # a task's baseline: --methods adds it to every sweep part
    description: ClassVar[str] = ""

    def __init__(self, cfg: Any = None) -> None:
        self.cfg = cfg if cfg is not None else self.config_cls()

    @classmethod
    def serves(cls, task: Any) -> str | None:
        """None when it can run on ``task``, else why not (completing "ref:NAME is ...")."""
        return None if task.kind in cls.kinds else f"for {' or '.join(map(str, cls.kinds))} tasks"

    @classmethod
    def config_sections(cls, task: str, preset: str | None = None) -> dict[str, Any]:
        """Its config sections on ``task``: its own, and the ``preset``'s task config."""
        return {"method": build_config(cls.config_cls, {}), "task": task_config(task, preset)}

    @classmethod
    @functools.cache
    def code_version(cls) -> str:
        """Its ``method_code``: a digest of this module and the module that registers it.

        For a task's own reference, the task's module and the modules of its package it uses.
        """
        module = sys.modules[cls.__module__]
        files = {__file__}
        if module.__name__.partition(".")[0] == __name__.partition(".")[0]:
            files.add(module.__file__)
        else:
            files |= source_files(module)
        return code_digest(files)

    def fit(self, task: Any, train: Any, seed: int) -> None:
        """Fit on the training split (a ``harness.components.task.Split``) only."""
        raise NotImplementedError

    def predict(self, batch: Any) -> Any:
        """The prediction for a ``task.Batch``, shaped as a model's ``pred`` would be."""
        raise NotImplementedError

    def num_params(self) -> int:
        """How many numbers the fit produced (a record's ``params``)."""
        return 0

    def score(self, task: Any, split: Any, batch_size: int) -> dict[str, float]:
        """The task's metrics of the predictions on ``split`` (``batch_stats``, ``finalize``)."""
        stats: dict[str, tuple[float, float]] = {}
        for batch in split.batches(batch_size):
            add_stats(stats, task.batch_stats(self.predict(batch), batch))
        return task.finalize(stats)


def add_stats(stats: dict[str, tuple[float, float]], batch: dict[str, tuple]) -> None:
    """Add a batch's ``(sum, count)`` per metric (``Task.batch_stats``) to ``stats``."""
    for k, (s, c) in batch.items():
        old = stats.get(k, (0.0, 0.0))
        stats[k] = (old[0] + s, old[1] + c)


def is_reference(name: Any) -> bool:
    """Whether ``name`` names a reference predictor (``ref:NAME``): the one test of the prefix."""
    return isinstance(name, str) and name.startswith(REFERENCES.prefix)


def component(name: str) -> Any:
    """The class that runs ``name``, which the core asks (``fitting``, ``every_part``, ...)."""
    return (REFERENCES if is_reference(name) else METHODS).get(name)


def resolve_names(spec: str | Iterable[str]) -> list[str]:
    """Method and reference names and globs (``"all,ref:*"``: ``all`` is every method), in order.

    UnknownNameError: an unknown name, a glob that matches nothing, or no name at all.
    """
    parts = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec)]
    out: list[str] = []
    for part in (p for p in parts if p):
        found = REFERENCES.resolve(part) if is_reference(part) else METHODS.resolve(part)
        out.extend(n for n in found if n not in out)
    return out or METHODS.resolve("")  # the registry's "no method given" message


def named_outright(spec: str | Iterable[str]) -> set[str]:
    """The names a ``--methods`` or ``--tasks`` value gives outright (not a glob, not ``all``)."""
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    return {p.strip() for p in parts if p.strip() and not any(c in p for c in "*?[")} - {"all"}


def role(method: Any) -> str:
    """How a report places a record's row: ``"method"``, ``"reference"`` or ``"bound"``.

    Reports put reference rows first and judge the methods against the predictors, never against
    a bound. A reference this harness does not have registered is a predictor.
    """
    if not is_reference(method):
        return "method"
    try:
        return "bound" if REFERENCES.get(method).bound else "reference"
    except Exception:  # a reference this harness does not know: taken as a predictor
        return "reference"


def describe(name: str) -> str:
    """A reference's description (``Reference.description``, else its docstring's first line)."""
    cls = REFERENCES.get(name)
    return cls.description or (cls.__doc__ or "").strip().split("\n", 1)[0]


def unserved(cfg: Any, data_dir: str | None = None) -> str | None:
    """Why the reference of ``cfg`` cannot run on its task (``Reference.serves``), or None."""
    if not isinstance(cfg, RefConfig):
        return None
    return REFERENCES.get(cfg.method).serves(TASKS.get(cfg.task)(cfg.task_cfg, data_dir))


def cannot_serve(name: str, task: Any, why: str) -> str:
    """One line: reference ``name`` cannot run on ``task`` (a Task), and why."""
    return f"{name} cannot run on '{task.name}' (a {task.kind} task): {name} is {why}"


def skipped_lines(skipped: dict[str, dict[str, list[str]]]) -> list[str]:
    """One line per task of ``skipped`` (task -> why -> references): the references left out."""
    lines = []
    for task, whys in skipped.items():
        kind = TASKS.get(task).kind
        parts = "; ".join(f"{', '.join(sorted(refs))} ({why})" for why, refs in whys.items())
        lines.append(f"reference predictors skipped on '{task}' (a {kind} task): {parts}")
    return lines
