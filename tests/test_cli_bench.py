"""``harness bench``, in-process: the report's default path follows the mode, and its header
names the command ``main`` parsed (not the host process's ``sys.argv``)."""

import json
import sys

import pytest
import torch

from harness.cli import main


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["host-process", "--not-the-command"])
    return tmp_path


def test_speedup_writes_speedup_report_naming_its_command(in_tmp, capsys):
    threads = torch.get_num_threads()
    # methods whose fast path needs no C++ kernel: compiling one takes half a minute
    args = ["bench", "--speedup", "--methods", "skip-rnn,vc-rnn", "--hidden", "16"]
    args += ["--batches", "2", "--seq-len", "4", "--budget", "0", "--skips", "0.5"]
    args += ["--threads", "2"]
    assert main(args) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [".benchmarks/SPEEDUP.md", ".benchmarks/SPEEDUP.jsonl"]  # not reports/
    text = (in_tmp / ".benchmarks" / "SPEEDUP.md").read_text()
    raw = (in_tmp / ".benchmarks" / "SPEEDUP.jsonl").read_text().splitlines()
    raw = [json.loads(x) for x in raw]
    assert [(r["method"], r["D"], r["B"]) for r in raw] == [("skip-rnn", 16, 2), ("vc-rnn", 16, 2)]
    assert all(len(r["rounds_ms"]["fused"]) == r["rounds"] for r in raw)
    assert "`SPEEDUP.jsonl`" in text
    assert "`harness " + " ".join(args) + "`" in text
    assert "threads: 2" in text and "host-process" not in text
    assert "| skip-rnn | 16 | 2 | 50 |" in text and "| vc-rnn | 16 | 2 | 50 |" in text
    assert not (in_tmp / ".benchmarks" / "TIMING.md").exists()
    assert torch.get_num_threads() == threads, "the thread count is restored"


def test_speedup_options_reach_the_measurement(in_tmp, monkeypatch):
    import harness.bench.speedup as speedup
    import harness.bench.speedup_report as report

    calls = []
    monkeypatch.setattr(speedup, "measure_speedups", lambda **kw: calls.append(kw) or [])
    monkeypatch.setattr(
        report, "speedup_markdown", lambda rows, command, device, data_file: command
    )
    assert main(["bench", "--speedup", "--report", "s.md"]) == 0
    assert (in_tmp / "s.jsonl").read_text() == ""  # the raw timings beside the report
    assert main(["bench", "--speedup", "--report", "r.jsonl"]) == 0
    assert (in_tmp / "r.jsonl.rounds.jsonl").exists()  # never over the report itself
    args = ["bench", "--speedup", "--methods", "x-*", "--skips", "0.25", "--hidden", "8,9"]
    assert main(args) == 0
    assert calls[0] == dict(
        methods=None,
        skips=[0.5, 0.75, 0.9],
        hidden=[256, 1024],
        batches=[1, 32],
        seq_len=50,
        device="cpu",
        budget_s=3.0,
    )
    assert (calls[2]["methods"], calls[2]["skips"], calls[2]["hidden"]) == ("x-*", [0.25], [8, 9])
    assert (in_tmp / "s.md").read_text() == "harness bench --speedup --report s.md"


@pytest.mark.parametrize("cuda", [False, True], ids=["no-cuda", "cuda"])
def test_each_mode_resolves_device_through_harness_env(in_tmp, monkeypatch, capsys, cuda):
    # --speedup: one device, the CPU by default, auto as `harness run` (CUDA when available);
    # the timing suite: every device, auto (its default) the CPU plus CUDA when present
    import harness.bench.speedup as speedup
    import harness.bench.speedup_report as report
    import harness.bench.suite as suite

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    seen = []
    monkeypatch.setattr(speedup, "measure_speedups", lambda **kw: seen.append(kw["device"]) or [])
    monkeypatch.setattr(report, "speedup_markdown", lambda rows, command, device, **kw: device)
    for device in ([], ["--device", "cpu"], ["--device", "auto"]):
        assert main(["bench", "--speedup", "--report", "s.md", *device]) == 0
        assert (in_tmp / "s.md").read_text() == seen[-1]  # the report names the device measured
    assert seen == ["cpu", "cpu", "cuda" if cuda else "cpu"]

    timed = []
    monkeypatch.setattr(suite, "run_bench", lambda *a, **kw: timed.append(a[3]) or [])
    for device in ([], ["--device", "auto"], ["--device", "cpu"]):
        assert main(["bench", "--task", "adding", *device]) == 0
    assert timed == ["auto", "auto", "cpu"]  # run_bench times on env.bench_devices of these
    if not cuda:
        assert main(["bench", "--speedup", "--report", "c.md", "--device", "cuda"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].endswith("--device cuda requested but no CUDA device is available")
        assert not (in_tmp / "c.md").exists()


def test_timing_suite_writes_timing_report_naming_its_command(in_tmp, capsys):
    args = ["bench", "--task", "adding", "--methods", "gru", "--rounds", "1", "--warmup", "0"]
    args += ["--device", "cpu"]
    assert main(args) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [".benchmarks/timing.jsonl", ".benchmarks/TIMING.md"]
    text = (in_tmp / ".benchmarks" / "TIMING.md").read_text()
    assert "`harness " + " ".join(args) + "`" in text and "host-process" not in text
    gru = next(ln for ln in text.splitlines() if ln.startswith("| gru |"))
    header = next(ln for ln in text.splitlines() if ln.startswith("| Method |"))
    per_mac = header.split(" | ").index("× cell per MAC ↓")
    assert gru.split(" | ")[per_mac] != "–"  # the time per MAC against the fused GRU
    assert not (in_tmp / ".benchmarks" / "SPEEDUP.md").exists()


def test_timing_suite_takes_several_tasks_and_says_which_it_skips(in_tmp, capsys):
    args = ["bench", "--task", "synthetic,yahoo,adding", "--methods", "rnn", "--rounds", "1"]
    args += ["--warmup", "0", "--device", "cpu", "--data-dir", str(in_tmp / "no-data")]
    args += ["--set", "seq_len=4", "--set", "hidden_size=4", "--set", "n_test=8"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out.split() == [".benchmarks/timing.jsonl", ".benchmarks/TIMING.md"]
    skips = [ln for ln in err.splitlines() if "yahoo" in ln]
    assert len(skips) == 1 and skips[0].startswith("task 'yahoo' skipped: no usable data")
    assert "`rnn` train on cpu (synthetic): " in err and "`rnn` train on cpu (adding): " in err
    text = (in_tmp / ".benchmarks" / "TIMING.md").read_text()
    heads = [ln.split(" on ")[0] for ln in text.splitlines() if ln.startswith("## ")]
    assert heads == ["## synthetic (smoke preset)", "## adding (smoke preset)", "## Not timed"]


def test_timing_suite_with_no_task_that_has_data_is_one_line(in_tmp, capsys):
    args = ["bench", "--task", "yahoo", "--device", "cpu", "--data-dir", str(in_tmp / "none")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no usable data for task 'yahoo'" in err[0]


def test_a_timing_report_rendered_from_stores_timed_in_parallel(in_tmp, capsys):
    """Two timing commands with their own --out (as on two cores), one report from both: each
    task's table in the order the stores are given, each timing command named; nothing timed."""
    tiny = ["--methods", "rnn", "--rounds", "1", "--warmup", "0", "--device", "cpu"]
    tiny += ["--set", "seq_len=4", "--set", "hidden_size=4", "--set", "n_test=8"]
    timed = []
    for task in ("adding", "synthetic"):
        timed.append(["bench", "--task", task, "--out", task, *tiny])
        assert main(timed[-1]) == 0
    capsys.readouterr()
    args = ["bench", "--from", "synthetic,adding/timing.jsonl", "--report", "T.md"]
    assert main(args) == 0
    assert capsys.readouterr().out.split() == ["T.md", "T.jsonl"]
    text = (in_tmp / "T.md").read_text()
    # beside the report, the timings it shows: its data, for 'harness bench --from T.jsonl'
    stored = [json.loads(x) for s in ("synthetic", "adding") for x in open(f"{s}/timing.jsonl")]
    assert [json.loads(x) for x in open("T.jsonl")] == stored
    assert main(["bench", "--from", "T.jsonl", "--report", "T2.md"]) == 0
    assert (in_tmp / "T2.md").read_text().split("\n## ")[1:] == text.split("\n## ")[1:]
    assert main(args) == 2  # never over records: the data file of the first rendering
    assert "T.jsonl holds run records" in capsys.readouterr().err
    heads = [ln.split(" on ")[0] for ln in text.splitlines() if ln.startswith("## ")]
    assert heads == ["## synthetic (smoke preset)", "## adding (smoke preset)"]
    assert "`harness " + " ".join(args) + "`" in text
    assert all(f"- Timed by `harness {' '.join(t)}`." in text for t in timed)
    assert "- Merged from these runs: each ratio is against the reference timed in its own" in text
    # the rendering refuses to write over an input, needs --report, and times nothing
    assert main(["bench", "--from", "adding", "--report", "adding/timing.jsonl"]) == 2
    assert main(["bench", "--from", "adding"]) == 2
    assert main(["bench", "--from", "adding", "--report", "U.md", "--rounds", "3"]) == 2
    assert main(["bench", "--from", "nowhere", "--report", "U.md"]) == 2
    assert main(["bench", "--speedup", "--from", "adding", "--report", "U.md"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 5 and "--from" in err[0] and "--report" in err[1]
    assert "--rounds" in err[2] and "nowhere" in err[3]
    assert "--from: only used by the timing suite (without --speedup)" in err[4]


def test_methods_of_one_task_timed_apart_share_the_references_shown(in_tmp, capsys):
    """One task's methods split over two timing commands: the report shows each reference once
    (the last run's timing of it); each ratio stays against its own run's reference."""
    tiny = ["--task", "adding", "--rounds", "1", "--warmup", "0", "--device", "cpu"]
    tiny += ["--set", "seq_len=4", "--set", "hidden_size=4", "--set", "n_test=8"]
    for m in ("gru", "skip-rnn"):
        assert main(["bench", "--methods", m, "--out", m, *tiny]) == 0
    assert main(["bench", "--from", "gru,skip-rnn", "--report", "T.md"]) == 0
    capsys.readouterr()
    text = (in_tmp / "T.md").read_text()
    for ref in ("torch.nn.GRU (fused)", "torch.nn.GRUCell (step loop)"):
        rows = [ln for ln in text.splitlines() if ln.startswith(f"| **{ref}** (reference) |")]
        assert len(rows) == 1, rows


def test_print_prints_parts_of_a_reports_data_and_writes_nothing(in_tmp, capsys):
    """--print: parts of the timing records (or with --speedup of the speedup rows) --from names,
    selected by --where; nothing is timed or written, and an option that would be is refused."""
    tiny = ["--task", "adding", "--rounds", "1", "--warmup", "0", "--device", "cpu"]
    tiny += ["--set", "seq_len=4", "--set", "hidden_size=4", "--set", "n_test=8"]
    assert main(["bench", "--methods", "gru,lstm", "--out", "t", *tiny]) == 0
    (in_tmp / "S.jsonl").write_text(
        json.dumps({"method": "sa-rnn", "D": 8, "B": 1, "T": 5, "V": 2, "target_skip": 0.5,
                    "skip": 0.5, "fast_ms": 1.0, "dense_ms": 3.0, "speedup_dense": 3.0,
                    "mac_ratio_dense": 2.0, "realised_frac_dense": 1.5}) + "\n"
    )  # fmt: skip
    capsys.readouterr()
    before = sorted(p.name for p in in_tmp.rglob("*"))

    assert main(["bench", "--from", "t", "--print", "times", "--where", "method=lstm"]) == 0
    out, err = capsys.readouterr()
    rec = next(
        r for r in map(json.loads, open("t/timing.jsonl"))
        if r["method"] == "lstm" and r["phase"] == "train"
    )  # fmt: skip
    from harness.bench.timing_report import format_ms

    assert err == "" and out.startswith("*`t`: adding (smoke preset) on ")
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and "Method" not in ln]
    assert len(rows) == 1 and rows[0].startswith("| lstm | LSTM | 4 | ")
    assert f"| {format_ms(rec['median_s'])} (" in rows[0]
    assert main(["bench", "--speedup", "--from", "S.jsonl", "--print", "rows,above"]) == 0
    out = capsys.readouterr().out
    assert "| sa-rnn | 8 | 1 | 50 | 50.0 | 1.00 / 3.00 / – / – | 3.00x (2.00x, 1.50) | – | – |" in (
        out
    )
    said = "Realised above 1 (speedup above the MAC ratio): 1 of 1 rows against the own dense "
    assert said in out
    assert sorted(p.name for p in in_tmp.rglob("*")) == before  # nothing written

    refused = {
        ("--print", "rows"): "--print rows: not a part without --speedup (choose from times, cost)",
        ("--speedup", "--print", "times"): "--print times: not a part with --speedup",
        ("--print", "times", "--from", "t", "--rounds", "3"): "--rounds: only used when measuring",
        ("--print", "times"): "--print: name the records to print from with --from",
        ("--from", "t", "--print", "times", "--where", "nope=1"): "--where nope: no record has",
        ("--from", "t", "--print", "times", "--suite", "sei-table2"): "--suite: only used with "
        "--print cost",
        ("--from", "t", "--print", "cost", "--suite", "sei-table2"): "--print cost: name the "
        "suite (--suite) and its epoch (--epoch-batches)",
        ("--task", "adding", "--where", "method=gru"): "--where: only used with --print",
        ("--from", "t", "--print", "cost", "--suite", "sei-table2", "--epoch-batches", "2"):
        "--print cost: no train timing at suite sei-table2's task, har (paper preset), in t",
    }  # fmt: skip
    for args, says in refused.items():
        assert main(["bench", *args]) == 2, args
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, (args, err)
    # a filter that keeps nothing warns (a docs block fails on it)
    assert main(["bench", "--from", "t", "--print", "times", "--where", "method=rnn"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("", "warning: --where method=rnn: no record matches\n")
