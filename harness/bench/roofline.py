"""This machine's roofline, and the physical bound it gives a row of the speedup report.

Measured once per ``harness bench --speedup`` run (issue 65, item 3), one thread, float32, in a
few seconds (``measure_machine``):

- memory bandwidth, by a STREAM-like triad ``a[i] = b[i] + s c[i]`` (2 values read and one
  written per element, counted as STREAM counts them: the write-allocate read of ``a`` is not)
  at one size per level: the three arrays together half of each cache level (the data and
  unified caches of ``/sys/devices/system/cpu/cpu0/cache/index*``, or, where that is not there,
  the fixed sizes of ``FIXED_CACHES``), and 4 times the last level (at least 64 MiB, at most
  1 GiB) for memory; the best of a few calls;
- peak product throughput, MACs per second: a GEMV (torch's ``mv``, ``[n, n]`` by ``[n]``) at
  batch 1 and a GEMM (torch's ``mm``, ``[B, n]`` by ``[n, n]^T``) at each larger batch B of the
  run (a batch step is a GEMM, several times faster per MAC than B GEMVs), at each n of
  ``PEAK_SIZES``, the best of them;
- a per-step floor: the time of one call of an empty loop over the run's T steps, over T.

Where the kernel library is loaded (asked through the kernel loaders of the run's methods, as a
sweep builds it), its ops run them (``baselines/ops/csrc/roofline.cpp``): the triad, built with
the kernels' flags, many passes inside one call (so that the call's dispatch from Python is
amortised; beyond the caches a call of one pass more less one, so that the allocation of its
output is not in it either), whose bandwidth counts where it beats ``torch.add``'s; ATen's
``mv`` and ``mm``, repeated inside one call; the empty loop, ``condrnn::roofline_empty_loop``.
Elsewhere torch's ops called from Python run them (``torch.add(..., out=)`` once a pass,
``torch.mv`` / ``torch.mm`` once a product, ``torch.cumsum`` over T values): a call's dispatch
(a few microseconds) is then inside every pass and product, so that the in-cache bandwidths and
the small products' rates come out low. The measurement says which ran (``ops``).

The bound (``physical_bound``) of a row: the sum over its steps of the larger of the step's
bytes at the bandwidth of the level the sequence's working set fits in and its MACs at the peak
throughput of the row's batch size, plus T times the per-step floor. The bytes of a step come
from the weight elements its decisions read (``step_traffic``), which the exact-realisable MAC
count of the batch's union of decisions gives: one MAC per weight element read for one sequence,
so the union's per-sequence MACs (the batch's union MACs / B: at batch B each element read
serves B sequences); its MACs are each sequence's own, summed over the batch. What it leaves
out: biases, nonlinearities and the decisions' own elementwise work, any state beyond the D
outputs (an LSTM's cell, a depth stack's layers), and the cost of reading a scattered row rather
than a contiguous block.
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

    From ``root/index*/{level,type,size}``: the data and unified caches (not the instruction
    cache), one per level. Where none can be read: ``FIXED_CACHES`` and False.
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
    """Seconds per call of ``f``: the best of ``blocks`` timed blocks of ``calls`` calls.

    One untimed call comes first.
    """
    f()
    best = math.inf
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def kernel_ops(methods: Sequence[str]) -> dict[str, Any] | None:
    """The kernel library's measure ops, or None where the library is not loaded.

    The library's inference part (which holds them) is asked for through the inference kernel
    loaders of ``methods`` (``method_kernels``). None: no method with an inference kernel, the
    library not built, ``HARNESS_NO_KERNELS``.

    Returns:
        ``{"triad": ..., "product": ..., "loop": ...}``: ``condrnn::roofline_triad``,
        ``roofline_product`` and ``roofline_empty_loop``.
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

    ``torch.add`` into a preallocated output, P calls a block (P passes move ``CALL_BYTES``, or
    one pass does), or by the kernel library's op (``triad``, not None): the time of a call of P
    passes over P, or where P < 4 (arrays of 16 MiB or more), that of a call of P + 1 passes
    less that of P, so that the allocation of the output and the first touch of its pages (which
    may be fresh from the OS) are not in it. An array holds one value at least.
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

    A GEMV, ``[n, n]`` by ``[n]``, at batch 1, a GEMM, ``[batch, n]`` by ``[n, n]^T``, above:
    by the kernel library's op (``product``: ATen's ``mv`` or ``mm``, repeated inside one call
    for ``BLOCK_S`` at a guessed rate), or where None, ``torch.mv`` or ``torch.mm`` into a
    preallocated output, as many calls a block.
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
    """Seconds of one call of an empty loop over ``steps`` steps.

    The kernel library's op (``loop``) or, where None, ``torch.cumsum`` over ``steps`` values.
    """
    x = torch.zeros(max(1, steps))
    calls = 200
    if loop is not None:
        return best_per_call(lambda: loop(x, steps), calls, blocks)
    return best_per_call(lambda: torch.cumsum(x, 0), calls, blocks)


def measure_machine(
    methods: Sequence[str], batches: Sequence[int], seq_len: int, blocks: int = 5
) -> dict[str, Any]:
    """This machine's roofline, one thread, float32 (the module docstring says how).

    Args:
        methods: the run's methods, whose kernel loaders bring the kernel library's ops.
        batches: the run's batch sizes (a peak throughput for each).
        seq_len: the run's T (the empty loop's steps).
        blocks: timed blocks (or calls) of each measure, the best kept.

    Returns:
        ``ops`` (``kernel`` or ``torch``: who ran the triad and the loop), ``caches`` (``sysfs``
        or ``fixed``), ``levels`` (per cache level and then ``memory``: ``name``, ``size`` in
        bytes, None for memory, ``triad_bytes`` (the three arrays together) and
        ``bytes_per_s``), ``peak_macs_per_s`` and ``peak_n`` (by batch size, as a string),
        ``floor_steps``, ``floor_call_s``, ``floor_step_s``, ``threads`` (1) and ``seconds``
        (the measurement's wall time).
    """
    start = time.perf_counter()
    ops = kernel_ops(methods) or {}
    caches, from_sysfs = cache_levels()
    with env.torch_threads(1):
        levels = []
        for name, size in caches:
            n_bytes = size // 2
            levels.append({"name": name, "size": size, "triad_bytes": n_bytes})
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
    """Bytes and MACs of each step of a batch, from the weight elements each step reads.

    Args:
        weights: per step, the weight elements the union of the batch's decisions reads: the
            exact-realisable MACs of one sequence computing that union (one MAC per element;
            at batch B each element read serves B sequences, so this is the batch's union MACs
            / B). A dense GRU reads ``3 D (D + V)`` every step.
        batch: B.
        input_size: V.
        hidden_size: D.
        itemsize: bytes of a value (4: float32).
        own: per step, the MACs of the batch's sequences each by its own decisions (their
            sum), the least arithmetic a step needs; None: every sequence computes the union,
            ``B weights``.

    Returns:
        Per step: bytes, ``itemsize (weights + B (V + 2 D))`` (the weights once, and the
        batch's input step, previous state and output), and MACs (``own``, or ``B weights``).
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

    The weights read over the sequence, at the least: the most any one step reads (at most the
    ``full_weights`` elements of the whole model; a row read at several steps counts once, and
    which rows differ from step to step is not known here, so the fewest the sequence can touch
    are taken and the bound stays a lower bound: a depth-adaptive model that runs its first
    layer at every step touches that layer's rows alone); and the activations: the inputs and
    outputs of every step and the initial state, ``B (T (V + D) + D)``. A step's rows are read
    again at later steps and calls: they stay at the level the whole working set fits in, not
    the one a single step's bytes would.
    """
    acts = batch * (len(weights) * (input_size + hidden_size) + hidden_size)
    return itemsize * (min(float(max(weights, default=0.0)), full_weights) + acts)


def level_for(n_bytes: float, machine: dict[str, Any]) -> dict[str, Any]:
    """The first level of ``machine["levels"]`` (smallest first) whose size holds ``n_bytes``.

    Memory (the last level) where none does.
    """
    for level in machine["levels"]:
        if level["size"] is not None and n_bytes <= level["size"]:
            return level
    return machine["levels"][-1]


def read_seconds(n_bytes: float, level: dict[str, Any], machine: dict[str, Any]) -> float:
    """The least time to read a step's ``n_bytes`` from a working set at ``level``.

    The working set does not fit the level below (``level_for``), but as much of the step's bytes
    as that smaller, faster level holds can come from there (at most its size, at its bandwidth);
    the rest comes at ``level``'s. This keeps the bound a lower bound where a working set passes a
    cache's size by a little (the part that stays in the cache is read at its speed).
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
    """The least time this machine needs for a sequence whose steps read ``weights`` elements.

    Sum over the steps of ``max(read time, MACs / peak)`` (``step_traffic``; the bytes read at
    the bandwidth of the level the ``working_set`` fits in, as much of them as the next smaller
    level holds at its bandwidth, ``read_seconds``; the peak at ``batch``), plus T times the
    measured per-step floor (``machine["floor_step_s"]``).

    Args:
        weights: per step, the weight elements the batch's union of decisions reads
            (``step_traffic``).
        full_weights: the weight elements of the whole model (a dense step's MACs for one
            sequence), the most a sequence can touch.
        batch: B.
        input_size: V.
        hidden_size: D.
        machine: a measurement (``measure_machine``).
        itemsize: bytes of a value.
        own: per step, the batch's MACs by each sequence's own decisions (``step_traffic``).

    Returns:
        ``bound_ms``, ``bound_level`` (the level's name), ``bound_working_set`` (bytes),
        ``bound_bytes`` and ``bound_macs`` (summed over the steps) and ``bound_mac_steps`` (the
        steps whose MACs take longer than their bytes).
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
