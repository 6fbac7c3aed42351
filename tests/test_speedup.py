"""The speedup measurement's comparisons (``harness.bench.speedup``): the fast path against its own
dense loop, the same path without skipping and torch's fused cell; the MAC ratios, the spread and
the raw timings. Structure and arithmetic only, on tiny sizes: no wall-clock assertion."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from harness.bench import roofline, speedup, speedup_report
from harness.bench.phases import FUSED_CELLS
from harness.bench.speedup import (
    fast_path_methods,
    fused_cell,
    interleaved_rounds,
    measure_speedups,
    speedup_jsonl,
    union_macs,
)
from harness.bench.speedup_report import speedup_markdown
from harness.components.flops import sequence_macs
from harness.components.method import SeqOut
from harness.components.registry import METHODS
from harness.errors import ConfigError

FAST = fast_path_methods()
ALTS = ("dense", "noskip", "fused")


@pytest.fixture(scope="module")
def rows():
    return measure_speedups(
        methods=None, skips=(0.5,), hidden=(16,), batches=(1, 3), seq_len=6, budget_s=0.0
    )


def test_every_row_times_the_fast_path_against_three_alternatives(rows):
    assert [(r["method"], r["B"]) for r in rows] == [(n, b) for n in FAST for b in (1, 3)]
    for r in rows:
        assert set(r["rounds_ms"]) == {*ALTS, "fast"}
        assert all(len(v) == r["rounds"] >= 3 for v in r["rounds_ms"].values())
        assert r["fast_ms"] == pytest.approx(statistics.median(r["rounds_ms"]["fast"]))
        for alt in ALTS:
            ratios = [
                a / b for a, b in zip(r["rounds_ms"][alt], r["rounds_ms"]["fast"], strict=True)
            ]
            assert r[f"speedup_{alt}"] == pytest.approx(statistics.median(ratios))
            assert r[f"speedup_{alt}_min"] == pytest.approx(min(ratios))
            assert r[f"speedup_{alt}_max"] == pytest.approx(max(ratios))
            assert r[f"{alt}_ms"] == pytest.approx(statistics.median(r["rounds_ms"][alt]))
            assert r[f"mac_ratio_{alt}"] == pytest.approx(r[f"{alt}_macs"] / r["fast_macs"])
            assert r[f"realised_frac_{alt}"] == pytest.approx(
                r[f"speedup_{alt}"] / r[f"mac_ratio_{alt}"]
            )
        # time does not follow MACs alone: no MAC ratio is called a bound
        assert not {"bound_dense", "bound_noskip", "bound_fused", "bound", "speedup"} & set(r)


def test_every_row_has_the_physical_bound_of_one_roofline_measured_for_the_run(rows):
    machine = rows[0]["roofline"]
    assert all(r["roofline"] is machine for r in rows)  # once per run
    assert machine["floor_steps"] == rows[0]["T"] and set(machine["peak_macs_per_s"]) == {"1", "3"}
    assert [lv["name"] for lv in machine["levels"]][-1] == "memory"
    assert all(lv["bytes_per_s"] > 0 for lv in machine["levels"])
    for r in rows:
        assert r["x_bound"] == pytest.approx(r["fast_ms"] / r["bound_ms"])
        assert r["bound_macs"] == pytest.approx(r["B"] * r["own_macs"])  # each one its own
        assert r["bound_level"] in [lv["name"] for lv in machine["levels"]]


def test_the_mac_ratios(rows):
    for r in rows:
        cls = METHODS.get(r["method"])
        assert r["fused_cell"] == cls.fused_cell
        cell_macs = FUSED_CELLS[cls.fused_cell] * r["D"] * (r["V"] + r["D"]) * r["T"]
        assert r["fused_macs"] == cell_macs
        # the same method at skip 0: every unit updated at full depth, so the dense MACs;
        # activity-sparse methods read every column but the first step's zero state
        first = r["D"] / (r["V"] + r["D"]) / r["T"] if r["skip_kind"] == "columns" else 0.0
        assert r["noskip_skip"] < first + 0.01
        noskip = r["dense_macs"] * (1 - r["noskip_skip"])
        assert r["noskip_macs"] == pytest.approx(noskip, 0.01)
        # the MAC ratio counts what a sparse implementation can realise (VC-RNN: k(k + V))
        assert r["mac_ratio_dense"] <= r["flop_reduction_exact"] * (1 + 1e-9)
        if r["B"] == 1:  # one sequence: the union is its own decisions, the FLOP reduction
            assert r["mac_ratio_dense"] == pytest.approx(r["flop_reduction_exact"])


def test_the_union_reads_every_row_some_sequence_updates():
    """Two sequences updating disjoint units: the batched fast path reads both units' rows."""
    cls = METHODS.get("sa-rnn")
    m = cls(3, 8)
    T, D = 4, 8
    mask = torch.zeros(2, T, D)
    mask[0, :, 0] = 1
    mask[1, :, 1] = 1
    out = SeqOut(torch.zeros(2, T, D), mask)
    cost = m.cost()
    assert union_macs(m, out) == T * (cost.always + 2 * cost.per_unit)
    assert sequence_macs(m, out)["effective"].tolist() == [T * (cost.always + cost.per_unit)] * 2
    one = SeqOut(torch.zeros(1, T, D), mask[:1])
    assert union_macs(m, one) == sequence_macs(m, one)["effective"].item()


def test_the_union_runs_the_deepest_sequence():
    cls = next(METHODS.get(n) for n in FAST if METHODS.get(n).has_depth)
    m = cls(3, 8)
    cost = m.cost()
    T, D = 3, 8
    depth = torch.zeros(2, T, D, dtype=torch.long)
    depth[0], depth[1] = 1, cost.max_depth
    out = SeqOut(torch.zeros(2, T, D), torch.ones(2, T, D), depth=depth)
    per_step = cost.always + cost.per_unit * D + cost.per_active_step
    assert union_macs(m, out) == T * (per_step + cost.per_layer * cost.max_depth)


def test_fused_cell_is_torchs_cell_in_eval_mode():
    for name in FUSED_CELLS:
        cell = fused_cell(name, 3, 5)
        assert type(cell).__name__ == name and not cell.training and cell.batch_first
    with pytest.raises(ConfigError, match="fused_cell 'Mamba' is not one of GRU, LSTM, RNN"):
        fused_cell("Mamba", 3, 5)


def test_interleaved_rounds_alternate_the_paths_and_time_slow_ones_once(monkeypatch):
    calls = []
    paths = {k: (lambda k=k: calls.append(k)) for k in ("a", "b", "c")}
    t = interleaved_rounds(paths, torch.device("cpu"), warmup=1, min_rounds=3, budget_s=0.0)
    assert all(len(v) == 3 for v in t.values()) and set(t) == set(paths)
    rounds = ["a"] * 4 + ["b"] * 4 + ["c"] * 4  # one untimed call, then a block of three
    assert calls == rounds * 4  # warm-up and three rounds
    calls.clear()
    monkeypatch.setattr(speedup, "SLOW_CALL_S", -1.0)  # every path counts as slow
    interleaved_rounds(paths, torch.device("cpu"), warmup=1, min_rounds=2, budget_s=0.0)
    assert calls == ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["a", "b", "c"] * 2


def test_raw_timings_are_json_lines(rows):
    back = [json.loads(line) for line in speedup_jsonl(rows).splitlines()]
    assert back == json.loads(json.dumps(rows))
    assert all(len(b["rounds_ms"]["fast"]) == b["rounds"] for b in back)


def row(method="m", D=8, B=1, target=0.9, **kw):
    r = {
        "method": method, "D": D, "B": B, "T": 5, "V": 2, "target_skip": target, "skip": target,
        "setting": "s", "flop_reduction": 10.0, "flop_reduction_exact": 10.0, "max_abs_diff": 0.0,
        "mask_mismatch": 0, "rounds": 4, "note": None, "fast_ms": 1.0,
    }  # fmt: skip
    for alt, sp in (("dense", 5.0), ("noskip", 4.0), ("fused", 3.0)):
        r.update(
            {
                f"{alt}_ms": sp,
                f"speedup_{alt}": sp,
                f"speedup_{alt}_min": sp - 1,
                f"speedup_{alt}_max": sp + 1,
                f"mac_ratio_{alt}": 10.0 / 2 if alt == "dense" and B == 1 else 10.0,
            }
        )
        r[f"realised_frac_{alt}"] = sp / r[f"mac_ratio_{alt}"]
    r.update(fused_cell="GRU", **kw)
    return r


def test_markdown_shows_each_comparison_its_spread_mac_ratio_and_fraction():
    rows = [row(D=8), row(D=16, target=0.5, speedup_dense=7.0, realised_frac_dense=1.4)]
    rows.append(row(D=16))
    rows.append(row(D=16, B=4, speedup_fused=9.0))
    md = speedup_markdown(rows, "c", data_file="S.jsonl")
    for head in ("vs own dense loop", "vs same path, no skip", "vs fused cell", "realised"):
        assert head in md
    # no MAC ratio is called a bound, and the note counts the rows whose realised fraction
    # passes 1; rows measured without a roofline show dashes for the bound
    assert "| vs own dense loop | MAC ratio | realised | vs same path, no skip | MAC ratio |" in md
    intro = next(x for x in md.splitlines() if x.startswith("Untrained models"))
    assert "bound" not in intro.replace("no bound on the speedup", "")
    assert "Bound ms and × bound: no roofline measured for these rows (–)." in md
    assert "| ms: dense / no skip / fused / fast | bound ms | × bound | vs own dense loop |" in md
    assert "here: 1 of 4 rows against the own dense loop, 0 of 4 rows against the no-skip" in md
    assert "`S.jsonl`" in md
    line = next(x for x in md.splitlines() if x.startswith("| m | 8 | 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[7:19] == [
        "5.00 / 4.00 / 3.00 / 1.00",
        "–",
        "–",
        "5.00x (4.00–6.00)",
        "5.00x",
        "1.00",
        "4.00x (3.00–5.00)",
        "10.00x",
        "0.40",
        "GRU: 3.00x (2.00–4.00)",
        "10.00x",
        "0.30",
    ]
    assert cells[-1] == "4"
    # the summary: per method the batch-1 row at the largest D and the highest target
    summary = [x for x in md.splitlines() if x.startswith("| m | 16 | 90 | GRU |")]
    assert summary == ["| m | 16 | 90 | GRU | 3.00x | 10.00x | 0.30 | – |"]


def test_rows_give_the_mac_ratio_of_each_sequences_own_decisions_beside_the_unions(rows):
    """own_macs: the exact-realisable MACs of each sequence's decisions (the batch's mean), so
    never more than the union's; equal at batch 1."""
    for r in rows:
        assert r["own_macs"] <= r["fast_macs"] * (1 + 1e-9)
        if r["B"] == 1:
            assert r["own_macs"] == pytest.approx(r["fast_macs"])
        assert r["mac_ratio_fused_own"] == pytest.approx(r["fused_macs"] / r["own_macs"])
        own = r["speedup_fused"] / r["mac_ratio_fused_own"]
        assert r["realised_frac_fused_own"] == pytest.approx(own)


def test_markdown_shows_the_union_and_the_own_ratios_at_batch_above_1():
    rows = [row(D=16), row(D=16, B=4, speedup_fused=9.0, realised_frac_fused=0.9,
                        mac_ratio_fused_own=30.0, realised_frac_fused_own=0.3)]  # fmt: skip
    md = speedup_markdown(rows, "c", data_file="S.jsonl")
    table = [x for x in md.splitlines() if x.startswith("| m | 16 | 4 | 90 |")]
    assert table[0] == "| m | 16 | 4 | 90 | 9.00x | 10.00x | 0.90 | 30.00x | 0.30 |"
    assert "| realised: union | MAC ratio: own | realised: own |" in md
    # rows measured before the own ratio existed: no such table
    assert "MAC ratio: own" not in speedup_markdown([row(D=16, B=4)], "c")


def test_markdown_shows_the_bound_and_the_measurement_it_came_from():
    from test_roofline import machine

    m = machine()
    bound = {"bound_ms": 0.4, "bound_level": "L2", "x_bound": 2.5, "roofline": m}
    rows = [row(D=8, **bound), row(D=16, **bound), row(D=16, B=4)]  # the last one from before
    md = speedup_markdown(rows, "c")
    assert speedup_report.BOUND_NOTE in md and roofline.describe(m) in md
    assert "1 rows measured without one show –." in md and "measurements in these rows" not in md
    cells = [
        [c.strip() for c in x.strip("|").split("|")]
        for x in md.splitlines()
        if x.startswith("| m | ") and x.count("|") > 12
    ]
    assert [c[8:10] for c in cells] == [["0.4", "2.50x"], ["0.4", "2.50x"], ["–", "–"]]
    # the summary gives the fast path's time over its bound
    assert "| m | 16 | 90 | GRU | 3.00x | 10.00x | 0.30 | 2.50x |" in md
    other = {**m, "floor_step_s": 2e-6}
    md = speedup_markdown([row(**bound), row(**{**bound, "roofline": other})], "c")
    assert "(2 measurements in these rows: the first shown.)" in md and "without one" not in md


def test_markdown_shows_a_missing_comparison_as_a_dash():
    r = row()
    for alt in ("noskip", "fused"):
        for k in [k for k in r if alt in k]:
            del r[k]  # fused_cell too
    md = speedup_markdown([r], "c")
    line = next(x for x in md.splitlines() if x.startswith("| m | 8 | 1 |"))
    assert line.count("| – ") == 8 and "5.00 / – / – / 1.00" in line
    assert "| 5.00x (4.00–6.00) | 5.00x | 1.00 | – |" in line
    assert "Against the fused cell" not in md and "JSON line" not in md


def test_activity_sparse_outputs_are_measured_by_the_columns_they_read():
    """Skip % of rows is 0 for a method that updates every unit; its skip is the activity
    sparsity (1 - mean of reads), and the batch's union reads every column some sequence reads."""
    m = METHODS.get("delta-gru")(2, 4)
    T, V, D = 3, 2, 4
    reads = torch.zeros(2, T, V + D)
    reads[0, :, 0] = 1  # sequence 0 reads input 0, sequence 1 state unit 2
    reads[1, :, V + 2] = 1
    out = SeqOut(torch.zeros(2, T, D), torch.ones(2, T, D), reads=reads)
    assert speedup.skip_kind(out) == "columns"
    assert speedup.achieved_skip(out, m) == pytest.approx(1 - 1 / 6)
    rows_only = SeqOut(torch.zeros(2, T, D), torch.ones(2, T, D))
    assert speedup.skip_kind(rows_only) == "units" and speedup.achieved_skip(rows_only, m) == 0
    per_unit = m.cost().per_unit  # 3 (V + D): a unit reading c of V + D columns costs 3 c
    assert union_macs(m, out) == pytest.approx(T * D * per_unit * 2 / (V + D))
    one = SeqOut(out.outputs[:1], out.mask[:1], reads=reads[:1])
    assert union_macs(m, one) == pytest.approx(sequence_macs(m, one)["effective"].item())
    assert speedup.reads_mismatch(out, out) == 0 and speedup.reads_mismatch(rows_only, out) == 36
    flipped = SeqOut(out.outputs, out.mask, reads=1 - reads)
    assert speedup.reads_mismatch(flipped, out) == reads.numel()


def test_markdown_says_when_the_skip_is_the_activity_sparsity():
    rows = [row(), row(method="a", skip_kind="columns", reads_mismatch=3)]
    md = speedup_markdown(rows, "c")
    assert speedup_report.COLUMNS_NOTE in md
    line = next(x for x in md.splitlines() if x.startswith("| a | 8 | 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[4] == "90.0 (cols)" and "3 reads entries differ" in cells[-2]
    other = next(x for x in md.splitlines() if x.startswith("| m | 8 | 1 |"))
    assert "(cols)" not in other and "reads" not in other
    assert speedup_report.COLUMNS_NOTE not in speedup_markdown(rows[:1], "c")


def test_measured_rows_of_activity_sparse_methods():
    rows = measure_speedups(
        methods="delta-gru,egru", skips=(0.0, 0.75), hidden=(24,), batches=(1, 3), seq_len=12,
        budget_s=0.0,
    )  # fmt: skip
    for r in rows:
        assert r["skip_kind"] == "columns" and r["mask_mismatch"] == r["reads_mismatch"] == 0
        assert r["max_abs_diff"] < 1e-5
        assert r["mac_ratio_dense"] == pytest.approx(r["dense_macs"] / r["fast_macs"])
        if r["B"] == 1:
            assert r["fast_macs"] == pytest.approx(r["dense_macs"] * (1 - r["skip"]))
        if r["target_skip"]:
            assert r["flop_reduction"] > 1.5


def test_the_speedup_report_names_the_code_it_timed_and_warns_when_it_changed(rows):
    from harness.components.code import method_code

    md = speedup_markdown(rows, "harness bench --speedup")
    assert "Code timed (`method_code`): " in md and method_code(rows[0]["method"]) in md
    assert "other code" not in md
    old = [{**r, "method_code": "0" * 16} for r in rows]
    assert "**Timed with other code than today's**" in speedup_markdown(old, "cmd")


def test_markdown_says_why_a_method_needing_more_macs_than_the_fused_cell_is_slower():
    more = row("deep", D=16, speedup_fused=0.6, mac_ratio_fused=0.5, realised_frac_fused=1.2,
               bound_ms=0.8)  # fmt: skip
    md = speedup_markdown([row(D=16), more], "c")
    says = [x for x in md.splitlines() if x.startswith("- deep: ")]
    assert len(says) == 1 and "needs 2.00x the MACs of torch's fused GRU" in says[0]
    assert "realised 1.20" in says[0] and "1.25x its physical bound" in says[0]
    assert not any(x.startswith("- m: ") for x in md.splitlines())  # MAC ratio 10: nothing to say
