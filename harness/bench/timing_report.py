"""The timing report, ``reports/TIMING.md``, rendered from timing records alone."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from harness.bench.phases import (
    FUSED_GRU,
    MAC_BOUND,
    MAC_BOUNDS,
    PHASES,
    STEP_LOOP,
    TARGET_FACTOR,
    TIMED_CELLS,
    mac_bound,
)
from harness.components.code import code_changes
from harness.reporting.render import pipe_table
from harness.reporting.text import commits

RATIO = "× fused GRU"
CELL_RATIO = "× fused cell"
PER_MAC = "× cell per MAC"
FLAG = "⚑"


def code_lines(rows: Sequence[dict[str, Any]], bullet: str = "") -> list[str]:
    """A header's lines on the code versions the methods were timed with and those moved since."""
    codes: dict[str, set[str]] = {}
    for r in rows:
        if not r.get("reference"):
            codes.setdefault(r["method"], set()).add(r.get("method_code") or "?")
    timed = ", ".join(f"{m} {'/'.join(sorted(c))}" for m, c in codes.items()) or "none"
    return [
        f"{bullet}Code timed (`method_code`): {timed}.",
        *[f"- **Timed with other code than today's**: {line}" for line in code_changes(rows)],
    ]


def format_ms(seconds: float | None) -> str:
    """Seconds as ms, three significant digits below 100 ms; a dash for None."""
    if seconds is None:
        return "–"
    ms = 1e3 * seconds
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def spread(r: dict[str, Any], rounds_shown: bool = False) -> str:
    """``median (min–max)`` in ms, with the round count when the table does not give it."""
    if "median_s" not in r:
        return "–"
    n = f", n={r.get('rounds')}" if rounds_shown else ""
    low, high = format_ms(r.get("min_s")), format_ms(r.get("max_s"))
    return f"{format_ms(r['median_s'])} ({low}–{high}{n})"


def format_ratio(r: float | None) -> str:
    """A ratio: two decimals below 10, else three significant digits; a dash for None."""
    return "–" if r is None else f"{r:.2f}" if r < 10 else f"{r:.3g}"


def per_mac_ratio(r: dict[str, Any]) -> float | None:
    """A timing record's ``ratio_vs_cell`` x ``cell_macs`` / ``dense_macs``; None: one lacking."""
    ratio, macs, cell = r.get("ratio_vs_cell"), r.get("dense_macs"), r.get("cell_macs")
    if ratio is None or not macs or not cell:
        return None
    return ratio * cell / macs


def _cell_name(reference: str | None) -> str:
    """``torch.nn.LSTM (fused)`` -> ``LSTM``."""
    return next((k for k, v in TIMED_CELLS.items() if v == reference), reference or "?")


def round_counts(records: Sequence[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """The distinct (rounds, warm-up rounds) of the records."""
    return sorted({(r.get("rounds"), r.get("warmup_rounds")) for r in records}, key=str)


def timing_table(records: Sequence[dict[str, Any]]) -> str:
    """One Markdown table of the timings of one task on one device (``_reading`` says how)."""
    bound = mac_bound(records[0].get("device") if records else None)
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        key: tuple[Any, ...] = (r["method"],)
        if r.get("reference"):  # a reference row pairs the two phases of one size (B differs)
            key += tuple(r["sizes"].get(k) for k in ("V", "D", "layers", "T"))
        if r["phase"] in rows.get(key, {}):  # two references of one phase differ in B
            key = (*key, r["sizes"].get("B"))
        row = rows.setdefault(
            key, {"method": r["method"], "sizes": r["sizes"], "ref": bool(r.get("reference"))}
        )
        row[r["phase"]] = r
        for k in ("params", "fused_cell", "mac_ratio"):
            row[k] = r.get(k)
    uniform = _batch_shapes(records) is not None
    per_cell_rounds = len(round_counts(records)) > 1
    cols = ["Method", "Cell", "D", "L", "Params"] + ([] if uniform else ["B×T (inference / train)"])
    cols += [f"{PHASES['inference']} ms ↓", f"{CELL_RATIO} ↓"]
    cols += [f"{PHASES['train']} ms ↓", f"{CELL_RATIO} ↓", f"{RATIO} ↓", "MACs / GRU"]
    cols += [f"{PER_MAC} ↓", OPS]
    cols += ["Target (train)", "Met"]
    kinds = list(TIMED_CELLS.values())

    def order(row: dict[str, Any]) -> tuple[Any, ...]:
        s = row["sizes"]
        if row["ref"]:
            kind = kinds.index(row["method"]) if row["method"] in kinds else len(kinds)
            return (0, s.get("D") or 0, s.get("layers") or 0, kind)
        ratios = [row.get(p, {}).get("ratio_vs_cell") for p in ("train", "inference")]
        return (1, *[float("inf") if x is None else x for x in ratios])

    body, ordered = [], sorted(rows.values(), key=order)
    for row in ordered:
        name = f"**{row['method']}** (reference)" if row["ref"] else row["method"]
        s = row["sizes"]
        cells = [name, row["fused_cell"] or "–", str(s.get("D", "–")), str(s.get("layers", "–"))]
        cells.append(str(row["params"] or "–"))
        if not uniform:
            bt = [row.get(p, {}).get("sizes", {}) for p in PHASES]
            cells.append(" / ".join(f"{b.get('B', '?')}×{b.get('T', '?')}" for b in bt))
        inf, train = row.get("inference", {}), row.get("train", {})
        cells += [spread(inf, per_cell_rounds), format_ratio(inf.get("ratio_vs_cell"))]
        cells += [spread(train, per_cell_rounds), format_ratio(train.get("ratio_vs_cell"))]
        x = per_mac_ratio(train)  # bold and flagged above the device's bound
        per_mac = (
            "–" if x is None else f"**{format_ratio(x)}** {FLAG}" if x > bound else format_ratio(x)
        )
        cells += [format_ratio(train.get("ratio_vs_gru")), format_ratio(row["mac_ratio"]), per_mac]
        cells.append(_ops(train))
        target = train.get("target")
        if target:
            met = target.get("met")
            cells.append(f"≤ {target['ratio']:.2f} × {_cell_name(target['reference'])}")
            cells.append("–" if met is None else "yes" if met else "**no**")
        else:
            cells += ["–", "–"]
        body.append(cells)
    lines = pipe_table(cols, body)
    above = [row["train"] for row in ordered if (per_mac_ratio(row.get("train", {})) or 0) > bound]
    if above:
        lines += ["", f"{FLAG} Train step above {bound:g}× its fused cell per MAC: "]
        lines[-1] += "; ".join(_flagged(r, records) for r in above) + "."
    return "\n".join(lines)


OPS = "Ops / step (train)"


def _ops(r: dict[str, Any]) -> str:
    """``python / aten`` ops a step of a train timing (``harness.bench.profile``), or –."""
    ops = r.get("ops_per_step")
    return "–" if not ops else f"{ops['python']:.3g} / {ops['aten']:.3g}"


def _flagged(r: dict[str, Any], records: Sequence[dict[str, Any]]) -> str:
    """A flagged train timing, with its ops a step beside its fused cell's at the same sizes."""
    text = f"`{r['method']}` ({format_ratio(per_mac_ratio(r))}"
    cell = TIMED_CELLS.get(r.get("fused_cell") or "")
    same = [
        x for x in records if x.get("reference") and (x["method"], x["phase"]) == (cell, "train")
    ]
    dims = ("V", "D", "layers", "T")
    ref = next((x for x in same if all(x["sizes"].get(k) == r["sizes"].get(k) for k in dims)), None)
    if r.get("ops_per_step") and ref is not None and ref.get("ops_per_step"):
        text += f"; {_ops(r)} ops a step against {_cell_name(cell)}'s {_ops(ref)}"
    return text + ")"


def timing_markdown(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    command: str,
    failed: Sequence[str] = (),
    skipped: dict[str, int] | None = None,
) -> str:
    """The TIMING.md text: a header, a table per (task, device), what failed or was ``skipped``."""
    parts = _header(records, sources, command)
    sections: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        sections.setdefault((r["task"], r["device"]), []).append(r)
    for (task, device), here in sections.items():  # in the order timed: task by task
        parts += _section(task, device, here)
    if failed or skipped:
        parts.append("## Not timed\n")
        parts += [f"- failed: {f}" for f in failed]
        parts += [f"- skipped ({n}): {reason}" for reason, n in (skipped or {}).items()]
        parts.append("")
    return "\n".join(parts)


def _header(records: Sequence[dict[str, Any]], sources: Sequence[str], command: str) -> list[str]:
    """The report's lines before its tables: what produced it, where, and how to read it."""
    envs = [r.get("env", {}) for r in records]

    def uniq(key: str) -> str:
        return ", ".join(sorted({str(e.get(key)) for e in envs if e.get(key) is not None})) or "?"

    shas = commits(records) or ["unknown"]
    timed_by = list(dict.fromkeys(r["command"] for r in records if r.get("command")))
    tasks = list(dict.fromkeys(f"{r['task']} ({r['preset']} preset)" for r in records))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    factor = f"{TARGET_FACTOR:g}"
    cuda_bound = ""
    if any(r.get("device") == "cuda" for r in records):
        cuda_bound = (
            f" ({MAC_BOUNDS['cuda']:g}× on CUDA, issue 66: a GPU's fused cell is harder to "
            "approach at small sizes)"
        )
    lines = [
        "# Timing (advisory)",
        "",
        f"<!-- Generated by `harness bench` at {now}. Do not edit by hand. -->",
        "",
        f"- Generated by `{command}` ({len(records)} timings, in "
        f"{', '.join(f'`{s}`' for s in sources) or '?'}); sizes of {', '.join(tasks) or '?'}.",
        *[f"- Timed by `{c}`." for c in timed_by if c != command],
    ]
    if len(timed_by) > 1:
        lines.append(
            "- Merged from these runs: each ratio is against the reference timed in its own "
            "run; a reference timed at the same sizes by several runs shows the last run's "
            "times (every run's are in the records)."
        )
    lines.append(
        f"- Commit: {', '.join(shas)}; devices: {uniq('device_name')}; torch: {uniq('torch')}; "
        f"CPU threads: {uniq('threads')}; python: {uniq('python')}."
    )
    if any(e.get("cuda") for e in envs):
        lines.append(
            f"- CUDA: {uniq('cuda')}; driver: {uniq('driver')}; cuDNN: {uniq('cudnn')}; "
            f"compute capability: {uniq('capability')}; triton: {uniq('triton')}."
        )
    return [*lines, *_reading(factor, cuda_bound), *code_lines(records, "- "), ""]


def _reading(factor: str, cuda_bound: str) -> list[str]:
    """The header's lines on how to read the tables (``_header``)."""
    return [
        "- **Timing is advisory**: it depends on the machine and on its load at the time, and is "
        "never a pass/fail gate. Compare ratios, and only within one run and device.",
        "- Inference: one test batch of `train.eval_batch_size`, eval mode, no_grad. Train step: "
        "one test batch of `train.batch_size`, forward + loss + backward + clip + Adam step.",
        "- Every time is in ms: the median (min–max) of its timed rounds; the rounds and warm-up "
        "rounds are given under each table (all statistics, IQR included, are in the records).",
        "- The reference rows (first, per size) are the same model with torch's own cell of as "
        "many layers in place of the method's: same batch, embedding, read-out, loss and "
        f"optimiser. `{FUSED_GRU}` (cuDNN on CUDA); `{TIMED_CELLS[STEP_LOOP]}`, an eager loop "
        "over the steps with the GRU's arithmetic, so that its ratio to the fused GRU is the "
        "cost of dispatching a step at a time; and the fused cell of any method held against "
        f"another (e.g. `{TIMED_CELLS['LSTM']}`).",
        f"- Cell: the fused cell a method is held against (its `fused_cell`). {CELL_RATIO} = "
        f"median / the median of that reference at the same sizes in the same run, device and "
        f"phase; {RATIO} likewise against the fused GRU. MACs / GRU: dense MACs per step of the "
        "method's layers over the fused GRU's at the same sizes.",
        f"- {PER_MAC} (train step): the median over the fused cell's median × the method's "
        "dense MACs per step / the cell's (`dense_macs`, `cell_macs` in the records), i.e. the "
        "time per dense MAC against the fused cell's. Every method should train within "
        f"{MAC_BOUND:g}×{cuda_bound}: a row above it is flagged (**bold** {FLAG}) and listed "
        "under its table. – where a record lacks the MACs (timed before they were recorded).",
        f"- {OPS}: what one training step dispatches per time step (`harness.bench.profile`, "
        "one more, untimed step): the torch functions called from Python / the ATen operators "
        "run, forward and backward (optimizer and loss included, spread over the steps). On a "
        "CPU `nn.LSTM` trains as one fused operator (a handful of ATen calls a step), "
        "`nn.GRU` and `nn.RNN` as ATen calls a step issued from C++; a method that decides "
        "per step runs its step from Python. At the sizes of the paper presets a step's "
        "arithmetic is small, so a flagged row that calls more operators a step than its cell "
        "is bound by their dispatch, which only a whole-sequence kernel of the method would "
        "remove; the flagged list gives both counts.",
        f"- Target (train step): within {factor}× its fused cell; a depth-adaptive (highway) "
        f"method, which runs several layers per step, within {factor}× the fused GRU × its "
        "MACs / GRU. Met: whether the measured ratio is within it (advisory).",
    ]


def _section(task: str, device: str, here: Sequence[dict[str, Any]]) -> list[str]:
    """A task's section on one device: its title, batch shapes and rounds, and its table."""
    names = sorted({r["device_name"] for r in here})
    lines = [f"## {task} ({here[0]['preset']} preset) on {device}: {', '.join(names)}\n"]
    shapes = _batch_shapes(here)
    line = (
        "Batch × steps: "
        + "; ".join(f"{PHASES[p].lower()} {b}×{t}" for p, (b, t) in shapes.items())
        + ". "
        if shapes
        else ""
    )
    line += "Times: median (min–max) of " + "; ".join(
        f"{n} rounds after {w} warm-up round(s)" for n, w in round_counts(here)
    )
    return [*lines, line + ".\n", timing_table(here) + "\n"]


def _batch_shapes(records: Sequence[dict[str, Any]]) -> dict[str, tuple[Any, Any]] | None:
    """``{phase: (B, T)}`` when every timing of a phase has the same shape, else None."""
    shapes: dict[str, set[tuple[Any, Any]]] = {}
    for r in records:
        shapes.setdefault(r["phase"], set()).add((r["sizes"].get("B"), r["sizes"].get("T")))
    if any(len(s) > 1 for s in shapes.values()):
        return None
    return {p: next(iter(shapes[p])) for p in PHASES if p in shapes}
