"""Reference predictors: trivial, non-recurrent baselines run through the task interface.

A reference (``ref:NAME``) is not a method: it has no recurrent model, no epochs and no Skip %.
It says whether a task separates the methods at all, so every leaderboard and paper table shows
the references first (``harness.reporting.references``). A reference gets the task's splits for
the run's seed (``Task.splits``), is fitted on the training split only and predicts each
validation and test batch as a model would, so that its metrics come from the task's own
``batch_stats`` and ``finalize``. The training step runs it as it runs a method (``ReferenceFit``,
through ``Reference.fitting``) and records it the same way, under ``method`` = ``ref:NAME``, with a
run id hashed from its task, the task's config, the preset, the seed, its name and its own config
(``RefConfig``).

Built-in references (``harness.references.predictors``): ``ref:majority`` and ``ref:logreg``
(classification), ``ref:mean`` and ``ref:last`` (regression), ``ref:unigram`` and ``ref:bigram``
(language models). A task declares a reference of its own in its module with
``@register_reference`` (a bound the task computes, say). ``harness run --methods 'ref:*'`` runs
them (``resolve_names``); ``--methods all`` stays the registered methods.

This module imports no torch: the registry, the base class, the run config and the run.
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
from harness.components.registry import (
    METHODS,
    REFERENCES,
    TASKS,
    register_reference,
)
from harness.errors import ConfigError
from harness.persistence.records import Identified

__all__ = [
    "REFERENCES",
    "RefConfig",
    "Reference",
    "component",
    "describe",
    "register_reference",
    "resolve_names",
    "role",
]


# --- a reference run: its config, and the run through the training step's interface --------


@dataclass(frozen=True)
class RefConfig(Identified):
    """Everything that determines a reference run (what ``RunConfig`` is to a method's run).

    No trainer and no model: its run id hashes the reference, the task, the task's config, the
    preset, the seed, the reference's own config and the data's identity.
    """

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
    """One reference run through the training step's interface (``harness.training.train.Fitting``).

    Fitted once on the training split, it scores validation and test with the task's own
    ``batch_stats`` and ``finalize``; its record has no MACs, no trace and no epochs (``history``
    empty, ``best_epoch`` -1), and ``params`` the numbers the fit produced. It runs on the CPU,
    whatever device the sweep trains on: it is deterministic there.
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
    """Base class of a reference predictor (see the module docstring).

    A subclass sets ``kinds`` (the ``harness.components.task.TaskKind`` values it serves) and
    implements ``fit`` and ``predict``; ``config_cls`` holds its knobs (declared with
    ``harness.components.config.knob``); ``description`` says what it is in one sentence (``harness
    list references``, the notes under the tables). ``bound``: the reference is a bound the task
    computes (what no predictor can beat), not a predictor: it overrides ``score``, and the tables
    do not judge the methods against it.

    Args:
        cfg: an instance of ``config_cls``.
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
        """None when the reference can run on ``task``; otherwise why not, in a few words.

        The words complete "ref:NAME ...": ``for classification tasks``.
        """
        if task.kind in cls.kinds:
            return None
        return f"for {' or '.join(str(k) for k in cls.kinds)} tasks"

    @classmethod
    def config_sections(cls, task: str, preset: str | None = None) -> dict[str, Any]:
        """Its config sections on ``task``: its own, and the ``preset``'s task config."""
        return {"method": build_config(cls.config_cls, {}), "task": task_config(task, preset)}

    @classmethod
    @functools.cache
    def code_version(cls) -> str:
        """Its code version (a record's ``method_code``): a digest of its files.

        The files are this package's base module (its runner too) and the module that registers
        the reference (for a task's own reference: the task's module and the modules of its
        package it uses, as ``harness.components.code.method_code`` takes them).
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
        stats: dict[str, list[float]] = {}
        for batch in split.batches(batch_size):
            for k, (s, c) in task.batch_stats(self.predict(batch), batch).items():
                acc = stats.setdefault(k, [0.0, 0.0])
                acc[0] += s
                acc[1] += c
        return task.finalize({k: (s, c) for k, (s, c) in stats.items()})


def is_reference(name: Any) -> bool:
    """Whether ``name`` names a reference predictor (``ref:NAME``): the one test of the prefix."""
    return isinstance(name, str) and name.startswith(REFERENCES.prefix)


def component(name: str) -> Any:
    """The class that runs ``name``, which the core asks (``fitting``, ``every_part``, ...)."""
    return (REFERENCES if is_reference(name) else METHODS).get(name)


def resolve_names(spec: str | Iterable[str]) -> list[str]:
    """Method and reference names and globs (``"all,ref:*"``), in order, repeats dropped.

    A part starting with ``ref:`` is looked up among the references, any other among the
    methods (``all`` is every method, never a reference).

    Raises:
        UnknownNameError: an unknown name, a glob that matches nothing, or no name at all.
    """
    parts = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec)]
    out: list[str] = []
    for part in (p for p in parts if p):
        found = REFERENCES.resolve(part) if is_reference(part) else METHODS.resolve(part)
        out.extend(n for n in found if n not in out)
    if not out:
        return METHODS.resolve("")  # the registry's "no method given" message
    return out


def named_outright(spec: str | Iterable[str]) -> set[str]:
    """The names a ``--methods`` or ``--tasks`` value gives outright (not a glob, not ``all``)."""
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    return {p.strip() for p in parts if p.strip() and not any(c in p for c in "*?[")} - {"all"}


def role(method: Any) -> str:
    """How a report places a record's row: ``"method"``, ``"reference"`` or ``"bound"``.

    The one place that decides whether a name is a reference predictor: a report asks, and puts
    reference rows first, judges the methods against the predictors and never against a bound
    (``Reference.bound``). A reference this harness does not have registered is a predictor.
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
    """One line per task: the references left out for it, grouped by why.

    Args:
        skipped: task -> why (``Reference.serves``) -> the references it holds for.
    """
    lines = []
    for task, whys in skipped.items():
        kind = TASKS.get(task).kind
        parts = "; ".join(f"{', '.join(sorted(refs))} ({why})" for why, refs in whys.items())
        lines.append(f"reference predictors skipped on '{task}' (a {kind} task): {parts}")
    return lines
