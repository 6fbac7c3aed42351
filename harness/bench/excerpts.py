"""Parts of the timing and speedup reports for the docs' blocks: ``bench --from ... --print``.

Imported by the command line at start-up: the timing report's helpers (torch) where used.
"""

from __future__ import annotations

import fnmatch
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError
from harness.planning.spec import Block, SweepSpec, parse_seeds, resolve_configs
from harness.planning.suites import load, plan, suite_path
from harness.planning.sweep import wall_seconds
from harness.reporting.render import pipe_table
from harness.reporting.text import commits

TIMING_PARTS = ("times", "cost")
SPEEDUP_PARTS = ("rows", "above")
WORKERS = (16, 64, 256)  # the cluster sizes ``cost`` gives the wall time on
ALTERNATIVES = (  # the speedup report's comparisons: key, column title, how a count names it
    ("dense", "vs own dense loop", "own dense loop"),
    ("noskip", "vs same path, no skip", "no-skip path"),
    ("fused", "vs fused cell", "fused cell"),
)
_MISSING = object()


def value(row: dict[str, Any], key: str) -> Any:
    """The field ``key`` of a record or row, dotted for a nested one (``sizes.D``)."""
    here: Any = row
    for part in key.split("."):
        if not isinstance(here, dict) or part not in here:
            return _MISSING
        here = here[part]
    return here


def _matches(field: Any, text: str) -> bool:
    """Whether a field's value is ``text``: a name or glob, or a number equal to it."""
    if isinstance(field, bool) or field is None:
        return str(field).lower() == text.lower()
    if isinstance(field, (int, float)):
        try:
            return math.isclose(float(field), float(text), rel_tol=1e-9, abs_tol=0.0)
        except ValueError:
            return False
    return fnmatch.fnmatchcase(str(field), text)


def where(rows: Sequence[dict[str, Any]], items: Sequence[str]) -> list[dict[str, Any]]:
    """The rows whose fields have the values ``items`` name (``KEY=V[,V...]`` each, all of them).

    A string matches a name or glob, a number an equal value. HarnessError: an item not
    ``KEY=VALUE``, a field no row has; no row kept: one warning line on stderr (fails a block).
    """
    kept = list(rows)
    for item in items:
        key, _, values = (part.strip() for part in item.partition("="))
        texts = [v.strip() for v in values.split(",") if v.strip()]
        if not key or not texts:
            raise HarnessError(f"--where expects KEY=VALUE[,VALUE...], got '{item}'")
        if rows and all(value(r, key) is _MISSING for r in rows):
            raise HarnessError(f"--where {key}: no record has this field (dotted when nested)")
        kept = [r for r in kept if any(_matches(value(r, key), t) for t in texts)]
        if not kept:
            sys.stderr.write(f"warning: --where {' --where '.join(items)}: no record matches\n")
            return []
    return kept


def _pairs(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timings as rows, a row per method and size holding its phases' records."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        s = r.get("sizes") or {}
        key: tuple[Any, ...] = (r["task"], r.get("preset"), r.get("device"), r["method"])
        key += tuple(s.get(k) for k in ("V", "D", "layers", "T"))
        while r["phase"] in rows.get(key, {}):  # a phase timed twice at one size: its own row
            key = (*key, len(key))
        rows.setdefault(key, {"record": r})[r["phase"]] = r
    return list(rows.values())


def _about(here: Sequence[dict[str, Any]]) -> str:
    """``TASK (PRESET preset) on CPU NAME, commit SHA``: where a group was timed."""
    r = here[0]
    names = ", ".join(sorted({str(x.get("device_name") or x.get("device")) for x in here}))
    shas = ", ".join(commits(here)) or "unknown"
    return f"{r['task']} ({r.get('preset')} preset) on {names}, commit {shas}"


def times(records: Sequence[dict[str, Any]], sources: Sequence[str]) -> str:
    """``times``: per task, preset and device, a caption and a table of the timings."""
    from harness.bench.timing_report import format_ratio, per_mac_ratio, round_counts, spread

    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}  # by task, preset and device
    for r in records:
        groups.setdefault((r["task"], r.get("preset"), r.get("device")), []).append(r)
    out = []
    for here in groups.values():
        shapes = {}
        for phase, label in (("inference", "inference"), ("train", "train step")):
            of = [r["sizes"] for r in here if r["phase"] == phase]
            got = sorted({(x.get("B"), x.get("T")) for x in of}, key=str)
            if got:
                shapes[label] = " or ".join(f"{b}×{t}" for b, t in got)
        caption = (
            f"*{', '.join(f'`{s}`' for s in sources)}: {_about(here)}; batch × steps "
            + "; ".join(f"{k} {v}" for k, v in shapes.items())
            + "; times in ms, the median (min–max) of "
            + " or ".join(f"{n} rounds after {w} warm-up round(s)" for n, w in round_counts(here))
            + "; × fused cell: over the method's fused cell at the same sizes in the same run.*"
        )
        body = []
        pairs = _pairs(here)  # the references first, then in the records' order
        for row in sorted(pairs, key=lambda row: not row["record"].get("reference")):
            r = row["record"]
            inf, train = row.get("inference", {}), row.get("train", {})
            name = f"{r['method']} (reference)" if r.get("reference") else r["method"]
            s = r["sizes"]
            body.append(
                [name, r.get("fused_cell") or "–", str(s.get("D", "–")), str(s.get("layers", "–"))]
                + [spread(inf), format_ratio(inf.get("ratio_vs_cell"))]
                + [spread(train), format_ratio(train.get("ratio_vs_cell"))]
                + [format_ratio(per_mac_ratio(train))]
            )
        titles = ["Method", "Cell", "D", "L", "Inference ms", "× fused cell", "Train step ms"]
        table = pipe_table([*titles, "× fused cell", "× cell per MAC"], body)
        out.append("\n".join([caption, "", *table]) + "\n")
    return "\n".join(out)


def duration(seconds: float) -> str:
    """Seconds as ms, s, min or h, with two or three significant digits."""
    if seconds < 1:
        return f"{1e3 * seconds:.3g} ms"
    if seconds < 600:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def suite_runs(name: str, seeds: str | None) -> tuple[list[Any], str]:
    """The runs (``RunConfig``) of ``harness run --suite NAME [--seeds S]``, and the seeds."""
    file = load(suite_path(name))
    opts = {"methods": "all", "tasks": "all", "seeds": "0", "preset": "smoke"} | file.options
    seeds = seeds or str(opts["seeds"])
    blocks = plan(file, opts["methods"], opts["tasks"], {}, {}, set())
    spec = SweepSpec([Block(*b) for b in blocks], parse_seeds(seeds), opts["preset"])
    return resolve_configs(spec, unserved=[]), seeds


def cost(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    suite: str,
    seeds: str | None,
    epoch_batches: int,
) -> str:
    """``cost``: what each method's runs of ``suite`` would take on one core, and the total.

    A run: the method's train step at the suite's task x ``epoch_batches`` (at most
    ``train.max_train_batches``) x its epochs. ConfigError: the suite trains on several tasks,
    no method has a train timing there, or a method has several.
    """
    cfgs, seeds = suite_runs(suite, seeds)
    trained = [c for c in cfgs if hasattr(c, "train")]  # a reference predictor has no trainer
    refs = len(cfgs) - len(trained)
    places = sorted({(c.task, c.preset) for c in trained})
    if len(places) != 1:
        where_ = ", ".join(f"{t} ({p})" for t, p in places) or "none"
        raise ConfigError(f"--print cost: suite {suite} trains on {where_}; an epoch is one task's")
    task, preset = places[0]
    steps = _train_steps(records, task, preset)
    if not steps:
        raise ConfigError(
            f"--print cost: no train timing at suite {suite}'s task, {task} ({preset} preset), in "
            f"{', '.join(sources)}"
        )
    per_method: dict[str, list[Any]] = {}
    for c in trained:
        per_method.setdefault(c.method, []).append(c)
    body, per_run, untimed = [], [], []
    for method, runs in per_method.items():
        r = steps.get(method)
        if r is None or "median_s" not in r:
            untimed.append(f"{method} ({len(runs)} runs)")
            continue
        row, times_ = _method_cost(method, runs, r, epoch_batches)
        body.append(row)
        per_run += times_
    here = [r for r in steps.values() if r["method"] in per_method]
    about = _about(here) if here else f"{task} ({preset} preset)"
    caption = (
        f"*What `harness run --suite {suite} --seeds {seeds}` would take on one core, at the "
        f"train steps of {', '.join(f'`{s}`' for s in sources)} ({about}): a run is the train "
        f"step × {epoch_batches:,} batches an epoch (`--epoch-batches`) × its epochs, each "
        "method at the size timed whatever the run's; validation and the reference predictors "
        "not counted.*"
    )
    titles = ["Method (size timed)", "Train step", "Epoch", "Run", "Epochs", "Runs", "Total"]
    lines = [caption, "", *pipe_table(titles, body), ""]
    total = sum(per_run) / 3600
    walls = [f"{wall_seconds(per_run, n) / 3600:.1f}" for n in WORKERS]
    said = f"Total: {total:.1f} h of one core ({len(per_run)} runs"
    said += f"; {refs} runs of reference predictors not counted)" if refs else ")"
    said += (
        f"; on {', '.join(map(str, WORKERS[:-1]))} and {WORKERS[-1]} workers (one run a worker, "
        f"longest first) {', '.join(walls[:-1])} and {walls[-1]} h."
    )
    if untimed:
        said += f" Not timed, not counted: {', '.join(untimed)}."
    return "\n".join([*lines, said]) + "\n"


def _train_steps(
    records: Sequence[dict[str, Any]], task: str, preset: str
) -> dict[str, dict[str, Any]]:
    """``cost``'s train timing of each method at ``task`` (``preset``); ConfigError: several."""
    steps: dict[str, dict[str, Any]] = {}
    for r in records:
        here = (r["task"], r.get("preset")) == (task, preset)
        if r["phase"] == "train" and here and not r.get("reference"):
            if r["method"] in steps:
                raise ConfigError(
                    f"--print cost: {r['method']} has several train timings at {task} ({preset}): "
                    "pick one with --where (e.g. sizes.D=...)"
                )
            steps[r["method"]] = r
    return steps


def _method_cost(
    method: str, runs: list[Any], r: dict[str, Any], epoch_batches: int
) -> tuple[list[str], list[float]]:
    """``cost``'s row of a method whose train step ``r`` timed, and the seconds of each run."""
    step, s = r["median_s"], r["sizes"]
    times_, epochs = [], []
    for c in runs:
        cap = c.train.max_train_batches
        batches = min(epoch_batches, cap) if cap else epoch_batches
        epochs.append(c.train.epochs)
        times_.append(step * batches * c.train.epochs)
    epoch = duration(step * epoch_batches)
    run = " – ".join(dict.fromkeys(duration(t) for t in (min(times_), max(times_))))
    span = sorted(set(epochs))
    layers = f"{s.get('layers')} layer" + ("" if s.get("layers") == 1 else "s")
    row = [f"{method} (D {s.get('D')}, {layers})", duration(step), epoch, run]
    row += [" – ".join(map(str, dict.fromkeys((span[0], span[-1])))), str(len(runs))]
    return [*row, f"{sum(times_) / 3600:.1f} h"], times_


def print_timing(
    records: Sequence[dict[str, Any]],
    parts: Sequence[str],
    sources: Sequence[str],
    items: Sequence[str] = (),
    *,
    suite: str | None = None,
    seeds: str | None = None,
    epoch_batches: int | None = None,
) -> str:
    """The timing parts asked for (``TIMING_PARTS``, in order) of the records ``items`` keep."""
    kept = where(records, items)
    out = []
    if "times" in parts and kept:
        out.append(times(kept, sources))
    if "cost" in parts and kept:
        assert suite is not None and epoch_batches is not None
        out.append(cost(kept, sources, suite, seeds, epoch_batches))
    return "\n".join(out)


def speedup_rows(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The rows of speedup data files (a report's ``.jsonl``); HarnessError: a bad file or line."""
    rows = []
    for p in paths:
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise HarnessError(f"cannot read {p}: {getattr(e, 'strerror', None) or e}") from None
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not isinstance(row, dict) or not {"method", "D", "B"} <= row.keys():
                raise HarnessError(f"{p}:{i}: not a speedup row (a JSON object with method, D, B)")
            rows.append(row)
    return rows


def _vs(r: dict[str, Any], alt: str) -> str:
    """``2.17x (10.36x, 0.21)``: a comparison's speedup (MAC ratio, realised), or a dash."""
    keys = (f"speedup_{alt}", f"mac_ratio_{alt}", f"realised_frac_{alt}")
    if any(k not in r for k in keys):
        return "–"
    text = f"{r[keys[0]]:.2f}x ({r[keys[1]]:.2f}x, {r[keys[2]]:.2f})"
    return f"{r['fused_cell']}: {text}" if alt == "fused" and r.get("fused_cell") else text


def realised_above(rows: Sequence[dict[str, Any]]) -> str:
    """Per comparison, how many rows realise more than their MAC ratio (``N of M rows against``)."""
    counts = []
    for alt, _, what in ALTERNATIVES:
        had = [r for r in rows if f"realised_frac_{alt}" in r]
        n = sum(r[f"realised_frac_{alt}"] > 1 for r in had)
        counts.append(f"{n} of {len(had)} rows against the {what}")
    return ", ".join(counts)


def who(r: dict[str, Any]) -> list[str]:
    """A speedup row's first cells: method, D, B, target skip % and skip % ((cols): columns)."""
    skip = f"{100 * r['skip']:.1f}" + (" (cols)" if r.get("skip_kind") == "columns" else "")
    return [r["method"], str(r["D"]), str(r["B"]), f"{100 * r['target_skip']:.0f}", skip]


def ms(r: dict[str, Any], paths: Sequence[str]) -> str:
    """A speedup row's median ms of ``paths`` (``fast``, ``dense``, ...), dashes where missing."""
    return " / ".join(f"{r[f'{k}_ms']:.2f}" if f"{k}_ms" in r else "–" for k in paths)


def _row_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    titles = ["Method", "D", "B", "Target skip %", "Skip %", "ms: fast / dense / no skip / fused"]
    body = []
    for r in rows:
        paths = ms(r, ("fast", "dense", "noskip", "fused"))
        body.append([*who(r), paths] + [_vs(r, alt) for alt, _, _ in ALTERNATIVES])
    return pipe_table(titles + [title for _, title, _ in ALTERNATIVES], body)


def _speedup_caption(rows: Sequence[dict[str, Any]], sources: Sequence[str]) -> str:
    shape = sorted({(r.get("T"), r.get("V")) for r in rows}, key=str)
    return (
        f"*{', '.join(f'`{s}`' for s in sources)}, "
        + " or ".join(f"T = {t}, V = {v}" for t, v in shape)
        + ": each comparison is the speedup, alternative / fast path (the median of per-round "
        "ratios), then its MAC ratio and the realised fraction, speedup / MAC ratio; (cols): "
        "the skip is the activity sparsity.*"
    )


def print_speedup(
    rows: Sequence[dict[str, Any]],
    parts: Sequence[str],
    sources: Sequence[str],
    items: Sequence[str] = (),
) -> str:
    """The speedup parts asked for (``SPEEDUP_PARTS``, in order) of the rows ``items`` keep."""
    kept = where(rows, items)
    out = []
    if "rows" in parts and kept:
        out.append("\n".join([_speedup_caption(kept, sources), "", *_row_table(kept)]) + "\n")
    if "above" in parts and kept:
        alts = [alt for alt, _, _ in ALTERNATIVES]
        above = [r for r in kept if any(r.get(f"realised_frac_{a}", 0) > 1 for a in alts)]
        text = [f"Realised above 1 (speedup above the MAC ratio): {realised_above(kept)}."]
        if above:
            text += ["", _speedup_caption(above, sources), "", *_row_table(above)]
        out.append("\n".join(text) + "\n")
    return "\n".join(out)
