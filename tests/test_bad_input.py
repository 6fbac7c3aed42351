"""Bad flags and values are refused before anything starts: one line on stderr, exit code 2.

Every case calls the command line in-process (``harness.cli.main``), as the shell would, in a
scratch directory holding ``blocker`` (a regular file, so ``blocker/sub`` cannot be created) and
``a.jsonl`` (one well-formed record, for ``compare``).
"""

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.cli.common import parse_seeds
from harness.components import config
from harness.errors import ConfigError, HarnessError
from harness.planning import sweep
from harness.training.train import out_of_memory_as_error

RUN = ["run", "--tasks", "adding", "--methods", "gru", "--no-report", "--out", "r.jsonl"]
FLOPS = ["flops", "--task", "adding", "--methods", "gru"]
BENCH = ["bench", "--task", "adding", "--methods", "gru"]
SPEEDUP = ["bench", "--speedup", "--methods", "gru"]
COMPARE = ["compare", "a.jsonl"]

# a real run record (the reference's gru on adding), so that it passes the record checks
REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "smoke.jsonl"
RECORD = next(
    r
    for r in map(json.loads, REFERENCE.read_text().splitlines())
    if (r["method"], r["task"], r["seed"]) == ("gru", "adding", 0)
)

CASES = [
    # 1. non-finite hyperparameters, in --set and --grid
    (RUN + ["--set", "lr=inf"], "'lr' expects a finite number, got 'inf'"),
    (RUN + ["--set", "clip=nan"], "'clip' expects a finite number, got 'nan'"),
    (RUN + ["--grid", "train.lr=0.1,-inf"], "'train.lr' expects a finite number, got '-inf'"),
    (FLOPS + ["--set", "weight_decay=NaN"], "'weight_decay' expects a finite number"),
    # 2. seeds: negative, and too many (refused before a range is expanded)
    (RUN + ["--seeds", "-1"], "--seeds expects e.g. 0-4 or 0,1,2 (seeds >= 0); got '-1'"),
    (RUN + ["--seeds", "0,-3"], "(seeds >= 0); got '0,-3'"),
    (RUN + ["--seeds", "0-9999999"], "gives 10,000,000 seeds; at most 10,000 are allowed"),
    (
        ["run", "--tasks", "adding", "--methods", "all", "--seeds", "0-9999", "--grid", "lam=0,1"],
        "methods x 2 grid points x 10,000 seeds); at most 100,000 are allowed",
    ),
    # 3. one key twice, or two spellings of one key, with different values
    (RUN + ["--set", "lr=0.1", "--set", "train.lr=0.02"], "'lr=0.1' and 'train.lr=0.02' set"),
    (RUN + ["--set", "lr=0.1", "--set", "lr=0.02"], "--set lr=0.1 and --set lr=0.02 conflict"),
    (RUN + ["--grid", "lr=0.1,0.2", "--grid", "lr=0.3"], "--grid lr=0.1,0.2 and --grid lr=0.3"),
    (RUN + ["--set", "lr=0.1", "--grid", "lr=0.1,0.2"], "'lr' is given to both --set and --grid"),
    (FLOPS + ["--set", "hidden_size=8", "--set", "model.hidden_size=16"], "model.hidden_size"),
    # a compiled step asked of a method that has none
    (RUN + ["--set", "compile=true"], "train.compile: method 'gru' has no compiled step"),
    # 4. compare: tolerances, records it cannot read, where it would write
    (COMPARE + ["a.jsonl", "--tol", "metrics=nan"], "tolerances must be finite numbers >= 0"),
    (COMPARE + ["a.jsonl", "--tol", "metrics=inf"], "'metrics=inf': tolerances must be finite"),
    (COMPARE + ["a.jsonl", "--tol", "metrics=-1e-6"], "tolerances must be finite numbers >= 0"),
    (COMPARE + ["a.jsonl", "--tol", "metrics=0:-0.1"], "tolerances must be finite numbers >= 0"),
    (COMPARE + ["a.jsonl", "--tol", "=1"], "--tol expects MEASURE=ABS or MEASURE=ABS:REL"),
    (COMPARE + ["torn.jsonl"], "torn.jsonl:2: malformed record skipped"),
    (COMPARE + ["torn.jsonl"], "'harness store repair FILE', or pass --skip-malformed"),
    (COMPARE + ["future.jsonl"], "schema version 99 is unknown"),
    (
        COMPARE + ["a.jsonl", "--markdown", "blocker/d.md"],
        "cannot write blocker/d.md: blocker is a file, not a folder",
    ),
    # 5. a model that cannot be allocated
    # (the largest sizes the bounds admit: about 6 TB of weights, refused by any allocator)
    (
        FLOPS + ["--set", "hidden_size=65536", "--set", "num_layers=64"],
        "does not fit in memory (hidden_size=65536, num_layers=64",
    ),
    (
        RUN + ["--set", "hidden_size=65536", "--set", "num_layers=64"],
        "gru on adding (smoke): does not fit in memory",
    ),
    (FLOPS + ["--set", "hidden_size=1000000"], "hidden_size=1000000 is out of range"),
    # 6. bench: outputs that cannot be written, numbers out of range
    (BENCH + ["--out", "blocker/sub"], "cannot write blocker/sub: blocker is a file, not a folder"),
    (
        BENCH + ["--report", "blocker/t.md"],
        "cannot write blocker/t.md: blocker is a file, not a folder",
    ),
    (BENCH + ["--report", "."], "cannot write .: it is a folder, not a regular file"),
    (
        SPEEDUP + ["--report", "blocker/s.md"],
        "cannot write blocker/s.md: blocker is a file, not a folder",
    ),
    (SPEEDUP + ["--seq-len", "0"], "argument --seq-len: must be >= 1 (got 0)"),
    (SPEEDUP + ["--seq-len", "-5"], "argument --seq-len: must be >= 1 (got -5)"),
    (SPEEDUP + ["--skips", "0.5,1"], "argument --skips: must be in [0, 1) (got 1)"),
    (SPEEDUP + ["--budget", "inf"], "argument --budget: expects a finite number, got 'inf'"),
    (SPEEDUP + ["--hidden", "0"], "argument --hidden: must be >= 1"),
    (SPEEDUP + ["--batches", "-1"], "argument --batches: must be >= 1"),
    (BENCH + ["--rounds", "0"], "argument --rounds: must be >= 1"),
    (BENCH + ["--warmup", "-1"], "argument --warmup: must be >= 0"),
    (BENCH + ["--threads", "-2"], "argument --threads: must be >= 0"),
    (FLOPS + ["--batch", "-1"], "argument --batch: must be >= 1"),
    # 7. report --task: names and globs, resolved like 'run --tasks'
    (["report", "a.jsonl", "--paper", "--task", "adding,nope"], "Unknown task 'nope'"),
    (["report", "a.jsonl", "--paper", "--task", "zz*"], "No task matches 'zz*'"),
    (["report", "a.jsonl", "--task", "adding"], "--task: only used with --paper"),
    (["report", "a.jsonl", "--out-dir", "x"], "--out-dir: only used with --paper (the leaderbo"),
    (["report", "a.jsonl", "--against", "gru"], "--against: only used with --paper (the leaderb"),
    (["report", "a.jsonl", "--paper", "--against", "gru,sa_rnn"], "Unknown method 'sa_rnn'. Did"),
    (["report", "a.jsonl", "--paper", "--out", "x.md"], "--out: the leaderboard's file; --paper"),
    (["report", "a.jsonl", "--tex-root", "x"], "--tex-root: only used with --paper (the leader"),
    (["report", "a.jsonl", "--width", "column"], "--width: the LaTeX versions, with --format tex"),
    (["report", "a.jsonl", "--paper", "--format", "md", "--width", "column"], "--width: the LaT"),
    (["report", "a.jsonl", "--paper", "--out-dir", "p", "--tex-root", "q"], "--tex-root q does no"),
    # 8. options with fixed values: argparse choices, before anything starts
    (RUN + ["--match-skip", "nan"], "argument --match-skip: expects a finite number, got 'nan'"),
    (RUN + ["--match-skip", "-5"], "argument --match-skip: must be >= 0 (got -5)"),
    (RUN + ["--device", "gpu"], "argument --device: invalid choice: 'gpu'"),
    (RUN + ["--preset", "huge"], "argument --preset: invalid choice: 'huge'"),
    (RUN + ["--executor", "dask"], "argument --executor: invalid choice: 'dask'"),
    (BENCH + ["--device", "gpu"], "argument --device: invalid choice: 'gpu'"),
    (BENCH + ["--preset", "huge"], "argument --preset: invalid choice: 'huge'"),
    (FLOPS + ["--preset", "huge"], "argument --preset: invalid choice: 'huge'"),
    (["report", "a.jsonl", "--paper", "--preset", "huge"], "invalid choice: 'huge'"),
    (["report", "a.jsonl", "--paper", "--formats", "pdf"], "unknown value 'pdf'"),
    (["report", "a.jsonl", "--paper", "--width", "half"], "unknown value 'half'"),
]


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """``cli(args)``: run the CLI in a scratch directory; (exit code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "blocker").write_text("a file, not a directory")
    (tmp_path / "a.jsonl").write_text(json.dumps(RECORD) + "\n")
    (tmp_path / "torn.jsonl").write_text(json.dumps(RECORD) + '\n{"schema": 1, "run_')
    (tmp_path / "future.jsonl").write_text(json.dumps(dict(RECORD, schema=99)) + "\n")

    def call(args):
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's usage errors
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err

    return call


@pytest.mark.parametrize("args,needle", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(cli, monkeypatch, args, needle):
    # nothing may start: a benchmark or a training run reached here is a failure of the test
    def started(*a, **k):
        raise AssertionError("the work started before the input was checked")

    monkeypatch.setattr("harness.bench.suite.run_bench", started)
    monkeypatch.setattr("harness.bench.speedup.measure_speedups", started)
    monkeypatch.setattr("harness.training.train.run", started)
    before = sorted(p.name for p in Path.cwd().iterdir())
    code, _, err = cli(args)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert needle in lines[0], err
    assert "Traceback" not in err
    assert sorted(p.name for p in Path.cwd().iterdir()) == before  # nothing was created


def test_seeds_are_counted_before_they_are_expanded():
    assert parse_seeds("0-2,1-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("7") == [7]
    with pytest.raises(ConfigError, match="gives 100,000,000,000 seeds"):
        parse_seeds("0-99999999999")  # would take minutes and gigabytes if expanded first


def test_repeated_keys_with_the_same_value_are_accepted():
    cfgs = sweep.build_configs(["gru"], ["adding"], [0], "smoke", {"lr": "0.1", "train.lr": "1e-1"})
    assert cfgs[0].train.lr == 0.1
    assert config.parse_set(["lr=0.1", " lr = 0.1"]) == {"lr": "0.1"}


def test_an_allocation_failure_names_the_model(monkeypatch, capsys):
    def no_memory(*a, **k):
        raise MemoryError()

    monkeypatch.setattr("harness.training.train.build", no_memory)
    assert main(FLOPS + ["--set", "hidden_size=48"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: gru on adding (smoke): does not fit in memory (hidden_size=48, num_layers=1)"
    ]


def test_other_runtime_errors_are_not_taken_for_memory():
    cfg = sweep.build_configs(["gru"], ["adding"], [0], "smoke", {})[0]
    with pytest.raises(RuntimeError, match="shape mismatch"):
        with out_of_memory_as_error(cfg):
            raise RuntimeError("shape mismatch")


def test_report_task_takes_names_and_globs(cli, monkeypatch):
    seen = {}

    def fake_report(records, sources, out_dir, tasks=None, **kwargs):
        seen["tasks"] = tasks
        return []

    monkeypatch.setattr("harness.reporting.paper.write_paper_report", fake_report)
    code, _, err = cli(["report", "a.jsonl", "--paper", "--task", "synth*,adding"])
    assert code == 0, err
    assert seen["tasks"][-1] == "adding" and "synthetic" in seen["tasks"]
    assert all(t.startswith("synth") for t in seen["tasks"][:-1])


def test_compare_only_present_leaves_out_the_runs_not_in_both(cli, tmp_path):
    other = dict(RECORD, run_id="1111111111111111", seed=1)
    (tmp_path / "both.jsonl").write_text(json.dumps(RECORD) + "\n" + json.dumps(other) + "\n")
    code, _, err = cli(COMPARE + ["both.jsonl"])
    assert code == 0, err  # a new run in current is not a failure
    code, _, err = cli(["compare", "both.jsonl", "a.jsonl"])
    assert code == 1 and "missing from current: gru/adding/smoke/seed1" in err
    code, _, err = cli(["compare", "both.jsonl", "a.jsonl", "--only-present", "--markdown", "d.md"])
    assert code == 0, err
    assert "left out (not in both): 1 reference run(s), 0 current run(s)" in err
    assert "PASS: 1 matched, 0 drifted, 0 missing" in err
    assert "left out 1 reference and 0 current run(s)" in (tmp_path / "d.md").read_text()
    (tmp_path / "elsewhere.jsonl").write_text(json.dumps(other) + "\n")
    code, _, err = cli(["compare", "a.jsonl", "elsewhere.jsonl", "--only-present"])
    assert code == 1 and "no run is in both" in err  # nothing compared is not a pass


def test_compare_skip_malformed_names_each_line_it_skipped(cli):
    code, _, err = cli(COMPARE + ["torn.jsonl", "--skip-malformed"])
    assert code == 0, err
    assert "\ntorn.jsonl:2: malformed record skipped" in "\n" + err
    code, _, err = cli(["compare", "future.jsonl", "a.jsonl", "--skip-malformed"])
    assert "future.jsonl:1: malformed record skipped (schema version 99" in err
    # nothing usable in the reference: nothing compared, which fails unless allowed
    assert code == 1 and "0 matched" in err and "1 new" in err
    assert "nothing compared: the reference holds no run record" in err
    code, _, err = cli(["compare", "future.jsonl", "a.jsonl", "--skip-malformed", "--allow-empty"])
    assert code == 0 and "accepted (--allow-empty)" in err


def test_a_speedup_measurement_out_of_memory_is_one_line(cli, monkeypatch):
    def no_memory(**kwargs):
        raise RuntimeError(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate "
            "4294967296 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr("harness.bench.speedup.measure_speedups", no_memory)
    code, _, err = cli(SPEEDUP + ["--hidden", "32768", "--report", "s.md"])
    assert code == 2 and err.strip().splitlines() == [
        "error: the speedup measurement (--hidden 32768, --batches 1,32, --seq-len 50) does not "
        "fit in memory; it asked for 4.0 GiB"
    ]


def test_flops_and_bench_task_take_globs():
    from harness.cli.common import require_task

    assert require_task("add*", "flops") == "adding"
    assert require_task("adding,syn*", "bench", many=True) == "adding,synthetic"
    with pytest.raises(ConfigError, match="takes one task; '\\*' matches adding"):
        require_task("*", "flops")
    with pytest.raises(HarnessError, match="Unknown task"):
        require_task("nope", "flops")
