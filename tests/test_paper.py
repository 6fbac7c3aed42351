"""The paper-style report (harness.reporting.paper, harness.reporting.figures) on hand-made
records."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from builders import make_record

from harness.components.selection import Rule
from harness.errors import HarnessError
from harness.persistence.trace import pack_mask
from harness.reporting.figures import pareto_front
from harness.reporting.paper import write_paper_report
from harness.reporting.patterns import mask_figure, mask_image
from harness.reporting.published import tables_for
from harness.reporting.render import render_md, render_tex
from harness.reporting.runs import aggregate, runs_frame
from harness.reporting.tables import build_main_table, welch_p
from harness.reporting.versus import paper_vs_harness, setting_diff

KEYS = ["geo_mean", "skip_pct", "accuracy", "solved", "mse", "flops", "params", "hidden_size"]


def rec(
    method,
    seed,
    task="seizures",
    primary="accuracy",
    higher=True,
    flops=1e4,
    hidden=8,
    trace=None,
    status="ok",
    **values,
):
    """An ok record; ``values`` are metrics, except the method config fields ``lam``, ``p_skip``."""
    knobs = {k: values.pop(k) for k in ("lam", "p_skip") if k in values}
    vid = f"{method}-{knobs}-{hidden}"
    return make_record(
        method=method,
        task=task,
        seed=seed,
        run_id=f"{vid}-{seed}",
        variant_id=vid,
        status=status,
        primary=primary,
        higher_is_better=higher,
        selection=f"test metrics at the best validation {primary}",
        env={"git_sha": "abcdef1234567", "device_name": "cpu (test)", "torch": "2.x"},
        metrics=values,
        flops={"effective": flops, "dense": 2 * flops},
        params={"total": 100},
        trace=trace or {},
        **{f"config.method_cfg.{k}": v for k, v in knobs.items()},
        **{"config.model.hidden_size": hidden, "config.train.lr": 0.01},
    )


def table(records):
    runs = runs_frame(records)
    agg = aggregate(runs, KEYS, ["gru", "sa-rnn"])
    primary, higher = records[0]["primary"], records[0]["higher_is_better"]
    t = build_main_table(agg, primary, higher)
    return agg, (t.titles, t.rows)


def col(titles, rows, start):
    j = next(i for i, t in enumerate(titles) if t.startswith(start))
    return [r[j] for r in rows]


def test_mean_std_and_seed_counts():
    recs = [rec("gru", s, accuracy=a, skip_pct=0.0) for s, a in enumerate([80.0, 82.0, 84.0])]
    recs += [rec("sa-rnn", 0, accuracy=70.0, skip_pct=50.0, lam=1e-3)]
    recs += [rec("gru", 5, status="failed")]  # not tabulated
    _, (titles, rows) = table(recs)
    assert [t for t, _ in col(titles, rows, "Method")] == ["gru", "sa-rnn"]
    assert [t for t, _ in col(titles, rows, "Seeds")] == ["3", "1*"]  # one seed: marked
    assert [t for t, _ in col(titles, rows, "Accuracy")] == ["82.0 ± 2.0", "70.0"]
    # 95 % CI, t-distribution: 82 ± t(0.975, 2) * 2 / sqrt(3) = 82 ± 4.968
    assert [t for t, _ in col(titles, rows, "95 % CI")] == ["[77.0, 87.0]", "–"]
    assert "95 % CI (Student's t), Accuracy %" in titles  # the CI names its method
    assert not any(t.startswith("p vs") for t in titles)  # every p is n/a: left out


def test_the_ci_is_clipped_to_the_metric_range():
    # 95 ± t(0.975, 2) * 5 / sqrt(3) = 95 ± 12.42: [82.6, 107.4] unclipped
    recs = [rec("gru", s, accuracy=a, skip_pct=0.0) for s, a in enumerate([90.0, 95.0, 100.0])]
    _, (titles, rows) = table(recs)
    assert [t for t, _ in col(titles, rows, "95 % CI")] == ["[82.6, 100.0]"]


def test_bold_marks_the_best_value_direction_aware():
    recs = [rec("gru", s, accuracy=90.0 + s, skip_pct=0.0, flops=2e4) for s in (0, 1)]
    recs += [rec("sa-rnn", s, accuracy=80.0, skip_pct=60.0 + s, flops=1e4, lam=0.0) for s in (0, 1)]
    _, (titles, rows) = table(recs)
    assert [b for _, b in col(titles, rows, "Accuracy")] == [True, False]  # higher is better
    assert [b for _, b in col(titles, rows, "Effective FLOPs")] == [False, True]  # lower: better
    assert [b for _, b in col(titles, rows, "Skip")] == [False, True]
    md, tex = render_md(titles, rows), render_tex(titles, rows, "t")
    assert "**90.50 ± 0.71**" in md and r"\textbf{90.50 $\pm$ 0.71}" in tex
    assert "Skip \\%" in tex and "$\\times 10^{" not in tex  # 2e4 needs no unit
    # Regression: lower MSE is bold; every row tied -> nothing bold.
    recs = [
        rec("rnn", s, "synthetic", "mse", False, mse=m, skip_pct=0.0)
        for s, m in [(0, 2e-3), (1, 2e-3)]
    ]
    recs += [rec("lstm", s, "synthetic", "mse", False, mse=1e-3, skip_pct=0.0) for s in (0, 1)]
    _, (titles, rows) = table(recs)
    assert "MSE (×10^-3) ↓" in titles
    assert [t for t, _ in col(titles, rows, "Method")] == ["lstm", "rnn"]
    # a std of 0 over 2 seeds is printed with its n
    assert col(titles, rows, "MSE") == [("1.00 ± 0 (n=2)", True), ("2.00 ± 0 (n=2)", False)]
    assert not any(b for _, b in col(titles, rows, "# params"))


def test_pareto_front_on_hand_made_points():
    xs = [10.0, 20.0, 30.0, 25.0, 5.0, math.nan]
    ys = [0.9, 0.8, 0.5, 0.4, 0.9, 1.0]
    # Skip-like x (higher better) and accuracy-like y (higher better): (5, .9) is dominated by
    # (10, .9); (25, .4) by (30, .5); the NaN point never counts.
    assert pareto_front(xs, ys, True, True) == [0, 1, 2]
    # FLOPs-like x (lower better), MSE-like y (lower better).
    # (10, .9) is dominated by (5, .9); (30, .5) by (25, .4).
    assert pareto_front(xs, ys, False, False) == [4, 1, 3]


def test_welch_p_value_where_the_seeds_differ_and_na_for_one_seed():
    a, b = [80.0, 82.0, 85.0], [70.0, 75.0]
    # Worked by hand: t = 9.8333 / sqrt(6.3333/3 + 12.5/2) = 3.4007, Welch-Satterthwaite
    # df = 1.6931, two-sided p = I_{df/(df+t^2)}(df/2, 1/2) = 0.096173.
    assert welch_p(a, b) == pytest.approx(0.0961730, rel=1e-5)
    assert welch_p(b, a) == pytest.approx(0.0961730, rel=1e-5)
    assert welch_p(a, [70.0]) is None
    recs = [rec("gru", s, accuracy=v, skip_pct=0.0) for s, v in enumerate(a)]
    recs += [rec("sa-rnn", s, accuracy=v, skip_pct=50.0, lam=0.0) for s, v in enumerate(b)]
    recs += [rec("sa-rnn", 0, accuracy=60.0, skip_pct=70.0, lam=1e-2)]
    _, (titles, rows) = table(recs)
    p = [t for t, _ in col(titles, rows, "p vs reference")]
    # no validation accuracy recorded: the reference is the best test mean, and says so
    assert p[0] == "best on test, display only (reference)"
    assert p[1] == "0.096 (Welch)"  # seeds 0-1 against 0-2: not paired; one test, Holm = p
    assert p[2] == "n/a"
    assert [t for t, _ in col(titles, rows, "Variant")] == ["", "lam=0", "lam=0.01"]


def test_heatmap_reads_the_packed_mask():
    g = torch.Generator().manual_seed(0)
    masks = [(torch.rand(7, 13, generator=g) > 0.5).float(), torch.eye(7)[:, :5]]  # [T, D]
    trace = {"first_mask": [pack_mask(m) for m in masks], "units": [13, 5]}
    want = np.concatenate([m.numpy().T for m in masks])  # [units, T]: layers stacked
    np.testing.assert_array_equal(mask_image(rec("sa-rnn", 0, trace=trace)), want)
    fig = mask_figure({"sa-rnn": rec("sa-rnn", 0, trace=trace), "gru": rec("gru", 0)})
    assert len(fig.axes) == 1  # a method without a trace gets no panel
    np.testing.assert_array_equal(np.asarray(fig.axes[0].images[0].get_array()), want)


def test_setting_diff_names_a_compiled_training():
    paper = {"train.epochs": 100, "seeds": 5}
    cfg = {"train.epochs": 100, "hidden_size": 10}
    assert setting_diff(paper, cfg, 5, "paper") == "preset paper"
    got = setting_diff(paper, {**cfg, "train.compile": True}, 3, "paper")
    assert got == "preset paper; seeds 3 (paper 5); trained with its step compiled (train.compile)"


def test_at_a_smaller_preset_the_table_is_the_harness_own_matched_on_knobs():
    recs = [
        rec("sa-rnn", s, accuracy=70.0 + s, skip_pct=75.0, geo_mean=72.0, lam=lam, hidden=50)
        for s in (0, 1)
        for lam in (2e-4, 1e-2)
    ]
    recs[1]["metrics"]["accuracy"] = 99.0  # the lam=1e-2 variant is better but not the match
    recs += [rec("gru", 0, accuracy=85.0, skip_pct=0.0, geo_mean=0.0, hidden=8)]
    agg, _ = table(recs)
    pvh = paper_vs_harness(
        tables_for("seizures")[0], agg, "accuracy", Rule("best-val"), "seizures", "smoke"
    )
    assert not pvh.at_setting and "D 8/50" in pvh.own_setting  # the harness's own setting
    assert not any(t.startswith("Ours − paper") for t in pvh.titles)  # not a reproduction
    by_label = {r[0][0]: [t for t, _ in r] for r in pvh.rows}
    sa = dict(zip(pvh.titles, by_label["SA-RNN"], strict=True))
    # S-SA's spreads as S-SA prints them, in parentheses, and named (not a std)
    assert sa["Paper: Accuracy %"] == "81.6 (0.6)" and sa["Ours: Accuracy %"] == "70.50 ± 0.71"
    spreads = "Paper spreads, printed (x) as the paper prints them, are what S-SA calls confidence"
    assert pvh.notes[0].startswith(spreads)
    assert sa["Paper: Effective FLOPs (×10^4)"] == "6.4"
    assert sa["Ours: Effective FLOPs (×10^4)"] == "1.00 ± 0 (n=2)"
    assert sa["Ours: knobs"] == "lam=0.0002" and sa["Ours: seeds"] == "2"
    assert sa["Commit"] == "abcdef1234"
    assert sa["Picked by"].startswith("at the paper's λ = 0.0002")
    gru = dict(zip(pvh.titles, by_label["GRU"], strict=True))
    assert gru["Paper: Accuracy %"] == "84.7 (0.8)" and gru["Ours: Accuracy %"] == "85.0"
    assert gru["Paper: Skip %"] == "0" and gru["Ours: seeds"] == "1*"
    # At a smaller preset the table-wide setting is not a knob: D = 8 fills the D = 50 row of
    # the harness's own table, and the note says where it differs.
    letter = gru["Setting vs paper"]
    (note,) = [n for n in pvh.notes if n.startswith(f"Setting vs paper {letter}")]
    assert "preset smoke" in note and "D 8 (paper 50)" in note and "epochs" in note
    assert "seeds 1 (paper 10)" in note
    assert by_label["CW-RNN"][2] == "not run at this setting"
    assert by_label["CW-RNN"][-1] == "not run at this setting"
    (cmds,) = [n for n in pvh.notes if n.startswith("Not run")]
    assert (
        "`harness run --tasks seizures --methods clockwork-rnn --preset smoke --seeds 0-1`" in cmds
    )
    # A row knob must match: with SA-RNN at lam=1e-2 only, the lam=2e-4 row is not run.
    agg2 = agg[[c.get("lam") != 2e-4 for c in agg["config"]]]
    pvh = paper_vs_harness(
        tables_for("seizures")[0], agg2, "accuracy", Rule("best-val"), "seizures", "smoke"
    )
    sa = dict(zip(pvh.titles, next(r for r in pvh.rows if r[0][0] == "SA-RNN"), strict=True))
    assert sa["Ours: √(Acc×Skip)"] == ("not run at this setting", False)
    assert sa["Ours: Accuracy %"] == ("–", False)
    assert any(
        "--methods sa-rnn --preset smoke --seeds 0-1 --set lam=0.0002" in n for n in pvh.notes
    )


def test_several_variants_with_the_knobs_are_told_apart_on_validation_only():
    # Two SA-RNN variants with lam=2e-4 that differ in lr: the better TEST accuracy must not win.
    recs = []
    for lr, test_acc, val_acc in [(0.01, 99.0, 60.0), (0.001, 60.0, 90.0)]:
        for s in (0, 1):
            r = rec("sa-rnn", s, accuracy=test_acc, skip_pct=70.0, geo_mean=1.0, lam=2e-4)
            r["config"]["train"]["lr"] = lr
            r["variant_id"] += f"-lr{lr}"
            r["run_id"] = r["variant_id"] + f"-{s}"
            r["val_metrics"] = {"accuracy": val_acc, "skip_pct": 70.0}
            recs.append(r)
    agg, _ = table(recs)
    pvh = paper_vs_harness(
        tables_for("seizures")[0], agg, "accuracy", Rule("best-val"), "seizures", "smoke"
    )
    sa = dict(zip(pvh.titles, next(r for r in pvh.rows if r[0][0] == "SA-RNN"), strict=True))
    assert sa["Ours: Accuracy %"][0] == "60.0 ± 0 (n=2)"
    assert "(best-val of 2 (val accuracy 90" in sa["Picked by"][0]


def test_files_are_produced(tmp_path):
    mask = {"first_mask": [pack_mask(torch.eye(4)[:, :3])], "units": [3]}
    recs = [
        rec("gru", s, accuracy=80.0 + s, skip_pct=0.0, geo_mean=0.0, trace=mask) for s in (0, 1)
    ]
    recs += [
        rec(
            "sa-rnn",
            s,
            accuracy=75.0 + s,
            skip_pct=lam * 1e4,
            geo_mean=60.0,
            lam=lam,
            flops=1e4 * (1 - lam * 50),
            trace=mask,
        )
        for s in (0, 1)
        for lam in (0.0, 1e-3)
    ]
    recs += [
        rec(
            "ei-rehn",
            0,
            accuracy=70.0,
            skip_pct=20.0,
            trace={**mask, "depth_hist": {"3": 5, "4": 7}},
        )
    ]
    paths = write_paper_report(recs, ["recs.jsonl"], tmp_path)
    names = {p.relative_to(tmp_path).as_posix() for p in paths}
    assert {"paper_seizures_smoke.md", "paper_seizures_smoke.tex"} <= names
    for kind in ("tradeoff", "masks", "budget-lam", "depth"):
        assert {f"figures/seizures_smoke_{kind}.{ext}" for ext in ("png", "pdf")} <= names
    assert all(p.stat().st_size > 0 for p in paths)
    md = (tmp_path / "paper_seizures_smoke.md").read_text()
    assert "Generated by `harness report` from `recs.jsonl`" in md and "abcdef1234" in md
    assert "beside S-SA Table 1 as context" in md and "](figures/seizures_smoke_masks.png)" in md
    tex = (tmp_path / "paper_seizures_smoke.tex").read_text()
    assert r"\label{tab:seizures-smoke.recs.main}" in tex
    assert r"\label{tab:seizures-smoke.recs.paper-1}" in tex
    assert r"\includegraphics" in tex
    only = write_paper_report(recs, ["r"], tmp_path / "b", formats=("md",), figures=False)
    assert [p.name for p in only] == ["paper_seizures_smoke.md"]
    with pytest.raises(HarnessError, match="no ok runs"):
        write_paper_report(recs, ["r"], tmp_path, tasks=["adding"])
    with pytest.raises(HarnessError, match="cannot write"):  # one line for the CLI, no traceback
        write_paper_report(recs, ["r"], tmp_path / "paper_seizures_smoke.md", figures=False)


def test_every_failed_record_is_named_superseded_ones_included(tmp_path):
    recs = [
        rec("sa-rnn", s, accuracy=80.0, skip_pct=50.0, lam=lam) for s in (0, 1) for lam in (0, 1)
    ]
    bad = rec("sa-rnn", 2, status="failed", lam=1)
    bad["error"] = "diverged: non-finite loss (nan) at epoch 5, batch 3"
    stale = rec("gru", 0, status="failed")  # retried: its latest record is ok
    stale["error"] = "diverged: non-finite gradient norm (inf) at epoch 9, batch 1"
    recs += [bad, stale, dict(rec("gru", 0, accuracy=80.0, skip_pct=0.0), run_id=stale["run_id"])]
    (path,) = write_paper_report(recs, ["r"], tmp_path, formats=("md",), figures=False)
    md = path.read_text()
    # Before: "Failed runs (not tabulated): 1", the rerun gru record not counted.
    assert (
        "- Failed runs (not tabulated): 2 failed records (2 runs), 1 rerun, 1 not "
        "(not tabulated):\n"
    ) in md
    assert (
        f"  - sa-rnn (lam=1) on seizures (smoke, seed 2, run {bad['run_id']}, commit abcdef1234): "
        f"{bad['error']} (not rerun successfully: its latest record failed)"
    ) in md
    assert f"run {stale['run_id']}, commit abcdef1234): {stale['error']} (rerun: its latest" in md


def test_variants_are_labelled_by_the_config_values_that_vary():
    recs = [rec("gru", 0, accuracy=80.0, skip_pct=0.0, hidden=h) for h in (8, 16)]
    _, (titles, rows) = table(recs)
    assert [t for t, _ in col(titles, rows, "Variant")] == ["hidden_size=8", "hidden_size=16"]
    # S-EI layout: D_h is a column of its own, so it is not repeated as a variant label.
    recs = [rec("rnn", 0, "synthetic", "mse", False, mse=1e-3, hidden=h) for h in (30, 20)]
    _, (titles, rows) = table(recs)
    assert "Variant" not in titles
    assert [t for t, _ in col(titles, rows, "D_h")] == ["20", "30"]


MY_TABLE = """
[papers.Mine]
cite = "My own runs"

[[table]]
key = "Mine 1"
task = "seizures"
title = "My table 1"
source = { paper = "Mine", where = "Table 1" }
columns = ["accuracy"]

[[table.row]]
method = "sa-rnn"
label = "SA-RNN, mine"
values = { accuracy = 77.7 }
"""


def test_a_users_published_file_replaces_the_shipped_one(tmp_path):
    recs = [rec("gru", 0, accuracy=80.0, skip_pct=0.0, geo_mean=0.0)]
    recs += [rec("sa-rnn", 0, accuracy=70.0, skip_pct=50.0, geo_mean=59.2, lam=1e-3)]
    mine = tmp_path / "mine.toml"
    mine.write_text(MY_TABLE, encoding="utf-8")
    (path,) = write_paper_report(recs, ["r"], tmp_path, formats=("md",), figures=False)
    assert "beside S-SA Table 1 as context" in path.read_text()
    (path,) = write_paper_report(
        recs, ["r"], tmp_path, formats=("md",), figures=False, published=mine
    )
    md = path.read_text()
    assert "beside My table 1 as context" in md and "S-SA Table 1" not in md
    assert "| SA-RNN, mine | 77.7 " in md
    # Methods of the published table lead the main table.
    assert md.index("| sa-rnn ") < md.index("| gru ")


def test_unsolved_runs_skip_pct_is_greyed_and_out_of_the_comparison(tmp_path):
    """Adding: Skip % is the mean over the runs that solved the task; the unsolved runs' Skip %
    follows greyed, is never bold and is not in Ours − paper (S-SA Table 4)."""

    def add(method, seed, mse, skip, **knobs):
        return rec(method, seed, task="adding", primary="mse", higher=False, mse=mse,
                   solved=float(mse <= 1.67e-3), skip_pct=skip, **knobs)  # fmt: skip

    recs = [add("gru", s, 1e-3, 0.0) for s in range(3)]
    # SA-RNN lambda 1e-4: seeds 0 and 1 solved at 80 and 84 % skip, seed 2 unsolved at 99 %
    sa = ((0, 1e-3, 80.0), (1, 1.5e-3, 84.0), (2, 0.1, 99.0))
    recs += [add("sa-rnn", s, m, k, lam=1e-4) for s, m, k in sa]
    recs += [add("skip-rnn", s, 0.09, 95.0, lam=1e-7) for s in range(3)]  # none solved
    agg, (titles, rows) = table(recs)
    skip = dict(zip([r[0][0] for r in rows], col(titles, rows, "Skip %"), strict=True))
    assert skip["sa-rnn"] == ("82.0 ± 2.8 (n=2) \x0e(unsolved 1/3: 99.0)\x0f", True)  # bold: 82
    assert skip["skip-rnn"] == ("\x0e(unsolved 3/3: 95.0 ± 0 (n=3))\x0f", False)  # not 95
    assert skip["gru"] == ("0 ± 0 (n=3)", False)
    write_paper_report(recs, ["r"], tmp_path, formats=("md", "tex"), figures=False)
    md = (tmp_path / "paper_adding_smoke.md").read_text()
    assert '<span style="color:gray">(unsolved 1/3: 99.0)</span>' in md
    assert md.count("Skip % on a task with a solved line") >= 1
    tex = (tmp_path / "paper_adding_smoke.tex").read_text()
    assert r"\textcolor{gray}{(unsolved 3/3: 95.0" in tex and "\x0e" not in tex
    assert "xcolor" in tex


def test_ours_minus_paper_takes_the_solved_runs_skip_pct_only():
    from harness.reporting.published import tables_for as published

    t4 = published("adding")[0]
    sa = next(r for r in t4.rows if r.method == "sa-rnn" and r.config.get("lam") == 1e-4)

    def add(seed, mse, skip):
        return rec("sa-rnn", seed, task="adding", primary="mse", higher=False, mse=mse,
                   solved=float(mse <= 1.67e-3), skip_pct=skip, lam=1e-4)  # fmt: skip

    runs = runs_frame([add(0, 1e-3, 80.0), add(1, 0.1, 99.0)])
    agg = aggregate(runs, KEYS, ["sa-rnn"])
    pvh = paper_vs_harness(t4, agg, "mse", Rule("best-val"), "adding", "smoke")
    assert not pvh.at_setting  # smoke: no difference column; the cell is greyed all the same
    row = next(r for r in pvh.rows if r[0][0] == sa.label)
    j = pvh.titles.index("Ours: Skip %")
    assert row[j][0] == "80.0 (n=1) \x0e(unsolved 1/2: 99.0)\x0f"
    from harness.reporting.tables import comparable

    assert comparable(agg.iloc[0], "skip_pct") == 80.0 and agg.iloc[0]["skip_pct"] == 89.5
