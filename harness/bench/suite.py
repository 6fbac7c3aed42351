"""``harness bench``: time every method's model, record the timings, write ``TIMING.md``.

Each (task, method, phase, device) and its references, once per size, timed in this process;
each timing a record appended to ``OUT/timing.jsonl``. Advisory: a failed timing is listed.
"""

from __future__ import annotations

import functools
import os
import shlex
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from harness import env
from harness.bench.phases import (
    FUSED_GRU,
    PHASES,
    STEP_LOOP,
    TIMED_CELLS,
    Phase,
    SplitCache,
    method_phase,
)
from harness.bench.profile import ops_per_step
from harness.bench.timing_report import format_ms, timing_markdown
from harness.components import config
from harness.components.code import current_code
from harness.components.config import config_hash
from harness.components.registry import METHODS, TASKS
from harness.errors import ConfigError, HarnessError
from harness.persistence.outputs import write_text
from harness.persistence.records import latest
from harness.persistence.store import Store, load
from harness.planning.sweep import build_configs
from harness.training.timing import summarize, time_fn

# 2: references of several kinds, ratio_vs_cell, mac_ratio and target; dense_macs and cell_macs
# (issue 32) are optional: records made before them lack them
TIMING_SCHEMA = 2
STATS = ("median", "mean", "stddev", "min", "max", "iqr")


def timing_record(
    phase: Phase,
    times: list[float],
    *,
    warmup: int,
    environment: dict[str, Any],
    bench_id: str = "",
    start: str | None = None,
    reference: bool = False,
) -> dict[str, Any]:
    """The timing record of one phase's per-round seconds (``times``, after ``warmup`` rounds).

    ``environment``: ``harness.env.environment`` of the device, with the threads in use;
    ``start``: ISO time the timing started. The ratios are left to ``apply_ratios`` (a
    reference is 1.0 to itself), and so is whether a method's target was met.
    """
    info, stats = phase.info, summarize(times)
    rec: dict[str, Any] = {"schema": TIMING_SCHEMA, "kind": "timing"}
    rec.update({k: info[k] for k in ("method", "task", "seed", "preset")}, status="ok")
    rec.update({k: info[k] for k in ("config", "phase", "device", "device_name")})
    rec.update({f"{k}_s": stats[k] for k in STATS}, rounds=stats["rounds"], iterations=1)
    rec.update(warmup_rounds=warmup, sizes=info["sizes"], params=info["params"], env=environment)
    rec.update(bench_id=bench_id, time={"start": start})
    rec["benchmark"] = f"{info['method']}[{info['phase']}-{info['device']}]"
    # its fused cell, dense MACs / the GRU's, dense MACs per step of its layers and of the cell
    rec.update({k: info.get(k) for k in ("fused_cell", "mac_ratio", "dense_macs", "cell_macs")})
    rec["method_code"] = current_code(info["method"])  # the report names it, warns if it moved
    if reference:
        rec["reference"] = True
    # Same config, phase and device -> same id: ``results.latest`` keeps the newest timing.
    rec["run_id"] = config_hash(
        {k: rec[k] for k in ("kind", "config", "method", "phase", "device", "device_name")}
        | {"threads": environment.get("threads")}
    )
    rec["ratio_vs_gru"] = 1.0 if rec["method"] == FUSED_GRU else None
    cell = TIMED_CELLS.get(rec["fused_cell"] or "")
    rec["ratio_vs_cell"] = 1.0 if reference and rec["method"] == cell else None
    if info.get("target"):
        rec["target"] = {**info["target"], "measured": None, "met": None}
    return rec


def apply_ratios(rec: dict[str, Any], refs: dict[str, dict[str, Any] | None]) -> None:
    """Fill a record's ratios (in place) from ``refs``, ``{reference: record or None}``.

    The references timed at its sizes, device and phase (None: failed).
    """

    def ratio(name: str | None) -> float | None:
        ref = refs.get(name or "")
        return rec["median_s"] / ref["median_s"] if ref and ref["median_s"] else None

    rec["ratio_vs_gru"] = ratio(FUSED_GRU)
    rec["ratio_vs_cell"] = ratio(TIMED_CELLS.get(rec.get("fused_cell") or ""))
    target = rec.get("target")
    if target:
        measured = ratio(target["reference"])
        target["measured"] = measured
        target["met"] = None if measured is None else measured <= target["ratio"]


def merge_references(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Timings merged from several runs of the suite, each reference shown once (the last run's).

    Each record's ratios stay against the references of its own run.
    """
    last = {
        (r["reference_key"], r["method"]): r
        for r in records
        if r.get("reference") and r.get("reference_key")
    }
    return [
        r
        for r in records
        if not (r.get("reference") and r.get("reference_key"))
        or last[(r["reference_key"], r["method"])] is r
    ]


def timing_records(stores: Sequence[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The timings a report of ``stores`` shows, and one line per unusable line of the stores.

    ``merge_references`` of the latest record of each, in the order of the stores. ConfigError:
    no timing record in them; RecordError: a store that does not exist.
    """
    records, problems = load(stores)
    timings = merge_references([r for r in latest(records) if r.get("kind") == "timing"])
    if not timings:
        raise ConfigError(f"bench --from: no timing records in {', '.join(map(str, stores))}")
    return timings, problems


def render_timing(
    stores: Sequence[Path], command: str
) -> tuple[str, list[dict[str, Any]], list[str]]:
    """The timing report of ``stores`` (``harness bench --from``), and ``timing_records``."""
    timings, problems = timing_records(stores)
    return timing_markdown(timings, [str(p) for p in stores], command), timings, problems


def reference_kinds(phase: Phase) -> list[str]:
    """The kinds of reference a method's phase is compared with, the fused GRU first."""
    return list(dict.fromkeys(["GRU", phase.info.get("fused_cell") or "GRU", STEP_LOOP]))


def _first_line(e: BaseException) -> str:
    """The exception's type and the first line of its message: a report's line on a failure."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def time_methods(
    names: Sequence[str],
    devices: Sequence[torch.device],
    task: str,
    preset: str,
    overrides: dict[str, Any] | None = None,
    *,
    rounds: int = 10,
    warmup: int = 2,
    data_dir: str | None = None,
    bench_id: str = "",
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Time every method in every phase on every device at one task's sizes, with references.

    Returns the timing records and one line per timing that failed (also told to ``progress``).
    """
    records: list[dict[str, Any]] = []
    splits: SplitCache = {}
    run = _Timings(warmup, rounds, bench_id, progress or (lambda line: None))
    for device in devices:
        environment = env.environment(device)
        as_reference = {"environment": environment, "reference": True}
        # {reference key of a size: {reference name: record or None}}
        refs: dict[str, dict[str, dict[str, Any] | None]] = {}
        for name in names:
            mine = {k: v for k, v in (overrides or {}).items() if config.accepts(name, task, k)}
            for phase_name in PHASES:
                label = f"`{name}` {phase_name} on {device.type} ({task})"
                make = functools.partial(
                    method_phase, name, phase_name, device, task, preset, mine,
                    data_dir=data_dir, splits=splits,
                )  # fmt: skip
                phase, rec = run(make, label, device, environment=environment)
                if rec is None:
                    continue
                rec["reference_key"] = phase.reference_key  # a report from several stores
                records.append(rec)
                here = refs.setdefault(phase.reference_key, {})
                for kind in reference_kinds(phase):
                    if TIMED_CELLS[kind] in here:
                        continue
                    ref_label = (
                        f"`{TIMED_CELLS[kind]}` {phase_name} on {device.type} ({task}, at "
                        f"`{name}`'s sizes)"
                    )
                    make_ref = functools.partial(phase.make_reference, kind)
                    _, ref = run(make_ref, ref_label, device, **as_reference)
                    here[TIMED_CELLS[kind]] = ref
                    if ref is not None:
                        ref["reference_key"] = phase.reference_key
                        apply_ratios(ref, here)
                        records.append(ref)
                apply_ratios(rec, here)
                del phase  # free the model before building the next one
    return records, run.failed


class _Timings:
    """How ``time_methods`` times a phase: its rounds, and what it says and records of each."""

    def __init__(self, warmup: int, rounds: int, bench_id: str, say: Callable[[str], None]):
        self.warmup, self.rounds, self.bench_id, self.say = warmup, rounds, bench_id, say
        self.failed: list[str] = []  # one line per timing that failed

    def __call__(
        self, make: Callable[[], Phase], label: str, device: torch.device, **kw: Any
    ) -> tuple[Phase | None, dict[str, Any] | None]:
        """The phase ``make`` builds, timed, and its record (None, None where it failed)."""
        try:
            phase = make()
            start = datetime.now(timezone.utc).isoformat(timespec="seconds")
            times = time_fn(phase.fn, device, warmup=self.warmup, rounds=self.rounds)
        except Exception as e:  # a broken method is reported, and the others go on
            if device.type == "cuda":
                torch.cuda.empty_cache()
            self.failed.append(f"{label}: {_first_line(e)}")
            self.say(f"{label}: failed ({_first_line(e)})")
            return None, None
        rec = timing_record(
            phase, times, warmup=self.warmup, start=start, bench_id=self.bench_id, **kw
        )
        if phase.info["phase"] == "train":  # what a step dispatches (one more, untimed step)
            try:
                rec["ops_per_step"] = ops_per_step(phase.fn, phase.info["sizes"].get("T") or 1)
            except Exception as e:  # the timing stands without its profile
                self.say(f"{label}: ops not counted ({_first_line(e)})")
        self.say(f"{label}: {format_ms(rec['median_s'])} ms")
        return phase, rec


def _command(
    asked: tuple[str | Iterable[str], str | Iterable[str]],
    resolved: tuple[list[str], list[str]],
    preset: str,
    device: str,
    out_dir: str | os.PathLike,
    overrides: dict[str, Any] | None,
) -> str:
    """The command line of ``run_bench``'s arguments (methods and tasks as asked, or resolved)."""
    (methods, tasks), (names, task_names) = asked, resolved
    flags = (
        ("--methods", methods if isinstance(methods, str) else ",".join(names)),
        ("--task", tasks if isinstance(tasks, str) else ",".join(task_names)),
        *(("--preset", preset), ("--device", device), ("--out", out_dir)),
        *(("--set", f"{k}={v}") for k, v in (overrides or {}).items()),
    )
    return "harness bench " + " ".join(f"{f} {shlex.quote(str(v))}" for f, v in flags)


def runnable_tasks(
    tasks: Sequence[str], data_dir: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The tasks whose data is usable (or generated), in order, and ``{task: why not}``."""
    runnable, no_data = [], {}
    for t in tasks:
        status = TASKS.get(t)(None, data_dir).data_status()
        if status and status.get("status") != "found":
            no_data[t] = str(status.get("detail") or status.get("status") or status)
        else:
            runnable.append(t)
    return runnable, no_data


def run_bench(
    methods: str | Iterable[str],
    tasks: str | Iterable[str],
    preset: str = "smoke",
    device: str = "auto",
    out_dir: str | os.PathLike = ".benchmarks",
    *,
    report: str | os.PathLike = ".benchmarks/TIMING.md",
    overrides: dict[str, Any] | None = None,
    rounds: int = 10,
    warmup: int = 2,
    threads: int = 1,
    data_dir: str | None = None,
    command: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Path, Path]:
    """Time methods and the references at each task's sizes; record the timings; write the Markdown.

    As ``harness bench`` (its ``--help`` says what each argument does): ``methods`` and
    ``tasks`` are names or globs, a list or comma-separated; a task without usable data is
    skipped with one line (through ``progress`` and in the report); ``overrides`` as ``--set``;
    ``threads`` is restored afterwards; ``command`` defaults to one rebuilt from the arguments.

    Returns the paths of the timing records (``out_dir/timing.jsonl``) and of the Markdown.
    HarnessError: unknown methods, tasks or device, no task with usable data, an unwritable store;
    ConfigError: a bad preset, round or thread count, an override no selected pair has.
    """
    names, task_names = METHODS.resolve(methods), TASKS.resolve(tasks)
    devices = env.bench_devices(device)
    if rounds < 1 or warmup < 0 or threads < 0:
        raise ConfigError("bench needs rounds >= 1, warmup >= 0 and threads >= 0")
    runnable, no_data = runnable_tasks(task_names, data_dir)
    if not runnable:
        raise HarnessError(
            "; ".join(f"no usable data for task '{t}': {why}" for t, why in no_data.items())
        )
    build_configs(names, runnable, [0], preset, dict(overrides or {}))  # checked before timing
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    jsonl, md = Path(out_dir) / "timing.jsonl", Path(report)
    (store := Store(jsonl, config.legacy_values)).check_writable()
    skipped: dict[str, int] = {}
    for t, why in no_data.items():
        if progress is not None:
            progress(f"task '{t}' skipped: no usable data ({why})")
        skipped[f"task `{t}`: no usable data ({why})"] = len(names) * len(PHASES) * len(devices)
    bench_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:6]
    if command is None:
        asked, resolved = (methods, tasks), (names, task_names)
        command = _command(asked, resolved, preset, device, out_dir, overrides)
    env.run_conditions()  # as in training runs: methods and fused references alike
    records, failed = [], []
    with env.torch_threads(threads):
        for t in runnable:
            recs, fails = time_methods(
                names, devices, t, preset, overrides, rounds=rounds, warmup=warmup,
                data_dir=data_dir, bench_id=bench_id, progress=progress,
            )  # fmt: skip
            records += recs
            failed += fails
            for r in recs:  # each task's records are kept even if a later task is interrupted
                r["command"] = command  # what timed it, for a report rendered from the records
                store.append(r)
    if device == "auto" and all(d.type != "cuda" for d in devices):
        skipped["CUDA not available (device auto)"] = len(names) * len(PHASES) * len(runnable)
    write_text(md, timing_markdown(records, [str(jsonl)], command, failed, skipped))
    return jsonl, md
