"""The physical bound of the speedup report (``harness.bench.roofline``): the bytes and MACs of a
step, the cache level a sequence reads from and the bound's arithmetic, on a constructed
measurement with hand-computed numbers; the cache sizes read from sysfs. No timing assertion."""

from __future__ import annotations

import pytest
import torch

from harness.bench import roofline
from harness.bench.roofline import (
    FIXED_CACHES,
    cache_levels,
    describe,
    level_for,
    parse_size,
    peak_for,
    physical_bound,
    read_seconds,
    step_traffic,
    working_set,
)
from harness.bench.speedup import union_macs, union_step_macs
from harness.components.registry import METHODS


def machine() -> dict:
    """A measurement with round numbers: L1 500 B at 1e12 B/s, L2 100 kB at 1e11, memory 1e10;
    1e10 MAC/s at batch 1, 4e10 at batch 4; a floor of 1 us a step."""
    return {
        "ops": "kernel",
        "caches": "sysfs",
        "levels": [
            {"name": "L1", "size": 500, "triad_bytes": 250, "bytes_per_s": 1e12},
            {"name": "L2", "size": 100_000, "triad_bytes": 50_000, "bytes_per_s": 1e11},
            {"name": "memory", "size": None, "triad_bytes": 400_000, "bytes_per_s": 1e10},
        ],
        "peak_macs_per_s": {"1": 1e10, "4": 4e10},
        "peak_n": {"1": 256, "4": 512},
        "floor_steps": 3,
        "floor_call_s": 3e-6,
        "floor_step_s": 1e-6,
        "threads": 1,
        "seconds": 0.5,
    }


V, D = 2, 4
GRU = 3 * D * (D + V)  # 72 weight elements a dense GRU step reads


def test_a_dense_gru_step_reads_its_weights_once_and_the_batch_uses_each_b_times():
    nbytes, macs = step_traffic([GRU] * 3, 1, V, D)
    assert nbytes == [4 * (72 + 2 + 2 * 4)] * 3 == [328] * 3  # weights, x_t, h_{t-1}, h_t
    assert macs == [72] * 3
    nbytes, macs = step_traffic([GRU, 0, 36], 4, V, D)
    assert nbytes == [4 * (72 + 40), 4 * 40, 4 * (36 + 40)] and macs == [288, 0, 144]
    assert step_traffic([GRU], 1, V, D, itemsize=8)[0] == [656]


def test_the_union_of_a_dense_gru_reads_3d_d_plus_v_weights_each_step():
    m = METHODS.get("gru")(V, D).eval()
    with torch.no_grad():
        out = m(torch.randn(2, 5, V))
    per_step = union_step_macs(m, out)
    assert per_step.tolist() == [GRU] * 5
    assert union_macs(m, out) == 5 * GRU


def test_the_working_set_counts_a_weight_once_and_every_activation():
    # weights: the most one step reads, at most the whole model's; B (T (V + D) + D) activations
    assert working_set([GRU] * 3, GRU, 1, V, D) == 4 * (72 + 3 * 6 + 4) == 376
    assert working_set([10, 0, 20], GRU, 2, V, D) == 4 * (20 + 2 * 22)


def test_a_model_that_runs_a_small_part_of_itself_at_every_step_reads_it_from_its_cache():
    """A depth-adaptive model at depth 1 of 10 reads its first layer at every step: the rows it
    touches are those of one step, not of the whole model nor of T steps, so its bound's level
    is the one they fit in (the bound must stay below what any implementation can do)."""
    layer, model, T = 20_000, 200_000, 50  # 80 kB a layer (L2), 800 kB the model (memory)
    b = physical_bound([layer] * T, model, 1, V, D, machine())
    assert b["bound_level"] == "L2" and b["bound_working_set"] == 4 * (layer + T * 6 + 4)
    m = machine()
    assert level_for(376, m)["name"] == "L1" and level_for(501, m)["name"] == "L2"
    assert level_for(100_001, m)["name"] == "memory"


def test_the_bound_of_a_dense_gru_at_batch_1_is_its_macs_at_the_peak_plus_the_floor():
    b = physical_bound([GRU] * 3, GRU, 1, V, D, machine())
    # working set 376 B: L1; per step max(328 B / 1e12, 72 MACs / 1e10) = 7.2 ns; floor 3 us
    assert b["bound_level"] == "L1" and b["bound_working_set"] == 376
    assert b["bound_ms"] == pytest.approx(1e3 * (3 * 7.2e-9 + 3e-6))
    assert (b["bound_bytes"], b["bound_macs"], b["bound_mac_steps"]) == (984, 216, 3)
    assert set(b) == set(roofline.BOUND_KEYS)


def test_the_bound_takes_the_larger_of_bytes_and_macs_step_by_step():
    b = physical_bound([GRU, 0, 36], GRU, 4, V, D, machine())
    # working set 4 (72 + 4 * 22) = 640 B: L2; a step's bytes (at most 500) fit L1, read at its
    # 1e12 B/s; peak at B 4: 4e10 MAC/s. Steps: max(448/1e12, 288/4e10) = 7.2 ns,
    # max(160/1e12, 0) = 0.16 ns, max(304/1e12, 144/4e10) = 3.6 ns
    assert b["bound_level"] == "L2"
    assert b["bound_ms"] == pytest.approx(1e3 * (7.2e-9 + 0.16e-9 + 3.6e-9 + 3e-6))
    assert (b["bound_bytes"], b["bound_macs"], b["bound_mac_steps"]) == (912, 432, 2)


def test_at_batch_above_1_the_macs_are_each_sequences_own_and_the_bytes_the_unions():
    """A batch whose sequences update different units reads the union of their rows once a step,
    but need compute only each one's own: the bound counts those MACs (``own``)."""
    union = physical_bound([GRU, 36], GRU, 4, V, D, machine())
    own = physical_bound([GRU, 36], GRU, 4, V, D, machine(), own=[72, 36])
    assert union["bound_macs"] == 4 * (GRU + 36) and own["bound_macs"] == 72 + 36
    assert own["bound_bytes"] == union["bound_bytes"] and own["bound_ms"] < union["bound_ms"]
    # working set 4 (72 + 4 x 16) = 544 B: L2, a step's bytes from L1; the first step
    # max(4 (72 + 40) B / 1e12, 72 / 4e10) = 1.8 ns (the union's 288 MACs: 7.2 ns), the second
    # max(0.304, 0.9) ns
    assert own["bound_level"] == "L2"
    assert own["bound_ms"] == pytest.approx(1e3 * (1.8e-9 + 0.9e-9 + 2 * 1e-6))


def test_a_working_set_beyond_the_caches_reads_what_passes_the_last_at_the_memory_bandwidth():
    w = [30_000] * 3
    b = physical_bound(w, 1e6, 1, V, D, machine())
    # 4 (30 000 + 22) B: memory (1e10 B/s); of a step's 120 040 B the 100 000 L2 holds at 1e11,
    # the rest at 1e10: 1 + 2.004 us, above its 3e4 MACs / 1e10 = 3 us
    assert b["bound_level"] == "memory" and b["bound_mac_steps"] == 0
    assert b["bound_ms"] == pytest.approx(1e3 * (3 * 3.004e-6 + 3e-6))
    assert read_seconds(120_040, machine()["levels"][-1], machine()) == pytest.approx(3.004e-6)
    assert read_seconds(400, machine()["levels"][0], machine()) == pytest.approx(0.4e-9)
    # a model of 20 000 weights read again at every step stays in L2 (80 088 B)
    assert physical_bound(w, 20_000, 1, V, D, machine())["bound_level"] == "L2"


def test_the_peak_of_a_batch_size_not_measured_is_the_nearest_ones():
    m = machine()
    assert peak_for(m, 1) == 1e10 and peak_for(m, 3) == 4e10 and peak_for(m, 32) == 4e10


def test_cache_sizes_come_from_sysfs_data_and_unified_caches(tmp_path):
    for i, (level, kind, size) in enumerate(
        [
            (1, "Data", "48K"),
            (1, "Instruction", "64K"),
            (2, "Unified", "2048K"),
            (3, "Unified", "96M"),
        ]
    ):
        d = tmp_path / f"index{i}"
        d.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (d / name).write_text(f"{value}\n")
    assert cache_levels(tmp_path) == ([("L1", 48 << 10), ("L2", 2 << 20), ("L3", 96 << 20)], True)
    assert cache_levels(tmp_path / "none") == (list(FIXED_CACHES), False)
    assert parse_size("1024") == 1024 and parse_size("32 KiB") == 32 << 10
    with pytest.raises(ValueError):
        parse_size("lots")


def test_the_header_names_every_level_peak_and_the_floor():
    text = describe(machine())
    for part in (
        "L1 (250 B) 1000.0 GB/s",
        "L2 (48.8 KiB) 100.0 GB/s",
        "memory (391 KiB) 10.0 GB/s",
    ):
        assert part in text
    assert "B 1: 10.0 GMAC/s (n 256), B 4: 40.0 GMAC/s (n 512)" in text
    assert "per-step floor 1.000 us" in text and "empty 3-step loop: 3.00 us" in text
    assert "(sysfs)" in text and "kernel library's ops" in text
    fallback = describe({**machine(), "ops": "torch", "caches": "fixed"})
    assert "torch's ops from Python" in fallback and "assumed: sysfs has none" in fallback


@pytest.fixture
def library():
    """The kernel library built (or found built) and loaded."""
    from kernel_support import built

    from baselines.ops.masked_cell import masked_cell_kernel

    yield from built(masked_cell_kernel)


@pytest.mark.kernel
def test_the_library_measures_compute_what_they_say_and_the_run_uses_them(library):
    ops = roofline.kernel_ops(["clockwork-rnn"])  # its kernel's loader brings the library
    assert ops is not None and set(ops) == {"triad", "product", "loop"}
    for dtype in (torch.float32, torch.float64):
        b, c = torch.randn(37, dtype=dtype), torch.randn(37, dtype=dtype)
        assert torch.equal(ops["triad"](b, c, 2.5, 3), b + 2.5 * c)
        w, x, xs = torch.randn(5, 4, dtype=dtype), torch.randn(4, dtype=dtype), torch.randn(3, 4)
        torch.testing.assert_close(ops["product"](w, x, 2), torch.mv(w, x))
        torch.testing.assert_close(ops["product"](w.float(), xs, 1), xs @ w.float().t())
        x5 = torch.arange(5, dtype=dtype)
        assert ops["loop"](x5, 12).tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]
    m = roofline.measure_machine(["clockwork-rnn"], [1, 2], 7, blocks=1)
    assert m["ops"] == "kernel" and m["floor_steps"] == 7 and set(m["peak_n"]) == {"1", "2"}
    assert roofline.kernel_ops(["gru"]) is None  # no kernel: torch's ops measure
