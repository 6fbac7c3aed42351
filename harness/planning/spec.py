"""What a sweep runs: its specification (``SweepSpec``), and the plan of checked runs from it.

``plan_sweep`` resolves every run's config and checks all that can be checked before the first
run starts: names, values against their bounds, the data against their published sums, every
model built once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.components.registry import TASKS
from harness.data import attach_identity, task_row
from harness.errors import ConfigError, DataError
from harness.planning.sweep import build_configs, validate, variant_labels
from harness.references import cannot_serve, named_outright, resolve_names, skipped_lines
from harness.references import unserved as why_not

MAX_SEEDS = 10_000


def parse_seeds(spec: str, limit: int = MAX_SEEDS) -> list[int]:
    """Seeds from ``"0-4"``, ``"0,2,5"`` or ``"3"``, in order (ConfigError: bad, over ``limit``)."""
    usage = f"--seeds expects e.g. 0-4 or 0,1,2 (seeds >= 0); got '{spec}'"
    try:
        parts = [p.strip().partition("-") for p in spec.split(",") if p.strip()]
        ranges = [(int(lo), int(hi) if sep else int(lo)) for lo, sep, hi in parts]
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
    """Methods x tasks with their own ``--set`` overrides and ``--grid`` (a ``[[part]]``)."""

    methods: list[str]
    tasks: list[str]
    set: dict[str, str] = field(default_factory=dict)
    grid: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class SweepSpec:
    """What a sweep runs, before anything is resolved: the union of its blocks' runs.

    What the user named outright (not through ``all`` or a glob) is an error where it cannot run
    (missing data; a reference on a task it cannot serve); otherwise it is skipped with the
    reason. ``config``, ``suite``, ``select`` and ``match_skip`` are provenance.
    """

    blocks: list[Block]
    seeds: list[int] = field(default_factory=lambda: [0])
    preset: str = "smoke"
    named_tasks: set[str] = field(default_factory=set)
    named_methods: set[str] = field(default_factory=set)
    config: str | None = None  # the sweep file
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
    """A planned sweep: every run's config, checked, in the order a serial executor runs them."""

    spec: SweepSpec
    configs: list[Any]
    labels: dict[str, str]  # per run id, what tells its variant apart (``lam=0.001``)
    skipped_tasks: list[tuple[str, str]] = field(default_factory=list)  # (task, missing data)
    notes: list[str] = field(default_factory=list)  # data without published checksums
    skipped_references: list[str] = field(default_factory=list)  # ``skipped_lines``

    @property
    def provenance(self) -> dict[str, Any]:
        """The resolved sweep, as each of its records stores it (``sweep``)."""
        keys = ("config", "suite", "preset", "seeds", "match_skip", "select")
        blocks = [asdict(b) for b in self.spec.blocks]
        return {k: getattr(self.spec, k) for k in keys} | {"blocks": blocks}


def plan_sweep(
    spec: SweepSpec, data_dir: str | None = None, allow_unverified: bool = False
) -> Sweep:
    """Resolve and check every run of ``spec`` before any starts; HarnessError names what is wrong.

    ``allow_unverified``: run on data that differ from the published sums (recorded so).
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
    """Every distinct run of ``spec`` as a config, block by block; ``tasks``: only these.

    Nothing is built and no data are read. A reference that cannot serve a task is left out for
    it (a line in ``unserved``), or a ConfigError where both were named outright.
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
    """The tasks whose data can be read, ``(task, reason)`` of the others (DataError: ``named``)."""
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
