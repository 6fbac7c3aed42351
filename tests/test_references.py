"""Reference predictors (``harness.references``): each against a hand computation, their runs
through the sweep, the store and resume, and their rows in every table and figure.

Each predictor is fitted on a tiny split with an answer computed here independently (class
frequencies, a variance, an entropy, bigram counts in plain Python); logistic regression beats
the class prior on a separable toy and is deterministic; ``harness run --methods 'ref:*'`` records
them like any run; the reports put them first, say what each is, and say when a task does not
separate the methods (``harness.reporting.references``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter

import pytest
import torch
from builders import make_record

from harness import api
from harness.components import config
from harness.components.code import method_code
from harness.components.selection import Rule, select
from harness.components.task import Split, Task, TaskKind
from harness.data import data_root
from harness.executors import ExecutorOptions, RunOptions, make_executor, run_one
from harness.persistence import records
from harness.references import REFERENCES, RefConfig, resolve_names
from harness.references.predictors import summary_features
from harness.reporting.leaderboard import TERSE, boards, leaderboard_markdown, terminal
from harness.reporting.paper import write_paper_report
from harness.reporting.references import separation
from harness.reporting.runs import aggregate, runs_frame
from harness.reporting.tables import build_main_table

# --- toy tasks: the task interface without data --------------------------------------------------


class Toy(Task):
    """A classification task of ``k`` classes over ``v`` channels (nothing registered)."""

    kind = TaskKind.CLASSIFICATION
    primary, higher_is_better = "accuracy", True

    def __init__(self, k: int = 3, v: int = 1) -> None:
        super().__init__()
        self.k, self.v = k, v

    @property
    def input_size(self) -> int:
        return self.v

    @property
    def output_size(self) -> int:
        return self.k


class ToyRegression(Toy):
    kind = TaskKind.REGRESSION
    primary, higher_is_better = "mse", False


class ToyNextStep(ToyRegression):
    readout = "every"


class ToyLM(Toy):
    kind = TaskKind.LM
    readout = "every"
    primary, higher_is_better = "perplexity", False


def fitted(name: str, task: Task, train: Split, cfg=None):
    ref = REFERENCES.get(name)(cfg)
    ref.fit(task, train, 0)
    return ref


def test_majority_is_the_class_prior():
    task = Toy(k=3)
    train = Split(torch.zeros(5, 4, 1), torch.tensor([0, 0, 0, 1, 2]))
    test = Split(torch.zeros(6, 4, 1), torch.tensor([1, 1, 0, 0, 0, 2]))
    out = fitted("ref:majority", task, train).score(task, test, batch_size=4)
    assert out["accuracy"] == pytest.approx(100 * 3 / 6)  # class 0's share of the test labels
    p = {0: 3 / 5, 1: 1 / 5, 2: 1 / 5}  # the training frequencies
    nll = -statistics.fmean(math.log(p[int(y)]) for y in test.y)
    assert out["nll"] == pytest.approx(nll, rel=1e-6)


def test_the_mean_predictor_mse_is_the_variance():
    task = ToyRegression(k=2)
    y = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 60.0], [6.0, 10.0]])
    split = Split(torch.zeros(4, 3, 1), y)
    out = fitted("ref:mean", task, split).score(task, split, batch_size=3)
    variance = statistics.fmean(statistics.pvariance(col.tolist()) for col in y.T)
    assert out["mse"] == pytest.approx(variance, rel=1e-6)


def test_the_last_value_predicts_each_target_as_its_input():
    task = ToyNextStep(k=2, v=2)
    seq = torch.randn(3, 6, 2)
    split = Split(seq[:, :-1], seq[:, 1:])  # targets: the next inputs
    out = fitted("ref:last", task, split).score(task, split, batch_size=2)
    squares = [
        (float(seq[n, t + 1, c]) - float(seq[n, t, c])) ** 2
        for n in range(3)
        for t in range(5)
        for c in range(2)
    ]
    assert out["mse"] == pytest.approx(statistics.fmean(squares), rel=1e-5)
    assert REFERENCES.get("ref:last").serves(ToyRegression(k=2, v=2)) is not None  # last step


def lm_split(stream: list[int], width: int) -> Split:
    n = (len(stream) - 1) // width
    t = torch.tensor(stream)
    return Split(t[: n * width].reshape(n, width), t[1 : n * width + 1].reshape(n, width))


STREAM = [0, 1, 2, 1, 0, 1, 3, 1, 2, 2, 0, 1, 1, 3, 0, 2, 1, 0, 3, 1, 2]


def test_unigram_perplexity_is_the_exponential_of_the_entropy():
    task = ToyLM(k=4)
    split = lm_split(STREAM, 4)
    counts = Counter(int(t) for t in split.y.reshape(-1))
    total = sum(counts.values())
    entropy = -sum(c / total * math.log(c / total) for c in counts.values())
    out = fitted("ref:unigram", task, split).score(task, split, batch_size=2)
    assert out["perplexity"] == pytest.approx(math.exp(entropy), rel=1e-5)


def test_bigram_is_add_one_smoothed_counts():
    task = ToyLM(k=4)
    train, test = lm_split(STREAM, 4), lm_split([2, 1, 3, 3, 0, 2, 1, 1, 0], 4)
    pairs = Counter(zip(train.x.reshape(-1).tolist(), train.y.reshape(-1).tolist(), strict=True))
    context = Counter(train.x.reshape(-1).tolist())

    def p(v: int, w: int) -> float:
        return (pairs[(v, w)] + 1) / (context[v] + 4)

    scored = list(zip(test.x.reshape(-1).tolist(), test.y.reshape(-1).tolist(), strict=True))
    nll = -statistics.fmean(math.log(p(v, w)) for v, w in scored)
    out = fitted("ref:bigram", task, train).score(task, test, batch_size=1)
    assert out["nll"] == pytest.approx(nll, rel=1e-5)
    assert out["perplexity"] == pytest.approx(math.exp(nll), rel=1e-5)


def test_summary_features_read_only_the_true_steps():
    x = torch.tensor([[[1.0], [3.0], [2.0], [99.0]], [[4.0], [4.0], [-7.0], [5.0]]])
    f = summary_features(x, torch.tensor([3, 1]))
    mean, std, low, high, diff = f[0].tolist()
    assert (mean, low, high, diff) == pytest.approx((2.0, 1.0, 3.0, 1.5))
    assert std == pytest.approx(math.sqrt(2 / 3))
    assert f[1].tolist() == pytest.approx([4.0, 0.0, 4.0, 4.0, 0.0])  # one step: no difference


def separable(n: int, seed: int) -> Split:
    """Two classes told apart by channel 0's level; padded with values that would hide it."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    lengths = torch.randint(5, 20, (n,), generator=g)
    x = torch.randn(n, 20, 2, generator=g)
    x[:, :, 0] += (2 * y - 1)[:, None] * 1.5
    for i, length in enumerate(lengths.tolist()):
        x[i, length:] = 50.0 * torch.randn(20 - length, 2, generator=g)
    return Split(x, y, lengths)


def test_logreg_beats_the_class_prior_on_a_separable_task_and_is_deterministic():
    task = Toy(k=2, v=2)
    train, test = separable(200, 0), separable(100, 1)
    logreg = fitted("ref:logreg", task, train)
    majority = fitted("ref:majority", task, train)
    assert logreg.score(task, test, 32)["accuracy"] >= 95.0
    assert majority.score(task, test, 32)["accuracy"] == 50.0
    again = fitted("ref:logreg", task, train)
    assert torch.equal(logreg.weight, again.weight) and torch.equal(logreg.bias, again.bias)
    assert logreg.num_params() == 5 * 2 * 2 + 2  # 5 statistics x 2 channels x 2 classes + biases


# --- names, configs, runs -------------------------------------------------------------------


def test_references_are_resolved_beside_the_methods_and_never_by_all():
    assert not any(m.startswith("ref:") for m in resolve_names("all"))
    both = resolve_names("gru,ref:*")
    assert both[0] == "gru" and {"ref:logreg", "ref:mean", "ref:noise-floor"} <= set(both)
    assert api.SweepSpec.of("all", "adding").blocks[0].methods == resolve_names("all")
    with pytest.raises(Exception, match="Did you mean: ref:logreg"):
        resolve_names("ref:logregg")


def test_a_reference_run_id_hashes_task_config_preset_seed_and_its_own_knobs():
    cfg = config.resolve("ref:logreg", "freq-discrimination", 0, "smoke")
    assert isinstance(cfg, RefConfig) and set(cfg.to_dict()) == {
        "method",
        "task",
        "seed",
        "preset",
        "method_cfg",
        "task_cfg",
    }
    ids = {
        cfg.run_id,
        config.resolve("ref:logreg", "freq-discrimination", 1, "smoke").run_id,
        config.resolve("ref:logreg", "freq-discrimination", 0, "quick").run_id,
        config.resolve("ref:logreg", "freq-discrimination", 0, "smoke", {"l2": "0.1"}).run_id,
        config.resolve("ref:majority", "freq-discrimination", 0, "smoke").run_id,
        config.resolve("ref:logreg", "freq-discrimination", 0, "smoke", {"n_train": 90}).run_id,
    }
    assert len(ids) == 6
    # a trainer or model setting is no part of a reference run: not its key, not its id
    assert not config.accepts("ref:logreg", "freq-discrimination", "lr")
    assert config.from_dict(cfg.to_dict()) == cfg
    assert (
        method_code("ref:logreg")
        == REFERENCES.get("ref:logreg").code_version()
        != method_code("gru")
    )


def test_every_executor_runs_a_reference_as_it_runs_a_method():
    cfgs = [config.resolve(r, "synthetic", 0, "smoke") for r in ("ref:mean", "ref:last")]
    serial = [run_one(c.to_dict(), RunOptions()) for c in cfgs]
    ex = make_executor("pool", RunOptions(), ExecutorOptions(workers=2))
    try:
        pooled = [rec for _, rec in api._pull(ex, cfgs, lambda event: None)]
    finally:
        ex.close()
    assert [r["status"] for r in serial] == ["ok", "ok"]
    by_id = {r["run_id"]: r for r in pooled}
    for r in serial:
        assert by_id[r["run_id"]]["metrics"] == r["metrics"]
        assert (
            records.validate(r) == []
            and r["method_code"] == REFERENCES.get(r["method"]).code_version()
        )
        assert r["history"] == [] and r["trace"] == {} and "skip_pct" not in r["metrics"]


def test_run_records_references_and_resume_skips_them(harness):
    if not (data_root() / "epileptic_seizure").is_dir():
        pytest.skip(f"seizure data absent under {data_root()} (set HARNESS_DATA_DIR)")
    args = ("run", "--tasks", "adding,seizures", "--methods", "ref:*", "--preset", "smoke")
    first = harness(*args, "--out", "store", "--format", "md", check=True)
    recs = [json.loads(line) for line in open("store/runs.jsonl")]
    assert sorted((r["method"], r["task"], r["status"]) for r in recs) == [
        ("ref:logreg", "seizures", "ok"),
        ("ref:majority", "seizures", "ok"),
        ("ref:mean", "adding", "ok"),
    ]
    assert all(records.validate(r) == [] for r in recs)
    assert all(r["val_metrics"] and r["metrics"] for r in recs)
    assert "reference predictors skipped on 'adding'" in first.stdout + first.stderr
    assert "ref:mean (reference)" in first.stdout  # the leaderboard, its reference rows first
    again = harness(*args, "--out", "store", "--no-report", check=True)
    assert "3 already recorded" in again.stdout + again.stderr
    assert len(open("store/runs.jsonl").read().splitlines()) == 3


def test_a_reference_named_for_a_task_it_cannot_serve_is_one_line_and_exit_2(harness):
    res = harness("run", "--tasks", "adding", "--methods", "ref:logreg", "--dry-run")
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "ref:logreg cannot run on 'adding'" in res.stderr
    ok = harness("run", "--tasks", "adding", "--methods", "gru,ref:*", "--dry-run", check=True)
    assert "reference predictors skipped on 'adding' (a regression task)" in ok.stdout + ok.stderr
    listed = harness("list", "references", check=True).stdout
    assert "ref:logreg" in listed and "on adding:" in listed and "0.167" in listed


# --- reports --------------------------------------------------------------------------------


def acc(method, seed, test, val=None, task="freq-discrimination"):
    """An ok record of a classification task: accuracy on test (and validation)."""
    val = test if val is None else val
    return make_record(
        method=method,
        task=task,
        seed=seed,
        primary="accuracy",
        higher_is_better=True,
        metrics={"accuracy": test, "skip_pct": 0.0},
        val_metrics={"accuracy": val, "skip_pct": 0.0},
    )


def table(recs):
    text = leaderboard_markdown(recs, ["store.jsonl"])
    return text.split("## freq-discrimination (smoke preset)")[1]


METHODS = [acc("gru", s, a) for s, a in enumerate([90.0, 91.0, 92.0])]
CLOSE = [acc("ref:logreg", s, 89.5) for s in range(3)]  # 1.5 points below the best method row
FAR = [acc("ref:logreg", s, 70.0) for s in range(3)]
DOES_NOT = "This task does not separate the methods at this setting"


def test_the_leaderboard_puts_references_first_and_says_when_a_task_does_not_separate():
    text = table(METHODS + CLOSE)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "Method" not in line]
    assert rows[0].startswith("| ref:logreg (reference)") and "gru" in rows[1]
    assert "ref:logreg: multinomial logistic regression" in text
    assert DOES_NOT in text and "within 2 points" in text
    assert DOES_NOT not in table(METHODS + FAR)  # 21 points apart, beyond the CI
    assert "at most 2 percentage points" in table(METHODS + FAR)  # the rule is always stated


def test_within_the_ci_does_not_separate_and_a_bound_is_no_predictor():
    wide = [acc("gru", s, a) for s, a in enumerate([85.0, 91.0, 97.0])]  # CI half-width 14.9
    assert "within the 95 % CI" in table(wide + [acc("ref:logreg", s, 87.0) for s in range(3)])

    def mse(method, value):
        return make_record(method=method, task="synthetic", metrics={"mse": value})

    rows = [mse("gru", 0.01), mse("ref:mean", 0.5), mse("ref:noise-floor", 0.001)]
    text = leaderboard_markdown(rows, ["s.jsonl"])
    assert "ref:noise-floor (reference)" in text and DOES_NOT not in text
    close = leaderboard_markdown([*rows[:2], mse("ref:last", 0.0105)], ["s.jsonl"])
    assert DOES_NOT in close and "within 10%" in close  # 0.01 is 5 % below 0.0105


def test_a_table_without_references_gives_the_command_that_adds_them():
    text = table(METHODS)
    cmd = (
        "harness run --tasks freq-discrimination --preset smoke --seeds 0-2 --methods 'ref:*' "
        "--out store.jsonl"
    )
    assert f"No reference predictor was run for this table; to add them: `{cmd}`" in text


def test_paper_tables_keep_references_out_of_bold_tests_and_holm():
    lstm = [acc("lstm", s, a, val=a - 5) for s, a in enumerate([80.0, 82.0, 83.0])]
    best = [acc("ref:logreg", s, 99.0) for s in range(3)]  # better than every method row
    runs = runs_frame(METHODS + lstm + best)
    agg = aggregate(runs, ["accuracy", "skip_pct", "geo_mean", "flops"], ["ref:logreg"])
    main = build_main_table(agg, "accuracy", True)
    ref_row, gru_row = main.rows[0], next(r for r in main.rows if r[0][0] == "gru")
    assert ref_row[0][0] == "ref:logreg (reference)"
    assert not any(bold for _, bold in ref_row)  # never bold, though its accuracy is the best
    acc_col = main.titles.index("Accuracy % ↑")
    assert gru_row[acc_col][1]  # the best method row is
    p_col = next(i for i, t in enumerate(main.titles) if t.startswith("p vs reference"))
    assert ref_row[p_col][0] == "–" and gru_row[p_col][0].endswith("(reference)")
    assert "Holm's step-down correction over the table's 1 t-tests" in " ".join(main.notes)


def test_selection_keeps_every_reference_whatever_the_rule():
    kept, why = select(METHODS + CLOSE, Rule("val-skip-band", 50.0, 5.0))
    assert {r["method"] for r in kept} == {"ref:logreg"}  # gru's Skip % 0 is out of the band
    assert any(v.startswith("reference predictor, best-val") for v in why.values())


def test_the_tradeoff_figure_draws_each_reference_as_a_labelled_band(tmp_path):
    from harness.reporting.figures import report_figures, tradeoff_figure, variant_points
    from harness.reporting.references import reference_bands

    wider = [  # a second variant, twice the FLOPs: the trade-off has a FLOPs axis to draw
        r | {"variant_id": "gru-wide", "run_id": f"gru-wide-{r['seed']}",
             "flops": {k: 2 * v for k, v in r["flops"].items()}}
        for r in METHODS
    ]  # fmt: skip
    refs = [acc("ref:logreg", s, a) for s, a in enumerate([70, 72, 74])]
    runs = runs_frame(METHODS + wider + refs)
    bands = reference_bands(runs, "accuracy")
    assert [b[0] for b in bands] == ["ref:logreg"] and bands[0][1] == pytest.approx(72.0)
    assert bands[0][2] == pytest.approx(4.303 * 2 / math.sqrt(3), rel=1e-3)  # t(0.975, 2)
    points = variant_points(runs[runs["method"] == "gru"], ["accuracy", "skip_pct", "flops"])
    fig = tradeoff_figure(points, "accuracy", True, "Accuracy %", bands)
    # 72 is below the methods' 91 ± 1: named, with its mean, after an arrow at the bottom edge
    assert [t.get_text() for t in fig.axes[-1].texts] == ["↓ ref:logreg 72.0"]
    inside = tradeoff_figure(points, "accuracy", True, "Accuracy %", [("ref:logreg", 91.5, 0.2)])
    assert [t.get_text() for t in inside.axes[-1].texts] == ["ref:logreg 91.5"]  # a band, named
    assert len(inside.axes[0].patches) == 1  # its CI shaded
    figs = report_figures(runs, "accuracy", True, "Accuracy %", tmp_path / "t")
    assert "Grey: the reference predictors (ref:logreg)" in figs[0][0]


def test_separation_needs_a_reference_and_a_method():
    from harness.reporting.references import row

    assert separation([row("gru", "", [90.0])], "accuracy", True) is None
    assert separation([row("ref:logreg", "", [90.0])], "accuracy", True) is None
    both = [row("gru", "", [90.0]), row("ref:majority", "", [95.0])]
    assert "at least as good as the best method row" in separation(both, "accuracy", True)


def test_a_method_row_worse_than_the_best_reference_predictor_is_marked_and_named(tmp_path):
    def mse(method, seed, value):
        return make_record(method=method, task="synthetic", seed=seed, metrics={"mse": value})

    recs = [mse("gru", s, 0.01) for s in range(2)] + [mse("lstm", s, 0.6 + s / 10) for s in (0, 1)]
    recs += [mse("ref:mean", s, 0.5) for s in range(2)] + [mse("ref:last", s, 0.8) for s in (0, 1)]
    recs += [mse("ref:noise-floor", s, 0.001) for s in range(2)]  # a bound: every row is worse
    note = (
        "† a method row whose mean MSE is worse than the best reference predictor's, ref:mean "
        "(0.5): lstm (0.65)."
    )
    text = leaderboard_markdown(recs, ["s.jsonl"])
    cells = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in text.splitlines()
             if line.startswith("| ") and "Method" not in line}  # fmt: skip
    assert text.split("| Method")[1].split("|")[2].strip().startswith("MSE")
    assert cells["lstm"].endswith(" †") and "†" not in cells["gru"] + cells["ref:last (reference)"]
    assert f"- {note}" in text
    (board,) = boards(recs)
    assert [r[2].endswith("†") for r in terminal(board, TERSE)[1]] == [False] * 3 + [False, True]
    agg = aggregate(runs_frame(recs), ["mse", "flops", "params", "hidden_size"], ["ref:mean"])
    main = build_main_table(agg, "mse", False)
    col = next(i for i, t in enumerate(main.titles) if t.startswith("MSE"))
    assert {r[0][0]: r[col][0].endswith(" †") for r in main.rows}["lstm"]
    assert sum(r[col][0].endswith("†") for r in main.rows) == 1
    (md,) = write_paper_report(recs, ["s.jsonl"], tmp_path, formats=("md",), figures=False)
    assert note in md.read_text()


def test_ptb_rows_worse_than_the_unigram_are_marked_in_markdown_and_latex(tmp_path):
    """The PTB quick table: Phased LSTM, VC-RNN, Random Updates above the unigram's perplexity."""
    means = {"gru": 560.0, "ref:unigram": 680.2, "phased-lstm": 743.2, "vc-rnn": 770.3}
    means |= {"random-updates": 919.0}
    recs = [
        make_record(
            method=m,
            task="ptb",
            preset="quick",
            seed=s,
            primary="perplexity",
            selection="test metrics at the epoch with the lowest validation perplexity",
            metrics={"perplexity": v + s},
            val_metrics={"perplexity": v + s},
        )
        for m, v in means.items()
        for s in range(3)
    ]
    paths = write_paper_report(recs, ["r.jsonl"], tmp_path, figures=False)
    for path, mark in zip(paths, ["†", r"$\dagger$"], strict=True):
        text = path.read_text(encoding="utf-8")
        marked = {  # the first word of each table line with the mark: its method
            line.strip("| ").split(" ")[0]
            for line in text.splitlines()
            if mark in line and not line.startswith(("- ", r"\par"))
        }
        assert marked == {"phased-lstm", "vc-rnn", "random-updates"}, (path.suffix, marked)
        note = (
            f"{mark} a method row whose mean Perplexity is worse than the best reference "
            "predictor's, ref:unigram (681.2): phased-lstm (744.2); random-updates (920); "
            "vc-rnn (771.3)."
        )
        assert note in text.replace(r"\_", "_"), path.suffix
