"""Realised speedups of the skipping methods' inference fast paths (``harness bench --speedup``).

What a row measures: docs/speedup.md; ``harness.bench.speedup_report`` renders the rows.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from harness.bench.phases import FUSED_CELLS, fused_macs
from harness.bench.roofline import measure_machine, physical_bound
from harness.components.code import current_code
from harness.components.flops import realisable_step_macs, sequence_macs
from harness.components.method import Method, SeqOut
from harness.components.registry import METHODS
from harness.env import resolve_device
from harness.errors import ConfigError
from harness.training.timing import synchronize


def has_fast_path(method_cls: type[Method]) -> bool:
    """Whether a method class implements ``Method.at_skip`` (so it has a fast path to measure)."""
    return getattr(method_cls.at_skip, "__func__", None) is not Method.at_skip.__func__


def fast_path_methods() -> list[str]:
    """The registered methods with a fast path, in registry (sorted) order."""
    return [name for name, cls in METHODS.items() if has_fast_path(cls)]


def resolve_methods(methods: str | Sequence[str] | None = None) -> list[str]:
    """The methods to measure: names or globs (a list, or comma-separated); None: all with one.

    A glob keeps the methods with a fast path. HarnessError: an unknown name, a glob matching no
    method; ConfigError: a named method without a fast path, a glob matching none with one.
    """
    have = fast_path_methods()
    if methods is None:
        return have
    parts = methods.split(",") if isinstance(methods, str) else list(methods)
    out: list[str] = []
    for part in (p.strip() for p in parts if p.strip()):
        glob = any(c in part for c in "*?[") or part == "all"
        if not glob:
            METHODS.get(part)  # unknown names: the registry's message, with suggestions
        found = [n for n in (METHODS.resolve(part) if glob else [part]) if n in have]
        if not found:
            why = f"no method with a fast path matches '{part}'; those with one: "
            if not glob:
                why = f"method '{part}' has no fast inference path to measure; methods with one: "
            raise ConfigError(why + ", ".join(have))
        out.extend(n for n in found if n not in out)
    if not out:
        raise ConfigError(f"no method given; methods with a fast path: {', '.join(have)}")
    return out


def build_at_skip(
    method: str, input_size: int, hidden_size: int, skip: float, seq_len: int, seed: int = 0
) -> tuple[Method, str]:
    """``method``'s ``at_skip`` model (eval mode) and its setting, built after seeding torch."""
    cls = METHODS.get(method)
    if not has_fast_path(cls):
        resolve_methods([method])  # raises the ConfigError that lists the methods with one
    torch.manual_seed(seed)
    return cls.at_skip(input_size, hidden_size, skip, seq_len)


def skip_kind(out: SeqOut) -> str:
    """What ``achieved_skip`` measures for an output: ``columns``, ``depth`` or ``units``."""
    if out.reads is not None:
        return "columns"
    return "units" if out.depth is None else "depth"


def achieved_skip(out: SeqOut, method: Method) -> float:
    """The skip a fast path is measured at, as a fraction of a batch (``skip_kind``).

    Activity-sparse methods (``SeqOut.reads``): the share of the V + D input and state columns
    not read; depth-adaptive ones: the depth-skip fraction; others: the unit updates skipped.
    """
    if out.reads is not None:
        return 1.0 - (out.reads > 0).double().mean().item()
    if out.depth is not None:
        r_max = method.cost().max_depth
        return 1.0 - out.depth.double().mean().item() / r_max
    return 1.0 - (out.mask > 0).double().mean().item()


SLOW_CALL_S = 0.1  # a path slower than this per call is timed one call per round


def interleaved_rounds(
    paths: dict[str, Callable[[], Any]],
    device: torch.device,
    warmup: int = 1,
    min_rounds: int = 3,
    max_rounds: int = 15,
    budget_s: float = 3.0,
    block: int = 3,
) -> dict[str, list[float]]:
    """Time several paths in alternating rounds: ``{path: [seconds per call, one per round]}``.

    A round times each path in turn, ``block`` calls after an untimed one (one call, none
    untimed, for a path slower than ``SLOW_CALL_S``); rounds go on until ``budget_s`` is spent,
    within min/max rounds (docs/speedup.md, "What a row measures").
    """
    blocks = dict.fromkeys(paths, block)

    def timed(name: str, f: Callable[[], Any]) -> float:
        n = blocks[name]
        if n > 1:
            f()  # untimed: bring this path's working set back into the caches
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        synchronize(device)
        return (time.perf_counter() - t0) / n

    for _ in range(warmup):
        for name, f in paths.items():
            if timed(name, f) > SLOW_CALL_S:
                blocks[name] = 1
    times: dict[str, list[float]] = {name: [] for name in paths}
    start, rounds = time.perf_counter(), 0
    while rounds < max_rounds and (rounds < min_rounds or time.perf_counter() - start < budget_s):
        for name, f in paths.items():
            times[name].append(timed(name, f))
        rounds += 1
    return times


def ratio_spread(num: Sequence[float], den: Sequence[float]) -> tuple[float, float, float]:
    """Median, min and max of the per-round ratios ``num[i] / den[i]``."""
    ratios = [a / b for a, b in zip(num, den, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def union_step_macs(model: Method, out: SeqOut) -> Tensor:
    """Exact-realisable MACs per sequence of each step, ``[T]``, of the batch's union of decisions.

    What a batched fast path reads (docs/speedup.md, "MAC ratios").
    """

    def any_sequence(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.detach().amax(0, keepdim=True)

    union = SeqOut(
        outputs=out.outputs[:1],
        mask=any_sequence(out.mask),
        depth=any_sequence(out.depth),
        reads=any_sequence(out.reads),
    )
    return realisable_step_macs(model, union)[0]


def union_macs(model: Method, out: SeqOut) -> float:
    """The sum of ``union_step_macs`` over the steps."""
    return union_step_macs(model, out).sum().item()


def fused_cell(cell: str, input_size: int, hidden_size: int) -> torch.nn.Module:
    """Torch's fused ``cell`` (``GRU``, ``LSTM`` or ``RNN``): one layer, batch first, eval mode."""
    if cell not in FUSED_CELLS:
        raise ConfigError(f"fused_cell {cell!r} is not one of {', '.join(FUSED_CELLS)}")
    return getattr(torch.nn, cell)(input_size, hidden_size, batch_first=True).eval()


def measure_speedups(
    methods: str | Sequence[str] | None = None,
    skips: Sequence[float] = (0.5, 0.75, 0.9),
    hidden: Sequence[int] = (256, 1024),
    batches: Sequence[int] = (1, 32),
    seq_len: int = 50,
    device: str = "cpu",
    input_size: int = 8,
    budget_s: float = 3.0,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The realised speedup of ``fast_forward`` against its three alternatives.

    One row (``measure_one``, after method, D, B, T, V, method_code, target_skip, setting and
    noskip_setting) per method, hidden size D, batch size B and target skip (Skip % / 100), on
    ``x ~ N(0, I)``, ``[B, seq_len, input_size]`` (seeded by ``seed`` + B), as ``harness bench
    --speedup`` takes them. ConfigError: bad sizes, skips or budget, a method without a fast
    path; HarnessError: an unknown method or device, CUDA where there is none.
    """
    names = resolve_methods(methods)
    if not skips or not all(0.0 <= s < 1.0 for s in skips):
        raise ConfigError(f"speedup targets must be skips in [0, 1) (got {list(skips)})")
    for what, values in (("hidden", hidden), ("batches", batches), ("seq_len", [seq_len])):
        if not values or not all(isinstance(v, int) and v >= 1 for v in values):
            raise ConfigError(f"speedup {what} must be integers >= 1 (got {values})")
    if input_size < 1 or budget_s < 0:
        raise ConfigError("speedup needs input_size >= 1 and budget_s >= 0")
    dev = resolve_device(device)
    # once per run, before the rows: this machine's roofline (CPU only: no bound elsewhere)
    machine = measure_machine(names, batches, seq_len) if dev.type == "cpu" else None
    rows = []
    for method in names:
        for D in hidden:
            noskip, noskip_note = build_at_skip(method, input_size, D, 0.0, seq_len, seed)
            noskip.to(dev)
            torch.manual_seed(seed)
            cell = fused_cell(noskip.fused_cell, input_size, D).to(dev)
            for skip in skips:
                model, note = build_at_skip(method, input_size, D, skip, seq_len, seed)
                model.to(dev)
                for B in batches:
                    g = torch.Generator().manual_seed(seed + B)
                    x = torch.randn(B, seq_len, input_size, generator=g).to(dev)
                    row = {"method": method, "D": D, "B": B, "T": seq_len, "V": input_size}
                    row["method_code"] = current_code(method)  # the report names it
                    row.update(target_skip=skip, setting=note, noskip_setting=noskip_note)
                    rows.append({**row, **measure_one(model, x, budget_s, noskip, cell, machine)})
    return rows


def measure_one(
    model: Method,
    x: Tensor,
    budget_s: float,
    noskip: Method,
    cell: torch.nn.Module,
    machine: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One row of ``measure_speedups`` (docs/speedup.md, "The rows"): ``model``'s fast path.

    Checked against its dense loop and timed on ``x`` (``[B, T, V]``) against it, ``noskip``
    (the method at skip 0) and ``cell`` (torch's fused cell), for ``budget_s`` seconds; the
    physical bound by ``machine`` (None: no bound).
    """
    model.eval()
    with torch.no_grad():
        ref = model(x)
    out = model.fast_forward(x)
    macs = {k: v.mean().item() for k, v in sequence_macs(model, ref).items()}
    fast_macs = union_macs(model, ref)
    noskip.eval()
    with torch.no_grad():
        noskip_ref = noskip(x)
    name = type(cell).__name__
    fused = float(fused_macs(name, x.shape[-1], model.hidden_size) * x.shape[1])
    alt_macs = {"dense": macs["dense"], "noskip": union_macs(noskip, noskip_ref), "fused": fused}
    paths: dict[str, Callable[[], Any]] = {
        "dense": torch.no_grad()(lambda: model(x)),
        "noskip": lambda: noskip.fast_forward(x),
        "fused": torch.no_grad()(lambda: cell(x)),
        "fast": lambda: model.fast_forward(x),
    }
    times = interleaved_rounds(paths, x.device, budget_s=budget_s)
    row = {
        "skip": achieved_skip(ref, model),
        "skip_kind": skip_kind(ref),
        "flop_reduction": macs["dense"] / macs["effective"],
        "flop_reduction_exact": macs["dense"] / macs["exact"],
        "fast_macs": fast_macs,  # the batch's union of decisions
        "own_macs": macs["exact"],  # each sequence's own decisions, the batch's mean
    }
    for alt, alt_mac in alt_macs.items():
        row.update(_against(alt, times[alt], times["fast"], alt_mac, fast_macs))
    row["mac_ratio_fused_own"] = alt_macs["fused"] / macs["exact"]
    row["realised_frac_fused_own"] = row["speedup_fused"] / row["mac_ratio_fused_own"]
    fast_ms = 1e3 * statistics.median(times["fast"])
    if machine is not None:
        B, T, V = x.shape
        weights = union_step_macs(model, ref).tolist()  # elements read, per sequence and step
        own = realisable_step_macs(model, ref).sum(0).tolist()  # the batch's least MACs a step
        bound = physical_bound(weights, macs["dense"] / T, B, V, model.hidden_size, machine,
                               itemsize=x.element_size(), own=own)  # fmt: skip
        row.update(roofline=machine, **bound, x_bound=fast_ms / bound["bound_ms"])
    row.update(fast_ms=fast_ms, rounds=len(times["fast"]))
    row["rounds_ms"] = {k: [1e3 * t for t in v] for k, v in times.items()}
    row.update(noskip_skip=achieved_skip(noskip_ref, noskip), fused_cell=name)
    diff = (out.outputs - ref.outputs).abs().max().item()
    row.update(max_abs_diff=diff, mask_mismatch=int((out.mask != ref.mask).sum().item()))
    return {**row, "reads_mismatch": reads_mismatch(out, ref), "note": type(model).fast_path_note()}


def _against(
    alt: str, alt_s: list[float], fast_s: list[float], alt_macs: float, fast_macs: float
) -> dict[str, float]:
    """A row's fields comparing the fast path with ``alt``, from per-round seconds and MACs."""
    med, lo, hi = ratio_spread(alt_s, fast_s)
    return {
        f"{alt}_ms": 1e3 * statistics.median(alt_s),
        f"{alt}_macs": alt_macs,
        f"speedup_{alt}": med,
        f"speedup_{alt}_min": lo,
        f"speedup_{alt}_max": hi,
        f"mac_ratio_{alt}": alt_macs / fast_macs,
        f"realised_frac_{alt}": med * fast_macs / alt_macs,
    }


def reads_mismatch(out: SeqOut, ref: SeqOut) -> int:
    """Entries of ``reads`` that differ between two outputs (all where only one has them)."""
    if out.reads is None and ref.reads is None:
        return 0
    if out.reads is None or ref.reads is None or out.reads.shape != ref.reads.shape:
        present = out.reads if ref.reads is None else ref.reads
        return int(present.numel())
    return int((out.reads != ref.reads).sum().item())


def speedup_jsonl(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as JSON lines, raw per-round timings included: the report's data file."""
    return "".join(json.dumps(r, sort_keys=False, allow_nan=True) + "\n" for r in rows)
