"""The leaderboard, the shared number format, selection on validation, report formats."""

from __future__ import annotations

import json

import pytest
from builders import make_record

from harness.cli import main
from harness.components.selection import Rule, parse_rule, select
from harness.errors import ConfigError
from harness.reporting.leaderboard import boards, leaderboard_markdown
from harness.reporting.text import column_scale, commit_label, fmt_cell


def rec(method, seed, lam, test, val, val_skip=50.0, sha="abcdef1234567", dirty=False):
    """An adding ok record (MSE, lower is better) with test and validation metrics."""
    vid = f"{method}-{lam}"
    return make_record(
        method=method,
        seed=seed,
        run_id=f"{vid}-{seed}",
        variant_id=vid,
        env={"git_sha": sha, "git_dirty": dirty},
        metrics={"mse": test, "skip_pct": val_skip},
        val_metrics={"mse": val, "skip_pct": val_skip},
        flops={"effective": 1e5, "dense": 2e5},
        params={"total": 100},
        **{"config.method_cfg.lam": lam, "config.model.hidden_size": 8},
    )


def test_one_number_format():
    assert fmt_cell(82.0, 2.0, 3) == "82.0 ± 2.0"  # std to 2 significant digits
    assert fmt_cell(0.0467, 0.0024, 3) == "0.0467 ± 0.0024"
    assert fmt_cell(86.0, 21.2, 3) == "86 ± 21"
    # a std of 0 is printed with its n: every seed gave the same value (not one seed, not hidden)
    assert fmt_cell(76.0, 0.0, 3) == "76.0 ± 0 (n=3)" and fmt_cell(76.0, 0.0, 1) == "76.0"
    assert fmt_cell(8.27e-4, 1.1e-4, 3, scale=-3) == "0.83 ± 0.11"
    assert fmt_cell(2.57e5, scale=4) == "25.7" and fmt_cell(0.0) == "0"
    assert fmt_cell(float("nan")) == "–" and fmt_cell(97.6086) == "97.6"
    assert "e" not in fmt_cell(1.5e-5) + fmt_cell(3e7)  # never e-notation
    assert column_scale([5.8e-4, 0.186]) == -3 and column_scale([0.05, 3.0]) == 0
    assert column_scale([7.8e5], large=True) == 4 and column_scale([2.6e4], large=True) == 0


def test_commit_per_row_and_mixed_commits_flagged():
    assert commit_label([rec("gru", 0, 0, 1, 1)]) == "abcdef1234"
    assert commit_label([rec("gru", 0, 0, 1, 1, dirty=True)]) == "abcdef1234+dirty"
    mixed = [rec("gru", 0, 0, 1, 1), rec("gru", 1, 0, 1, 1, sha="0123456789abc")]
    assert commit_label(mixed) == "mixed: 0123456789, abcdef1234"
    (board,) = boards(mixed)
    assert [r["Commit"] for r in board.rows] == ["mixed: 0123456789, abcdef1234"]


def sweep():
    # lam=0.1 is best on TEST, lam=0.01 best on validation; lam=1 has the band's Skip %.
    out = []
    for s in (0, 1):
        out += [
            rec("sa-rnn", s, 0.1, test=1e-4, val=5e-3, val_skip=60.0),
            rec("sa-rnn", s, 0.01, test=2e-3, val=1e-3, val_skip=40.0),
            rec("sa-rnn", s, 1.0, test=9e-3, val=8e-3, val_skip=90.0),
            rec("gru", s, 0.0, test=1e-3, val=1e-3, val_skip=0.0),
        ]
    return out


def test_best_val_picks_on_validation_never_on_test():
    kept, why = select(sweep(), Rule("best-val"))
    assert {r["variant_id"] for r in kept} == {"sa-rnn-0.01", "gru-0.0"}
    assert why["sa-rnn-0.01"].startswith("best-val of 3 (val mse 0.001")
    kept, why = select(sweep(), parse_rule("val-skip-band:85:10"))
    assert {r["variant_id"] for r in kept} == {"sa-rnn-1.0"}
    assert why["adding/smoke/gru"] == "val-skip-band:85:10: no variant of 1 in the band"
    # a tie on validation is broken by the variant id, not by the test metric
    tie = [rec("gru", 0, lam, test=t, val=1.0) for lam, t in [(2, 0.1), (1, 0.9)]]
    assert select(tie, Rule("best-val"))[0][0]["variant_id"] == "gru-1"


def test_val_skip_nearest_matches_the_budget_on_validation():
    # validation Skip % 60 is nearest 70 (test never read); gru's one variant is kept
    kept, why = select(sweep(), parse_rule("val-skip-nearest:70"))
    assert {r["variant_id"] for r in kept} == {"sa-rnn-0.1", "gru-0.0"}
    assert why["sa-rnn-0.1"] == "val-skip-nearest:70 of 3 (val Skip % 60.0, val mse 0.005)"
    assert select(sweep(), parse_rule("val-skip-nearest:80"))[1].keys() >= {"sa-rnn-1.0"}
    # equally near: the better validation metric, then the variant id
    tie = [
        rec("gru", 0, lam, test=t, val=v, val_skip=sk)
        for lam, t, v, sk in [(1, 0.1, 2.0, 40.0), (2, 0.9, 1.0, 60.0), (3, 0.0, 1.0, 60.0)]
    ]
    assert select(tie, parse_rule("val-skip-nearest:50"))[0][0]["variant_id"] == "gru-2"


def test_val_skip_nearest_picks_the_learning_rate_on_validation():
    # lam=1 at lr 1e-2 skips nearest 70 but validates worse than lam=1 at lr 1e-3: the learning
    # rate is chosen on the validation metric, lambda on the Skip %; gru's lr likewise.
    def at(lr, *a, **k):
        r = rec(*a, **k)
        r["variant_id"] += f"-lr{lr}"
        r["run_id"] = f"{r['variant_id']}-{r['seed']}"
        r["config"] = {**r["config"], "train": {"lr": lr}}
        return r

    recs = [
        at(1e-2, "sa-rnn", 0, 1.0, test=1e-4, val=9e-3, val_skip=70.0),
        at(1e-3, "sa-rnn", 0, 1.0, test=9e-3, val=1e-3, val_skip=60.0),
        at(1e-3, "sa-rnn", 0, 0.1, test=9e-3, val=2e-3, val_skip=66.0),
        at(1e-2, "gru", 0, 0.0, test=1e-4, val=5e-3, val_skip=0.0),
        at(1e-3, "gru", 0, 0.0, test=9e-3, val=1e-3, val_skip=0.0),
    ]
    kept, why = select(recs, parse_rule("val-skip-nearest:70"))
    assert {r["variant_id"] for r in kept} == {"sa-rnn-0.1-lr0.001", "gru-0.0-lr0.001"}
    assert (
        "of 3, 1 beaten on validation by the same knobs' other training settings"
        in (why["sa-rnn-0.1-lr0.001"])
    )
    assert why["gru-0.0-lr0.001"].startswith("val-skip-nearest:70 of 2, 1 beaten")


def test_parse_rule():
    assert parse_rule("val-skip-band:75:5") == Rule("val-skip-band", 75.0, 5.0)
    assert parse_rule("val-skip-nearest:76") == Rule("val-skip-nearest", 76.0)
    assert str(parse_rule("val-skip-nearest:76")) == "val-skip-nearest:76"
    bad_rules = ("val-skip-nearest", "val-skip-nearest:x", "val-skip-nearest:inf")
    for bad in ("best", "val-skip-band:75", "val-skip-band:a:5", "val-skip-band:75:-1", *bad_rules):
        with pytest.raises(ConfigError):
            parse_rule(bad)


def test_leaderboard_states_the_rule_and_picks_one_row_per_method():
    md = leaderboard_markdown(sweep(), ["r"], select=Rule("best-val"))
    assert "- Rows: best-val: per method" in md and "Picked by" in md
    assert "lam=0.1" not in md and md.count("| sa-rnn ") == 1
    assert "Mean depth (depth-adaptive methods): the mean over steps of R_t" in md
    md = leaderboard_markdown(sweep(), ["r"])
    assert md.count("| sa-rnn ") == 3 and "every variant (no --select rule)" in md


def test_report_cli_select_and_formats(tmp_path, capsys):
    store = tmp_path / "runs.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in sweep()))
    out = tmp_path / "o" / "board.md"
    args = ["report", str(store), "--out", str(out), "--no-figures"]
    assert main([*args, "--select", "best-val", "--format", "md,tex,csv"]) == 0
    assert {p.name for p in out.parent.iterdir()} == {"board.md", "board.tex", "board.csv"}
    csv = (tmp_path / "o" / "board.csv").read_text().splitlines()
    assert csv[0].startswith("task,preset,method,variant,variant_id,seeds,commit,picked_by")
    assert len(csv) == 3  # one row per method
    capsys.readouterr()
    assert main([*args, "--select", "worst-val"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown selection rule 'worst-val'") and "\n" not in err
    pytest.importorskip("pandas")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        assert main([*args, "--format", "parquet"]) == 2
        err = capsys.readouterr().err.strip()
        assert "needs pyarrow" in err and "\n" not in err
    else:
        assert main([*args, "--format", "parquet"]) == 0
        assert (tmp_path / "o" / "board.parquet").exists()


def test_a_field_older_records_lack_tells_their_variant_apart():
    # the same method before and after a config field was added: the rows must not look alike
    old = rec("gru", 0, 0, test=1e-3, val=1e-3)
    old["config"] = {**old["config"], "method_cfg": {}}
    old["variant_id"] = old["run_id"] = "gru-old"
    new = rec("gru", 0, 0, test=2e-3, val=2e-3)
    md = leaderboard_markdown([old, new], ["r"])
    rows = [line for line in md.splitlines() if line.startswith("| gru ")]
    assert len(rows) == 2 and "lam=None" in rows[0] + rows[1] and "lam=0" in rows[0] + rows[1]
    from harness.reporting.runs import aggregate, runs_frame

    labels = set(aggregate(runs_frame([old, new]), ["mse"])["label"])
    assert labels == {
        "gru_form=None, lam=None",
        "gru_form=after, lam=0",
    }  # (not read: no migration)


def test_the_leaderboard_ci_of_an_mse_starts_at_zero():
    # 1e-3 ± t(0.975, 2) * 1e-3 / sqrt(3) = 1e-3 ± 2.48e-3: the low end would be negative
    recs = [rec("gru", s, 0.0, test=t, val=t) for s, t in enumerate([0.0, 1e-3, 2e-3])]
    (board,) = boards(recs)
    (ci,) = [c.title for c in board.columns if c.title.startswith("95 % CI")]
    low, high = (float(v) for v in board.rows[0][ci].strip("[]").split(", "))
    assert low == 0.0 and high > 0
