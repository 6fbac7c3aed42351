"""``harness run`` as a daily tool: sweep files, suites, dry runs, progress, reports, exit codes.

Everything is called in-process (``harness.cli.main``) on the data-free tasks at smoke sizes.
"""

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import api
from harness.cli.progress import SweepProgress, fmt_duration
from harness.cli.run import given_options

ONE_RUN = ("run", "--tasks", "adding", "--methods", "gru", "--set", "train.epochs=1")


def one_line_error(p, needle: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], p.stderr


def test_options_are_checked_before_anything_even_with_nothing_to_run(
    tmp_path, harness, monkeypatch
):
    harness(*ONE_RUN, "--out", "r", "--no-report", check=True)
    before = (tmp_path / "r" / "runs.jsonl").read_text()
    cases = [
        (["--ray-address", "ray://head:10001"], "--ray-address is only used with --executor ray"),
        (["--ray-connect-timeout", "30"], "--ray-connect-timeout is only used with --executor ray"),
        (
            ["--executor", "ray", "--ray-connect-timeout", "1", "--dry-run"],  # starts no Ray
            "--ray-connect-timeout: must be >= 5",
        ),
        (
            ["--executor", "ray", "--workers", "2"],
            "--workers is only used with --executor local or",
        ),
        (["--workers", "0"], "--workers: must be >= 1"),
        (["--executor", "dask"], "invalid choice: 'dask'"),
    ]
    for extra, needle in cases:
        p = harness(*ONE_RUN, "--out", "r", *extra)
        one_line_error(p, needle)  # no "1 runs: 1 already recorded" header first
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
    one_line_error(harness(*ONE_RUN, "--out", "r", "--executor", "ray"), "needs Ray: pip install")
    assert (tmp_path / "r" / "runs.jsonl").read_text() == before
    assert not (tmp_path / "r" / "LEADERBOARD.md").exists()


def test_device_cuda_without_cuda_is_rejected_up_front(harness):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    one_line_error(harness(*ONE_RUN, "--device", "cuda"), "no CUDA device is available")


def test_given_options_sees_explicit_and_abbreviated_flags():
    from harness.cli import make_parser

    argv = ["run", "--seeds", "0", "--work", "2", "--set", "a=1"]
    parser = make_parser().parse_args(argv).parser  # run's own parser
    assert given_options(parser, argv) == {"seeds", "workers", "set"}
    assert given_options(parser, ["run"]) == set()
    assert parser.parse_args([]).workers == 1  # the defaults are back


def test_the_api_plans_a_typed_request_its_sweep_file_filling_what_was_not_given(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('tasks = "adding"\nmethods = "gru"\nseeds = "0-2"\nworkers = 2\n')
    out = tmp_path / "r"
    request = api.RunRequest(config=str(sweep), seeds="5", out=str(out), dry_run=True)
    job = api.prepare_run(request)  # nothing given: the file's seeds win over the field's
    assert (job.request.tasks, job.request.methods, job.spec.seeds) == ("adding", "gru", [0, 1, 2])
    assert job.executor[0] == "pool" and job.executor[1].workers == 2  # the file's executor key
    job = api.prepare_run(api.RunRequest(**{**vars(request), "given": frozenset({"seeds"})}))
    assert job.spec.seeds == [5]  # given as a flag: it wins over the file
    resume, recorded = job.plan()
    assert [c.seed for c in resume.todo] == [5] and recorded == []
    assert not out.exists()  # planned only: nothing written
    with pytest.raises(api.ConfigError, match="not both"):
        api.prepare_run(api.RunRequest(config=str(sweep), suite="ssa-table4"))


SWEEP = """
description = "a test sweep"
tasks = "adding"
methods = ["gru", "sa-rnn"]
seeds = "0-1"
set = { "train.epochs" = 1, hidden_size = 6 }
grid = { lam = [0, 0.01] }
"""


def dry_rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.strip().splitlines()[1:]]


def test_config_file_holds_the_flags_and_flags_override_it(tmp_path, harness):
    (tmp_path / "s.toml").write_text(SWEEP)
    p = harness("run", "--config", "s.toml", "--dry-run", check=True)
    rows = dry_rows(p.stdout)
    # gru has no lam: 2 seeds; sa-rnn: 2 lambdas x 2 seeds
    assert len(rows) == 6 and "6 runs: 0 already recorded" in p.stderr
    assert sorted(r[-1] for r in rows if r[2] == "sa-rnn") == ["lam=0.0"] * 2 + ["lam=0.01"] * 2
    p = harness("run", "--config", "s.toml", "--dry-run", "--seeds", "3", "--grid", "lam=1")
    rows = dry_rows(p.stdout)
    assert [(r[2], r[4]) for r in rows] == [("gru", "3"), ("sa-rnn", "3")]
    # --set beside the file overrides the file's key, and keeps its other keys
    argv = ["run", "--config", "s.toml", "--seeds", "0", "--methods", "sa-rnn", "--grid", "lam=0"]
    harness(*argv, "--set", "hidden_size=5", "--out", "o", check=True)
    (rec,) = [json.loads(x) for x in (tmp_path / "o" / "runs.jsonl").read_text().splitlines()]
    assert rec["config"]["model"]["hidden_size"] == 5 and rec["config"]["train"]["epochs"] == 1
    assert rec["argv"] == ["harness", *argv, "--set", "hidden_size=5", "--out", "o"]
    assert rec["sweep"]["config"] == "s.toml"
    (block,) = rec["sweep"]["blocks"]
    assert block["methods"] == ["sa-rnn"] and block["grid"] == {"lam": ["0"]}
    assert block["set"] == {"train.epochs": "1", "hidden_size": "5"}
    assert rec["sweep"]["seeds"] == [0]
    # the other spelling of a file's key overrides it too (not a conflict)
    p = harness(*argv, "--set", "epochs=2", "--dry-run", check=True)
    p = harness(*argv, "--set", "model.hidden_size=7", "--out", "o2", check=True)
    (rec,) = [json.loads(x) for x in (tmp_path / "o2" / "runs.jsonl").read_text().splitlines()]
    assert rec["config"]["model"]["hidden_size"] == 7


def test_config_file_parts_and_yaml(tmp_path, harness):
    (tmp_path / "p.toml").write_text(
        'tasks = "adding"\nset = { "train.epochs" = 1 }\n'
        '[[part]]\nmethods = "gru"\nset = { hidden_size = 4 }\n'
        '[[part]]\nmethods = ["sa-rnn", "skip-rnn"]\ngrid = { lam = [0, 1] }\n'
    )
    rows = dry_rows(harness("run", "--config", "p.toml", "--dry-run", check=True).stdout)
    assert len(rows) == 5  # gru once, sa-rnn and skip-rnn at two lambdas
    # beside a file with parts, --methods keeps the matching methods of each part
    rows = dry_rows(
        harness("run", "--config", "p.toml", "--dry-run", "--methods", "sa-*", check=True).stdout
    )
    assert {r[2] for r in rows} == {"sa-rnn"} and len(rows) == 2
    one_line_error(
        harness("run", "--config", "p.toml", "--methods", "lstm"), "select no run of p.toml"
    )
    (tmp_path / "y.yaml").write_text("tasks: adding\nmethods: [gru]\nseeds: [0, 1]\n")
    rows = dry_rows(harness("run", "--config", "y.yaml", "--dry-run", check=True).stdout)
    assert [r[4] for r in rows] == ["0", "1"]


@pytest.mark.parametrize(
    "text,needle",
    [
        ('tasks = "adding"\nepochs = 3\n', "s.toml: unknown key 'epochs' (keys: "),
        ('workers = "two"\n', "'workers' expects an integer in [1, 1024], got 'two'"),
        ('executor = "dask"\n', "'executor' expects one of local, pool, ray, submitit, got 'dask'"),
        ("set = { lr = nan }\n", "'set'.lr expects a finite number"),
        ("grid = { lam = 1 }\n", "'grid'.lam expects a non-empty list of values"),
        ("[[part]]\nmethod = 'gru'\n", "s.toml: part 1: unknown key 'method'"),
        ("tasks = [", "s.toml: not valid TOML"),
        ('methods = "grux"\n', "Unknown method 'grux'"),
    ],
)
def test_bad_config_file_gives_one_line(tmp_path, harness, text, needle):
    (tmp_path / "s.toml").write_text(text)
    one_line_error(harness("run", "--config", "s.toml", "--dry-run"), needle)


def test_config_file_errors_of_their_own(tmp_path, harness, monkeypatch):
    one_line_error(harness("run", "--config", "nope.toml"), "cannot read nope.toml")
    (tmp_path / "s.json").write_text("{}")
    one_line_error(harness("run", "--config", "s.json"), "a sweep file is .toml, .yaml or .yml")
    one_line_error(harness("run", "--suite", "ssa-table9"), "Unknown suite 'ssa-table9'")
    (tmp_path / "s.toml").write_text("")
    one_line_error(harness("run", "--config", "s.toml", "--suite", "ssa-table1"), "not both")
    (tmp_path / "y.yml").write_text("tasks: adding\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # PyYAML not installed
    one_line_error(harness("run", "--config", "y.yml"), "YAML sweep files need PyYAML")


def test_every_suite_resolves_without_running(harness):
    from harness.cli.common import parse_seeds
    from harness.planning import suites

    names = suites.suite_names()
    assert {f"ssa-table{i}" for i in range(1, 5)} | {"ssa-figure5"} <= set(names)
    assert {f"sei-table{i}" for i in range(1, 4)} <= set(names)
    listing = harness("run", "--suite", "list", check=True).stdout
    for name in names:
        sweep = suites.load(suites.suite_path(name))
        assert sweep.description and name in listing
        opts = sweep.options
        assert opts["preset"] == "paper"
        blocks = suites.plan(sweep, "all", opts.get("tasks", "all"), {}, {}, set())
        spec = api.SweepSpec([api.Block(*b) for b in blocks], parse_seeds(opts["seeds"]), "paper")
        cfgs = api.resolve_configs(spec)
        assert cfgs, name
        assert len({c.run_id for c in cfgs}) == len(cfgs)
    table4 = suites.load(suites.suite_path("ssa-table4"))
    blocks = suites.plan(table4, "all", "adding", {}, {}, set())
    cfgs = api.resolve_configs(api.SweepSpec([api.Block(*b) for b in blocks], [0], "paper"))
    lams = sorted(c.method_cfg.lam for c in cfgs if c.method == "sa-rnn")
    assert lams == [0.0, 1e-5, 1e-4] and {c.model.hidden_size for c in cfgs} == {128}


def test_dry_run_writes_nothing_and_tells_recorded_from_to_run(tmp_path, harness):
    p = harness(*ONE_RUN, "--seeds", "0-1", "--out", "d", "--dry-run", check=True)
    assert not (tmp_path / "d").exists() and not (tmp_path / "reports").exists()
    assert [r[0] for r in dry_rows(p.stdout)] == ["to", "to"] and "nothing was run" in p.stderr
    harness(*ONE_RUN, "--seeds", "0", "--out", "d", "--no-report", check=True)
    p = harness(*ONE_RUN, "--seeds", "0-1", "--out", "d", "--dry-run", check=True)
    assert [r[0] for r in dry_rows(p.stdout)] == ["recorded", "to"]
    assert len((tmp_path / "d" / "runs.jsonl").read_text().splitlines()) == 1
    # the time the runs to run would take, from the recorded seed of the same variant
    assert "estimated time: " in p.stderr and "(1 from recorded seeds of the same variant" in (
        p.stderr
    )


def estimate_seconds(todo, records):
    """The summed estimate of ``todo`` (``estimate_runs``), and how each run was estimated."""
    from harness.planning.sweep import estimate_runs

    per_run, counts = estimate_runs(todo, records)
    return sum(s for s in per_run if s is not None), counts


def test_estimate_seconds_from_the_variant_then_the_method():
    from harness.components import config

    a0, a1 = (config.resolve("gru", "adding", s, "smoke") for s in (0, 1))
    other = config.resolve("gru", "adding", 0, "smoke", {"hidden_size": "7"})
    lstm = config.resolve("lstm", "adding", 0, "smoke")

    def rec(cfg, train_s, status="ok", epochs_run=None):
        return {
            "run_id": cfg.run_id, "variant_id": cfg.variant_id, "method": cfg.method,
            "task": cfg.task, "preset": cfg.preset, "seed": cfg.seed, "status": status,
            "time": {"train_s": train_s, "eval_s": 1.0}, "epochs_run": epochs_run,
        }  # fmt: skip

    recs = [rec(a0, 9.0), rec(other, 99.0), rec(lstm, 5.0, "failed")]
    s, n = estimate_seconds([a1], recs)  # the same variant's seed: 9 + 1
    assert (s, n) == (10.0, {"variant": 1, "method": 0, "unknown": 0})
    s, n = estimate_seconds([other, a1, lstm], recs[1:])  # a1 by method (mean of 100); lstm: none
    assert (s, n) == (200.0, {"variant": 1, "method": 1, "unknown": 1})
    # by method, per epoch run: 100 s over one epoch is 100 s per epoch of a1's
    epochs = a1.train.epochs
    assert epochs > 1
    s, n = estimate_seconds([a1], [rec(other, 99.0, epochs_run=1)])
    assert (s, n) == (100.0 * epochs, {"variant": 0, "method": 1, "unknown": 0})
    s, n = estimate_seconds([other], [rec(other, 99.0, epochs_run=1)])  # its variant: as is
    assert s == 100.0


def test_estimate_seconds_counts_compilation_once_per_variant():
    """A compiled run's ``time.compile_s`` is paid once per variant (a cold cache), not per seed:
    the other seeds load the compiled graphs from inductor's cache."""
    from harness.components import config

    on = {"train.compile": "true"}
    s0, s1, s2 = (config.resolve("ei-rehn", "synthetic", s, "smoke", on) for s in (0, 1, 2))
    wide = config.resolve("ei-rehn", "synthetic", 0, "smoke", {**on, "hidden_size": "7"})

    def rec(cfg, train_s, compile_s=None):
        t = {"train_s": train_s, "eval_s": 1.0}
        if compile_s is not None:
            t["compile_s"] = compile_s
        return {
            "run_id": cfg.run_id, "variant_id": cfg.variant_id, "method": cfg.method,
            "task": cfg.task, "preset": cfg.preset, "seed": cfg.seed, "status": "ok",
            "time": t, "epochs_run": None,
        }  # fmt: skip

    # seed 0 compiled afresh (40 of its 50 s), seed 1 loaded from the cache (2 of 12 s)
    recs = [rec(s0, 50.0, 40.0), rec(s1, 12.0, 2.0)]
    s, n = estimate_seconds([s2], recs)  # steady 11 a run (mean of 11, 11) + 40 once
    assert (s, n) == (51.0, {"variant": 1, "method": 0, "unknown": 0})
    s, _ = estimate_seconds([s1, s2], recs)  # two runs, one compilation
    assert s == 2 * 11.0 + 40.0
    s, _ = estimate_seconds([wide], recs)  # another variant: its method's steady time + 40
    assert s == 11.0 + 40.0
    s, _ = estimate_seconds([s2], [rec(s0, 50.0)])  # records made before compile_s: as is
    assert s == 51.0


def test_progress_lines_show_variant_epochs_and_the_leaderboard_goes_next_to_out(tmp_path, harness):
    p = harness(
        "run",
        "--tasks",
        "adding",
        "--methods",
        "sa-rnn",
        "--grid",
        "lam=0,1e-2,1",
        "--set",
        "train.epochs=2",
        "--out",
        "sweeps/a.jsonl",
        "-v",
        check=True,
    )
    done = [line for line in p.stderr.splitlines() if line.startswith("✓")]
    assert len(done) == 3 and len(set(done)) == 3
    assert [line.split(":")[0] for line in done] == [
        f"✓ sa-rnn | adding seed 0 lam={lam}" for lam in ("0.0", "0.01", "1.0")
    ]
    assert all(line.endswith(" s)") for line in done)  # e.g. "(0.4 s)"
    assert "sa-rnn | adding seed 0 lam=1.0 epoch 2/2: train_loss " in p.stderr
    board = tmp_path / "sweeps" / "a.md"
    assert "## adding (smoke preset)" in board.read_text()
    assert "adding (smoke preset)" in map(str.strip, p.stdout.splitlines())  # printed as a table
    assert not (tmp_path / "reports").exists()
    harness(*ONE_RUN, "--out", "dir", check=True)
    assert (tmp_path / "dir" / "LEADERBOARD.md").exists()
    harness(*ONE_RUN, "--out", "dir", "--report", "reports/LEADERBOARD.md", check=True)
    assert (tmp_path / "reports" / "LEADERBOARD.md").exists()


def test_compare_ignores_the_command_line_and_sweep_in_records(tmp_path, harness):
    harness(*ONE_RUN, "--out", "a.jsonl", "--no-report", check=True)
    rec = json.loads((tmp_path / "a.jsonl").read_text())
    assert rec["argv"][:2] == ["harness", "run"] and rec["sweep"]["preset"] == "smoke"
    other = dict(rec, argv=["harness", "run", "--other"], sweep={"config": "elsewhere.toml"})
    (tmp_path / "b.jsonl").write_text(json.dumps(other) + "\n")
    assert harness("compare", "a.jsonl", "b.jsonl").returncode == 0


def test_durations_read_as_a_person_writes_them():
    assert fmt_duration(0.42) == "0.4 s"
    assert fmt_duration(12.4) == "12 s"
    assert fmt_duration(200) == "3 min 20 s"
    assert fmt_duration(7500) == "2 h 05 min"


def test_eta_comes_from_the_finished_runs():
    from rich.console import Console

    todo = [
        SimpleNamespace(
            run_id=str(i), method="m", task="t", seed=i, train=SimpleNamespace(epochs=3)
        )
        for i in range(3)
    ]
    console = Console(file=io.StringIO(), width=200)
    rec = {"status": "ok", "metrics": {"mse": 1.0, "skip_pct": 0.0}, "primary": "mse"}
    progress = SweepProgress(console, todo, {}, serial=True, verbose=False)
    with progress.progress:
        progress.started -= 30  # the first run took 30 s
        progress.on_event(api.SweepEvent("epoch", epoch=1, row={"epoch": 1, "train_loss": 0.5}))
        (task,) = progress.progress.tasks
        assert task.description == "running m | t seed 0 epoch 2/3"
        progress.on_event(api.SweepEvent("finished", todo[0], rec))
        assert task.fields["eta"] == "ETA 1 min 00 s"  # two runs left at 30 s each
        assert task.description == "running m | t seed 1"
    assert "✓ m | t seed 0: mse 1 skip 0.0% (0.0 s)" in console.file.getvalue()


def test_readme_shows_a_suite_and_the_dry_run():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "--suite" in readme and "--dry-run" in readme and "[[part]]" in readme


def test_run_select_keeps_the_variant_picked_on_validation(tmp_path, harness):
    sweep = [*ONE_RUN[:4], "sa-rnn", "--set", "train.epochs=1", "--grid", "lam=0,1"]
    p = harness(*sweep, "--select", "worst-val", "--out", "bad")
    one_line_error(p, "unknown selection rule 'worst-val'")
    assert not (tmp_path / "bad").exists()  # refused before anything ran or was created
    p = harness(*sweep, "--select", "best-val", "--out", "o", check=True)
    board = (tmp_path / "o" / "LEADERBOARD.md").read_text()
    assert "- Rows: best-val: per method" in board and board.count("| sa-rnn ") == 1
    (rec, _) = [json.loads(x) for x in (tmp_path / "o" / "runs.jsonl").read_text().splitlines()]
    assert rec["sweep"]["select"] == "best-val"
    # a sweep file holds the rule too; a bad one is one line naming it
    (tmp_path / "s.toml").write_text('tasks = "adding"\nselect = "val-skip-nearest:50"\n')
    p = harness("run", "--config", "s.toml", "--methods", "gru", "--dry-run", check=True)
    (tmp_path / "b.toml").write_text('tasks = "adding"\nselect = "val-skip-nearest:x"\n')
    one_line_error(harness("run", "--config", "b.toml", "--dry-run"), "val-skip-nearest:x")
    from harness.planning import suites

    assert suites.load(suites.suite_path("ssa-table1")).options["select"] == ("val-skip-nearest:76")


def test_wall_seconds_schedules_independent_runs_longest_first():
    from harness.planning.sweep import wall_seconds

    runs = [5.0, 4.0, 3.0, 3.0, 3.0, None]  # None: not estimated, left out
    assert wall_seconds(runs, 1) == 18.0
    # LPT: 5 | 4, then each 3 to the worker free soonest: 5 + 3 | 4 + 3 + 3 (the best is 9)
    assert wall_seconds(runs, 2) == 10.0
    assert wall_seconds(runs, 3) == 7.0  # 5 | 4 + 3 | 3 + 3
    assert wall_seconds(runs, 100) == 5.0  # at least as many workers as runs: the longest run
    assert wall_seconds([], 4) == 0.0


def test_dry_run_estimate_on_n_workers():
    from harness.cli.progress import estimate_line
    from harness.components import config

    cfgs = [config.resolve("gru", "adding", s, "smoke") for s in range(4)]
    recs = [{
        "run_id": "x", "variant_id": cfgs[0].variant_id, "method": "gru", "task": "adding",
        "preset": "smoke", "seed": 9, "status": "ok", "time": {"train_s": 59.0, "eval_s": 1.0},
    }]  # fmt: skip
    assert estimate_line(cfgs, recs).startswith("estimated time: 4 min 00 s in one process (")
    line = estimate_line(cfgs, recs, workers=3)
    assert (
        "4 min 00 s in one process, 2 min 00 s on 3 workers (the longest run: 1 min 00 s)" in line
    )


def test_the_pools_fork_server_starts_before_planning_and_ends_at_once_on_bad_input(
    tmp_path, harness, monkeypatch
):
    from harness.executors import pool

    pool._stop_server()  # none runs: this command starts it (a later pool starts another)
    started = []
    real = pool.PoolExecutor.start_early
    server = pool.forkserver._forkserver  # multiprocessing's one fork server (started or not)

    def start_early(run, options):
        started.append(server._forkserver_pid)  # None: planning has not started it
        return real(run, options)

    monkeypatch.setattr(pool.PoolExecutor, "start_early", staticmethod(start_early))
    bad = harness("run", "--tasks", "adding", "--methods", "no-such", "--workers", "2")
    one_line_error(bad, "no-such")
    assert started == [None] and server._forkserver_pid is None  # started, then ended
    assert list(tmp_path.iterdir()) == []  # nothing created
    harness("run", "--tasks", "adding", "--methods", "no-such", "--workers", "2", "--dry-run")
    assert len(started) == 1  # a dry run starts none


def test_verbose_reaches_the_executor(tmp_path, harness, monkeypatch):
    # -v: the in-process progress shows every epoch's losses, an executor its own lines (Ray's)
    seen, make = [], api.make_executor
    monkeypatch.setattr(api, "make_executor", lambda *a: seen.append(a[1].verbose) or make(*a))
    harness(*ONE_RUN, "--out", "quiet", "--no-report", check=True)
    harness(*ONE_RUN, "--out", "loud", "--no-report", "-v", check=True)
    assert seen == [False, True]
