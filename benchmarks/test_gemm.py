"""The kernels' own float32 GEMM (``gemm512``, baselines/ops/csrc/gemm.h) against the libraries
that could replace it, side by side at the shapes the kernels multiply (issue 64, point 3;
advisory, never a pass/fail gate on speed).

Every product is C[m, n] = A[m, k] B[k, n], row-major, float32, on one thread, into a
preallocated C, after one warm-up call. Two groups, each compared only within itself:

- timed in C++ (no Python call inside the timed loop): gemm512, MKL's ``sgemm_`` called directly
  and ATen's ``at::mm_out`` (``baselines.ops.library.matmul_seconds``), and libxsmm's JIT kernel
  for the shape (``benchmarks/gemm_libxsmm.cpp``, compiled here once against Debian's
  ``libxsmm-dev``: ``g++ -O3 -march=native ... -lxsmm -lxsmmnoblas -lpthread -lrt -ldl -lm``;
  "not installed" where its header is not there, it is optional). ``own/best``: gemm512's
  GMAC/s over the fastest of these libraries' (> 1.10: gemm512 beats it by more than 10 %).
- timed from Python (one call a product, the same loop for each): ``torch.mm(a, b, out=c)``
  (ATen, MKL underneath), oneDNN's matmul as torch ships it (``torch.ops.mkldnn._linear_pointwise``
  on the plain weight B^T, and on B^T prepacked by ``torch.ops.mkldnn._reorder_linear_weight``,
  which is what inductor calls for a linear layer; both allocate their output: there is no out=)
  and MKL's packed GEMM (``torch.ops.mkl._mkl_linear`` on B^T packed by
  ``_mkl_reorder_linear_weight``, what inductor calls for a float32 linear on x86).
  ``best/mm``: the fastest of the three over ``torch.mm``. A Python call costs a few µs, so at
  the smallest shapes these columns time the call more than the product.

Which oneDNN primitive each ran (and that ``torch.mm`` ran none) is read from ``ONEDNN_VERBOSE``
in one subprocess and printed under the table.

Shapes: the per-step product of the GRU kernels, h[B, D] @ W^T[D, 3D], for B in 1, 8, 32, 64,
256 and D in 64 ... 1024; and at each task's paper-preset train step in reports/TIMING.md
(batch B, steps T, hidden D) with G = 3 (GRU) and 4 (LSTM): the forward product
h[B, D] @ W^T[D, G D], the backward one dh = dA[B, G D] @ W[G D, D] and the weight gradient
dW = dA^T[G D, B T] @ H[B T, D] once a sequence (here with A contiguous, where the kernels pass
gemm512 a transposed view of dA).

Each time is the median of 5 measurements (interleaved: every candidate once a round, so that
load from other processes hits them alike) of as many products as take about 20 ms. The
Python-timed candidates' cost of a call is measured at m = n = k = 1 and printed too.

Environment: ``HARNESS_GEMM_QUICK=1`` a handful of shapes, 3 shorter measurements (a smoke test);
``HARNESS_GEMM_OUT=FILE`` the rows (and a first line of what ran) as JSON lines.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import torch

from baselines.ops import library

QUICK = bool(os.environ.get("HARNESS_GEMM_QUICK"))
OUT = os.environ.get("HARNESS_GEMM_OUT")
ROUNDS = 3 if QUICK else 5
TARGET_S = 0.005 if QUICK else 0.02  # one measurement
SOURCE = Path(__file__).resolve().parent / "gemm_libxsmm.cpp"
XSMM_LIBS = ("-lxsmm", "-lxsmmnoblas", "-lpthread", "-lrt", "-ldl", "-lm")

# task: train-step batch, steps, hidden sizes (reports/TIMING.md, paper presets)
PRESETS = {
    "synthetic": (20, 20, (20,)),
    "seizures": (32, 17, (50,)),
    "har": (200, 128, (32, 48)),
    "ptb": (20, 35, (256,)),
    "adding": (256, 500, (128,)),
}
CPP = {"gemm512": 0, "MKL sgemm": 1, "ATen mm_out": 2}  # matmul_seconds modes
CPP_LIBS = ("MKL sgemm", "ATen mm_out", "libxsmm")
PY = ("torch.mm(out=)", "oneDNN", "oneDNN packed", "MKL packed")


def shapes() -> list[dict]:
    """The products to time: label, group, m, n, k."""
    rows = []
    for b in (1, 8, 32, 64, 256):
        for d in (64, 128, 256, 512, 1024):
            rows.append(
                {"label": f"GRU fwd B{b} D{d}", "group": "grid", "m": b, "n": 3 * d, "k": d}
            )
    for task, (b, t, hidden) in PRESETS.items():
        for d in hidden:
            for g, cell in ((3, "GRU"), (4, "LSTM")):
                at = f"{task} {cell} B{b} D{d}"
                rows += [
                    {"label": f"{at} fwd", "group": task, "m": b, "n": g * d, "k": d},
                    {"label": f"{at} dh", "group": task, "m": b, "n": d, "k": g * d},
                    {"label": f"{at} dW T{t}", "group": task, "m": g * d, "n": d, "k": b * t},
                ]
    if QUICK:
        keep = (
            "GRU fwd B1 D64",
            "GRU fwd B32 D256",
            "GRU fwd B256 D1024",
            "ptb GRU B20 D256 fwd",
            "seizures LSTM B32 D50 dh",
            "har GRU B200 D32 dW T128",
        )
        rows = [r for r in rows if r["label"] in keep]
    return rows


def median_seconds(timers: dict, rounds: int = ROUNDS) -> dict[str, float | None]:
    """Seconds per product of each timer (``reps -> seconds`` or None): reps calibrated so that
    a measurement takes about ``TARGET_S``, then the median of ``rounds`` interleaved ones."""
    reps: dict[str, int] = {}
    for name, timer in timers.items():
        r = 1
        while True:
            s = timer(r)
            if s is None:
                break
            if s >= 0.8 * TARGET_S or r >= 10**7:
                reps[name] = max(1, round(r * TARGET_S / s))
                break
            r = min(r * 1000, math.ceil(r * 1.2 * TARGET_S / max(s, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in reps}
    for _ in range(rounds):
        for name in reps:
            s = timers[name](reps[name])
            if s is not None:
                samples[name].append(s / reps[name])
    return {
        name: statistics.median(samples[name]) if samples.get(name) else None for name in timers
    }


def python_timer(call):
    """``reps -> seconds`` of a Python loop of ``reps`` calls (after one warm-up call)."""

    def timer(reps: int) -> float:
        call()
        start = time.perf_counter()
        for _ in range(reps):
            call()
        return time.perf_counter() - start

    return timer


def python_calls(m: int, n: int, k: int) -> dict:
    """The Python-timed candidates at one shape (None where one fails or computes wrong)."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    bt = b.t().contiguous()  # the weight as nn.Linear (and the recurrent cells) hold it
    c = torch.empty(m, n)
    reference = a @ b
    calls = {"torch.mm(out=)": partial(torch.mm, a, b, out=c)}
    packs = {
        "oneDNN": lambda: bt,
        "oneDNN packed": lambda: torch.ops.mkldnn._reorder_linear_weight(bt, m),
        "MKL packed": lambda: torch.ops.mkl._mkl_reorder_linear_weight(bt, m),
    }
    for name, pack in packs.items():
        try:
            w = pack()
            if name == "MKL packed":
                calls[name] = partial(torch.ops.mkl._mkl_linear, a, w, bt, None, m)
            else:
                calls[name] = partial(
                    torch.ops.mkldnn._linear_pointwise, a, w, None, "none", [], ""
                )
        except (RuntimeError, AttributeError):
            calls[name] = None
    for name, call in calls.items():
        if call is not None:
            out = call()
            if not torch.allclose(out, reference, rtol=1e-4, atol=1e-3 * math.sqrt(k)):
                calls[name] = None
    return calls


VERBOSE_SCRIPT = """
import ctypes, json, sys
import torch
sys.path.insert(0, {here!r})
from test_gemm import python_calls
torch.set_num_threads(1)
libc = ctypes.CDLL(None)
for i, (m, n, k) in enumerate(json.loads(sys.argv[1])):
    calls = python_calls(m, n, k)
    for name, call in calls.items():
        if call is not None:
            libc.fflush(None)
            print("@@", i, name, flush=True)
            call()
            libc.fflush(None)
            print("@@ end", flush=True)
"""


def onednn_primitives(rows: list[dict]) -> list[dict[str, list[str]]]:
    """For each shape, the oneDNN primitives (kind:implementation) each Python-timed candidate
    executed once its operands were set up, from ONEDNN_VERBOSE=1 in a subprocess."""
    found: list[dict[str, list[str]]] = [{name: [] for name in PY} for _ in rows]
    script = VERBOSE_SCRIPT.format(here=str(Path(__file__).resolve().parent))
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "OMP_NUM_THREADS": "1"}
    dims = json.dumps([(r["m"], r["n"], r["k"]) for r in rows])
    done = subprocess.run(
        [sys.executable, "-c", script, dims], env=env, capture_output=True, text=True, check=False
    )
    at = None
    for line in done.stdout.splitlines():
        if line == "@@ end":
            at = None
        elif line.startswith("@@ "):
            _, i, name = line.split(" ", 2)
            at = found[int(i)][name]
        elif line.startswith("onednn_verbose") and at is not None:
            parts = line.split(",")
            if "exec" in parts:
                j = parts.index("exec")
                primitive = f"{parts[j + 2]}:{parts[j + 3]}"
                if primitive not in at:
                    at.append(primitive)
    return found


@pytest.fixture(scope="module")
def libxsmm(tmp_path_factory):
    """(path of the compiled gemm_libxsmm program or None, what the table says about it)."""
    compiler = shutil.which("g++") or shutil.which("c++")
    headers = [Path(p) / "libxsmm.h" for p in ("/usr/include", "/usr/local/include")]
    if not any(h.exists() for h in headers):
        return None, "not installed"
    if compiler is None:
        return None, "no C++ compiler"
    exe = tmp_path_factory.mktemp("gemm") / "gemm_libxsmm"
    cmd = [compiler, "-O3", "-march=native", str(SOURCE), "-o", str(exe), *XSMM_LIBS]
    built = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        return None, "does not build: " + (built.stderr.strip().splitlines() or ["?"])[-1][:120]
    return exe, " ".join(["g++", *cmd[1:3], "gemm_libxsmm.cpp", *XSMM_LIBS])


def xsmm_timer(exe: Path, m: int, n: int, k: int, seen: dict):
    """``reps -> seconds`` of the libxsmm program (what it ran in ``seen``), or None."""

    def timer(reps: int) -> float | None:
        done = subprocess.run(
            [str(exe), str(m), str(n), str(k), str(reps)], capture_output=True, text=True
        )
        words = done.stdout.split()
        if done.returncode != 0 or not words or words[0] == "unavailable":
            seen["path"] = done.stdout.strip() or done.stderr.strip()[-200:] or "failed"
            return None
        seen.update(path=words[1], arch=words[2])
        return float(words[0])

    return timer


def measure(shape: dict, exe: Path | None, xsmm_note: str) -> dict:
    """One row: seconds per product and GMAC/s of every candidate at ``shape``."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    seen: dict = {}
    cpp = {name: partial(library.matmul_seconds, mode, m, n, k) for name, mode in CPP.items()}
    if exe is not None:
        cpp["libxsmm"] = xsmm_timer(exe, m, n, k, seen)
    seconds = median_seconds(cpp)
    calls = python_calls(m, n, k)
    seconds.update(median_seconds({name: python_timer(f) for name, f in calls.items() if f}))
    macs = m * n * k
    gmacs = {name: None if s is None else macs / s / 1e9 for name, s in seconds.items()}
    libs = {name: gmacs[name] for name in CPP_LIBS if gmacs.get(name)}
    best = max(libs, key=libs.__getitem__) if libs else None
    py_libs = {name: gmacs[name] for name in PY[1:] if gmacs.get(name)}
    py_best = max(py_libs, key=py_libs.__getitem__) if py_libs else None
    own, mm = gmacs.get("gemm512"), gmacs.get(PY[0])
    return {
        **shape,
        "macs": macs,
        "us_per_product": {name: None if s is None else s * 1e6 for name, s in seconds.items()},
        "gmacs": gmacs,
        "best_library": best,
        "own_over_best": own / libs[best] if best and own else None,
        "python_best": py_best,
        "python_best_over_mm": py_libs[py_best] / mm if py_best and mm else None,
        "libxsmm_path": seen.get("path", xsmm_note if exe is None else None),
        "libxsmm_arch": seen.get("arch"),
    }


def call_costs() -> dict[str, float | None]:
    """Microseconds a call of each Python-timed candidate costs at m = n = k = 1 (about all of
    it the call: what those columns carry on top of the product)."""
    seconds = median_seconds({n: python_timer(f) for n, f in python_calls(1, 1, 1).items() if f})
    return {name: None if s is None else s * 1e6 for name, s in seconds.items()}


def fmt(x: float | None, width: int, digits: int = 1) -> str:
    return f"{'–' if x is None else f'{x:.{digits}f}':>{width}}"


def table(results: list[dict], xsmm_note: str, costs: dict, elapsed: float) -> list[str]:
    """The printed table, the geometric means of own/best per group, and what ran."""
    head = (
        f"{'shape (C[m,n] = A[m,k] B[k,n])':<34}{'m':>5}{'n':>6}{'k':>7} |"
        f"{'gemm512':>8}{'MKL':>7}{'ATen':>7}{'xsmm':>7}{'own/best':>9} {'best':<12}|"
        f"{'mm(out)':>8}{'oneDNN':>7}{'packed':>7}{'MKLpk':>7}{'best/mm':>8}"
    )
    lines = [
        "",
        f"GEMM GMAC/s, float32, 1 thread, median of {ROUNDS} x ~{TARGET_S * 1e3:.0f} ms. Left of "
        "| timed in C++ (gemm512, MKL sgemm_, ATen mm_out, libxsmm); own/best = gemm512 / the "
        "fastest of those. Right of | timed from Python, one call a product (torch.mm(out=), "
        "oneDNN linear on the plain / prepacked weight, MKL packed); best/mm = the fastest of "
        "the last three / torch.mm. Compare each side within itself only.",
        head,
        "-" * len(head),
    ]
    for r in results:
        g = r["gmacs"]
        lines.append(
            f"{r['label']:<34}{r['m']:>5}{r['n']:>6}{r['k']:>7} |"
            + "".join(
                fmt(g.get(name), w) for name, w in zip((*CPP, "libxsmm"), (8, 7, 7, 7), strict=True)
            )
            + f"{fmt(r['own_over_best'], 9, 2)} {r['best_library'] or '–':<12}|"
            + "".join(fmt(g.get(name), w) for name, w in zip(PY, (8, 7, 7, 7), strict=True))
            + fmt(r["python_best_over_mm"], 8, 2)
        )
    for group in dict.fromkeys(r["group"] for r in results):
        ratios = [r["own_over_best"] for r in results if r["group"] == group and r["own_over_best"]]
        if ratios:
            geo = math.exp(statistics.fmean(math.log(x) for x in ratios))
            lines.append(
                f"own/best, {group}: geometric mean {geo:.2f}, min {min(ratios):.2f}, "
                f"max {max(ratios):.2f} ({len(ratios)} shapes)"
            )
    ran = sorted(
        {f"{r['libxsmm_path']}" + (f" ({a})" if (a := r["libxsmm_arch"]) else "") for r in results}
    )
    lines.append(f"libxsmm: {xsmm_note}; ran: {', '.join(ran)}")
    for name in PY:
        used = sorted({p for r in results for p in r.get("onednn_primitives", {}).get(name, [])})
        lines.append(f"oneDNN primitives run by {name}: {', '.join(used) or 'none'}")
    cost = ", ".join(f"{name} {fmt(us, 0, 1).strip()}" for name, us in costs.items())
    lines.append(f"Python-timed, µs a call at m = n = k = 1: {cost}")
    lines.append(f"measured in {elapsed:.0f} s ({len(results)} shapes)")
    return lines


@pytest.mark.benchmark(group="gemm-libraries-cpu")
def test_gemm_libraries(benchmark, libxsmm):
    if not library.load_library("gemm benchmark"):
        pytest.skip(f"the kernel library cannot run here: {library.library_status()}")
    exe, xsmm_note = libxsmm
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    results: list[dict] = []
    start = time.perf_counter()
    try:
        benchmark.pedantic(
            lambda: results.extend(measure(s, exe, xsmm_note) for s in shapes()),
            rounds=1,
            iterations=1,
        )
        costs = call_costs()
    finally:
        torch.set_num_threads(threads)
    elapsed = time.perf_counter() - start
    for row, used in zip(results, onednn_primitives(results), strict=True):
        row["onednn_primitives"] = used
    print("\n".join(table(results, xsmm_note, costs, elapsed)))

    meta = {
        "kind": "meta",
        "cpu": (library.cpu_identity().splitlines() + [""])[1],
        "torch": torch.__version__,
        "threads": 1,
        "rounds": ROUNDS,
        "target_s": TARGET_S,
        "quick": QUICK,
        "libxsmm": xsmm_note,
        "cpp_timed": [*CPP, "libxsmm"],
        "python_timed": list(PY),
        "python_call_us": costs,
    }
    benchmark.extra_info.update(meta=meta, rows=results)
    if OUT:
        with open(OUT, "w") as f:
            for row in [meta, *({"kind": "row", **r} for r in results)]:
                f.write(json.dumps(row) + "\n")
