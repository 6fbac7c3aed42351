"""Inference fast paths (``Method.fast_forward``) against the dense masked forward, and the
realised-speedup measurement (``harness.bench.speedup``).

Every method with a real fast path (one that implements the ``at_skip`` hook; the list comes from
the registry) is built by its hook at several target skips and must give, from ``fast_forward(x)``,
the outputs, mask, depth and extras of ``model.eval()(x)`` at batch 1 and batch > 1. The
comparisons run in float64 so that matmul rounding (the fast paths multiply fewer rows, in another
order) cannot flip a thresholded decision; masks must match exactly. These per-method properties
are ``harness.authoring.conformance.check_fast_path`` and ``check_at_skip`` (what ``harness check``
runs). Hand-made decision regimes (decisions varying across units, steps and sequences; none, mixed,
all skipped) are tested in each method's own test file with ``check_fast_equals_dense``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.authoring import conformance
from harness.bench import speedup
from harness.bench.speedup import (
    build_at_skip,
    fast_path_methods,
    has_fast_path,
    measure_speedups,
)
from harness.bench.speedup_report import speedup_markdown
from harness.components.method import Method
from harness.components.registry import METHODS
from harness.errors import ConfigError, HarnessError

FAST = fast_path_methods()
V, D, T = 3, 20, 20
HARNESS = Path(__file__).resolve().parent.parent / "harness"


def overrides_fast_forward(cls: type) -> bool:
    return cls.fast_forward is not Method.fast_forward


def test_fast_path_methods_come_from_the_registry():
    assert FAST == sorted(FAST) and len(FAST) >= 1
    assert FAST == [n for n, cls in METHODS.items() if has_fast_path(cls)]
    assert not has_fast_path(Method)

    class Hooked(Method):
        @classmethod
        def at_skip(cls, input_size, hidden_size, skip, seq_len):
            return cls(input_size, hidden_size), "hooked"

    assert has_fast_path(Hooked) and has_fast_path(type("Child", (Hooked,), {}))
    with pytest.raises(NotImplementedError):
        Method.at_skip(V, D, 0.5, T)
    assert Method.fast_path_note() is None


def test_every_overridden_fast_forward_is_measured_and_checked():
    """A method whose ``fast_forward`` really skips work must implement ``at_skip``, or neither
    the speedup report nor these tests would ever run its fast path."""
    overriding = [n for n, cls in METHODS.items() if overrides_fast_forward(cls)]
    assert overriding and overriding == FAST


@pytest.mark.parametrize("name", METHODS.names())
def test_fast_forward_equals_the_dense_forward(name):
    """With ``at_skip``: float64 at each target and batch 1 and 4, float32 at batch 1, after an
    optimizer step; without: the default, the dense eval forward. Always: mode kept, no graph."""
    conformance.check_fast_path(name)


@pytest.mark.parametrize("name", FAST)
def test_build_at_skip_hits_its_target_and_is_seeded(name):
    conformance.check_at_skip(name)


def test_a_fast_forward_without_at_skip_is_refused(monkeypatch):
    cls = METHODS.get(next(n for n in METHODS.names() if n not in FAST))
    monkeypatch.setattr(cls, "fast_forward", lambda self, x: Method.fast_forward(self, x))
    with pytest.raises(conformance.ConformanceError, match="at_skip is not"):
        conformance.check_fast_path(cls.name)


def test_measure_speedups_rows_and_markdown(monkeypatch):
    """Each row keeps its method's fast-path note as it stood after that row's fast path ran;
    the report prints the notes of the rows (per method the last) and calls no method hook."""
    first, last = FAST[0], FAST[-1]
    ran = []
    for name, note in ((first, "NOTE-ONE"), (last, "NOTE-TWO")):
        cls = METHODS.get(name)
        forward = cls.fast_forward
        monkeypatch.setattr(cls, "fast_forward", lambda m, x, f=forward: ran.append(1) or f(m, x))
        note_now = classmethod(lambda c, n=note: f"{n} after {len(ran)} fast runs")
        monkeypatch.setattr(cls, "fast_path_note", note_now)
    rows = measure_speedups(
        methods=None, skips=(0.5,), hidden=(20,), batches=(1, 2), seq_len=6, budget_s=0.0
    )
    assert [(r["method"], r["B"]) for r in rows] == [(n, b) for n in FAST for b in (1, 2)]
    for r in rows:
        assert r["mask_mismatch"] == 0 and r["max_abs_diff"] < 1e-4
        assert r["speedup_dense"] > 0 and r["flop_reduction"] >= 1 and r["rounds"] >= 3
        assert (r["D"], r["T"], r["V"], r["target_skip"]) == (20, 6, 8, 0.5)
    mine = [r for r in rows if r["method"] == first]
    assert all(r["note"].startswith("NOTE-ONE after ") for r in mine)
    runs = [int(r["note"].split()[2]) for r in mine]
    assert 0 < runs[0] < runs[1]  # asked after each row's fast path had run
    for cls in (METHODS.get(first), METHODS.get(last)):
        monkeypatch.setattr(cls, "fast_path_note", classmethod(lambda c: pytest.fail("asked")))
    md = speedup_markdown(mine, "harness bench --speedup")
    assert "Generated file" in md and "threads" in md and "`harness bench --speedup`" in md
    assert md.count(f"| {first} | 20 |") == 4  # two rows, the batch-1 and the batch > 1 summaries
    assert f"- {mine[-1]['note']}" in md and mine[0]["note"] not in md  # the last note only
    assert "NOTE-TWO" not in md  # only the notes of the rows given
    assert "\n- " not in speedup_markdown([{**r, "note": None} for r in mine], "c")
    assert "No rows." in speedup_markdown([], "c")


def test_measure_speedups_names_methods_and_globs():
    assert speedup.resolve_methods(None) == FAST
    assert speedup.resolve_methods("all") == FAST  # a glob keeps the methods with a fast path
    assert speedup.resolve_methods(f"{FAST[-1]},{FAST[0]}") == [FAST[-1], FAST[0]]
    without = next(n for n in METHODS.names() if n not in FAST)
    with pytest.raises(ConfigError, match="methods with one: " + ", ".join(FAST)):
        measure_speedups(methods=[without], hidden=(8,), seq_len=2, budget_s=0.0)
    with pytest.raises(ConfigError):
        build_at_skip(without, V, D, 0.5, T)
    with pytest.raises(HarnessError, match="Unknown method"):
        measure_speedups(methods=["no-such-method"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"skips": (1.0,)},
        {"skips": ()},
        {"hidden": (0,)},
        {"batches": ()},
        {"seq_len": 0},
        {"budget_s": -1.0},
    ],
)
def test_measure_speedups_rejects_bad_sizes(kwargs):
    with pytest.raises(ConfigError):
        measure_speedups(methods=FAST[:1], **kwargs)


def test_measure_speedups_rejects_bad_devices():
    with pytest.raises(HarnessError, match="Unknown device"):
        measure_speedups(methods=FAST[:1], device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(HarnessError, match="CUDA"):
            measure_speedups(methods=FAST[:1], device="cuda")


def test_harness_does_not_import_method_code():
    """The machinery learns about a fast path through the hooks, never by importing a method's
    module (e.g. to ask whether a compiled kernel was built)."""
    hits = [
        f"{p}: {line.strip()}"
        for p in sorted(HARNESS.rglob("*.py"))
        for line in p.read_text(encoding="utf-8").splitlines()
        if line.strip().startswith(("from baselines", "import baselines"))
    ]
    assert hits == []
