"""``harness bench``: time every method's model, record the timings, write ``reports/TIMING.md``.

The timing runs in this process (no test runner, no checkout needed): for every (method, phase,
device), ``harness.bench.phases`` builds the model at a task preset's sizes and ``harness.timing``
runs warm-up rounds, then timed rounds, synchronising the device around each. Each timing is a
record (one JSON line, appended to ``OUT/timing.jsonl`` through the same atomic store as run
records) with the median, mean, stddev, min, max and iqr in seconds, the rounds, the sizes timed
and the environment.

The reference is torch's fused ``nn.GRU`` in the same model (``phases.FusedGRUModel``), timed in
the same run at the sizes of each timed method (once per distinct size), on the same device and
phase, with records of its own (``reference: true``); every method's time is also given as a
ratio to it (``ratio_vs_gru``, the "× fused GRU" column). Timing is advisory: nothing here is a
pass/fail gate, and a method whose timing fails is listed under "Not timed", not fatal.
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
from harness.bench.phases import PHASES, REFERENCE, Phase, SplitCache, method_phase
from harness.config import config_hash, resolve
from harness.errors import ConfigError, HarnessError
from harness.registry import METHODS, TASKS
from harness.results import Store
from harness.timing import summarize, time_fn

TIMING_SCHEMA = 1
STATS = ("median", "mean", "stddev", "min", "max", "iqr")
RATIO = "× fused GRU"


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
    """The timing record of one phase's per-round seconds.

    Args:
        phase: what was timed (its ``info`` fills the record).
        times: seconds per timed round.
        warmup: untimed rounds before them.
        environment: ``harness.env.environment`` of the device, with the thread count in use.
        bench_id: the id of the ``harness bench`` invocation.
        start: ISO time the timing started.
        reference: whether this is a reference timing (adds ``reference: true``).

    Returns:
        The record; ``ratio_vs_gru`` is left to the caller (1.0 for a reference).
    """
    info, stats = phase.info, summarize(times)
    rec: dict[str, Any] = {
        "schema": TIMING_SCHEMA,
        "kind": "timing",
        "method": info["method"],
        "task": info["task"],
        "seed": info["seed"],
        "preset": info["preset"],
        "status": "ok",
        "config": info["config"],
        "phase": info["phase"],
        "device": info["device"],
        "device_name": info["device_name"],
        **{f"{k}_s": stats[k] for k in STATS},
        "rounds": stats["rounds"],
        "iterations": 1,
        "warmup_rounds": warmup,
        "sizes": info["sizes"],
        "params": info["params"],
        "env": environment,
        "bench_id": bench_id,
        "time": {"start": start},
        "benchmark": f"{info['method']}[{info['phase']}-{info['device']}]",
    }
    if reference:
        rec["reference"] = True
    # Same config, phase and device -> same id: ``results.latest`` keeps the newest timing.
    rec["run_id"] = config_hash(
        {k: rec[k] for k in ("kind", "config", "method", "phase", "device", "device_name")}
        | {"threads": environment.get("threads")}
    )
    rec["ratio_vs_gru"] = 1.0 if reference else None
    return rec


def _one_line(e: BaseException) -> str:
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
    """Time every method in every phase on every device, with the fused-GRU references.

    Args:
        names: registered methods.
        devices: where to time them.
        task: the registered task whose preset gives the sizes and the batches timed.
        preset: the task's preset (``smoke``, ``quick`` or ``paper``).
        overrides: config overrides (``section.field`` or a bare ``field``), applied after the
            preset as in a run (the seed is 0).
        rounds: timed rounds per timing.
        warmup: untimed warm-up rounds before the timed ones.
        data_dir: dataset root for real-data tasks.
        bench_id: stored in every record.
        progress: called with one line per finished or failed timing.

    Returns:
        (timing records, one line per timing that failed).
    """
    records: list[dict[str, Any]] = []
    failed: list[str] = []
    splits: SplitCache = {}
    say = progress or (lambda line: None)

    def run(make: Callable[[], Phase], label: str, device: torch.device, **kw: Any) -> Any:
        try:
            phase = make()
            start = datetime.now(timezone.utc).isoformat(timespec="seconds")
            times = time_fn(phase.fn, device, warmup=warmup, rounds=rounds)
        except Exception as e:  # a broken method is reported, and the others go on
            if device.type == "cuda":
                torch.cuda.empty_cache()
            failed.append(f"{label}: {_one_line(e)}")
            say(f"{label}: failed ({_one_line(e)})")
            return None, None
        rec = timing_record(phase, times, warmup=warmup, start=start, bench_id=bench_id, **kw)
        say(f"{label}: {1e3 * rec['median_s']:.3g} ms")
        return phase, rec

    for device in devices:
        environment = env.environment(device)
        refs: dict[str, dict[str, Any] | None] = {}
        for name in names:
            for phase_name in PHASES:
                label = f"`{name}` {phase_name} on {device.type}"
                make = functools.partial(
                    method_phase, name, phase_name, device, task, preset, overrides,
                    data_dir=data_dir, splits=splits,
                )  # fmt: skip
                phase, rec = run(make, label, device, environment=environment)
                if rec is None:
                    continue
                records.append(rec)
                key = phase.reference_key
                if key not in refs:
                    ref_label = f"`{REFERENCE}` {phase_name} on {device.type} (at `{name}`'s sizes)"
                    _, refs[key] = run(
                        phase.make_reference,
                        ref_label,
                        device,
                        environment=environment,
                        reference=True,
                    )
                    if refs[key] is not None:
                        records.append(refs[key])
                ref = refs[key]
                if ref is not None and ref["median_s"]:
                    rec["ratio_vs_gru"] = rec["median_s"] / ref["median_s"]
                del phase  # free the model before building the next one
    return records, failed


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    ms = 1e3 * seconds
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def _ratio(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}" if r < 10 else f"{r:.3g}"


def _row_key(r: dict[str, Any]) -> tuple[Any, ...]:
    if not r.get("reference"):
        return (r["method"],)
    s = r["sizes"]  # a reference row pairs the two phases of one size (batch sizes differ)
    return (r["method"], s.get("V"), s.get("D"), s.get("layers"), s.get("T"))


def timing_table(records: Sequence[dict[str, Any]]) -> str:
    """One Markdown table of the timings on one device.

    The reference rows come first (marked), then a row per method; each phase gets the median ms
    and the ratio to the fused GRU.
    """
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        key = _row_key(r)
        if r["phase"] in rows.get(key, {}):  # two references of one phase differ in B
            key = (*key, r["sizes"].get("B"))
        row = rows.setdefault(
            key, {"method": r["method"], "sizes": r["sizes"], "ref": bool(r.get("reference"))}
        )
        row[r["phase"]] = r
        row["params"] = r.get("params")
    uniform = _batch_shapes(records) is not None
    cols = ["Method", "D", "Params"] + ([] if uniform else ["B×T (inference / train)"])
    for title in PHASES.values():
        cols += [f"{title} ms ↓", f"{RATIO} ↓"]

    def order(row: dict[str, Any]) -> tuple[Any, ...]:
        if row["ref"]:
            return (0, row["sizes"].get("D") or 0, row["sizes"].get("layers") or 0)
        ratios = [row.get(p, {}).get("ratio_vs_gru") for p in ("train", "inference")]
        return (1, *[float("inf") if x is None else x for x in ratios])

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in sorted(rows.values(), key=order):
        name = f"**{row['method']}** (reference)" if row["ref"] else row["method"]
        cells = [name, str(row["sizes"].get("D", "–")), str(row["params"] or "–")]
        if not uniform:
            bt = [row.get(p, {}).get("sizes", {}) for p in PHASES]
            cells.append(" / ".join(f"{s.get('B', '?')}×{s.get('T', '?')}" for s in bt))
        for p in PHASES:
            r = row.get(p, {})
            cells += [_ms(r.get("median_s")), _ratio(r.get("ratio_vs_gru"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing_markdown(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    command: str,
    failed: Sequence[str] = (),
    skipped: dict[str, int] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The TIMING.md text: generated-file header, one table per device, what was not timed.

    Args:
        records: timing records (methods and references).
        sources: the records files, named in the header.
        command: the command line that produced them.
        failed: one line per timing that failed.
        skipped: ``{reason: count}`` of timings not attempted.
        notes: extra header bullet points.

    Returns:
        The Markdown.
    """
    envs = [r.get("env", {}) for r in records]

    def uniq(key: str) -> str:
        return ", ".join(sorted({str(e.get(key)) for e in envs if e.get(key) is not None})) or "?"

    commits = sorted(
        {
            f"{e['git_sha'][:10]}{'+dirty' if e.get('git_dirty') else ''}"
            for e in envs
            if e.get("git_sha")
        }
    ) or ["unknown"]
    rounds = sorted({(r.get("rounds"), r.get("warmup_rounds")) for r in records}, key=str)
    tasks = sorted({f"{r['task']} ({r['preset']} preset)" for r in records})
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    parts = [
        "# Timing (advisory)",
        "",
        f"<!-- Generated by `harness bench` at {now}. Do not edit by hand. -->",
        "",
        f"- Generated by `{command}` ({len(records)} timings, in "
        f"{', '.join(f'`{s}`' for s in sources) or '?'}); sizes of {', '.join(tasks) or '?'}.",
        f"- Commit: {', '.join(commits)}; devices: {uniq('device_name')}; torch: {uniq('torch')}; "
        f"CPU threads: {uniq('threads')}; python: {uniq('python')}.",
        "- **Timing is advisory**: it depends on the machine and on its load at the time, and is "
        "never a pass/fail gate. Compare ratios, and only within one run and device.",
        "- Inference: one test batch of `train.eval_batch_size`, eval mode, no_grad. Train step: "
        "one test batch of `train.batch_size`, forward + loss + backward + clip + Adam step.",
        "- Times are medians over "
        + "; ".join(f"{n} rounds after {w} warm-up round(s)" for n, w in rounds)
        + f" (spread in the records). {RATIO} = median / the median of the reference at the "
        "same sizes in the same run, device and phase. The reference rows (first) are the same "
        f"model with torch's fused `nn.GRU` (`{REFERENCE}`, as many layers; cuDNN on CUDA) in "
        "place of the method's layers: same batch, embedding, read-out, loss and optimiser.",
        *[f"- {n}" for n in notes],
        "",
    ]
    for device in sorted({r["device"] for r in records}):
        here = [r for r in records if r["device"] == device]
        names = sorted({r["device_name"] for r in here})
        parts.append(f"## {device}: {', '.join(names)}\n")
        shapes = _batch_shapes(here)
        if shapes:
            parts.append(
                "Batch × steps: "
                + "; ".join(f"{PHASES[p].lower()} {b}×{t}" for p, (b, t) in shapes.items())
                + ".\n"
            )
        parts.append(timing_table(here) + "\n")
    if failed or skipped:
        parts.append("## Not timed\n")
        parts += [f"- failed: {f}" for f in failed]
        parts += [f"- skipped ({n}): {reason}" for reason, n in (skipped or {}).items()]
        parts.append("")
    return "\n".join(parts)


def _batch_shapes(records: Sequence[dict[str, Any]]) -> dict[str, tuple[Any, Any]] | None:
    """``{phase: (B, T)}`` when every timing of a phase has the same shape, else None."""
    shapes: dict[str, set[tuple[Any, Any]]] = {}
    for r in records:
        shapes.setdefault(r["phase"], set()).add((r["sizes"].get("B"), r["sizes"].get("T")))
    if any(len(s) > 1 for s in shapes.values()):
        return None
    return {p: next(iter(shapes[p])) for p in PHASES if p in shapes}


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def bench_devices(device: str) -> list[torch.device]:
    """``cpu``, ``cuda`` or ``auto`` (CPU, plus CUDA when present) as torch devices.

    Raises:
        HarnessError: another name, or ``cuda`` where no CUDA device is available.
    """
    if device not in ("cpu", "cuda", "auto"):
        raise HarnessError(f"Unknown device '{device}'. Use cpu, cuda or auto")
    if device == "cuda" and not torch.cuda.is_available():
        raise HarnessError("--device cuda requested but no CUDA device is available")
    names = ["cpu", "cuda"] if device == "auto" else [device]
    return [torch.device(n) for n in names if n == "cpu" or torch.cuda.is_available()]


def run_bench(
    methods: str | Iterable[str],
    task: str,
    preset: str = "smoke",
    device: str = "auto",
    out_dir: str | os.PathLike = ".benchmarks",
    *,
    report: str | os.PathLike = "reports/TIMING.md",
    overrides: dict[str, Any] | None = None,
    rounds: int = 10,
    warmup: int = 2,
    threads: int = 1,
    data_dir: str | None = None,
    command: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Path, Path]:
    """Time methods and the fused-GRU reference; record the timings; write the Markdown.

    Args:
        methods: names or globs, a list or comma-separated (``"all"``).
        task: the task whose preset sizes are timed.
        preset: the preset.
        device: ``cpu``, ``cuda`` or ``auto`` (CPU, plus CUDA when present).
        out_dir: gets the timing records, appended to ``timing.jsonl``.
        report: the Markdown to write.
        overrides: config overrides (``{"seq_len": 5}``), as ``--set``.
        rounds: timed rounds per (method, phase, device).
        warmup: untimed rounds before them.
        threads: torch CPU threads while timing (0: leave torch's setting); restored afterwards.
        data_dir: dataset root for real-data tasks (else ``$HARNESS_DATA_DIR``).
        command: the command line for the report header (default: rebuilt from the arguments).
        progress: called with one line per finished or failed timing (e.g. to print to stderr).

    Returns:
        Paths of the timing records (JSONL) and of the Markdown.

    Raises:
        HarnessError: unknown methods, task or device; missing data; an unwritable store.
        ConfigError: a bad preset, override, or round/thread count.
    """
    names = METHODS.resolve(methods)
    devices = bench_devices(device)
    if rounds < 1 or warmup < 0 or threads < 0:
        raise ConfigError("bench needs rounds >= 1, warmup >= 0 and threads >= 0")
    status = TASKS.get(task)(None, data_dir).data_status()
    if status and status.get("status") != "found":
        raise HarnessError(f"no usable data for task '{task}': {status.get('detail', status)}")
    for m in names:  # bad presets or overrides fail here with one line, before any timing
        resolve(m, task, 0, preset, overrides)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jsonl, md = out / "timing.jsonl", Path(report)
    store = Store(jsonl)
    store.check_writable()
    bench_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:6]
    previous = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        records, failed = time_methods(
            names, devices, task, preset, overrides, rounds=rounds, warmup=warmup,
            data_dir=data_dir, bench_id=bench_id, progress=progress,
        )  # fmt: skip
    finally:
        torch.set_num_threads(previous)
    for r in records:
        store.append(r)
    skipped = {}
    if device == "auto" and all(d.type != "cuda" for d in devices):
        skipped["CUDA not available (device auto)"] = len(names) * len(PHASES)
    if command is None:
        command = "harness bench " + " ".join(
            f"{flag} {shlex.quote(str(v))}"
            for flag, v in (
                ("--methods", methods if isinstance(methods, str) else ",".join(names)),
                ("--task", task),
                ("--preset", preset),
                ("--device", device),
                ("--out", out_dir),
                *(("--set", f"{k}={v}") for k, v in (overrides or {}).items()),
            )
        )
    _write_atomic(md, timing_markdown(records, [str(jsonl)], command, failed, skipped))
    return jsonl, md
