"""The speedup report (``harness bench --speedup``), from rows alone: it never builds a kernel."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import torch

from harness.bench.excerpts import ms, realised_above, who
from harness.bench.roofline import describe
from harness.bench.timing_report import code_lines
from harness.components.metrics import UNIT_NOTE
from harness.env import device_name, git_state
from harness.reporting.render import pipe_table

# The report's sentence on activity-sparse rows (those whose skip_kind is "columns").
COLUMNS_NOTE = (
    "For activity-sparse methods (skip marked (cols)) the target and the skip are the activity "
    "sparsity, the share of the V + D input and state columns the steps do not read, not "
    "Skip % (rows: they update every unit, so theirs is 0); their fast path multiplies only the "
    "columns some sequence of the batch reads, their MAC ratio counts the union of those columns, "
    "and their no-skip model (its `at_skip` at 0) reads every column but the state columns of "
    "the first step (the zero initial state). "
)


# The report's sentences on the physical bound (rows with ``bound_ms``).
BOUND_NOTE = (
    "Bound ms = the least time this machine needs for the row's sequence, from a roofline "
    "measured in the same run: the sum over the steps of the larger of the step's bytes at the "
    "triad bandwidth of the cache level the sequence's working set fits in (its weights read, "
    "at the least the most one step reads, and its inputs and outputs; as much of a step's bytes "
    "as the next smaller level holds at that level's bandwidth) and its MACs at the peak "
    "product throughput of the row's batch size, plus T times the per-step floor (one call of "
    "an empty T-step loop, over T). A step's bytes: the weight elements the batch's union of "
    "decisions reads (one per exact-realisable MAC of one sequence; a row read serves the whole "
    "batch) and the batch's input step, previous state and output, float32; its MACs: each "
    "sequence's own, summed over the batch. × bound = fast / bound ms, 1 at the physical limit. "
    "Left out: biases, "
    "nonlinearities, the decisions' elementwise work and any state beyond the D outputs; a "
    "scattered row counts as fast as a contiguous block. "
)


def _bound(r: dict[str, Any]) -> list[str]:
    """The bound's columns, ``bound ms`` and ``× bound``, or dashes (a row measured without)."""
    if "bound_ms" not in r:
        return ["–", "–"]
    return [f"{r['bound_ms']:.3g}", f"{r['fast_ms'] / r['bound_ms']:.2f}x"]


def _bound_header(rows: Sequence[dict[str, Any]]) -> str:
    """The header's sentences on the bound and the measurement it came from."""
    machines = [r["roofline"] for r in rows if "roofline" in r]
    if not machines:
        return "Bound ms and × bound: no roofline measured for these rows (–)."
    distinct = list({repr(m): m for m in machines}.values())
    text = BOUND_NOTE + describe(distinct[0])
    if len(distinct) > 1:
        text += f" ({len(distinct)} measurements in these rows: the first shown.)"
    if len(machines) < len(rows):
        text += f" {len(rows) - len(machines)} rows measured without one show –."
    return text


def _vs(r: dict[str, Any], alt: str) -> list[str]:
    """Speedup (min-max), MAC ratio and realised fraction of one comparison, or dashes."""
    keys = [f"speedup_{alt}", f"mac_ratio_{alt}", f"realised_frac_{alt}"]
    if any(k not in r for k in keys):
        return ["–", "–", "–"]
    lo, hi = r.get(f"speedup_{alt}_min"), r.get(f"speedup_{alt}_max")
    spread = f" ({lo:.2f}–{hi:.2f})" if lo is not None and hi is not None else ""
    return [f"{r[keys[0]]:.2f}x{spread}", f"{r[keys[1]]:.2f}x", f"{r[keys[2]]:.2f}"]


METHOD_TEXT = (
    "Untrained models with decision parameters set to hit each target skip "
    "(each method's `at_skip`; the setting column says how); inputs x ~ N(0, I). "
    "Each row times the fast path `model.fast_forward(x)` against three alternatives, all "
    "under no_grad: the method's own dense masked loop `model.eval()(x)`; the same fast "
    "path with skipping turned off (the method's `at_skip` model at skip 0, same weights, "
    "every unit updated at full depth), which separates removed per-step dispatch from "
    "skipped work; and torch's fused cell at the same B, T, V, D (the method's "
    "`fused_cell`, eval), what a user would otherwise run. "
    "Speedup = alternative / fast, the median of per-round ratios (min–max over the rounds "
    "in brackets; rounds in the last column), timed in alternating blocks of consecutive "
    "calls after one warm-up. "
    "MAC ratio = MACs of the alternative / MACs the fast path needs, exact-realisable (what "
    "it can skip: for VC-RNN the first k units read only the first k state dims), for the "
    "union of the batch's decisions (every unit some sequence updates, the largest depth): "
    "at batch 1, and where a batch's decisions coincide, the FLOP reduction; at batch > 1 "
    "with independent per-unit decisions, the ratio of the weight rows read. Realised = "
    "speedup / MAC ratio, the fraction of the saved work turned into time. The MAC ratio is "
    "no bound on the speedup: against the own dense loop the fast path also removes "
    "per-step dispatch (skipped steps, fused kernels), and against any alternative a "
    "smaller working set can stay in cache, so that realised passes 1 "
    "({beaten}). FLOP reduction = dense / "
    "effective MACs per sequence (exact-realisable in brackets where it differs). "
    "Fast paths are PyTorch code unless a note below says "
    "otherwise. For depth-adaptive methods the skip is the depth-skip %. "
    "{columns}Max |diff| = "
    "largest difference between fast and dense outputs. {unit}.{raw}"
)
"""What a speedup report's header says its rows measure (``speedup_markdown``)."""

SUMMARY_TEXT = (
    "Against the fused cell at batch 1 (each method at its largest D and highest "
    "target skip): speedup, MAC ratio, realised, and the fast path's time over its "
    "physical bound."
)
BATCHED_TEXT = (
    "Against the fused cell at batch > 1 (each method at its largest D and highest "
    "target skip and batch): the MAC ratio and realised fraction by the union of the "
    "batch's decisions (what a path that reads a weight row for the whole batch once any "
    "sequence needs it must do) and by each sequence's own decisions (the batch's mean: "
    "what a path that follows every sequence's decisions must do). Where the decisions "
    "of a batch coincide the two are equal."
)
TITLES = [
    *("Method", "D", "B", "Target skip %", "Skip %", "Setting", "FLOP reduction"),
    *("ms: dense / no skip / fused / fast", "bound ms", "× bound"),
    *("vs own dense loop", "MAC ratio", "realised"),
    *("vs same path, no skip", "MAC ratio", "realised"),
    *("vs fused cell", "MAC ratio", "realised"),
    *("Max abs diff", "Rounds"),
]
"""The columns of a speedup report's table, one row per configuration (``_table_row``)."""


def speedup_markdown(
    rows: Sequence[dict[str, Any]],
    command: str,
    device: str = "cpu",
    data_file: str | None = None,
) -> str:
    """The Markdown report of ``measure_speedups`` rows, measured on ``device`` by ``command``.

    ``data_file``: the raw timings' file, named in the header; a comparison a row lacks: a dash.
    """
    lines = _header(rows, command, device, data_file)
    for text, summary in (
        (SUMMARY_TEXT, _fused_summary(rows)),
        (BATCHED_TEXT, _union_and_own(rows)),
    ):
        if summary:
            lines += [text, "", *summary, ""]
    lines += pipe_table(TITLES, [_table_row(r) for r in rows])
    lines.append("")
    lines.append(f"T = {rows[0]['T']}, V = {rows[0]['V']}." if rows else "No rows.")
    return "\n".join(lines) + "\n"


def _header(
    rows: Sequence[dict[str, Any]], command: str, device: str, data_file: str | None
) -> list[str]:
    """The report's lines before its summaries: what, where, when, how, the code and notes."""
    sha, dirty = git_state()
    commit = "unknown" if sha is None else sha[:12] + (" (dirty)" if dirty else "")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    last_note = {r["method"]: r["note"] for r in rows if r.get("note")}
    notes = list(dict.fromkeys(last_note.values()))
    raw = f" Raw per-round timings, one JSON line per row: `{data_file}`." if data_file else ""
    columns = COLUMNS_NOTE if any(r.get("skip_kind") == "columns" for r in rows) else ""
    beaten = "here: " + realised_above(rows)
    text = METHOD_TEXT.format(beaten=beaten, columns=columns, unit=UNIT_NOTE, raw=raw)
    return [
        "<!-- Generated file: do not edit. Produced by "
        "harness.bench.speedup_report.speedup_markdown. -->",
        "# Realised speedups of the skipping methods' fast inference paths",
        "",
        f"Generated {stamp} by `{command}`.",
        f"Device: {device_name(torch.device(device))}; torch {torch.__version__}; "
        f"threads: {torch.get_num_threads()}; commit {commit}.",
        "",
        text,
        "",
        _bound_header(rows),
        "",
        *code_lines(rows),
        "",
        *[f"- {n}" for n in notes],
        *([""] if notes else []),
    ]


def _table_row(r: dict[str, Any]) -> list[str]:
    """A configuration's row of the report's table (``TITLES``)."""
    red = f"{r['flop_reduction']:.2f}x"
    if abs(r["flop_reduction_exact"] - r["flop_reduction"]) > 1e-3 * r["flop_reduction"]:
        red += f" ({r['flop_reduction_exact']:.2f}x)"
    diff = f"{r['max_abs_diff']:.1e}"
    if r["mask_mismatch"]:
        diff += f", {r['mask_mismatch']} mask entries differ"
    if r.get("reads_mismatch"):
        diff += f", {r['reads_mismatch']} reads entries differ"
    fused = _vs(r, "fused")
    if r.get("fused_cell") and fused[0] != "–":
        fused[0] = f"{r['fused_cell']}: {fused[0]}"
    paths = ms(r, ("dense", "noskip", "fused", "fast"))
    own = [*_vs(r, "dense"), *_vs(r, "noskip")]
    return [*who(r), r["setting"], red, paths, *_bound(r), *own, *fused, diff, str(r["rounds"])]


def _best(rows: Sequence[dict[str, Any]], batched: bool, key: str) -> dict[str, dict[str, Any]]:
    """Per method, its row with ``key`` at the largest D, target (and batch) at batch 1 or above."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        if (r["B"] > 1) != batched or key not in r:
            continue
        b = best.get(r["method"])
        order = ("D", "target_skip", "B") if batched else ("D", "target_skip")
        if b is None or tuple(r[k] for k in order) > tuple(b[k] for k in order):
            best[r["method"]] = r
    return best


def _union_and_own(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A table row per method against the fused cell at batch > 1, by the union's and own MACs."""
    best = _best(rows, True, "mac_ratio_fused_own")
    if not best:
        return []
    titles = ["Method", "D", "B", "Target skip %", "vs fused cell", "MAC ratio: union"]
    return pipe_table(
        [*titles, "realised: union", "MAC ratio: own", "realised: own"],
        [
            [m, str(r["D"]), str(r["B"]), f"{100 * r['target_skip']:.0f}"]
            + [f"{r['speedup_fused']:.2f}x", f"{r['mac_ratio_fused']:.2f}x"]
            + [f"{r['realised_frac_fused']:.2f}", f"{r['mac_ratio_fused_own']:.2f}x"]
            + [f"{r['realised_frac_fused_own']:.2f}"]
            for m, r in best.items()
        ],
    )


def _fused_summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A table row per method against the fused cell at batch 1."""
    best = _best(rows, False, "speedup_fused")
    if not best:
        return []
    titles = ["Method", "D", "Target skip %", "Fused cell", "vs fused cell", "MAC ratio"]
    return pipe_table(
        [*titles, "realised", "× bound"],
        [
            [m, str(r["D"]), f"{100 * r['target_skip']:.0f}", str(r.get("fused_cell", "–"))]
            + [f"{r['speedup_fused']:.2f}x", f"{r['mac_ratio_fused']:.2f}x"]
            + [f"{r['realised_frac_fused']:.2f}", _bound(r)[1]]
            for m, r in best.items()
        ],
    ) + _more_work(best)


def _more_work(best: dict[str, dict[str, Any]]) -> list[str]:
    """A sentence per method of the batch-1 summary whose MAC ratio is below 1, saying why."""
    lines = [
        f"- {m}: at its {100 * r['target_skip']:.0f} % target skip it still needs "
        f"{1 / r['mac_ratio_fused']:.2f}x the MACs of torch's fused {r.get('fused_cell', 'cell')} "
        "(its dense step does more work than that cell's; what it skips is a share of its own "
        "work), so it runs slower than the fused cell unless it beats its MAC ratio; realised "
        f"{r['realised_frac_fused']:.2f} is its speedup over what that ratio predicts, and its "
        f"time is {_bound(r)[1]} its physical bound."
        for m, r in best.items()
        if r["mac_ratio_fused"] < 1
    ]
    return ["", *lines] if lines else []
