"""``harness bench``: time every method's model, record the timings, write ``reports/TIMING.md``.

The timing suite is ``benchmarks/test_methods_timing.py`` (pytest-benchmark). ``run_bench`` runs
it in a subprocess, steering it with ``HARNESS_BENCH_*`` environment variables, and turns its
``--benchmark-json`` output into timing records: one JSON line per (method, phase, device) with
the median, mean, stddev, min, max and rounds in seconds, the sizes timed and the environment,
appended to ``OUT/timing.jsonl`` through the same atomic store as run records. The Markdown gives
every time also as a ratio to GRU measured in the same run, on the same device and phase (GRU is
always timed). Timing is advisory: nothing here is a pass/fail gate, and a method whose timing
failed is listed, not fatal.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from harness.config import config_hash, resolve
from harness.env import REPO, environment
from harness.errors import ConfigError, HarnessError
from harness.registry import METHODS, TASKS
from harness.results import Store

BENCH_FILE = REPO / "benchmarks" / "test_methods_timing.py"
TIMING_SCHEMA = 1
REFERENCE = "gru"
PHASES = {"inference": "Inference", "train": "Train step"}
STATS = ("median", "mean", "stddev", "min", "max", "iqr")


def bench_env(
    methods: Sequence[str],
    task: str,
    preset: str,
    device: str,
    overrides: dict[str, Any] | None = None,
    rounds: int = 10,
    warmup: int = 2,
    threads: int = 1,
) -> dict[str, str]:
    """The ``HARNESS_BENCH_*`` variables that steer the timing suite."""
    return {
        "HARNESS_BENCH_METHODS": ",".join(methods),
        "HARNESS_BENCH_TASK": task,
        "HARNESS_BENCH_PRESET": preset,
        "HARNESS_BENCH_DEVICE": device,
        "HARNESS_BENCH_SET": json.dumps(overrides or {}),
        "HARNESS_BENCH_ROUNDS": str(rounds),
        "HARNESS_BENCH_WARMUP": str(warmup),
        "HARNESS_BENCH_THREADS": str(threads),
    }


def parse_benchmark_json(data: dict[str, Any], bench_id: str = "") -> list[dict[str, Any]]:
    """Timing records from pytest-benchmark JSON (entries not from the timing suite are ignored).

    Args:
        data: the parsed ``--benchmark-json`` file.
        bench_id: the id of the ``harness bench`` invocation, stored in every record.

    Returns:
        One record per (method, phase, device), with ``ratio_vs_gru`` filled where GRU was timed.
    """
    records = []
    for b in data.get("benchmarks", []):
        info = b.get("extra_info") or {}
        if not {"method", "phase", "device"} <= info.keys():
            continue
        stats = b["stats"]
        env = info.get("env") or _fallback_env(info["device"], info.get("device_name"))
        config = info.get("config") or {}
        rec: dict[str, Any] = {
            "schema": TIMING_SCHEMA,
            "kind": "timing",
            "method": info["method"],
            "task": info.get("task", config.get("task")),
            "seed": info.get("seed", config.get("seed", 0)),
            "preset": info.get("preset", config.get("preset")),
            "status": "ok",
            "config": config,
            "phase": info["phase"],
            "device": info["device"],
            "device_name": info.get("device_name", env.get("device_name")),
            **{f"{k}_s": stats.get(k) for k in STATS},
            "rounds": stats.get("rounds"),
            "iterations": stats.get("iterations", 1),
            "warmup_rounds": info.get("warmup_rounds"),
            "sizes": info.get("sizes", {}),
            "params": info.get("params"),
            "env": env,
            "bench_id": bench_id,
            "time": {"start": data.get("datetime")},
            "benchmark": b.get("name"),
        }
        # Same config, phase and device -> same id: ``results.latest`` keeps the newest timing.
        rec["run_id"] = config_hash(
            {k: rec[k] for k in ("kind", "config", "method", "phase", "device", "device_name")}
            | {"threads": env.get("threads")}
        )
        records.append(rec)
    add_ratios(records)
    return records


def _fallback_env(device: str, device_name: str | None) -> dict[str, Any]:
    env = environment(torch.device("cpu"))
    if device != "cpu":
        env.update(device=device, device_name=device_name or device)
    return env


def add_ratios(records: list[dict[str, Any]]) -> None:
    """Set ``ratio_vs_gru`` = median / GRU's median on the same phase and device (else None)."""
    ref = {(r["phase"], r["device"]): r["median_s"] for r in records if r["method"] == REFERENCE}
    for r in records:
        base = ref.get((r["phase"], r["device"]))
        r["ratio_vs_gru"] = r["median_s"] / base if base and r["median_s"] is not None else None


def parse_junit(path: Path) -> tuple[list[str], dict[str, int]]:
    """(one line per failed or errored test, {skip reason: count}) from pytest's JUnit XML."""
    failed: list[str] = []
    skipped: dict[str, int] = {}
    if not path.exists():
        return failed, skipped
    for case in ET.parse(path).getroot().iter("testcase"):
        for child in case:
            msg = (child.get("message") or "").strip().splitlines()
            first = msg[0] if msg else child.tag
            if child.tag in ("failure", "error"):
                failed.append(f"`{case.get('name')}`: {first}")
            elif child.tag == "skipped":
                reason = first.removeprefix("Skipped: ")
                skipped[reason] = skipped.get(reason, 0) + 1
    return failed, skipped


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    ms = 1e3 * seconds
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def _ratio(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}" if r < 10 else f"{r:.3g}"


def timing_table(records: Sequence[dict[str, Any]]) -> str:
    """One Markdown table (one device): a row per method, median ms and × GRU per phase."""
    rows: dict[str, dict[str, Any]] = {}
    for r in records:
        row = rows.setdefault(r["method"], {"method": r["method"], "sizes": r["sizes"]})
        row[r["phase"]] = r
        row["params"] = r.get("params")
    uniform = _batch_shapes(records) is not None
    cols = ["Method", "D", "Params"] + ([] if uniform else ["B×T (inference / train)"])
    for title in PHASES.values():
        cols += [f"{title} ms ↓", "× GRU ↓"]

    def key(row: dict[str, Any]) -> tuple:
        ratios = [row.get(p, {}).get("ratio_vs_gru") for p in ("train", "inference")]
        return (row["method"] != REFERENCE, *[float("inf") if x is None else x for x in ratios])

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in sorted(rows.values(), key=key):
        cells = [row["method"], str(row["sizes"].get("D", "–")), str(row["params"] or "–")]
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
    """The TIMING.md text: generated-file header, one table per device, what was not timed."""
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
        f"- Generated by `{command}` from {', '.join(f'`{s}`' for s in sources)} "
        f"({len(records)} timings); sizes of {', '.join(tasks) or '?'}.",
        f"- Commit: {', '.join(commits)}; devices: {uniq('device_name')}; torch: {uniq('torch')}; "
        f"CPU threads: {uniq('threads')}; python: {uniq('python')}.",
        "- **Timing is advisory**: it depends on the machine and on its load at the time, and is "
        "never a pass/fail gate. Compare ratios, and only within one run and device.",
        "- Inference: one test batch of `train.eval_batch_size`, eval mode, no_grad. Train step: "
        "one test batch of `train.batch_size`, forward + loss + backward + clip + Adam step.",
        "- Times are medians over "
        + "; ".join(f"{n} rounds after {w} warm-up round(s)" for n, w in rounds)
        + " (spread in `timing.jsonl`); × GRU = median / GRU's median in the same run, "
        "device and phase.",
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
    """``{phase: (B, T)}`` when every method was timed at the same shape, else None."""
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


def run_bench(
    methods: str | Iterable[str],
    task: str = "adding",
    preset: str = "smoke",
    device: str = "auto",
    out_dir: str | os.PathLike = ".benchmarks",
    extra_pytest_args: Sequence[str] = (),
    *,
    report: str | os.PathLike = "reports/TIMING.md",
    overrides: dict[str, Any] | None = None,
    rounds: int = 10,
    warmup: int = 2,
    threads: int = 1,
    data_dir: str | None = None,
    capture: bool = False,
    command: str | None = None,
) -> tuple[Path, Path, Path]:
    """Time methods with the pytest-benchmark suite; record the timings; write the Markdown.

    Args:
        methods: names or globs (``"all"``, ``"gru,sa-*"``); GRU is always added.
        task, preset: whose sizes to time at.
        device: ``cpu``, ``cuda`` or ``auto`` (CPU, plus CUDA when present).
        out_dir: gets ``bench.json`` (pytest-benchmark's), ``bench-junit.xml`` and, appended,
            ``timing.jsonl``.
        extra_pytest_args: passed on to pytest (e.g. ``["-x"]``).
        report: the Markdown to write.
        overrides: config overrides (``{"seq_len": 5}``), as ``--set``.
        rounds, warmup: timed and warm-up rounds per (method, phase, device).
        threads: torch CPU threads in the timing process (0: torch's default).
        data_dir: dataset root for real-data tasks (else ``$HARNESS_DATA_DIR``).
        capture: capture pytest's output (shown in the error if it fails) instead of streaming it.
        command: the command line for the report header (default: rebuilt from the arguments).

    Returns:
        Paths of the pytest-benchmark JSON, the timing records JSONL and the Markdown.
    """
    names = METHODS.resolve(methods)
    names = names if REFERENCE in names else [REFERENCE, *names]
    if device not in ("cpu", "cuda", "auto"):
        raise HarnessError(f"Unknown device '{device}'. Use cpu, cuda or auto")
    if device == "cuda" and not torch.cuda.is_available():
        raise HarnessError("--device cuda requested but no CUDA device is available")
    if rounds < 1 or warmup < 0 or threads < 0:
        raise ConfigError("bench needs rounds >= 1, warmup >= 0 and threads >= 0")
    status = TASKS.get(task)(None, data_dir).data_status()
    if status and status.get("status") != "found":
        raise HarnessError(f"no usable data for task '{task}': {status.get('detail', status)}")
    for m in names:  # bad presets or overrides fail here with one line, not inside pytest
        resolve(m, task, 0, preset, overrides)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, junit = out / "bench.json", out / "bench-junit.xml"
    jsonl, md = out / "timing.jsonl", Path(report)
    Store(jsonl).check_writable()
    for stale in (json_path, junit):
        stale.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(bench_env(names, task, preset, device, overrides, rounds, warmup, threads))
    if data_dir:
        env["HARNESS_DATA_DIR"] = str(Path(data_dir).resolve())
    argv = [
        sys.executable, "-m", "pytest", str(BENCH_FILE), "-q", "-p", "no:cacheprovider",
        f"--benchmark-json={json_path.resolve()}", f"--junitxml={junit.resolve()}",
        *extra_pytest_args,
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=capture, text=True)
    if proc.returncode not in (0, 1) or not json_path.exists():
        tail = "\n".join(((proc.stdout or "") + (proc.stderr or "")).splitlines()[-20:])
        raise HarnessError(
            f"the timing suite did not run (pytest exit code {proc.returncode})"
            + (f":\n{tail}" if tail else "")
        )

    bench_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:6]
    records = parse_benchmark_json(json.loads(json_path.read_text()), bench_id)
    store = Store(jsonl)
    for r in records:
        store.append(r)
    failed, skipped = parse_junit(junit)
    notes = [] if proc.returncode == 0 else [f"pytest exit code {proc.returncode}: see Not timed."]
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
    text = timing_markdown(records, [str(json_path)], command, failed, skipped, notes)
    _write_atomic(md, text)
    return json_path, jsonl, md
