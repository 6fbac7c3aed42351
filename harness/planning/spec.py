"""What a sweep runs: its specification, and the plan of checked runs made from it.

``SweepSpec`` is a sweep as flags or a sweep file say it (blocks of methods x tasks with their
overrides and grids, seeds, preset); ``plan_sweep`` resolves every run's ``RunConfig`` and checks
everything that can be checked before the first run starts (names, values against their declared
bounds, the data against their published checksums, every model built once). ``harness.api``
re-exports these names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.components.registry import TASKS
from harness.data import attach_identity, task_row
from harness.errors import ConfigError, DataError
from harness.planning.sweep import build_configs, validate, variant_labels
from harness.references import cannot_serve, named_outright, resolve_names, skipped_lines
from harness.references import unserved as why_not

MAX_SEEDS = 10_000


def parse_seeds(spec: str, limit: int = MAX_SEEDS) -> list[int]:
    """Seeds from ``"0-4"``, ``"0,2,5"`` or ``"3"`` (repeats dropped, order kept).

    The count is checked against ``limit`` before a range is expanded, so ``0-9999999`` fails
    at once; anything else, a negative seed, an empty or descending range is a ConfigError.
    """
    usage = f"--seeds expects e.g. 0-4 or 0,1,2 (seeds >= 0); got '{spec}'"
    ranges: list[tuple[int, int]] = []
    try:
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            lo, sep, hi = part.partition("-")
            ranges.append((int(lo), int(hi) if sep else int(lo)))
    except ValueError:  # also a negative seed: "-1" has no number before its "-"
        raise ConfigError(usage) from None
    if not ranges or any(hi < lo for lo, hi in ranges):
        raise ConfigError(usage)
    count = sum(hi - lo + 1 for lo, hi in ranges)
    if count > limit:
        raise ConfigError(f"--seeds '{spec}' gives {count:,} seeds; at most {limit:,} are allowed")
    return list(dict.fromkeys(s for lo, hi in ranges for s in range(lo, hi + 1)))


@dataclass
class Block:
    """Methods x tasks with their own overrides and grid (one ``[[part]]`` of a sweep file).

    Attributes:
        methods: registered method and reference (``ref:NAME``) names.
        tasks: registered task names.
        set: ``key -> value`` overrides, as ``--set`` gives them.
        grid: ``key -> values`` swept (cartesian product), as ``--grid`` gives them.
    """

    methods: list[str]
    tasks: list[str]
    set: dict[str, str] = field(default_factory=dict)
    grid: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class SweepSpec:
    """What a sweep runs, before anything is resolved.

    Attributes:
        blocks: the blocks whose union is the sweep.
        seeds: every variant's seeds.
        preset: ``smoke``, ``quick`` or ``paper``.
        named_tasks: tasks the user named outright: their missing data is an error, where a task
            reached through ``all`` or a glob is skipped with the reason.
        named_methods: methods and references the user named outright: a reference named
            outright for a task named outright that it cannot serve is an error; otherwise the
            pair is skipped with the reason.
        config: the sweep file it came from (provenance).
        suite: the shipped suite it came from (provenance).
        select: the leaderboard's selection rule (provenance; ``report`` applies it).
        match_skip: the Skip % target of ``--match-skip`` (provenance).
    """

    blocks: list[Block]
    seeds: list[int] = field(default_factory=lambda: [0])
    preset: str = "smoke"
    named_tasks: set[str] = field(default_factory=set)
    named_methods: set[str] = field(default_factory=set)
    config: str | None = None
    suite: str | None = None
    select: str | None = None
    match_skip: float | None = None

    @classmethod
    def of(
        cls,
        methods: str = "all",
        tasks: str = "all",
        *,
        seeds: Sequence[int] = (0,),
        preset: str = "smoke",
        set: dict[str, Any] | None = None,
        grid: dict[str, Sequence[Any]] | None = None,
    ) -> SweepSpec:
        """One block from names or globs (``"METHOD,PREFIX-*,ref:*"``), as ``harness run`` does."""
        block = Block(
            resolve_names(methods),
            TASKS.resolve(tasks),
            {k: str(v) for k, v in (set or {}).items()},
            {k: [str(v) for v in vs] for k, vs in (grid or {}).items()},
        )
        named = {t.strip() for t in tasks.split(",")} - {"all"}
        return cls([block], list(seeds), preset, named, named_outright(methods))

    def tasks(self) -> list[str]:
        """Every task of the sweep, in order."""
        return list(dict.fromkeys(t for b in self.blocks for t in b.tasks))

    def swept(self) -> list[str]:
        """Every key some block's grid sweeps, in order."""
        return list(dict.fromkeys(k for b in self.blocks for k in b.grid))


@dataclass
class Sweep:
    """A planned sweep: every run's config, checked, in the order a serial executor runs them.

    Attributes:
        spec: what it was planned from.
        configs: the distinct runs (``RunConfig``).
        labels: per run id, the config fields that tell its variant apart (``lam=0.001``).
        skipped_tasks: ``(task, reason)`` of tasks reached through ``all`` or a glob whose data
            are missing.
        notes: what the data checks said (data without published checksums).
        skipped_references: one line per (reference, task) pair left out because the
            reference cannot serve the task (reached through a glob or ``all``).
    """

    spec: SweepSpec
    configs: list[Any]
    labels: dict[str, str]
    skipped_tasks: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped_references: list[str] = field(default_factory=list)

    @property
    def provenance(self) -> dict[str, Any]:
        """The resolved sweep, as each of its records stores it (``sweep``)."""
        s = self.spec
        return {
            "config": s.config,
            "suite": s.suite,
            "preset": s.preset,
            "seeds": s.seeds,
            "match_skip": s.match_skip,
            "select": s.select,
            "blocks": [
                {"methods": b.methods, "tasks": b.tasks, "set": b.set, "grid": b.grid}
                for b in s.blocks
            ],
        }


def plan_sweep(
    spec: SweepSpec, data_dir: str | None = None, allow_unverified: bool = False
) -> Sweep:
    """Resolve and check every run of a sweep before any of them starts.

    Every config is resolved (names, ``--set`` values and their declared bounds), the data of
    every real-data task are checked against their published sums (and key the runs' ids), and
    each distinct model is built once, so bad input stops the sweep here, not in its middle.

    Args:
        spec: what to run.
        data_dir: the dataset root.
        allow_unverified: run on data that differ from the published sums (recorded as
            unverified, under their own digest).

    Returns:
        The sweep.

    Raises:
        HarnessError: one line naming what is wrong (exit 2 on the command line).
    """
    runnable, skipped = usable_tasks(spec.named_tasks, spec.tasks(), data_dir)
    unserved: list[str] = []
    resolved = resolve_configs(spec, runnable, unserved, data_dir)
    cfgs, notes = attach_identity(resolved, data_dir, allow_unverified)
    validate(cfgs, data_dir)
    return Sweep(spec, cfgs, variant_labels(cfgs), skipped, notes, unserved)


def resolve_configs(
    spec: SweepSpec,
    tasks: Sequence[str] | None = None,
    unserved: list[str] | None = None,
    data_dir: str | None = None,
) -> list[Any]:
    """Every distinct run of ``spec`` as a ``RunConfig``, block by block; ``tasks``: only these.

    Each is resolved and bounds-checked; nothing is built and no data are read. A reference
    (``ref:NAME``) that cannot serve a task is left out for it, with one line appended to
    ``unserved``, unless both were named outright (then it is an error).

    Raises:
        ConfigError: a key no selected method or task has, a bad or out-of-range value, a
            reference named outright for a task named outright that it cannot serve.
    """
    cfgs, seen = [], set()
    skipped: dict[str, dict[str, list[str]]] = {}  # task -> why -> references
    for b in spec.blocks:
        ts = [t for t in b.tasks if tasks is None or t in tasks]
        if not ts:
            continue
        for cfg in build_configs(b.methods, ts, spec.seeds, spec.preset, b.set, b.grid):
            if cfg.run_id in seen:
                continue
            seen.add(cfg.run_id)
            why = why_not(cfg, data_dir)
            if why is None:
                cfgs.append(cfg)
            elif cfg.method in spec.named_methods and cfg.task in spec.named_tasks:
                task = TASKS.get(cfg.task)
                raise ConfigError(f"{cannot_serve(cfg.method, task, why)}; drop one of them")
            else:
                refs = skipped.setdefault(cfg.task, {}).setdefault(why, [])
                refs += [] if cfg.method in refs else [cfg.method]
    if unserved is not None:
        unserved += skipped_lines(skipped)
    return cfgs


def usable_tasks(
    named: Iterable[str], tasks: list[str], data_dir: str | None
) -> tuple[list[str], list[tuple[str, str]]]:
    """The tasks whose data can be read, and ``(task, reason)`` for the others.

    Args:
        named: tasks the user named outright: for them missing data is an error.
        tasks: the resolved task names.
        data_dir: the data root.

    Raises:
        DataError: a task named outright whose data are missing or corrupt (one line: why,
            and how to get them).
    """
    named = set(named)
    runnable, skipped = [], []
    for t in tasks:
        row = task_row(t, TASKS.get(t)(None, data_dir))
        if row is None or row["status"] == "found":
            runnable.append(t)
            continue
        reason = f"{(row['detail'] or row['status']).rstrip('.')}; or: harness data fetch {t}"
        if t in named:
            raise DataError(f"task '{t}': {reason}")
        skipped.append((t, reason))
    return runnable, skipped
