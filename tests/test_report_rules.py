"""The rules the paper report enforces so that every number beside a paper's measures the same
thing (docs/reports.md): a row at its own setting, one setting one variant with no seed
cherry-picking and clean trees only, visible divergences and failures, and statistics that fit
the paired design of the seeds."""

from __future__ import annotations

import math

import pytest
from builders import make_record

from harness.cli import main
from harness.components.selection import Rule, choose, parse_rule, select
from harness.reporting.paper import write_paper_report
from harness.reporting.published import tables_for
from harness.reporting.runs import aggregate, runs_frame
from harness.reporting.tables import build_main_table, holm, paired_p
from harness.reporting.versus import paper_vs_harness

KEYS = ["geo_mean", "skip_pct", "accuracy", "solved", "mse", "flops", "params", "hidden_size"]


def acc_run(method, seed, acc, val=None, skip=0.0, preset="paper", dirty=False, set=None, **kw):
    """An ok seizures record (accuracy, higher is better) at ``preset`` with ``set`` applied."""
    return make_record(
        set=set,
        method=method,
        task="seizures",
        seed=seed,
        preset=preset,
        primary="accuracy",
        higher_is_better=True,
        env={"git_sha": "abcdef1234567", "git_dirty": dirty},
        metrics={"accuracy": acc, "skip_pct": skip, "geo_mean": math.sqrt(acc * skip)},
        val_metrics={"accuracy": acc if val is None else val, "skip_pct": skip},
        **kw,
    )


def mse_run(method, seed, mse, val=None, task="synthetic", preset="paper", set=None, **kw):
    """An ok record of an MSE task (lower is better)."""
    return make_record(
        set=set,
        method=method,
        task=task,
        seed=seed,
        preset=preset,
        primary="mse",
        higher_is_better=False,
        metrics={"mse": mse, "skip_pct": 0.0},
        val_metrics={"mse": mse if val is None else val, "skip_pct": 0.0},
        **kw,
    )


def versus(records, table_key, preset="paper"):
    task = records[0]["task"]
    (table,) = [t for t in tables_for(task) if t.key == table_key]
    agg = aggregate(runs_frame(records), KEYS)
    pvh = paper_vs_harness(table, agg, records[0]["primary"], Rule("best-val"), task, preset)
    rows = {r[0][0]: dict(zip(pvh.titles, [t for t, _ in r], strict=True)) for r in pvh.rows}
    return pvh, rows


# --- 1. a paper row is filled only by runs of the row's own setting ---------------------------


def test_a_paper_row_is_filled_only_at_its_tables_stated_setting():
    # S-SA Table 1 states D = 50: a D = 16 GRU of the paper preset does not fill the GRU row
    small = [acc_run("gru", s, 97.0, set={"hidden_size": 16}) for s in (0, 1)]
    pvh, rows = versus(small, "S-SA Table 1")
    assert rows["GRU"]["Ours: √(Acc×Skip)"] == "not run at this setting"  # before: filled
    assert rows["GRU"]["Picked by"] == "not run at this setting" and pvh.at_setting
    (cmds,) = [n for n in pvh.notes if n.startswith("Not run")]
    assert "`harness run --suite ssa-table1 --methods gru --set train.lr=0.001`" in cmds
    # at D = 50 it is filled, and the difference to the paper is taken
    pvh, rows = versus(small + [acc_run("gru", s, 96.0) for s in (0, 1)], "S-SA Table 1")
    assert rows["GRU"]["Ours: Accuracy %"] == "96.0 ± 0 (n=2)"
    assert rows["GRU"]["Ours − paper: Accuracy %"] == "+11.3"
    assert rows["GRU"]["Picked by"] == "the one variant at the row's setting"


def test_the_ablation_at_d_20_takes_only_d_20_runs():
    # S-EI's section 4.1 is at D_h = 20; the D = 10 EI-REHN validates best, but is not at it
    recs = [mse_run("ei-rehn", s, 2.5e-3, val=1e-3, set={"hidden_size": 10}) for s in (0, 1)]
    recs += [mse_run("ei-rehn", s, 2.6e-3, val=2e-3, set={"hidden_size": 20}) for s in (0, 1)]
    pvh, rows = versus(recs, "S-EI 4.1 ablation")
    assert rows["EI-REHN"]["Ours: MSE (×10^-3)"] == "2.60 ± 0 (n=2)"
    (cmds,) = [n for n in pvh.notes if n.startswith("Not run")]
    assert "`harness run --suite sei-table1 --methods srhn --set depth=1`" in cmds


def test_a_setting_of_one_method_keys_only_its_rows():
    from harness.reporting.published import load_tables
    from harness.reporting.versus import row_key

    (t3,) = [t for t in load_tables() if t.key == "S-EI Table 3"]
    rhn, ei = t3.rows[0], t3.rows[-1]
    assert row_key(rhn, t3) == {"hidden_size": 1200, "tie_embeddings": True, "depth": 2}
    assert row_key(ei, t3) == {"hidden_size": 1200, "tie_embeddings": True, "dz": 600, "r_max": 5}
    assert row_key(ei, t3, at_setting=False) == {"r_max": 5}  # a smaller preset: knobs only


def test_a_table_at_a_smaller_preset_is_the_harness_own_without_a_difference(tmp_path):
    # adding at the quick preset is T = 50, D = 50; S-SA Table 4 is T = 500, D = 128
    recs = [
        mse_run("gru", s, 1e-4, task="adding", preset="quick", **{"metrics.solved": 1.0})
        for s in (0, 1)
    ]
    (path,) = write_paper_report(recs, ["r"], tmp_path, formats=("md",), figures=False)
    md = path.read_text()
    assert "## Harness, quick preset (D 50, T 50, " in md
    assert "beside S-SA Table 4 (T = 500, D = 128) as context (not at the paper's setting" in md
    assert "| Ours − paper:" not in md and "(T = 500, D = 128) vs harness" not in md


# --- 2. one setting, one variant: no seed cherry-picking, clean trees only -------------------


def test_a_variant_with_fewer_seeds_is_not_eligible_while_one_with_more_exists():
    one = [acc_run("clockwork-rnn", 0, 95.4, val=99.0, preset="smoke", set={"lr": "0.001"})]
    three = [acc_run("clockwork-rnn", s, 93.9, val=90.0, preset="smoke") for s in (0, 1, 2)]
    variants = {one[0]["variant_id"]: one, three[0]["variant_id"]: three}
    vid, why = choose(variants, Rule("best-val"))
    assert vid == three[0]["variant_id"]  # before: the one seed's 99.0 on validation won
    assert why == "best-val of 2, 1 with fewer than 3 seeds not eligible (val accuracy 90)"
    kept, _ = select(one + three, parse_rule("val-skip-nearest:80"))
    assert {r["variant_id"] for r in kept} == {three[0]["variant_id"]}


def test_paper_tables_use_clean_commits_unless_allow_dirty(tmp_path):
    recs = [acc_run("gru", s, 97.0, preset="smoke") for s in (0, 1, 2)]
    recs.append(acc_run("clockwork-rnn", 0, 95.4, skip=81.2, preset="smoke", dirty=True))
    (path,) = write_paper_report(recs, ["r.jsonl"], tmp_path, formats=("md",), figures=False)
    md = path.read_text()
    assert "| clockwork-rnn " not in md and "abcdef1234+dirty" not in md
    assert "Rows that only records of a dirty tree would fill (left out; `--allow-dirty` " in md
    assert (
        "- Records: clean commits only (env.git_dirty false): 1 record of this task and preset "
        "from a tree with uncommitted changes left out (`harness report r.jsonl --paper --task "
        "seizures --preset smoke --allow-dirty` tabulates them)."
    ) in md
    assert "Seed count of this table: 3 (the most seeds of any row)." in md
    (path,) = write_paper_report(
        recs, ["r.jsonl"], tmp_path, formats=("md",), figures=False, allow_dirty=True
    )
    md = path.read_text()
    assert "| clockwork-rnn " in md and "abcdef1234+dirty" in md
    assert "- Records: dirty trees included (`--allow-dirty`): 1 record" in md


def test_a_table_the_clean_rule_empties_says_so_and_names_the_command(tmp_path):
    recs = [acc_run("gru", s, 97.0, preset="smoke", dirty=True) for s in (0, 1)]
    (path,) = write_paper_report(recs, ["r.jsonl"], tmp_path, formats=("md",), figures=False)
    md = path.read_text()
    assert "no record from a clean commit" in md and "| gru " not in md
    assert (
        "To tabulate them anyway: `harness report r.jsonl --paper --task seizures --preset "
        "smoke --allow-dirty`."
    ) in md


def test_report_cli_allow_dirty(tmp_path):
    import json

    store = tmp_path / "runs.jsonl"
    recs = [acc_run("gru", 0, 97.0, preset="smoke", dirty=True)]
    store.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "p"
    args = ["report", str(store), "--paper", "--out-dir", str(out), "--no-figures"]
    assert main([*args, "--format", "md", "--allow-dirty"]) == 0
    assert "| gru " in (out / "paper_seizures_smoke.md").read_text()
    assert main(["report", str(store), "--allow-dirty", "--out", str(tmp_path / "b.md")]) == 2


# --- 3. divergences and failures are visible -------------------------------------------------


def test_rows_whose_runs_had_training_events_are_marked_and_named():
    overflow = {"epoch": 4, "kind": "grad_overflow_clipped", "detail": "largest 2e+19"}
    recs = [acc_run("gru", 0, 97.0, preset="smoke", events=[overflow])]
    old = acc_run("gru", 1, 96.0, preset="smoke")
    del old["events"]  # made before events were recorded: the spike is in its history
    old["history"] = [{"epoch": e, "train_loss": x} for e, x in enumerate([0.5, 0.1, 0.1, 2.0])]
    recs += [old, acc_run("gru", 2, 96.5, preset="smoke")]
    recs += [acc_run("lstm", s, 96.0, preset="smoke") for s in (0, 1, 2)]
    t = build_main_table(aggregate(runs_frame(recs), KEYS), "accuracy", True)
    seeds = [r[t.titles.index("Seeds")][0] for r in t.rows]
    assert seeds == ["3 ‡", "3"]
    (note,) = [n for n in t.notes if n.startswith("‡")]
    assert note.startswith("‡ 1 row (2 runs) had training events")
    assert "gru: seed 0: grad_overflow_clipped at epoch 4; seed 1: loss_spike at epoch 3." in note


def test_the_leaderboard_lists_superseded_failed_records():
    from harness.reporting.leaderboard import leaderboard_markdown

    ok = acc_run("gru", 0, 97.0, preset="smoke")
    failed = dict(ok, status="failed", error="diverged: non-finite loss (nan) at epoch 2")
    md = leaderboard_markdown([failed, ok], ["r"])
    assert "1 failed record (1 run), all rerun (their latest records are ok and tabulated)" in md
    assert "diverged: non-finite loss (nan) at epoch 2 (rerun: its latest record is ok" in md


# --- 4. statistics that fit the design --------------------------------------------------------


def test_paired_tests_where_the_seeds_are_shared_against_a_reference_chosen_on_validation():
    # lstm is better on test, gru on validation: gru is the reference (before: lstm, "best")
    gru = [acc_run("gru", s, a, val=99.0, preset="smoke") for s, a in enumerate([80, 82, 85])]
    lstm = [acc_run("lstm", s, a, val=90.0, preset="smoke") for s, a in enumerate([81, 83, 86.5])]
    t = build_main_table(aggregate(runs_frame(gru + lstm), KEYS), "accuracy", True)
    col = t.titles.index("p vs reference (Accuracy %, Holm)")
    assert [r[col][0] for r in t.rows] == ["best val (reference)", "0.02 (paired t)"]
    # by hand: differences 1, 1, 1.5; t = 1.1667 / (0.28868 / sqrt(3)) = 7.0 on 2 df, and
    # for 2 df the two-sided p is 1 - t / sqrt(t^2 + 2) = 0.019804 (Welch: 0.72)
    assert paired_p([81, 83, 86.5], [80, 82, 85])[0] == pytest.approx(0.019804, rel=1e-4)
    # Wilcoxon, exact (two differences tied: every sign flip): 3 differences of one sign,
    # two-sided p = 2 / 2^3 = 0.25
    assert [r[t.titles.index("Wilcoxon p (Holm)")][0] for r in t.rows] == ["–", "0.25"]
    assert any("Holm's step-down correction over the table's 1 t-tests" in n for n in t.notes)


def test_wilcoxon_is_exact_where_scipy_computes_it_so_else_named_the_normal_approximation():
    # no zero, no tie: the exact null distribution; 3 of one sign: p = 2 / 2^3
    assert paired_p([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])[1:] == (pytest.approx(0.25), True)
    # ranks 1..6 with signs + + + + - +: W- = 5, P(W- <= 5) = 10 / 64 of the 2^6 sign sets
    assert paired_p([1, 2, 3, 4, -5, 6], [0] * 6)[1:] == (pytest.approx(20 / 64), True)
    # a tie (1, 1) or a zero: every sign flip, still exact
    assert paired_p([1, 1, 1.5], [0, 0, 0])[1:] == (pytest.approx(0.25), True)
    assert paired_p([0, 1, 2, 3], [0, 0, 0, 0])[1:] == (pytest.approx(0.25), True)
    assert paired_p([0.7, 0.8, 0.95], [0.6, 0.7, 0.8])[1:] == (pytest.approx(0.25), True)
    # 14 differences with a tie: no exact test, the normal approximation (ties-corrected z)
    d = [*range(1, 13), -13, 13]
    ranks = [*range(1, 13), 13.5, 13.5]
    w_minus = 13.5
    mean, var = 14 * 15 / 4, (14 * 15 * 29 - (2**3 - 2) / 2) / 24
    z = (w_minus - mean) / math.sqrt(var)
    assert sum(ranks) == 14 * 15 / 2 and paired_p(d, [0] * 14)[1:] == (
        pytest.approx(math.erfc(-z / math.sqrt(2))),
        False,
    )
    # and it is named so in the table: marked, the note says what the mark means
    gru = [acc_run("gru", s, 80.0, val=99.0, preset="smoke") for s in range(14)]
    lstm = [acc_run("lstm", s, 80.0 + x, preset="smoke") for s, x in enumerate(d)]
    t = build_main_table(aggregate(runs_frame(gru + lstm), KEYS), "accuracy", True)
    cells = [r[t.titles.index("Wilcoxon p (Holm)")][0] for r in t.rows]
    assert cells[0] == "–" and cells[1].startswith("≈") and cells[1] != "≈n/a"
    assert any("else the normal approximation, marked ≈" in n for n in t.notes)
    assert not any("(exact, two-sided)" in n for n in t.notes)


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 of m = 3: 3 x 0.01, max(0.03, 2 x 0.03), max(0.06, 1 x 0.04)
    assert holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])
    assert holm([0.5, 0.9]) == [1.0, 1.0]


def test_the_csv_export_carries_the_per_seed_values(tmp_path):
    recs = [acc_run("gru", s, a, preset="smoke") for s, a in enumerate([80.0, 82.0, 85.0])]
    recs += [acc_run("lstm", s, 90.0, preset="smoke") for s in (0, 2)]
    (path,) = write_paper_report(recs, ["r"], tmp_path, formats=("csv",), figures=False)
    import pandas as pd

    df = pd.read_csv(path).set_index("method")
    assert list(df.loc["gru", ["accuracy_seed0", "accuracy_seed1", "accuracy_seed2"]]) == [
        80.0,
        82.0,
        85.0,
    ]
    assert math.isnan(df.loc["lstm", "accuracy_seed1"])  # no run of that seed


def test_each_result_is_labelled_by_what_picked_it(tmp_path):
    # SA-RNN at the paper's lambda (2e-4) skips 46 %; at 1e-2, 74 %: the matched budget (76 %)
    # picks 1e-2 for the method table, the paper row keeps 2e-4; each says what picked it
    recs = [
        acc_run("sa-rnn", s, 96.0, skip=sk, set={"lam": lam})
        for s in (0, 1)
        for lam, sk in ((2e-4, 46.0), (1e-2, 74.0))
    ]
    recs += [acc_run("gru", s, 96.0) for s in (0, 1)]
    (path,) = write_paper_report(
        recs, ["r"], tmp_path, formats=("md",), figures=False, select=Rule("val-skip-nearest", 76)
    )
    md = path.read_text()
    (main_row,) = [line for line in md.splitlines() if line.startswith("| sa-rnn ")]
    assert "| at matched budget 76 % (val-skip-nearest:76 of 2 " in main_row
    (paper_row,) = [line for line in md.splitlines() if line.startswith("| SA-RNN ")]
    assert "| at the paper's λ = 0.0002 (the one variant at the row's setting) |" in paper_row
    assert (
        "- SA-RNN: this table shows sa-rnn at the paper's λ = 0.0002; the method table shows "
        "its lam=0.01 at matched budget 76 %"
    ) in md


def test_a_report_names_the_harness_commit_that_rendered_it(monkeypatch):
    from harness.reporting import text

    monkeypatch.setattr("harness.env.git_state", lambda: ("0123456789abcdef", False))
    assert "rendered by the harness at 0123456789 (clean)" in text.header([], ["r.jsonl"], "t")
    monkeypatch.setattr("harness.env.git_state", lambda: ("0123456789abcdef", True))
    assert "rendered by the harness at 0123456789+dirty" in text.header([], ["r.jsonl"], "t")


def test_the_metric_selection_line_says_which_rule_is_which_tasks():
    from builders import make_record

    from harness.reporting import text

    ppl = "test metrics at the epoch with the lowest validation perplexity"
    mse = "test metrics at the epoch with the lowest validation mse"
    refs = "reference predictors: fitted once on the training split, no epochs to choose from"
    recs = [
        make_record(task="adding"),
        make_record(task="synthetic"),
        make_record(task="ptb", selection=ppl),
        *(
            make_record(task=t, method="ref:mean", selection=refs)
            for t in ("adding", "synthetic", "ptb")
        ),
    ]
    line = next(x for x in text.header(recs, ["r.jsonl"], "t").splitlines() if "selection" in x)
    # the references' rule is every task's: it names none
    assert line == (
        f"- Metric selection: {refs}; {mse} (tasks adding, synthetic); {ppl} (task ptb). "
        "Mean ± sample std over seeds."
    )
    # one task: nothing to tell apart
    line = next(x for x in text.header(recs[:1], ["r.jsonl"], "t").splitlines() if "selection" in x)
    assert line == f"- Metric selection: {mse}. Mean ± sample std over seeds."


def test_a_lead_at_a_grid_point_only_its_method_was_given_lists_every_grid(tmp_path):
    """SA-RNN's λ 2e-2 was added to its grid alone: at 76 % it leads √(Acc×Skip) there."""
    sweep = {"suite": "my-suite"}
    grid = {"sa-rnn": [(1e-2, 70.0), (2e-2, 77.0), (5e-2, 95.0), (1e-1, 90.0)]}
    grid["skip-rnn"] = [(1e-2, 60.0), (1e-1, 65.0)]
    recs = [
        acc_run(m, s, 95.0, skip=sk, set={"lam": lam}, sweep=sweep)
        for m, points in grid.items()
        for lam, sk in points
        for s in (0, 1)
    ]
    recs += [acc_run("random-updates", s, 95.5, skip=76.0, set={"p_skip": 0.76}) for s in (0, 1)]

    def notes(rule):
        (path,) = write_paper_report(
            recs, ["r"], tmp_path, formats=("md",), figures=False, select=rule
        )
        return [n for n in path.read_text().splitlines() if n.startswith("- Grids: ")]

    (note,) = notes(Rule("val-skip-nearest", 76))
    assert note.startswith(
        "- Grids: sa-rnn (lam=0.02) leads √(Acc×Skip) ↑, Skip % ↑ at lam=0.02, a value skip-rnn "
        "was not run at (a lead at a grid point not every method was given)."
    )
    assert note.endswith(
        "(per method, the values its variants here were run at of each knob some method varies; "
        "suite my-suite): skip-rnn: lam 0.01 / 0.1; random-updates: one variant; sa-rnn: "
        "lam 0.01 / 0.02 / 0.05 / 0.1."
    )
    # At 90 % SA-RNN leads at λ 0.1, which Skip RNN was run at too: no note.
    assert notes(Rule("val-skip-nearest", 90)) == []
    assert notes(None) == []  # every variant a row (λ 0.05 bold): the grids are the table
