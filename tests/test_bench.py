"""``harness bench`` plumbing: the timing helpers, the timing records and their statistics, the
references (fused GRU and LSTM, the eager step-loop GRU) and the ratios and targets against them,
several tasks per run, the "Not timed" listing, bad input, the Markdown, from tiny real in-process
runs. No assertion is about how fast anything is: timing is advisory and never a gate."""

from __future__ import annotations

import functools
import inspect
import os
import platform

import pytest
import torch

from harness.bench import phases, timing_report
from harness.bench import suite as bench
from harness.components.registry import METHODS
from harness.errors import ConfigError, HarnessError
from harness.persistence.records import REQUIRED
from harness.persistence.store import Store
from harness.training import timing

TINY = {"seq_len": 4, "hidden_size": 4, "n_test": 8}
RECORD_KEYS = {  # the keys of a timing record (before the in-process rewrite too)
    "schema", "kind", "method", "task", "seed", "preset", "status", "config", "phase", "device",
    "device_name", "median_s", "mean_s", "stddev_s", "min_s", "max_s", "iqr_s", "rounds",
    "iterations", "warmup_rounds", "sizes", "params", "env", "bench_id", "time", "benchmark",
    "run_id", "ratio_vs_gru", "fused_cell", "mac_ratio", "ratio_vs_cell", "method_code",
    "dense_macs", "cell_macs",
}  # fmt: skip
METHOD_KEYS = RECORD_KEYS | {"target"}  # a method's record; a reference's has "reference"
GRU_LOOP = phases.TIMED_CELLS[phases.STEP_LOOP]
HELD = platform.libc_ver()[0] == "glibc"  # where run_conditions can hold freed memory
LSTM_REF = phases.TIMED_CELLS["LSTM"]
RNN_REF = phases.TIMED_CELLS["RNN"]


def table_row(markdown: str, method: str) -> list[str]:
    line = next(ln for ln in markdown.splitlines() if ln.startswith(f"| {method} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_time_fn_counts_calls_and_returns_one_time_per_round():
    calls = []
    times = timing.time_fn(lambda: calls.append(1), "cpu", warmup=2, rounds=3)
    assert len(calls) == 5 and len(times) == 3 and all(t >= 0 for t in times)
    s = timing.summarize([1.0, 2.0, 4.0])
    assert (s["median"], s["min"], s["max"], s["rounds"]) == (2.0, 1.0, 4.0, 3)
    assert s["iqr"] == pytest.approx(3.5 - 1.25)
    assert timing.summarize([3.0])["stddev"] == timing.summarize([3.0])["iqr"] == 0.0
    f = lambda: None  # noqa: E731
    assert timing.synced(f, "cpu") is f  # nothing to wait for on CPU
    with pytest.raises(ValueError):
        timing.time_fn(f, "cpu", rounds=0)


def test_summary_statistics_are_pytest_benchmarks():
    """The records kept pytest-benchmark's statistics when the timing moved in-process."""
    stats_mod = pytest.importorskip("pytest_benchmark.stats")
    gen = torch.Generator().manual_seed(0)
    for n in (1, 2, 3, 4, 5, 6, 7, 10, 11):
        times = torch.rand(n, generator=gen, dtype=torch.float64).tolist()
        ref = stats_mod.Stats()
        for t in times:
            ref.update(t)
        ours = timing.summarize(times)
        for key in ("median", "mean", "stddev", "min", "max", "iqr"):
            assert ours[key] == pytest.approx(getattr(ref, key), abs=1e-15), (n, key)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
def test_time_fn_synchronises_cuda():
    x = torch.randn(256, 256, device="cuda")
    times = timing.time_fn(timing.synced(lambda: x @ x, "cuda"), "cuda", warmup=1, rounds=2)
    assert len(times) == 2


def record(
    method: str,
    phase: str,
    median: float,
    ratio: float | None = None,
    *,
    cell: str = "GRU",
    target: dict | None = None,
    macs: tuple[int, int] = (100, 100),
    **sizes,
) -> dict:
    """A timing record as ``timing_record`` makes it, with hand-picked numbers; ``macs`` are its
    dense MACs per step and its fused cell's."""
    reference = method in phases.TIMED_CELLS.values()
    info = {
        "method": method,
        "task": "adding",
        "preset": "smoke",
        "seed": 0,
        "phase": phase,
        "device": "cpu",
        "device_name": "cpu (test)",
        "sizes": {"B": 4, "T": 3, "V": 2, "D": 5, "layers": 1, **sizes},
        "params": 11,
        "config": {"method": method, "task": "adding", "seed": 0, "preset": "smoke"},
        "fused_cell": cell,
        "mac_ratio": 1.0,
        "dense_macs": macs[0],
        "cell_macs": macs[1],
    }
    if not reference:
        info["target"] = target or {
            "ratio": 2.0, "reference": phases.TIMED_CELLS[cell], "rule": "2 x its fused cell"
        }  # fmt: skip
    env = {"git_sha": "abc", "torch": "9.9", "threads": 1, "device_name": "cpu (test)"}
    times = [median / 2, median, 2 * median]
    rec = bench.timing_record(
        phases.Phase(lambda: None, info), times, warmup=1, environment=env, reference=reference
    )
    if ratio is not None:
        rec["ratio_vs_gru"] = rec["ratio_vs_cell"] = ratio
    return rec


def with_ratios(recs: list[dict]) -> list[dict]:
    """Ratios and targets filled as ``time_methods`` fills them: against the references of the
    same phase and sizes (batch aside)."""

    def size(r: dict) -> tuple:
        return (r["phase"], *[r["sizes"][k] for k in ("T", "V", "D", "layers")])

    refs: dict[tuple, dict] = {}
    for r in recs:
        if r.get("reference"):
            refs.setdefault(size(r), {})[r["method"]] = r
    for r in recs:
        bench.apply_ratios(r, refs.get(size(r), {}))
    return recs


def test_timing_record_keys_statistics_and_run_id():
    rec = record("rnn", "train", 0.04)
    assert set(rec) == METHOD_KEYS and all(k in rec for k in REQUIRED)
    assert (rec["median_s"], rec["min_s"], rec["max_s"], rec["rounds"]) == (0.04, 0.02, 0.08, 3)
    assert rec["warmup_rounds"] == 1 and rec["kind"] == "timing" and rec["status"] == "ok"
    assert rec["schema"] == bench.TIMING_SCHEMA and rec["fused_cell"] == "GRU"
    assert rec["target"] == {
        "ratio": 2.0, "reference": phases.FUSED_GRU, "rule": "2 x its fused cell",
        "measured": None, "met": None,
    }  # fmt: skip
    ref = record(phases.FUSED_GRU, "train", 0.01)
    assert set(ref) == RECORD_KEYS | {"reference"} and ref["reference"] is True
    assert ref["ratio_vs_gru"] == ref["ratio_vs_cell"] == 1.0
    assert rec["ratio_vs_gru"] is None and rec["ratio_vs_cell"] is None
    # The other references are 1 to their own cell only once they are compared (apply_ratios).
    lstm = record(LSTM_REF, "train", 0.01, cell="LSTM")
    assert (lstm["ratio_vs_gru"], lstm["ratio_vs_cell"]) == (None, 1.0)
    loop = record(GRU_LOOP, "train", 0.01)
    assert (loop["ratio_vs_gru"], loop["ratio_vs_cell"]) == (None, None)
    # Same config, phase, device and threads: the same id, so ``latest`` keeps the newest.
    assert record("rnn", "train", 0.05)["run_id"] == rec["run_id"]
    assert record("rnn", "inference", 0.04)["run_id"] != rec["run_id"]
    assert ref["run_id"] != rec["run_id"]


def test_apply_ratios_against_the_fused_gru_the_own_cell_and_the_target():
    refs = {
        phases.FUSED_GRU: record(phases.FUSED_GRU, "train", 0.010),
        LSTM_REF: record(LSTM_REF, "train", 0.004, cell="LSTM"),
        GRU_LOOP: record(GRU_LOOP, "train", 0.030),
    }
    for r in refs.values():
        bench.apply_ratios(r, refs)
    assert refs[phases.FUSED_GRU]["ratio_vs_gru"] == refs[phases.FUSED_GRU]["ratio_vs_cell"] == 1
    # the step loop does the GRU's arithmetic: both its ratios are to the fused GRU
    assert refs[GRU_LOOP]["ratio_vs_gru"] == refs[GRU_LOOP]["ratio_vs_cell"] == pytest.approx(3)
    assert refs[LSTM_REF]["ratio_vs_gru"] == pytest.approx(0.4)
    assert refs[LSTM_REF]["ratio_vs_cell"] == 1.0

    lstm_based = record("phased-lstm", "train", 0.010, cell="LSTM")
    bench.apply_ratios(lstm_based, refs)
    assert lstm_based["ratio_vs_cell"] == pytest.approx(2.5)
    assert lstm_based["ratio_vs_gru"] == pytest.approx(1.0)
    assert lstm_based["target"]["measured"] == pytest.approx(2.5)
    assert lstm_based["target"]["met"] is False  # 2.5 x its fused LSTM > 2

    target = {"ratio": 3.0, "reference": phases.FUSED_GRU, "rule": "2 x MACs"}
    highway = record("rhn", "train", 0.025, target=target)
    bench.apply_ratios(highway, refs)
    assert highway["target"]["measured"] == pytest.approx(2.5)
    assert highway["target"]["met"] is True  # 2.5 x the fused GRU <= 3
    gru_based = record("gru", "train", 0.021)
    bench.apply_ratios(gru_based, refs)
    assert gru_based["target"]["met"] is False  # 2.1 x the fused GRU > 2

    alone = record("gru", "train", 0.021)
    bench.apply_ratios(alone, {phases.FUSED_GRU: None})  # its reference failed
    assert alone["ratio_vs_gru"] is None and alone["target"]["met"] is None


def test_markdown_reference_rows_ratios_spread_targets_and_not_timed():
    recs = with_ratios([
        record("skip-rnn", "inference", 0.005),
        record("skip-rnn", "train", 0.040, macs=(200, 100)),
        record("phased-lstm", "inference", 0.004, cell="LSTM"),
        record("phased-lstm", "train", 0.012, cell="LSTM"),
        record(phases.FUSED_GRU, "inference", 0.002),
        record(phases.FUSED_GRU, "train", 0.010),
        record(GRU_LOOP, "inference", 0.003),
        record(GRU_LOOP, "train", 0.015),
        record(LSTM_REF, "inference", 0.001, cell="LSTM"),
        record(LSTM_REF, "train", 0.008, cell="LSTM"),
        record("rnn", "inference", 0.001),
        record("rnn", "train", 0.005),
    ])  # fmt: skip
    md = timing_report.timing_markdown(
        recs, ["t.jsonl"], "harness bench --methods skip-rnn,rnn",
        failed=["`hsg` train on cpu (adding): RuntimeError: boom"],
        skipped={"CUDA not available": 4},
    )  # fmt: skip
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == [
        "Method", "Cell", "D", "L", "Params", "Inference ms ↓", "× fused cell ↓",
        "Train step ms ↓", "× fused cell ↓", "× fused GRU ↓", "MACs / GRU", "× cell per MAC ↓",
        "Ops / step (train)", "Target (train)", "Met",
    ]  # fmt: skip
    refs = [f"**{name}** (reference)" for name in (phases.FUSED_GRU, LSTM_REF, GRU_LOOP)]
    assert [ln.split("|")[1].strip() for ln in lines[1:4]] == refs  # references first
    # every time is median (min–max) in ms: the rounds were [m / 2, m, 2 m]
    assert table_row(md, refs[0])[5:] == [
        "2 (1–4)", "1.00", "10 (5–20)", "1.00", "1.00", "1.00", "1.00", "–", "–", "–"
    ]  # fmt: skip
    assert table_row(md, refs[2])[1] == "GRU" and table_row(md, refs[2])[8:10] == ["1.50", "1.50"]
    assert table_row(md, refs[1])[1] == "LSTM" and table_row(md, refs[1])[8:10] == ["1.00", "0.80"]
    assert table_row(md, "skip-rnn")[5:] == [
        "5 (2.5–10)", "2.50", "40 (20–80)", "4.00", "4.00", "1.00", "**2.00** ⚑", "–",
        "≤ 2.00 × GRU", "**no**",
    ]  # fmt: skip
    assert table_row(md, "phased-lstm")[1] == "LSTM"
    assert table_row(md, "phased-lstm")[6:] == [
        "4.00", "12 (6–24)", "1.50", "1.20", "1.00", "1.50", "–", "≤ 2.00 × LSTM", "yes"
    ]  # fmt: skip
    assert table_row(md, refs[2])[11] == "1.50"  # the step loop's time per MAC: not above 1.5
    assert "⚑ Train step above 1.5× its fused cell per MAC: `skip-rnn` (2.00)." in md
    methods = [ln.split("|")[1].strip() for ln in lines[4:]]
    assert methods == ["rnn", "phased-lstm", "skip-rnn"]  # by their train ratio to their cell
    assert "advisory" in md and "harness bench --methods skip-rnn,rnn" in md and "abc" in md
    assert "## adding (smoke preset) on cpu: cpu (test)" in md
    assert "## Not timed" in md
    assert "- failed: `hsg` train on cpu (adding): RuntimeError: boom" in md
    assert "- skipped (4): CUDA not available" in md
    assert (
        "Batch × steps: inference 4×3; train step 4×3. Times: median (min–max) of 3 rounds "
        "after 1 warm-up round(s)." in md
    )
    assert "## Not timed" not in timing_report.timing_markdown(recs, [], "c")


def test_the_train_step_per_dense_mac_against_the_fused_cell_in_every_row():
    """``× cell per MAC``: the time over the fused cell's time x the dense MACs / the cell's, in
    every row (references too), flagged above ``MAC_BOUND``; "–" in the rows of records made
    before the MACs were recorded, which the report still renders."""
    recs = with_ratios([
        record(phases.FUSED_GRU, "train", 0.010, macs=(360, 360)),
        record(GRU_LOOP, "train", 0.018, macs=(360, 360)),
        record(LSTM_REF, "train", 0.008, cell="LSTM", macs=(480, 480)),
        record("ei-rehn", "train", 0.150, macs=(6000, 360)),
        record("hsg", "train", 0.060, macs=(1800, 360)),
        record("phased-lstm", "train", 0.020, cell="LSTM", macs=(500, 480)),
    ])  # fmt: skip
    old = record("rnn", "train", 0.004, ratio=0.4)
    for k in ("dense_macs", "cell_macs"):
        del old[k]  # a record timed before the MACs were recorded
    md = timing_report.timing_markdown([*recs, old], ["t.jsonl"], "c")
    header = next(ln for ln in md.splitlines() if ln.startswith("| Method |"))
    assert [c.strip() for c in header.strip("|").split("|")][11] == "× cell per MAC ↓"

    def per_mac(method: str) -> str:
        return table_row(md, method)[11]

    assert per_mac(f"**{phases.FUSED_GRU}** (reference)") == "1.00"
    assert per_mac(f"**{LSTM_REF}** (reference)") == "1.00"
    assert per_mac(f"**{GRU_LOOP}** (reference)") == "**1.80** ⚑"
    assert per_mac("ei-rehn") == "0.90"  # 15 x GRU at 16.7 x its MACs
    assert per_mac("hsg") == "1.20"  # 6 x GRU at 5 x its MACs
    assert per_mac("phased-lstm") == "**2.40** ⚑"  # 2.5 x LSTM at 1.04 x its MACs
    assert per_mac("rnn") == "–"
    assert timing_report.per_mac_ratio(old) is None
    assert timing_report.per_mac_ratio(recs[3]) == pytest.approx(15 * 360 / 6000)
    flagged = f"⚑ Train step above 1.5× its fused cell per MAC: `{GRU_LOOP}` (1.80); "
    assert flagged + "`phased-lstm` (2.40)." in md
    # with the ops a step of the row and of its fused cell (harness.bench.profile)
    recs[5]["ops_per_step"] = {"python": 24.6, "aten": 71.2}
    recs[2]["ops_per_step"] = {"python": 9.25, "aten": 5.7}
    md = timing_report.timing_markdown(recs, ["t.jsonl"], "c")
    assert table_row(md, "phased-lstm")[12] == "24.6 / 71.2" and table_row(md, "hsg")[12] == "–"
    want = "`phased-lstm` (2.40; 24.6 / 71.2 ops a step against LSTM's 9.25 / 5.7)."
    assert flagged + want in md
    assert "Every method should train within 1.5×" in md


def test_markdown_pairs_references_by_size_and_gives_uneven_round_counts():
    """Two sizes give two reference rows; batch and steps go into a column when they differ;
    a table whose timings have different round counts gives each time its count."""
    recs = [
        record(phases.FUSED_GRU, "inference", 0.002, D=5),
        record(phases.FUSED_GRU, "train", 0.010, D=5, B=8),
        record(phases.FUSED_GRU, "inference", 0.003, D=7),
        record(phases.FUSED_GRU, "train", 0.020, D=7, B=8),
        record("rnn", "inference", 0.004, D=7, T=5),
    ]
    md = timing_report.timing_markdown(recs, [], "c")
    rows = [ln for ln in md.splitlines() if ln.startswith(f"| **{phases.FUSED_GRU}**")]
    assert [r.split("|")[3].strip() for r in rows] == ["5", "7"]
    assert rows[1].split("|")[6].strip() == "4×3 / 8×3"
    assert table_row(md, "rnn")[5:8] == ["4×5 / ?×?", "4 (2–8)", "–"]  # no ratio, no train
    recs[-1]["rounds"] = 5
    md = timing_report.timing_markdown(recs, [], "c")
    assert table_row(md, "rnn")[6] == "4 (2–8, n=5)"
    assert "of 3 rounds after 1 warm-up round(s); 5 rounds after 1" in md


def test_markdown_one_table_per_task_and_device_in_the_order_timed():
    recs = [record("rnn", "train", 0.001), record(phases.FUSED_GRU, "train", 0.001)]
    other = [record("rnn", "train", 0.002), record(phases.FUSED_GRU, "train", 0.004)]
    for r in other:
        r["task"] = "synthetic"
    cuda = [dict(r, device="cuda", device_name="gpu (test)") for r in recs]
    md = timing_report.timing_markdown(with_ratios(other) + with_ratios(recs) + cuda, [], "c")
    heads = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert heads == [
        "## synthetic (smoke preset) on cpu: cpu (test)",
        "## adding (smoke preset) on cpu: cpu (test)",
        "## adding (smoke preset) on cuda: gpu (test)",
    ]
    assert "sizes of synthetic (smoke preset), adding (smoke preset)." in md
    tables = md.split("## ")[1:]
    assert table_row(tables[0], "rnn")[9] == "0.50" and table_row(tables[1], "rnn")[9] == "1.00"


def test_fused_macs_are_the_gate_matrices_of_torchs_cells():
    for cell in ("GRU", "LSTM", "RNN"):
        stack = getattr(torch.nn, cell)(2, 4, num_layers=2)
        weights = sum(p.numel() for n, p in stack.named_parameters() if n.startswith("weight"))
        assert phases.fused_macs(cell, 2, 4, 2) == weights
    assert phases.fused_macs("GRU", 2, 4, 2) == 3 * 4 * (2 + 4) + 3 * 4 * (4 + 4)


def test_fused_cell_mac_ratio_and_target_come_from_the_method_class():
    """Which reference and which target a method gets is read from its class (``fused_cell``,
    ``has_depth``) and its ``cost()``, never from its name; D = 10 and V = 2 here."""
    lstm_based = {n for n in METHODS.names() if METHODS.get(n).fused_cell == "LSTM"}
    assert lstm_based == {"lstm", "phased-lstm"}
    rnn_based = {n for n in METHODS.names() if METHODS.get(n).fused_cell == "RNN"}
    assert rnn_based == {"rnn", "clockwork-rnn"}  # tanh RNNs: held against torch.nn.RNN
    assert {METHODS.get(n).fused_cell for n in METHODS.names()} == {"GRU", "LSTM", "RNN"}
    small = {"seq_len": 4, "n_test": 8}
    gru_macs = 3 * 10 * (10 + 2)
    for name in METHODS.names():
        cls = METHODS.get(name)
        p = phases.method_phase(name, "train", torch.device("cpu"), "adding", "smoke", small)
        macs = p.model.methods[0].cost().dense_step()
        assert p.info["fused_cell"] == cls.fused_cell, name
        assert p.info["mac_ratio"] == pytest.approx(macs / gru_macs), name
        assert p.info["dense_macs"] == macs, name
        assert p.info["cell_macs"] == phases.fused_macs(cls.fused_cell, 2, 10), name
        target = p.info["target"]
        if cls.has_depth:
            assert target["ratio"] == pytest.approx(2 * macs / gru_macs), name
            assert target["reference"] == phases.FUSED_GRU, name
        else:
            assert target["ratio"] == 2.0, name
            assert target["reference"] == phases.TIMED_CELLS[cls.fused_cell], name
    # by hand: RHN's L layers per step, 2DV + 2 D^2 L, over the GRU's 3 D (D + V)
    p = phases.method_phase("rhn", "train", torch.device("cpu"), "adding", "smoke", small)
    L = p.model.methods[0].cfg.depth
    assert p.info["target"]["ratio"] == pytest.approx(2 * (2 * 10 * 2 + 2 * 100 * L) / 360)
    assert p.info["target"]["ratio"] > 2  # more than one cell per step: a looser target
    # two layers: the second reads D; the MACs of both stacks are summed
    p = phases.method_phase(
        "rhn", "train", torch.device("cpu"), "adding", "smoke", {**small, "num_layers": 2}
    )
    rhn = (2 * 10 * 2 + 2 * 100 * L) + (2 * 10 * 10 + 2 * 100 * L)
    assert p.info["mac_ratio"] == pytest.approx(rhn / (360 + 3 * 10 * 20))


def test_a_fused_cell_torch_lacks_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(METHODS.get("rnn"), "fused_cell", "Mamba")
    with pytest.raises(ValueError, match="fused_cell 'Mamba' is not one of GRU, LSTM, RNN"):
        phases.method_phase("rnn", "train", torch.device("cpu"), "adding", "smoke", TINY)


def test_run_bench_rejects_bad_input_before_running(tmp_path):
    bad_run = functools.partial(bench.run_bench, out_dir=tmp_path, report=tmp_path / "T.md")
    assert inspect.signature(bench.run_bench).parameters["tasks"].default is inspect._empty
    with pytest.raises(HarnessError, match="Unknown method"):
        bad_run("no-such-method", "adding", "smoke", "cpu")
    with pytest.raises(HarnessError, match="Unknown task"):
        bad_run("rnn", "no-such-task", "smoke", "cpu")
    with pytest.raises(HarnessError, match="Unknown task"):
        bad_run("rnn", "adding,no-such-task", "smoke", "cpu")
    with pytest.raises(HarnessError, match="device"):
        bad_run("rnn", "adding", "smoke", "tpu")
    with pytest.raises(ConfigError, match="nope"):
        bad_run("rnn", "adding", "smoke", "cpu", overrides={"nope": 1})
    with pytest.raises(ConfigError, match="r_max"):  # a key only tasks not timed have
        bad_run("rnn", "adding", "smoke", "cpu", overrides={"r_max": 2})
    with pytest.raises(ConfigError, match="preset"):
        bad_run("rnn", "adding", "no-such-preset", "cpu")
    for bad in ({"rounds": 0}, {"warmup": -1}, {"threads": -1}):
        with pytest.raises(ConfigError, match="rounds"):
            bad_run("rnn", "adding", "smoke", "cpu", **bad)
    if not torch.cuda.is_available():
        with pytest.raises(HarnessError, match="CUDA"):
            bad_run("rnn", "adding", "smoke", "cuda")
    with pytest.raises(HarnessError, match="no usable data for task 'yahoo'"):
        bad_run("rnn", "yahoo", "smoke", "cpu", data_dir=str(tmp_path / "no"))
    assert not (tmp_path / "timing.jsonl").exists() and not (tmp_path / "T.md").exists()


def test_run_bench_end_to_end_tiny(tmp_path):
    report = tmp_path / "reports" / "TIMING.md"
    threads = torch.get_num_threads()
    lines: list[str] = []
    jsonl, md = bench.run_bench(
        "rnn,lstm",
        "adding",
        "smoke",
        "cpu",
        tmp_path / "out",
        report=report,
        overrides=TINY,
        rounds=3,
        warmup=1,
        threads=threads + 1,
        progress=lines.append,
    )
    assert torch.get_num_threads() == threads  # restored
    assert md == report and jsonl == tmp_path / "out" / "timing.jsonl"
    assert sorted(os.listdir(tmp_path / "out")) == ["timing.jsonl"]
    recs, problems = Store(jsonl).read()
    assert not problems and len(lines) == len(recs) == 12
    ref, refs = phases.FUSED_GRU, (phases.FUSED_GRU, GRU_LOOP, LSTM_REF, RNN_REF)
    assert sorted((r["method"], r["phase"], r["device"]) for r in recs) == sorted(
        (m, p, "cpu") for m in ("rnn", "lstm", *refs) for p in ("inference", "train")
    )  # both methods have the same sizes: one reference of each kind per phase
    for r in recs:
        keys = RECORD_KEYS | {"reference"} if r["method"] in refs else METHOD_KEYS
        train = {"ops_per_step"} if r["phase"] == "train" else set()
        assert set(r) == keys | train | {"command", "reference_key"}  # for bench --from
        assert r["command"].startswith("harness bench --methods rnn,lstm")
        assert r["sizes"]["T"] == 4 and r["sizes"]["D"] == 4 and r["sizes"]["layers"] == 1
        assert r["min_s"] <= r["median_s"] <= r["max_s"] and r["min_s"] <= r["mean_s"]
        assert r["iqr_s"] >= 0 and r["stddev_s"] >= 0
        assert (r["rounds"], r["warmup_rounds"], r["iterations"]) == (3, 1, 1)
        assert r["env"]["threads"] == threads + 1 and r["bench_id"] == recs[0]["bench_id"]
        assert r["env"]["flush_denormal"] is True  # as the training runs
        assert r["env"]["freed_memory_held"] is HELD  # as the training runs
    by = {(r["method"], r["phase"]): r for r in recs}
    for phase in ("inference", "train"):
        base = by[ref, phase]
        assert base["reference"] is True and base["ratio_vs_gru"] == 1.0
        for name in refs:
            assert by[name, phase]["sizes"] == by["rnn", phase]["sizes"]
        pairs = (("rnn", RNN_REF), ("lstm", LSTM_REF), (GRU_LOOP, ref), (LSTM_REF, LSTM_REF))
        for m, cell in pairs:
            r = by[m, phase]
            assert r["ratio_vs_gru"] == pytest.approx(r["median_s"] / base["median_s"])
            assert r["ratio_vs_cell"] == pytest.approx(r["median_s"] / by[cell, phase]["median_s"])
        for m in ("rnn", "lstm"):
            target = by[m, phase]["target"]
            assert target["measured"] == pytest.approx(by[m, phase]["ratio_vs_cell"])
            assert target["met"] == (target["measured"] <= 2.0)
    assert by["lstm", "train"]["fused_cell"] == "LSTM" and by["lstm", "train"]["mac_ratio"] == 4 / 3
    # what a step dispatches: the step loop calls more from Python a step than the fused GRU
    loop, fused = by[GRU_LOOP, "train"]["ops_per_step"], by[ref, "train"]["ops_per_step"]
    assert loop["python"] > fused["python"] > 0 and loop["aten"] > 0
    # the MACs per step behind the time per MAC, the method's and its fused cell's: V 2, D 4
    assert by["lstm", "train"]["dense_macs"] == by["lstm", "train"]["cell_macs"] == 4 * 4 * 6
    assert by[GRU_LOOP, "train"]["dense_macs"] == by[GRU_LOOP, "train"]["cell_macs"] == 3 * 4 * 6
    assert (by["rnn", "train"]["dense_macs"], by["rnn", "train"]["cell_macs"]) == (24, 24)
    text = md.read_text()
    row = table_row(text, f"**{ref}** (reference)")
    assert row[6] == row[8] == row[9] == row[11] == "1.00"  # its ratio columns
    rnn_per_mac = timing_report.per_mac_ratio(by["rnn", "train"])
    assert rnn_per_mac == pytest.approx(by["rnn", "train"]["ratio_vs_cell"])  # the RNN's MACs
    assert table_row(text, "rnn")[11].split()[0].strip("*") == timing_report.format_ratio(
        rnn_per_mac
    )
    assert table_row(text, "lstm")[1] == "LSTM"
    assert "advisory" in text and "--set seq_len=4" in text and str(jsonl) in text

    # A second run appends; the same config, phase and device keeps its run id.
    bench.run_bench("rnn", "adding", "smoke", "cpu", tmp_path / "out", report=report,
                    overrides=TINY, rounds=1, warmup=0, threads=threads + 1)  # fmt: skip
    again, _ = Store(jsonl).read()
    assert len(again) == 20
    assert {r["run_id"] for r in again[12:]} <= {r["run_id"] for r in recs}


def test_run_bench_times_several_tasks_and_skips_those_without_data(tmp_path):
    lines: list[str] = []
    jsonl, md = bench.run_bench(
        "rnn", "synthetic,yahoo,adding", "smoke", "cpu", tmp_path, report=tmp_path / "T.md",
        overrides={**TINY, "r_max": 2}, rounds=1, warmup=0, data_dir=str(tmp_path / "no-data"),
        progress=lines.append,
    )  # fmt: skip
    skip = [ln for ln in lines if "yahoo" in ln]
    assert len(skip) == 1 and skip[0].startswith("task 'yahoo' skipped: no usable data")
    recs = Store(jsonl).read()[0]
    assert [r["task"] for r in recs if r["method"] == "rnn"] == ["synthetic"] * 2 + ["adding"] * 2
    assert len(recs) == 2 * 2 * 4  # per task: rnn, the fused GRU, RNN and step loop; 2 phases
    synthetic = [r for r in recs if r["task"] == "synthetic" and not r.get("reference")]
    assert all(r["config"]["task_cfg"]["r_max"] == 2 for r in synthetic)  # the task's own key
    for r in recs:  # each task's references are its own
        if r.get("reference"):
            assert r["config"]["task"] == r["task"]
    text = md.read_text()
    heads = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert heads[:2] == [f"## {t} (smoke preset) on cpu: {recs[0]['device_name']}"
                         for t in ("synthetic", "adding")]  # fmt: skip
    assert heads[2] == "## Not timed" and "- skipped (2): task `yahoo`: no usable data" in text
    assert "--task synthetic,yahoo,adding" in text


def test_one_reference_per_distinct_size(tmp_path, monkeypatch):
    """Methods timed at different hidden sizes get references each, at their own sizes."""
    real = phases.method_phase
    hidden = {"rnn": 4, "skip-rnn": 6, "sa-rnn": 4}

    def sized(method, phase, device, task, preset, overrides=None, **kw):
        sized = {**overrides, "hidden_size": hidden[method]}
        return real(method, phase, device, task, preset, sized, **kw)

    monkeypatch.setattr(bench, "method_phase", sized)
    jsonl, _ = bench.run_bench(
        "rnn,skip-rnn,sa-rnn", "adding", "smoke", "cpu", tmp_path, report=tmp_path / "T.md",
        overrides=TINY, rounds=1, warmup=0,
    )  # fmt: skip
    recs = Store(jsonl).read()[0]
    refs = [r for r in recs if r.get("reference")]
    assert sorted((r["method"], r["phase"], r["sizes"]["D"]) for r in refs) == sorted(
        [(m, p, d) for m in (phases.FUSED_GRU, GRU_LOOP) for p in ("inference", "train")
         for d in (4, 6)] + [(RNN_REF, p, 4) for p in ("inference", "train")]
    )  # fmt: skip
    for r in recs:
        if not r.get("reference"):
            (base,) = [
                b for b in refs if b["method"] == phases.FUSED_GRU
                and (b["phase"], b["sizes"]) == (r["phase"], r["sizes"])
            ]  # fmt: skip
            assert r["ratio_vs_gru"] == pytest.approx(r["median_s"] / base["median_s"])


def test_reference_is_the_same_model_with_a_fused_cell():
    """Same batch, embedding and read-out (copies: tied weights stay tied); torch's GRU or LSTM,
    with as many layers, in place of the method's; its train step updates only its own weights."""
    overrides = {**TINY, "num_layers": 2}
    p = phases.method_phase("rnn", "train", torch.device("cpu"), "adding", "smoke", overrides)
    ref = p.make_reference()
    cfg = ref.info["config"]
    assert ref.info["method"] == cfg["reference"] == phases.FUSED_GRU
    assert ref.info["sizes"] == cfg["sizes"] == p.info["sizes"]
    assert set(cfg["train"]) == {"lr", "weight_decay", "clip"}
    gru, model = ref.model.recurrent, p.model
    assert isinstance(gru, torch.nn.GRU) and gru.num_layers == 2 and gru.hidden_size == 4
    assert ref.model.readout is not model.readout
    assert torch.equal(ref.model.readout.weight, model.readout.weight)
    x = torch.randn(3, 4, 2)
    with torch.no_grad():
        assert ref.model(x).shape == model(x).pred.shape == (3, 1)  # last-step read-out
        short = ref.model(x, torch.tensor([1, 2, 4]))
        assert torch.equal(short[2], ref.model(x)[2]) and not torch.equal(short[0], ref.model(x)[0])
    mine = [t.detach().clone() for t in model.parameters()]
    theirs = [t.detach().clone() for t in ref.model.parameters()]
    ref.fn()
    assert all(torch.equal(a, b) for a, b in zip(mine, model.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(theirs, ref.model.parameters(), strict=True))
    assert (
        p.reference_key
        == phases.method_phase(
            "skip-rnn", "train", torch.device("cpu"), "adding", "smoke", overrides
        ).reference_key
    )
    lstm = p.make_reference("LSTM")
    assert lstm.info["method"] == lstm.info["config"]["reference"] == LSTM_REF
    assert lstm.info["fused_cell"] == "LSTM" and lstm.info["mac_ratio"] == 4 / 3
    assert isinstance(lstm.model.recurrent, torch.nn.LSTM) and lstm.model.recurrent.num_layers == 2
    with torch.no_grad():
        assert lstm.model(x).shape == (3, 1)
    with pytest.raises(ValueError, match="unknown reference"):
        p.make_reference("GRUish")


def test_step_loop_reference_computes_the_fused_gru_one_step_at_a_time():
    """The eager loop is the GRU's arithmetic: with the fused GRU's weights copied into its cells
    it gives the fused GRU's predictions and gradients (float64), layer by layer."""
    overrides = {**TINY, "num_layers": 2}
    p = phases.method_phase("rnn", "train", torch.device("cpu"), "adding", "smoke", overrides)
    fused, loop = p.make_reference("GRU"), p.make_reference(phases.STEP_LOOP)
    assert loop.info["method"] == GRU_LOOP and loop.info["fused_cell"] == "GRU"
    cells = loop.model.recurrent
    assert [type(c) for c in cells] == [torch.nn.GRUCell] * 2
    fused.model.double()
    loop.model.double()
    with torch.no_grad():
        for i, cell in enumerate(cells):
            for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, kind).copy_(getattr(fused.model.recurrent, f"{kind}_l{i}"))
        loop.model.readout.load_state_dict(fused.model.readout.state_dict())
    x = torch.randn(3, 5, 2, dtype=torch.float64)
    lengths = torch.tensor([5, 2, 4])
    a, b = fused.model(x, lengths), loop.model(x, lengths)
    assert (a - b).abs().max().item() < 1e-12
    a.sum().backward()
    b.sum().backward()
    g_fused = fused.model.recurrent.weight_hh_l1.grad
    assert (g_fused - cells[1].weight_hh.grad).abs().max().item() < 1e-12
    assert g_fused.abs().max().item() > 0
    before = [t.detach().clone() for t in loop.model.parameters()]
    loop.model.float()
    loop.fn()  # its train step runs and updates its own weights
    assert not all(torch.equal(a, b) for a, b in zip(before, loop.model.parameters(), strict=True))


def test_run_bench_lists_a_failed_method_and_goes_on(tmp_path, monkeypatch):
    def broken(self, *args, **kwargs):
        raise RuntimeError("skip-rnn broke\nsecond line")

    monkeypatch.setattr(METHODS.get("skip-rnn"), "forward", broken)
    jsonl, md = bench.run_bench(
        "skip-rnn,rnn", "adding", "smoke", "cpu", tmp_path / "o", report=tmp_path / "T.md",
        overrides=TINY, rounds=1, warmup=0,
    )  # fmt: skip
    recs = Store(jsonl).read()[0]
    assert sorted({r["method"] for r in recs}) == sorted(
        {"rnn", phases.FUSED_GRU, GRU_LOOP, RNN_REF}
    )
    text = md.read_text()
    assert "## Not timed" in text
    for phase in ("inference", "train"):
        line = f"- failed: `skip-rnn` {phase} on cpu (adding): RuntimeError: skip-rnn broke\n"
        assert line in text
    assert "second line" not in text


def test_device_auto_times_cuda_only_where_present(tmp_path):
    jsonl, md = bench.run_bench(
        "rnn", "adding", "smoke", "auto", tmp_path, report=tmp_path / "T.md", overrides=TINY,
        rounds=1, warmup=0,
    )  # fmt: skip
    devices = {r["device"] for r in Store(jsonl).read()[0]}
    if torch.cuda.is_available():
        assert devices == {"cpu", "cuda"} and "Not timed" not in md.read_text()
    else:
        assert devices == {"cpu"}
        assert "- skipped (2): CUDA not available (device auto)" in md.read_text()


def test_a_timing_report_names_the_code_it_timed_and_warns_when_it_changed():
    from harness.bench.timing_report import timing_markdown
    from harness.components.code import code_changes, method_code

    now = method_code("gru")
    rows = [{"method": "gru", "method_code": now}, {"method": "gru", "method_code": "0" * 16}]
    assert code_changes(rows[:1]) == []
    assert code_changes(rows) == [f"gru: measured with {'0' * 16}, {now}, now {now}"]
    assert code_changes([{"method": "torch.nn.GRU (fused)", "method_code": "x"}]) == []
    assert code_changes([{"method": "gru"}]) == []  # no code version: not judged
    timed = [{**r, "phase": "train", "task": "adding", "preset": "smoke", "device": "cpu",
              "device_name": "cpu", "sizes": {"B": 2, "T": 3}, "median_s": 0.1, "rounds": 3,
              "warmup_rounds": 1} for r in rows]  # fmt: skip
    md = timing_markdown(timed[1:], ["t.jsonl"], "harness bench")
    assert f"Code timed (`method_code`): gru {'0' * 16}." in md
    assert f"**Timed with other code than today's**: gru: measured with {'0' * 16}" in md
    assert "other code" not in timing_markdown(timed[:1], ["t.jsonl"], "harness bench")


def test_count_ops_counts_python_calls_and_aten_operators_backward_included():
    from harness.bench.profile import count_ops, ops_per_step

    x = torch.ones(3, requires_grad=True)

    def fn() -> None:
        y = torch.sin(x) * 2  # Python: sin, mul; ATen: sin, mul
        y.sum().backward()  # Python: sum, backward; ATen: sum, then the backward's operators

    py, aten = count_ops(fn)
    assert py == 4
    assert aten >= 5  # sin, mul, sum forward; at least the backward's cos and mul
    _, forward_only = count_ops(lambda: torch.sin(x) * 2)
    assert forward_only == 2 and aten > 3
    assert ops_per_step(fn, 2) == {"python": 2.0, "aten": aten / 2}


def test_merged_timings_show_each_reference_once_and_keep_their_own_runs_ratios():
    """Timings of one size from two runs: the last run's reference stands; ratios untouched."""

    def rec(method, median, key="k", **kw):
        return {"method": method, "median_s": median, "reference_key": key, **kw}

    gru = phases.FUSED_GRU
    first = [rec(gru, 1.0, reference=True, ratio_vs_gru=1.0), rec("a", 3.0, ratio_vs_gru=3.0)]
    second = [rec(gru, 2.0, reference=True, ratio_vs_gru=1.0), rec("b", 5.0, ratio_vs_gru=2.5)]
    old = {"method": "c", "median_s": 9.0, "ratio_vs_gru": 4.5}
    other = [rec(gru, 4.0, key="k2", reference=True), rec("d", 8.0, key="k2")]
    merged = bench.merge_references(first + second + [old] + other)
    assert merged == first[1:] + second + [old] + other  # one GRU a size: the last run's
    assert [r["ratio_vs_gru"] for r in merged[:4]] == [3.0, 1.0, 2.5, 4.5]
