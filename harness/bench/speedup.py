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

How each target is reached (untrained models; the setting is reported per row):

- sa-rnn: ``W_i ~ N(0, 1/V)``, ``w_u = 0``, ``b_u = Phi^-1(1 - skip)``: with ``x ~ N(0, I)`` each
  decision is an independent coin per unit, step and sequence (the worst case for batch > 1,
  whose fast path computes the union of the sequences' updated units);
- skip-rnn: ``w_p = 0`` and ``b_p`` such that the state updates every ``m = 1 / (1 - skip)``
  steps, the same steps in every sequence;
- vc-rnn: scheduler weights 0, ``b = logit(1 - skip)``: ``m_t = 1 - skip``;
- clockwork-rnn: the (num_modules, base) whose schedule over the sequence is nearest the target;
- ei-rehn: ``W_a`` weights 0 and its bias such that every unit halts at depth
  ``R = round((1 - skip) R_max)``; its "skip" is the depth-skip % (its unit Skip % is 0).
"""

from __future__ import annotations

import argparse
import math
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.env import device_name, git_state
from harness.flops import UNIT_NOTE, sequence_macs
from harness.method import Method, SeqOut
from harness.registry import METHODS
from harness.timing import synchronize

METHOD_NAMES = ("sa-rnn", "skip-rnn", "clockwork-rnn", "vc-rnn", "ei-rehn")


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def clockwork_layout(D: int, skip: float, T: int) -> tuple[int, int, float]:
    """``(num_modules, base, skip)`` of the Clockwork schedule over ``T`` steps (clock from 0)
    nearest to ``skip``, among module counts dividing D and bases 2..8 (fewest modules on ties)."""
    best = None
    for g in (d for d in range(1, min(D, 256) + 1) if D % d == 0):
        for base in range(2, 9):
            if base ** (g - 1) >= 2**62:
                break
            active = sum(sum(1 for j in range(g) if t % base**j == 0) for t in range(T))
            s = 1 - active / (T * g)
            key = (abs(s - skip), g, base)
            if best is None or key < best[0]:
                best = (key, g, base, s)
    assert best is not None
    return best[1], best[2], best[3]


@torch.no_grad()
def build_at_skip(
    method: str, input_size: int, hidden_size: int, skip: float, seq_len: int, seed: int = 0
) -> tuple[Method, str]:
    """An untrained ``method`` whose decision parameters aim at ``skip`` (see the module
    docstring); returns the model (eval mode) and a one-line description of the setting."""
    torch.manual_seed(seed)
    V, D = input_size, hidden_size
    cls = METHODS.get(method)
    if method == "clockwork-rnn":
        g, base, _ = clockwork_layout(D, skip, seq_len)
        cfg = cls.config_cls(num_modules=g, base=base)
        return cls(V, D, cfg).eval(), f"num_modules={g}, base={base}"
    model = cls(V, D)
    q = min(max(1.0 - skip, 1e-4), 1 - 1e-4)  # target update fraction
    if method == "sa-rnn":
        model.w_i.normal_(0.0, 1.0 / math.sqrt(V))
        model.w_u.zero_()
        b = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(q)).item()
        model.b_u.fill_(b)
        note = f"b_u={b:.3g}, independent decisions"
    elif method == "skip-rnn":
        m = max(1, round(1 / q))  # update every m steps
        du = 0.5 / (m - 0.5) if m > 1 else 1 - 1e-4  # m du > 1/2 > (m - 1) du
        model.w_p.zero_()
        model.b_p.fill_(_logit(min(du, 1 - 1e-4)))
        note = f"update every {m} steps"
    elif method == "vc-rnn":
        model.sched_h.zero_()
        model.sched_x.zero_()
        model.sched_b.fill_(_logit(q))
        note = f"m_t={q:.3g}"
    elif method == "ei-rehn":
        r_max = model.cfg.r_max
        R = min(r_max, max(1, round(q * r_max)))
        gate = model.elastic
        alpha = F.softplus(gate.alpha_hat).mean().item()
        beta = torch.sigmoid(gate.beta_hat).mean().item()
        rate = math.log(beta + math.exp(alpha)) / (R + 0.5) - alpha  # L = R + 0.5 (2.14(b))
        gate.rate.weight.zero_()
        gate.rate.bias.fill_(_logit(min(max(rate, 1e-6), 1 - 1e-6)))
        note = f"depth {R} of {r_max}"
    else:
        raise ValueError(f"no skip setting for method {method!r}; known: {METHOD_NAMES}")
    return model.eval(), note


def achieved_skip(out: SeqOut, method: Method) -> float:
    """Skip % / 100 of a batch; for depth methods the depth-skip fraction (METHODS.md 1.1)."""
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
    """Median dense and fast times (ms) and the median of per-round ratios dense / fast, with
    rounds added until ``budget_s`` is spent (within min/max rounds).

    A round times a block of ``block`` consecutive calls of each path, after one untimed call of
    that path: alternating rounds makes load from other processes hit both paths alike, while
    the block keeps each path in its own steady state. (Alternating single calls would time the
    fast path right after the dense one has streamed every weight through the caches, which is
    not how repeated inference runs.)"""

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
    methods: Sequence[str] = METHOD_NAMES,
    skips: Sequence[float] = (0.5, 0.75, 0.9),
    hidden: Sequence[int] = (256, 1024),
    batches: Sequence[int] = (1, 32),
    seq_len: int = 50,
    device: str = "cpu",
    input_size: int = 8,
    budget_s: float = 3.0,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Realised speedup of ``fast_forward`` over the dense masked forward, per method, hidden
    size D, batch size B and target skip; inputs ``x ~ N(0, I)`` of shape ``[B, seq_len, V]``.

    Returns one row per configuration: method, D, B, T, V, target_skip, skip (achieved; EI-REHN:
    depth-skip), setting, flop_reduction (dense / effective MACs), flop_reduction_exact (dense /
    exact-realisable), dense_ms, fast_ms, speedup, realised_frac (speedup / flop_reduction),
    max_abs_diff and mask_mismatch (fast vs dense), rounds.
    """
    dev = torch.device(device)
    rows = []
    for method in methods:
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


def measure_one(model: Method, x: Tensor, budget_s: float = 3.0) -> dict[str, Any]:
    """Achieved skip, FLOP reductions, times and fast-vs-dense agreement of one model on ``x``
    (the per-configuration part of ``measure_speedups``)."""
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
    }


def speedup_markdown(rows: Sequence[dict[str, Any]], command: str, device: str = "cpu") -> str:
    """A generated Markdown report of ``measure_speedups`` rows, with a header naming the device,
    torch version, thread count, commit and the command that produced it."""
    dev = torch.device(device)
    name = device_name(dev)
    sha, dirty = git_state()
    commit = "unknown" if sha is None else sha[:12] + (" (dirty)" if dirty else "")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    from baselines._kernels import sarnn_kernel

    kernel = "used" if sarnn_kernel() is not None else "unavailable (PyTorch fallback)"
    lines = [
        "<!-- Generated file: do not edit. Produced by harness.bench.speedup.speedup_markdown. -->",
        "# Realised speedups of the skipping methods' fast inference paths",
        "",
        f"Generated {stamp} by `{command}`.",
        f"Device: {name}; torch {torch.__version__}; threads: {torch.get_num_threads()}; "
        f"commit {commit}.",
        "",
        "Untrained models with decision parameters set to hit each target skip "
        "(see `harness/speedup.py`); inputs x ~ N(0, I). FLOP reduction = dense / effective "
        "MACs per sequence (paper-effective; exact-realisable in brackets where it differs). "
        "Realised speedup = time of the dense masked `model.eval()(x)` / time of "
        "`model.fast_forward(x)`, both under no_grad, in alternating blocks of consecutive "
        "calls after one warm-up, median of per-round ratios (rounds in the last column). "
        f"SA-RNN at batch 1 runs the fused C++ kernel of `harness/kernels.py`: {kernel}; "
        "other fast paths are PyTorch. Realised / FLOP = the fraction of the "
        "FLOP reduction turned into time. EI-REHN's skip is its depth-skip %. Max |diff| = "
        f"largest difference between fast and dense outputs. {UNIT_NOTE}.",
        "",
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


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m harness.bench.speedup [--out reports/SPEEDUP.md] [--threads 1] ...``: measure every
    default configuration and write the generated report, its own command line in the header."""
    ap = argparse.ArgumentParser(prog="python -m harness.bench.speedup", description=main.__doc__)
    ap.add_argument("--out", default="reports/SPEEDUP.md")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--methods", nargs="+", default=list(METHOD_NAMES))
    ap.add_argument("--skips", nargs="+", type=float, default=[0.5, 0.75, 0.9])
    ap.add_argument("--hidden", nargs="+", type=int, default=[256, 1024])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    ap.add_argument("--seq-len", type=int, default=50)
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of timing per row")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    torch.set_num_threads(a.threads)
    rows = measure_speedups(
        a.methods, a.skips, a.hidden, a.batches, a.seq_len, a.device, budget_s=a.budget
    )
    command = shlex.join(["python", "-m", "harness.bench.speedup", *argv])
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(speedup_markdown(rows, command, a.device))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
