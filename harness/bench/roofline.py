"""This machine's roofline, and the physical bound it gives a row of the speedup report.

``measure_machine`` measures it once per ``harness bench --speedup`` run; ``physical_bound`` is
arithmetic on it (docs/speedup.md, "The physical bound", says how and what it leaves out).
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from harness import env
from harness.components.code import method_kernels

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
# the cache levels assumed where sysfs does not say (name, bytes)
FIXED_CACHES = (("L1", 32 << 10), ("L2", 1 << 20), ("L3", 32 << 20))
PEAK_SIZES = (256, 512, 1024)  # n of the [n, n] matrices the peak throughput is taken over
CALL_BYTES = 64 << 20  # bytes the triad moves per timed call (at least one pass)
BLOCK_S = 2e-3  # seconds of calls per timed block (a guessed rate sets the count)
BOUND_KEYS = (
    "bound_ms",
    "bound_level",
    "bound_working_set",
    "bound_bytes",
    "bound_macs",
    "bound_mac_steps",
)  # a row's fields from ``physical_bound``


def parse_size(text: str) -> int:
    """Bytes of a sysfs cache size: ``32K``, ``1024K``, ``32M`` or a plain number."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if m is None:
        raise ValueError(f"not a cache size: {text!r}")
    shift = {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]
    return int(m.group(1)) << shift


def cache_levels(root: Path = CACHE_DIR) -> tuple[list[tuple[str, int]], bool]:
    """The data cache levels of the first CPU, smallest first, and whether sysfs gave them.

    From ``root/index*/{level,type,size}``, instruction caches left out; ``FIXED_CACHES`` and
    False where none can be read.
    """
    found: dict[int, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction":
            found[level] = max(size, found.get(level, 0))
    if not found:
        return list(FIXED_CACHES), False
    return [(f"L{lv}", found[lv]) for lv in sorted(found)], True


def best_per_call(f: Callable[[], Any], calls: int, blocks: int) -> float:
    """Seconds per call of ``f``: the best of ``blocks`` blocks of ``calls`` calls, after one."""
    f()
    best = math.inf
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def kernel_ops(methods: Sequence[str]) -> dict[str, Any] | None:
    """``{"triad", "product", "loop"}``: the ops ``condrnn::roofline_*``, or None (not loaded).

    The library's inference part is asked for through the inference kernel loaders of
    ``methods`` (``method_kernels``).
    """
    for method in methods:
        for loader in method_kernels(method):
            if getattr(loader, "part", None) != "infer":
                continue
            ops = torch.ops.condrnn
            if loader() is None or not hasattr(ops, "roofline_triad"):
                return None
            names = {"triad": "triad", "product": "product", "loop": "empty_loop"}
            return {k: getattr(ops, f"roofline_{name}").default for k, name in names.items()}
    return None


def triad_rate(n_bytes: int, triad: Any, blocks: int) -> float:
    """Bytes per second of the triad over three float32 arrays of ``n_bytes`` together.

    P passes move ``CALL_BYTES`` (or one pass does): ``torch.add`` into a preallocated output, P
    calls a block, or the library's ``triad``, a call of P passes over P, or where P < 4 a call
    of P + 1 passes less one of P (so that the output's allocation and first touch are not in it).
    """
    n = max(1, n_bytes // 12)
    b, c = torch.full((n,), 1.5), torch.full((n,), 0.25)
    passes = max(1, -(-CALL_BYTES // (12 * n)))
    if triad is not None:
        seconds = best_per_call(lambda: triad(b, c, 3.0, passes), 1, blocks) / passes
        if passes < 4:  # the output's allocation and first touch weigh: a pass more, less P
            more = best_per_call(lambda: triad(b, c, 3.0, passes + 1), 1, blocks)
            seconds = more - passes * seconds
    else:
        a = torch.empty(n)
        seconds = best_per_call(lambda: torch.add(b, c, alpha=3.0, out=a), passes, blocks)
    return 12 * n / seconds


def peak_rate(batch: int, product: Any, blocks: int) -> tuple[float, int]:
    """The best MACs per second of a float32 product at ``batch`` over ``PEAK_SIZES``, and its n.

    A GEMV (``[n, n]`` by ``[n]``) at batch 1, a GEMM (``[batch, n]`` by ``[n, n]^T``) above, by
    the library's ``product`` (repeated inside one call for ``BLOCK_S`` at a guessed rate) or,
    where None, ``torch.mv`` / ``torch.mm`` into a preallocated output, as many calls a block.
    """
    best = (0.0, 0)
    for n in PEAK_SIZES:
        w = torch.full((n, n), 0.01)
        x = torch.full((n,) if batch == 1 else (batch, n), 0.5)
        macs = batch * n * n
        reps = max(1, int(BLOCK_S * 2e10 / macs))
        if product is not None:
            seconds = best_per_call(functools.partial(product, w, x, reps), 1, blocks) / reps
        elif batch == 1:
            f = functools.partial(torch.mv, w, x, out=torch.empty(n))
            seconds = best_per_call(f, reps, blocks)
        else:
            f = functools.partial(torch.mm, x, w.t(), out=torch.empty(batch, n))
            seconds = best_per_call(f, reps, blocks)
        best = max(best, (macs / seconds, n))
    return best


def floor_call(steps: int, loop: Any, blocks: int) -> float:
    """Seconds of one call of the library's empty ``loop`` over ``steps`` (None: a cumsum)."""
    x = torch.zeros(max(1, steps))
    f = functools.partial(torch.cumsum, x, 0) if loop is None else functools.partial(loop, x, steps)
    return best_per_call(f, 200, blocks)


def measure_machine(
    methods: Sequence[str], batches: Sequence[int], seq_len: int, blocks: int = 5
) -> dict[str, Any]:
    """This machine's roofline, one thread, float32, for a run's methods, batch sizes and T.

    ``blocks``: timed blocks (or calls) of each measure, the best kept. The fields: a row's
    ``roofline`` (docs/speedup.md, "The rows").
    """
    start = time.perf_counter()
    ops = kernel_ops(methods) or {}
    caches, from_sysfs = cache_levels()
    with env.torch_threads(1):
        levels = [{"name": name, "size": size, "triad_bytes": size // 2} for name, size in caches]
        memory = min(max(4 * caches[-1][1], 64 << 20), 1 << 30)
        levels.append({"name": "memory", "size": None, "triad_bytes": memory})
        triads = [None, *([ops["triad"]] if ops else [])]  # torch.add's, the library's
        for level in levels:
            level["bytes_per_s"] = max(triad_rate(level["triad_bytes"], t, blocks) for t in triads)
        product = ops.get("product")
        peaks = {str(b): peak_rate(b, product, blocks) for b in sorted(set(batches))}
        floor = floor_call(seq_len, ops.get("loop"), blocks)
    return {
        "ops": "kernel" if ops else "torch",
        "caches": "sysfs" if from_sysfs else "fixed",
        "levels": levels,
        "peak_macs_per_s": {b: rate for b, (rate, _) in peaks.items()},
        "peak_n": {b: n for b, (_, n) in peaks.items()},
        "floor_steps": seq_len,
        "floor_call_s": floor,
        "floor_step_s": floor / max(1, seq_len),
        "threads": 1,
        "seconds": time.perf_counter() - start,
    }


# --- the bound of a row: pure arithmetic on a measurement -------------------------------------


def step_traffic(
    weights: Sequence[float],
    batch: int,
    input_size: int,
    hidden_size: int,
    itemsize: int = 4,
    own: Sequence[float] | None = None,
) -> tuple[list[float], list[float]]:
    """Bytes and MACs of each step of a batch of B, with V inputs and D units.

    ``weights``: per step, the weight elements the batch's union of decisions reads (the union's
    exact-realisable MACs of one sequence); ``own``: per step, the batch's MACs by each sequence's
    own decisions (None: ``B weights``). Bytes: ``itemsize (weights + B (V + 2 D))``, the weights
    once and the batch's input step, previous state and output.
    """
    acts = batch * (input_size + 2 * hidden_size)
    macs = [batch * w for w in weights] if own is None else [float(m) for m in own]
    return [itemsize * (w + acts) for w in weights], macs


def working_set(
    weights: Sequence[float],
    full_weights: float,
    batch: int,
    input_size: int,
    hidden_size: int,
    itemsize: int = 4,
) -> float:
    """Bytes a sequence touches, which decide the cache level its steps read from.

    The most weight elements one step reads (at most ``full_weights``: the fewest the sequence
    can touch, so that the bound stays a lower bound) and every step's inputs and outputs with
    the initial state, ``B (T (V + D) + D)``.
    """
    acts = batch * (len(weights) * (input_size + hidden_size) + hidden_size)
    return itemsize * (min(float(max(weights, default=0.0)), full_weights) + acts)


def level_for(n_bytes: float, machine: dict[str, Any]) -> dict[str, Any]:
    """The first level of ``machine["levels"]`` whose size holds ``n_bytes``, else memory."""
    for level in machine["levels"]:
        if level["size"] is not None and n_bytes <= level["size"]:
            return level
    return machine["levels"][-1]


def read_seconds(n_bytes: float, level: dict[str, Any], machine: dict[str, Any]) -> float:
    """The least time to read a step's ``n_bytes`` from a working set at ``level``.

    As much of them as the level below holds at its bandwidth, the rest at ``level``'s.
    """
    levels = machine["levels"]
    i = next(k for k, lv in enumerate(levels) if lv is level or lv["name"] == level["name"])
    if i == 0:
        return n_bytes / float(level["bytes_per_s"])
    near = min(n_bytes, float(levels[i - 1]["size"]))
    return near / float(levels[i - 1]["bytes_per_s"]) + (n_bytes - near) / float(
        level["bytes_per_s"]
    )


def peak_for(machine: dict[str, Any], batch: int) -> float:
    """The peak MACs per second measured at ``batch``, or at the nearest batch size measured."""
    rates = machine["peak_macs_per_s"]
    key = str(batch) if str(batch) in rates else min(rates, key=lambda b: abs(int(b) - batch))
    return float(rates[key])


def physical_bound(
    weights: Sequence[float],
    full_weights: float,
    batch: int,
    input_size: int,
    hidden_size: int,
    machine: dict[str, Any],
    itemsize: int = 4,
    own: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The least time ``machine`` needs for a sequence whose steps read ``weights`` elements.

    The sum over the steps of ``max(read_seconds, MACs / peak)`` (``step_traffic``, at the level
    the ``working_set`` fits in), plus T times the per-step floor; ``full_weights``: the whole
    model's weight elements. Returns the ``BOUND_KEYS`` (docs/speedup.md, "The rows").
    """
    nbytes, macs = step_traffic(weights, batch, input_size, hidden_size, itemsize, own)
    ws = working_set(weights, full_weights, batch, input_size, hidden_size, itemsize)
    level = level_for(ws, machine)
    peak = peak_for(machine, batch)
    read = [read_seconds(b, level, machine) for b in nbytes]
    seconds = sum(max(r, m / peak) for r, m in zip(read, macs, strict=True))
    seconds += len(weights) * float(machine["floor_step_s"])
    return {
        "bound_ms": 1e3 * seconds,
        "bound_level": level["name"],
        "bound_working_set": ws,
        "bound_bytes": float(sum(nbytes)),
        "bound_macs": float(sum(macs)),
        "bound_mac_steps": sum(m / peak > r for r, m in zip(read, macs, strict=True)),
    }


def _bytes(n: float) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n:.0f} B"


def describe(machine: dict[str, Any]) -> str:
    """The measurement in one sentence, for the report's header."""
    caches = "(sysfs)" if machine["caches"] == "sysfs" else "(assumed: sysfs has none)"
    bws = ", ".join(
        f"{lv['name']} ({_bytes(lv['triad_bytes'])}) {lv['bytes_per_s'] / 1e9:.1f} GB/s"
        for lv in machine["levels"]
    )
    sizes = ", ".join(f"{lv['name']} {_bytes(lv['size'])}" for lv in machine["levels"][:-1])
    peaks = ", ".join(
        f"B {b}: {rate / 1e9:.1f} GMAC/s (n {machine['peak_n'][b]})"
        for b, rate in sorted(machine["peak_macs_per_s"].items(), key=lambda kv: int(kv[0]))
    )
    how = (
        "the kernel library's ops (`csrc/roofline.cpp`: the triad's passes, and ATen's mv or mm, "
        "repeated inside one call; the triad's bandwidth where it beats `torch.add`'s)"
        if machine["ops"] == "kernel"
        else "torch's ops from Python (`torch.add`, `torch.mv`, `torch.mm`, `torch.cumsum`: no "
        "kernel library; a call's dispatch is inside every pass and product, so the in-cache "
        "bandwidths and small products' rates come out low)"
    )
    return (
        f"Measured in this run ({machine['seconds']:.1f} s, one thread, float32, by {how}): "
        f"triad bandwidth {bws}; cache sizes {sizes} {caches}; peak product throughput "
        f"(a GEMV at B 1, a GEMM above, best over n of {', '.join(map(str, PEAK_SIZES))}) "
        f"{peaks}; per-step floor {1e6 * machine['floor_step_s']:.3f} us (one call of an "
        f"empty {machine['floor_steps']}-step loop: {1e6 * machine['floor_call_s']:.2f} us)."
    )
