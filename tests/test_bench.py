"""``harness bench`` plumbing: the timing helpers, the timing records and their statistics, the
fused-GRU reference and the ratios to it, the "Not timed" listing, bad input, the Markdown, from
tiny real in-process runs. No assertion is about how fast anything is: timing is advisory and
never a gate."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

from harness import timing
from harness.bench import phases
from harness.bench import suite as bench
from harness.errors import ConfigError, HarnessError
from harness.registry import METHODS
from harness.results import REQUIRED, Store

TINY = {"seq_len": 4, "hidden_size": 4, "n_test": 8}
RECORD_KEYS = {  # the keys of a timing record (before the in-process rewrite too)
    "schema", "kind", "method", "task", "seed", "preset", "status", "config", "phase", "device",
    "device_name", "median_s", "mean_s", "stddev_s", "min_s", "max_s", "iqr_s", "rounds",
    "iterations", "warmup_rounds", "sizes", "params", "env", "bench_id", "time", "benchmark",
    "run_id", "ratio_vs_gru",
}  # fmt: skip


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


def record(method: str, phase: str, median: float, ratio: float | None, **sizes) -> dict:
    """A timing record as ``timing_record`` makes it, with hand-picked numbers."""
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
    }
    env = {"git_sha": "abc", "torch": "9.9", "threads": 1, "device_name": "cpu (test)"}
    times = [median / 2, median, 2 * median]
    rec = bench.timing_record(
        phases.Phase(lambda: None, info), times, warmup=1, environment=env,
        reference=method == phases.REFERENCE,
    )  # fmt: skip
    if ratio is not None:
        rec["ratio_vs_gru"] = ratio
    return rec


def test_timing_record_keys_statistics_and_run_id():
    rec = record("rnn", "train", 0.04, None)
    assert set(rec) == RECORD_KEYS and all(k in rec for k in REQUIRED)
    assert (rec["median_s"], rec["min_s"], rec["max_s"], rec["rounds"]) == (0.04, 0.02, 0.08, 3)
    assert rec["warmup_rounds"] == 1 and rec["kind"] == "timing" and rec["status"] == "ok"
    ref = record(phases.REFERENCE, "train", 0.01, None)
    assert set(ref) == RECORD_KEYS | {"reference"} and ref["reference"] is True
    assert ref["ratio_vs_gru"] == 1.0 and rec["ratio_vs_gru"] is None
    # Same config, phase, device and threads: the same id, so ``latest`` keeps the newest.
    assert record("rnn", "train", 0.05, None)["run_id"] == rec["run_id"]
    assert record("rnn", "inference", 0.04, None)["run_id"] != rec["run_id"]
    assert ref["run_id"] != rec["run_id"]


def test_markdown_reference_rows_ratios_and_not_timed():
    recs = [
        record("skip-rnn", "inference", 0.005, 2.5),
        record("skip-rnn", "train", 0.040, 4.0),
        record(phases.REFERENCE, "inference", 0.002, None),
        record(phases.REFERENCE, "train", 0.010, None),
        record("rnn", "inference", 0.001, 0.5),
        record("rnn", "train", 0.005, 0.5),
    ]
    md = bench.timing_markdown(
        recs, ["t.jsonl"], "harness bench --methods skip-rnn,rnn",
        failed=["`hsg` train on cpu: RuntimeError: boom"], skipped={"CUDA not available": 4},
    )  # fmt: skip
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert "× fused GRU ↓" in lines[0]
    ref_row = table_row(md, f"**{phases.REFERENCE}** (reference)")
    assert lines[1].startswith(f"| **{phases.REFERENCE}** (reference) |")  # reference first
    assert ref_row[-4:] == ["2", "1.00", "10", "1.00"]
    assert table_row(md, "skip-rnn")[-4:] == ["5", "2.50", "40", "4.00"]
    assert lines.index(next(ln for ln in lines if ln.startswith("| rnn |"))) < lines.index(
        next(ln for ln in lines if ln.startswith("| skip-rnn |"))
    )  # methods by their ratio
    assert "advisory" in md and "harness bench --methods skip-rnn,rnn" in md and "abc" in md
    assert "## Not timed" in md and "- failed: `hsg` train on cpu: RuntimeError: boom" in md
    assert "- skipped (4): CUDA not available" in md
    assert "Batch × steps: inference 4×3; train step 4×3." in md
    assert "## Not timed" not in bench.timing_markdown(recs, [], "c")


def test_markdown_pairs_references_by_size():
    """Two sizes give two reference rows; batch and steps go into a column when they differ."""
    recs = [
        record(phases.REFERENCE, "inference", 0.002, None, D=5),
        record(phases.REFERENCE, "train", 0.010, None, D=5, B=8),
        record(phases.REFERENCE, "inference", 0.003, None, D=7),
        record(phases.REFERENCE, "train", 0.020, None, D=7, B=8),
        record("rnn", "inference", 0.004, None, D=7, T=5),
    ]
    md = bench.timing_markdown(recs, [], "c")
    rows = [ln for ln in md.splitlines() if ln.startswith(f"| **{phases.REFERENCE}**")]
    assert [r.split("|")[2].strip() for r in rows] == ["5", "7"]
    assert rows[1].split("|")[4].strip() == "4×3 / 8×3"
    assert table_row(md, "rnn")[3:] == ["4×5 / ?×?", "4", "–", "–", "–"]  # no ratio, no train


def test_run_bench_rejects_bad_input_before_running(tmp_path):
    assert inspect.signature(bench.run_bench).parameters["task"].default is inspect._empty
    with pytest.raises(HarnessError, match="Unknown method"):
        bench.run_bench("no-such-method", "adding", "smoke", "cpu", tmp_path)
    with pytest.raises(HarnessError, match="Unknown task"):
        bench.run_bench("rnn", "no-such-task", "smoke", "cpu", tmp_path)
    with pytest.raises(HarnessError, match="device"):
        bench.run_bench("rnn", "adding", "smoke", "tpu", tmp_path)
    with pytest.raises(ConfigError):
        bench.run_bench("rnn", "adding", "smoke", "cpu", tmp_path, overrides={"nope": 1})
    with pytest.raises(ConfigError, match="preset"):
        bench.run_bench("rnn", "adding", "no-such-preset", "cpu", tmp_path)
    for bad in ({"rounds": 0}, {"warmup": -1}, {"threads": -1}):
        with pytest.raises(ConfigError, match="rounds"):
            bench.run_bench("rnn", "adding", "smoke", "cpu", tmp_path, **bad)
    if not torch.cuda.is_available():
        with pytest.raises(HarnessError, match="CUDA"):
            bench.run_bench("rnn", "adding", "smoke", "cuda", tmp_path)
    assert not (tmp_path / "timing.jsonl").exists()


def test_run_bench_end_to_end_tiny(tmp_path):
    report = tmp_path / "reports" / "TIMING.md"
    threads = torch.get_num_threads()
    lines: list[str] = []
    jsonl, md = bench.run_bench(
        "rnn,skip-rnn",
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
    assert not problems and len(lines) == len(recs) == 6
    ref = phases.REFERENCE
    assert sorted((r["method"], r["phase"], r["device"]) for r in recs) == sorted(
        (m, p, "cpu") for m in ("rnn", "skip-rnn", ref) for p in ("inference", "train")
    )  # both methods have the same sizes: one reference per phase
    for r in recs:
        assert set(r) == RECORD_KEYS | ({"reference"} if r["method"] == ref else set())
        assert r["sizes"]["T"] == 4 and r["sizes"]["D"] == 4 and r["sizes"]["layers"] == 1
        assert r["min_s"] <= r["median_s"] <= r["max_s"] and r["min_s"] <= r["mean_s"]
        assert r["iqr_s"] >= 0 and r["stddev_s"] >= 0
        assert (r["rounds"], r["warmup_rounds"], r["iterations"]) == (3, 1, 1)
        assert r["env"]["threads"] == threads + 1 and r["bench_id"] == recs[0]["bench_id"]
    by = {(r["method"], r["phase"]): r for r in recs}
    for phase in ("inference", "train"):
        base = by[ref, phase]
        assert base["reference"] is True and base["ratio_vs_gru"] == 1.0
        assert base["sizes"] == by["rnn", phase]["sizes"]
        for m in ("rnn", "skip-rnn"):
            assert by[m, phase]["ratio_vs_gru"] == pytest.approx(
                by[m, phase]["median_s"] / base["median_s"]
            )
    text = md.read_text()
    row = table_row(text, f"**{ref}** (reference)")
    assert row[4] == row[6] == "1.00"  # both ratio columns
    assert "advisory" in text and "--set seq_len=4" in text and str(jsonl) in text

    # A second run appends; the same config, phase and device keeps its run id.
    bench.run_bench("rnn", "adding", "smoke", "cpu", tmp_path / "out", report=report,
                    overrides=TINY, rounds=1, warmup=0, threads=threads + 1)  # fmt: skip
    again, _ = Store(jsonl).read()
    assert len(again) == 10
    assert {r["run_id"] for r in again[6:]} <= {r["run_id"] for r in recs}


def test_one_reference_per_distinct_size(tmp_path, monkeypatch):
    """Methods timed at different hidden sizes get a reference each, at their own sizes."""
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
    assert sorted((r["phase"], r["sizes"]["D"]) for r in refs) == [
        ("inference", 4), ("inference", 6), ("train", 4), ("train", 6)
    ]  # fmt: skip
    for r in recs:
        if not r.get("reference"):
            (base,) = [b for b in refs if (b["phase"], b["sizes"]) == (r["phase"], r["sizes"])]
            assert r["ratio_vs_gru"] == pytest.approx(r["median_s"] / base["median_s"])


def test_reference_is_the_same_model_with_a_fused_gru():
    """Same batch, embedding and read-out (copies: tied weights stay tied); torch's GRU, with as
    many layers, in place of the method's; its train step updates only its own weights."""
    overrides = {**TINY, "num_layers": 2}
    p = phases.method_phase("rnn", "train", torch.device("cpu"), "adding", "smoke", overrides)
    ref = p.make_reference()
    cfg = ref.info["config"]
    assert ref.info["method"] == cfg["reference"] == phases.REFERENCE
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


def test_run_bench_lists_a_failed_method_and_goes_on(tmp_path, monkeypatch):
    def broken(self, *args, **kwargs):
        raise RuntimeError("skip-rnn broke\nsecond line")

    monkeypatch.setattr(METHODS.get("skip-rnn"), "forward", broken)
    jsonl, md = bench.run_bench(
        "skip-rnn,rnn", "adding", "smoke", "cpu", tmp_path / "o", report=tmp_path / "T.md",
        overrides=TINY, rounds=1, warmup=0,
    )  # fmt: skip
    recs = Store(jsonl).read()[0]
    assert sorted({r["method"] for r in recs}) == sorted({"rnn", phases.REFERENCE})
    text = md.read_text()
    assert "## Not timed" in text
    for phase in ("inference", "train"):
        assert f"- failed: `skip-rnn` {phase} on cpu: RuntimeError: skip-rnn broke\n" in text
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
