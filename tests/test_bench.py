"""``harness bench`` plumbing: the timing helpers, parsing pytest-benchmark JSON and JUnit XML
into timing records, the Markdown, and one tiny end-to-end run. No assertion is about how fast
anything is: timing is advisory and never a gate."""

from __future__ import annotations

import json

import pytest
import torch

from harness import timing
from harness.bench import suite as bench
from harness.errors import ConfigError, HarnessError
from harness.results import REQUIRED, Store


def table_row(markdown: str, method: str) -> list[str]:
    line = next(ln for ln in markdown.splitlines() if ln.startswith(f"| {method} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_time_fn_counts_calls_and_returns_one_time_per_round():
    calls = []
    times = timing.time_fn(lambda: calls.append(1), "cpu", warmup=2, rounds=3)
    assert len(calls) == 5 and len(times) == 3 and all(t >= 0 for t in times)
    s = timing.summarize([1.0, 2.0, 4.0])
    assert (s["median"], s["min"], s["max"], s["rounds"]) == (2.0, 1.0, 4.0, 3)
    assert timing.summarize([3.0])["stddev"] == 0.0
    f = lambda: None  # noqa: E731
    assert timing.synced(f, "cpu") is f  # nothing to wait for on CPU
    with pytest.raises(ValueError):
        timing.time_fn(f, "cpu", rounds=0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
def test_time_fn_synchronises_cuda():
    x = torch.randn(256, 256, device="cuda")
    times = timing.time_fn(timing.synced(lambda: x @ x, "cuda"), "cuda", warmup=1, rounds=2)
    assert len(times) == 2


def entry(method: str, phase: str, median: float, env: bool = True) -> dict:
    """One pytest-benchmark JSON entry as the timing suite writes it."""
    info = {
        "method": method,
        "task": "adding",
        "preset": "smoke",
        "seed": 0,
        "phase": phase,
        "device": "cpu",
        "device_name": "cpu (test)",
        "sizes": {"B": 4, "T": 3, "V": 2, "D": 5, "layers": 1},
        "params": 11,
        "warmup_rounds": 1,
        "config": {"method": method, "task": "adding", "seed": 0, "preset": "smoke"},
    }
    if env:
        info["env"] = {"git_sha": "abc", "torch": "9.9", "threads": 1, "device_name": "cpu (test)"}
    stats = {"min": median / 2, "max": 2 * median, "mean": median, "stddev": 0.1 * median}
    stats.update(median=median, iqr=0.0, rounds=5, iterations=1)
    return {"name": f"test_method_timing[{method}-{phase}-cpu]", "stats": stats, "extra_info": info}


HANDMADE = {
    "datetime": "2026-01-01T00:00:00+00:00",
    "benchmarks": [
        entry("gru", "inference", 0.002),
        entry("gru", "train", 0.010),
        entry("skip-rnn", "inference", 0.005, env=False),
        entry("skip-rnn", "train", 0.040),
        # An entry from another benchmark file (no timing-suite extra_info) is ignored.
        {"name": "test_gru_train_step[fused]", "stats": {"median": 1.0}, "extra_info": {"B": 3}},
    ],
}


def test_parse_handmade_benchmark_json():
    recs = bench.parse_benchmark_json(HANDMADE, bench_id="b1")
    assert [(r["method"], r["phase"]) for r in recs] == [
        ("gru", "inference"),
        ("gru", "train"),
        ("skip-rnn", "inference"),
        ("skip-rnn", "train"),
    ]
    skip_train = recs[3]
    assert skip_train["median_s"] == 0.040 and skip_train["mean_s"] == 0.040
    assert skip_train["stddev_s"] == pytest.approx(0.004) and skip_train["rounds"] == 5
    assert skip_train["sizes"] == {"B": 4, "T": 3, "V": 2, "D": 5, "layers": 1}
    assert skip_train["ratio_vs_gru"] == pytest.approx(4.0)
    assert recs[2]["ratio_vs_gru"] == pytest.approx(2.5)
    assert recs[0]["ratio_vs_gru"] == recs[1]["ratio_vs_gru"] == 1.0
    assert all(r["bench_id"] == "b1" and r["status"] == "ok" for r in recs)
    assert recs[0]["env"]["git_sha"] == "abc"
    assert "torch" in recs[2]["env"]  # no env in the entry: the parser's own environment
    assert len({r["run_id"] for r in recs}) == 4
    # Same config, phase and device: the same id, so the store's ``latest`` keeps the newest.
    assert bench.parse_benchmark_json(HANDMADE)[0]["run_id"] == recs[0]["run_id"]
    assert all(k in r for r in recs for k in REQUIRED)  # they fit the run-record store

    md = bench.timing_markdown(recs, ["b.json"], "harness bench --methods skip-rnn")
    assert table_row(md, "gru")[-4:] == ["2", "1.00", "10", "1.00"]
    assert table_row(md, "skip-rnn")[-4:] == ["5", "2.50", "40", "4.00"]
    assert "advisory" in md and "harness bench --methods skip-rnn" in md and "abc" in md


def test_no_gru_gives_no_ratio():
    recs = bench.parse_benchmark_json({"benchmarks": [entry("rnn", "train", 0.1)]})
    assert recs[0]["ratio_vs_gru"] is None
    assert table_row(bench.timing_markdown(recs, [], "c"), "rnn")[-1] == "–"


def test_parse_junit(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase name="test_method_timing[gru-train-cpu]"/>'
        '<testcase name="test_method_timing[rnn-train-cpu]">'
        '<failure message="RuntimeError: boom&#10;more">tb</failure></testcase>'
        '<testcase name="test_method_timing[gru-train-cuda]">'
        '<skipped type="pytest.skip" message="CUDA not available"/></testcase>'
        '<testcase name="test_method_timing[rnn-train-cuda]">'
        '<skipped type="pytest.skip" message="CUDA not available"/></testcase>'
        "</testsuite></testsuites>"
    )
    failed, skipped = bench.parse_junit(xml)
    assert failed == ["`test_method_timing[rnn-train-cpu]`: RuntimeError: boom"]
    assert skipped == {"CUDA not available": 2}
    assert bench.parse_junit(tmp_path / "missing.xml") == ([], {})


def test_run_bench_rejects_bad_input_before_running(tmp_path):
    with pytest.raises(HarnessError, match="Unknown method"):
        bench.run_bench("no-such-method", "adding", "smoke", "cpu", tmp_path)
    with pytest.raises(HarnessError, match="device"):
        bench.run_bench("rnn", "adding", "smoke", "tpu", tmp_path)
    with pytest.raises(ConfigError):
        bench.run_bench("rnn", "adding", "smoke", "cpu", tmp_path, overrides={"nope": 1})
    if not torch.cuda.is_available():
        with pytest.raises(HarnessError, match="CUDA"):
            bench.run_bench("rnn", "adding", "smoke", "cuda", tmp_path)
    assert not (tmp_path / "bench.json").exists()


def test_run_bench_end_to_end_tiny(tmp_path):
    report = tmp_path / "reports" / "TIMING.md"
    json_path, jsonl, md = bench.run_bench(
        "rnn,skip-rnn",  # GRU is added
        "adding",
        "smoke",
        "cpu",
        tmp_path / "out",
        report=report,
        overrides={"seq_len": 4, "hidden_size": 4, "n_test": 8},
        rounds=2,
        warmup=0,
        capture=True,
    )
    assert md == report and json_path.exists() and jsonl.exists() and md.exists()
    assert {b["extra_info"]["method"] for b in json.loads(json_path.read_text())["benchmarks"]} == {
        "gru",
        "rnn",
        "skip-rnn",
    }
    recs, problems = Store(jsonl).read()
    assert not problems
    assert sorted((r["method"], r["phase"], r["device"]) for r in recs) == [
        (m, p, "cpu") for m in ("gru", "rnn", "skip-rnn") for p in ("inference", "train")
    ]
    assert all(r["sizes"]["T"] == 4 and r["sizes"]["D"] == 4 for r in recs)
    assert all(r["ratio_vs_gru"] == 1.0 for r in recs if r["method"] == "gru")
    text = md.read_text()
    row = table_row(text, "gru")
    assert row[4] == row[6] == "1.00"  # both "× GRU" columns
    assert "advisory" in text and "--set seq_len=4" in text


FAKE_SUITE = """
import pytest

@pytest.mark.parametrize("method", ["gru", "rnn"])
def test_method_timing(benchmark, method):
    if method == "rnn":
        raise RuntimeError("rnn broke")
    benchmark.extra_info.update(method=method, phase="train", device="cpu", sizes={"B": 1})
    benchmark.pedantic(lambda: None, rounds=2, warmup_rounds=0)
"""


def test_run_bench_lists_a_failed_method_and_goes_on(tmp_path, monkeypatch):
    fake = tmp_path / "test_fake_timing.py"
    fake.write_text(FAKE_SUITE)
    monkeypatch.setattr(bench, "BENCH_FILE", fake)
    _, jsonl, md = bench.run_bench(
        "rnn", out_dir=tmp_path / "o", report=tmp_path / "T.md", device="cpu", capture=True
    )
    assert [r["method"] for r in Store(jsonl).read()[0]] == ["gru"]
    text = md.read_text()
    assert "exit code 1" in text and "test_method_timing[rnn]`: RuntimeError: rnn broke" in text
