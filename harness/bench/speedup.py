"""Realised speedups of the skipping methods' inference fast paths (issue 7).

The methods' ``forward`` computes every unit and then masks (as the authors' code does), so the
FLOPs it saves are analytic only. Each skipping method also has ``fast_forward`` (inference)
that really does less work. This module builds untrained models whose decision parameters are
set to hit a target Skip %, checks the fast path against the dense one, and times them:

- FLOP reduction = dense / effective MACs per sequence (``harness.flops.sequence_macs``; the
  paper-effective count, and the exact-realisable count where a method defines one);
- realised speedup = time of ``model.eval()(x)`` / time of ``model.fast_forward(x)``, both under
  ``no_grad``, interleaved (dense, fast, dense, ...) after warm-up, median of per-round ratios,
  so that load from other processes hits both sides alike; weights repacked by a fast path are
  cached, so packing is not timed (done once per model);
- ``realised_frac`` = realised speedup / FLOP reduction (1 = every saved FLOP became time).

Which methods are measured, and how a target is reached, is up to each method: a method with a
real fast path implements ``Method.at_skip`` (an untrained model whose decision parameters aim at
a Skip %, and a one-line description of that setting, reported per row) and may add a line to
the report's header with ``Method.fast_path_note``, asked once the fast path has run and kept in
each row, so that rendering a report from rows runs no method code (no kernel is built for it).
The target is the unit Skip %, or for depth-adaptive methods the depth-skip % (``achieved_skip``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import torch
from torch import Tensor

from harness.env import device_name, git_state
from harness.errors import ConfigError, HarnessError
from harness.flops import UNIT_NOTE, sequence_macs
from harness.method import Method, SeqOut
from harness.registry import METHODS
from harness.timing import synchronize


def has_fast_path(method_cls: type[Method]) -> bool:
    """Whether a method class implements ``Method.at_skip`` (so it has a fast path to measure)."""
    return getattr(method_cls.at_skip, "__func__", None) is not Method.at_skip.__func__


def fast_path_methods() -> list[str]:
    """The registered methods with a fast path, in registry (sorted) order."""
    return [name for name, cls in METHODS.items() if has_fast_path(cls)]


def resolve_methods(methods: str | Sequence[str] | None = None) -> list[str]:
    """The method names to measure, from names or globs.

    None gives every method with a fast path; else names or globs (a list, or comma-separated),
    where a glob keeps only the methods with a fast path.

    Raises:
        HarnessError: an unknown name, or a glob that matches no registered method.
        ConfigError: a named method without a fast path, or a glob that matches none with one
            (the message lists the methods with one).
    """
    have = fast_path_methods()
    if methods is None:
        return have
    parts = methods.split(",") if isinstance(methods, str) else list(methods)
    out: list[str] = []
    for part in (p.strip() for p in parts if p.strip()):
        if any(c in part for c in "*?[") or part == "all":
            found = [n for n in METHODS.resolve(part) if n in have]
            if not found:
                raise ConfigError(
                    f"no method with a fast path matches '{part}'; those with one: "
                    + ", ".join(have)
                )
        else:
            METHODS.get(part)  # unknown names: the registry's message, with suggestions
            if part not in have:
                raise ConfigError(
                    f"method '{part}' has no fast inference path to measure; methods with one: "
                    + ", ".join(have)
                )
            found = [part]
        out.extend(n for n in found if n not in out)
    if not out:
        raise ConfigError(f"no method given; methods with a fast path: {', '.join(have)}")
    return out


def build_at_skip(
    method: str, input_size: int, hidden_size: int, skip: float, seq_len: int, seed: int = 0
) -> tuple[Method, str]:
    """``method``'s ``at_skip`` model, built after seeding torch with ``seed``.

    Args:
        method: a registered method with a fast path.
        input_size: V, the size of each input step.
        hidden_size: D, the number of hidden units.
        skip: the target Skip % / 100.
        seq_len: T of the sequences it will run on.
        seed: seeds torch's global generator before the model is built.

    Returns:
        The model (eval mode) and a one-line description of its setting.
    """
    cls = METHODS.get(method)
    if not has_fast_path(cls):
        resolve_methods([method])  # raises the ConfigError that lists the methods with one
    torch.manual_seed(seed)
    return cls.at_skip(input_size, hidden_size, skip, seq_len)


def achieved_skip(out: SeqOut, method: Method) -> float:
    """Skip % / 100 of a batch; for depth methods the depth-skip fraction (docs/methods.md 1.1)."""
    if out.depth is not None:
        r_max = method.cost().max_depth
        return 1.0 - out.depth.double().mean().item() / r_max
    return 1.0 - (out.mask > 0).double().mean().item()


def interleaved_times(
    dense: Callable[[], Any],
    fast: Callable[[], Any],
    device: torch.device,
    warmup: int = 1,
    min_rounds: int = 3,
    max_rounds: int = 15,
    budget_s: float = 3.0,
    block: int = 3,
) -> dict[str, float]:
    """Time the dense and fast paths in alternating rounds and compare them.

    Returns the median dense and fast times (ms) and the median of per-round ratios
    dense / fast, with rounds added until ``budget_s`` is spent (within min/max rounds).

    A round times a block of ``block`` consecutive calls of each path, after one untimed call of
    that path: alternating rounds makes load from other processes hit both paths alike, while
    the block keeps each path in its own steady state. (Alternating single calls would time the
    fast path right after the dense one has streamed every weight through the caches, which is
    not how repeated inference runs.)
    """

    def timed(f: Callable[[], Any]) -> float:
        f()  # untimed: bring this path's working set back into the caches
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(block):
            f()
        synchronize(device)
        return (time.perf_counter() - t0) / block

    for _ in range(warmup):
        timed(dense)
        timed(fast)
    td, tf, ratios = [], [], []
    start = time.perf_counter()
    while len(ratios) < max_rounds and (
        len(ratios) < min_rounds or time.perf_counter() - start < budget_s
    ):
        a, b = timed(dense), timed(fast)
        td.append(a)
        tf.append(b)
        ratios.append(a / b)
    return {
        "dense_ms": 1e3 * statistics.median(td),
        "fast_ms": 1e3 * statistics.median(tf),
        "speedup": statistics.median(ratios),
        "rounds": len(ratios),
    }


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
    """Measure the realised speedup of ``fast_forward`` over the dense masked forward.

    One measurement per method, hidden size D, batch size B and target skip; inputs
    ``x ~ N(0, I)`` of shape ``[B, seq_len, V]``.

    Args:
        methods: names or globs (see ``resolve_methods``); None: every method with a fast path.
        skips: target Skip % / 100, each in [0, 1).
        hidden: hidden sizes D.
        batches: batch sizes B.
        seq_len: T.
        device: a torch device string (``cpu``, ``cuda``, ``cuda:1``).
        input_size: V.
        budget_s: seconds of timing per row (at least 3 rounds are timed regardless).
        seed: seeds each model (``build_at_skip``) and, with B added, its inputs.

    Returns:
        One row per configuration: method, D, B, T, V, target_skip, skip (achieved; for
        depth-adaptive methods the depth-skip), setting, flop_reduction (dense / effective MACs),
        flop_reduction_exact (dense / exact-realisable), dense_ms, fast_ms, speedup,
        realised_frac (speedup / flop_reduction), max_abs_diff and mask_mismatch (fast vs
        dense), rounds, note (the method's ``fast_path_note`` after this row's fast path ran).

    Raises:
        ConfigError: bad sizes, skips or budget, or a method without a fast path.
        HarnessError: an unknown method or device, or CUDA asked for where there is none.
    """
    names = resolve_methods(methods)
    if not skips or not all(0.0 <= s < 1.0 for s in skips):
        raise ConfigError(f"speedup targets must be skips in [0, 1) (got {list(skips)})")
    for what, values in (("hidden", hidden), ("batches", batches), ("seq_len", [seq_len])):
        if not values or not all(isinstance(v, int) and v >= 1 for v in values):
            raise ConfigError(f"speedup {what} must be integers >= 1 (got {values})")
    if input_size < 1 or budget_s < 0:
        raise ConfigError("speedup needs input_size >= 1 and budget_s >= 0")
    dev = check_device(device)
    rows = []
    for method in names:
        for D in hidden:
            for skip in skips:
                model, note = build_at_skip(method, input_size, D, skip, seq_len, seed)
                model.to(dev)
                for B in batches:
                    g = torch.Generator().manual_seed(seed + B)
                    x = torch.randn(B, seq_len, input_size, generator=g).to(dev)
                    row = {"method": method, "D": D, "B": B, "T": seq_len, "V": input_size}
                    row.update(target_skip=skip, setting=note)
                    rows.append({**row, **measure_one(model, x, budget_s)})
    return rows


def check_device(device: str) -> torch.device:
    """``device`` as a torch.device, or HarnessError when it is unknown or absent here."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise HarnessError(f"Unknown device '{device}'. Use cpu or cuda") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise HarnessError(f"device '{device}' requested but no CUDA device is available")
    if dev.type not in ("cpu", "cuda"):
        raise HarnessError(f"Unknown device '{device}'. Use cpu or cuda")
    return dev


def measure_one(model: Method, x: Tensor, budget_s: float = 3.0) -> dict[str, Any]:
    """Achieved skip, FLOP reductions, times and fast-vs-dense agreement of one model on ``x``.

    This is the per-configuration part of ``measure_speedups``. The row's ``note`` is the
    method's ``fast_path_note``, asked after the fast path has run, so that it describes what
    ran (e.g. whether an optional compiled kernel was built and used).
    """
    model.eval()
    with torch.no_grad():
        ref = model(x)
    out = model.fast_forward(x)
    macs = {k: v.mean().item() for k, v in sequence_macs(model, ref).items()}

    def dense() -> SeqOut:
        with torch.no_grad():
            return model(x)

    times = interleaved_times(dense, lambda: model.fast_forward(x), x.device, budget_s=budget_s)
    red = macs["dense"] / macs["effective"]
    return {
        "skip": achieved_skip(ref, model),
        "flop_reduction": red,
        "flop_reduction_exact": macs["dense"] / macs["exact"],
        **times,
        "realised_frac": times["speedup"] / red,
        "max_abs_diff": (out.outputs - ref.outputs).abs().max().item(),
        "mask_mismatch": int((out.mask != ref.mask).sum().item()),
        "note": type(model).fast_path_note(),
    }


def speedup_markdown(rows: Sequence[dict[str, Any]], command: str, device: str = "cpu") -> str:
    """A generated Markdown report of ``measure_speedups`` rows.

    Renders the rows only: no method code runs, so nothing is built here (a method's
    ``fast_path_note`` was taken into its rows when they were measured).

    Args:
        rows: from ``measure_speedups``.
        command: the command line that produced them, for the header.
        device: the device they were measured on.

    Returns:
        The report: a header naming the device, torch version, thread count, commit and command,
        the fast-path notes found in the rows (per method the last one, which saw all of its
        rows run), one table row per configuration.
    """
    dev = torch.device(device)
    name = device_name(dev)
    sha, dirty = git_state()
    commit = "unknown" if sha is None else sha[:12] + (" (dirty)" if dirty else "")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    last_note: dict[str, str] = {}
    for r in rows:
        if r.get("note"):
            last_note[r["method"]] = r["note"]
    notes = list(dict.fromkeys(last_note.values()))
    lines = [
        "<!-- Generated file: do not edit. Produced by harness.bench.speedup.speedup_markdown. -->",
        "# Realised speedups of the skipping methods' fast inference paths",
        "",
        f"Generated {stamp} by `{command}`.",
        f"Device: {name}; torch {torch.__version__}; threads: {torch.get_num_threads()}; "
        f"commit {commit}.",
        "",
        "Untrained models with decision parameters set to hit each target skip "
        "(each method's `at_skip`; the setting column says how); inputs x ~ N(0, I). "
        "FLOP reduction = dense / effective "
        "MACs per sequence (paper-effective; exact-realisable in brackets where it differs). "
        "Realised speedup = time of the dense masked `model.eval()(x)` / time of "
        "`model.fast_forward(x)`, both under no_grad, in alternating blocks of consecutive "
        "calls after one warm-up, median of per-round ratios (rounds in the last column). "
        "Fast paths are PyTorch code unless a note below says otherwise. Realised / FLOP = the "
        "fraction of the FLOP reduction turned into time. For depth-adaptive methods the skip is "
        "the depth-skip %. Max |diff| = largest difference between fast and dense outputs. "
        f"{UNIT_NOTE}.",
        "",
        *[f"- {n}" for n in notes],
        *([""] if notes else []),
        "| Method | D | B | Target skip % | Skip % | Setting | FLOP reduction | Dense ms "
        "| Fast ms | Realised speedup | Realised / FLOP | Max abs diff | Rounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        red = f"{r['flop_reduction']:.2f}x"
        if abs(r["flop_reduction_exact"] - r["flop_reduction"]) > 1e-3 * r["flop_reduction"]:
            red += f" ({r['flop_reduction_exact']:.2f}x)"
        diff = f"{r['max_abs_diff']:.1e}"
        if r["mask_mismatch"]:
            diff += f", {r['mask_mismatch']} mask entries differ"
        lines.append(
            f"| {r['method']} | {r['D']} | {r['B']} | {100 * r['target_skip']:.0f} "
            f"| {100 * r['skip']:.1f} | {r['setting']} | {red} | {r['dense_ms']:.2f} "
            f"| {r['fast_ms']:.2f} | {r['speedup']:.2f}x | {r['realised_frac']:.2f} "
            f"| {diff} | {r['rounds']} |"
        )
    lines.append("")
    lines.append(f"T = {rows[0]['T']}, V = {rows[0]['V']}." if rows else "No rows.")
    return "\n".join(lines) + "\n"
