"""``harness report --paper --against``: every method row against named methods, paired by seed
(harness.reporting.against), on hand-made records."""

from __future__ import annotations

import math

from scipy.stats import ttest_ind, ttest_rel
from test_paper import KEYS, rec

from harness.reporting.against import against_table, difference
from harness.reporting.paper import write_paper_report
from harness.reporting.runs import aggregate, runs_frame


def _records():
    acc = {"gru": [90.0, 92.0, 91.0, 95.0], "sa-rnn": [89.0, 90.5, 91.5, 92.0]}
    acc["skip-rnn"] = [85.0, 88.0, 86.0, 90.0]
    skip = {"gru": 0.0, "sa-rnn": 76.0, "skip-rnn": 60.0}
    more = {"gru": 0.0, "sa-rnn": 1.0, "skip-rnn": 2.0}  # Skip % per seed: skip + more * seed
    recs = [
        rec(m, s, accuracy=a, skip_pct=(k := skip[m] + more[m] * s), geo_mean=math.sqrt(a * k))
        for m, accs in acc.items()
        for s, a in enumerate(accs)
    ]
    recs += [rec("ref:majority", s, accuracy=50.0) for s in range(4)]
    # vc-rnn on other seeds: Welch, the difference of the means
    recs += [rec("vc-rnn", s, accuracy=81.0 + s, skip_pct=70.0, geo_mean=79.0) for s in (7, 8, 9)]
    return recs, acc


def _table(recs, names):
    agg = aggregate(runs_frame(recs), KEYS, ["gru", "sa-rnn"])
    return against_table(agg, "accuracy", True, names)


def _cell(titles, rows, method, title):
    j = titles.index(title)
    return next(r[j][0] for r in rows if r[0][0] == method)


def test_differences_are_paired_by_seed_with_holm_per_column():
    recs, acc = _records()
    titles, rows, notes = _table(recs, ["gru", "sa-rnn"])
    assert titles[-3:] == ["− gru: Accuracy %", "− sa-rnn: Accuracy %", "− sa-rnn: √(Acc×Skip)"]
    assert not any(r[0][0].startswith("ref:") for r in rows)  # references are not compared
    assert _cell(titles, rows, "gru", "− gru: Accuracy %") == "–"  # its own row
    # skip-rnn - gru per seed: -5, -4, -5, -5: mean -4.75, std 0.5, paired t
    cell = _cell(titles, rows, "skip-rnn", "− gru: Accuracy %")
    assert cell.startswith("-4.75 ± 0.50; p ")
    # Holm over the column's 3 tests (sa-rnn and skip-rnn paired, vc-rnn Welch)
    p_skip = ttest_rel(acc["skip-rnn"], acc["gru"]).pvalue
    p_sa = ttest_rel(acc["sa-rnn"], acc["gru"]).pvalue
    p_vc = ttest_ind([88.0, 89.0, 90.0], acc["gru"], equal_var=False).pvalue
    assert p_skip < min(p_sa, p_vc)  # the smallest: times 3
    assert f"p {3 * p_skip:.2g} (paired t, W " in cell
    # vc-rnn shares no seed with gru: the difference of the means, Welch
    cell = _cell(titles, rows, "vc-rnn", "− gru: Accuracy %")
    assert sum(acc["gru"]) / 4 == 92.0  # vc-rnn's mean: 89
    assert cell.startswith("-3.00 (means); p ") and cell.endswith("(Welch)")
    assert "Welch" in notes[0]
    # √(Acc×Skip) only against a method that skips: sa-rnn yes, gru no
    assert "− gru: √(Acc×Skip)" not in titles
    assert _cell(titles, rows, "sa-rnn", "− sa-rnn: √(Acc×Skip)") == "–"


def test_difference_pairs_only_identical_seed_sets():
    assert difference({0: 3.0, 1: 5.0}, {0: 1.0, 1: 1.0}) == (3.0, math.sqrt(2.0), 2)
    mean, std, n = difference({0: 3.0, 1: 5.0}, {2: 1.0, 3: 2.0, 4: 3.0})
    assert (mean, std, n) == (2.0, None, 2)
    assert math.isnan(difference({0: math.nan}, {0: 1.0})[0])


def test_a_named_method_without_a_row_is_said_and_the_report_has_the_table(tmp_path):
    recs, _ = _records()
    titles, rows, notes = _table(recs, ["lstm"])
    assert (titles, rows) == ([], [])
    assert notes == ["lstm: no row in this table, so no comparison with it."]
    assert _table(recs, []) is None
    write_paper_report(recs, ["r"], tmp_path, formats=("md", "tex"), figures=False,
                       against=("gru", "sa-rnn"))  # fmt: skip
    md = (tmp_path / "paper_seizures_smoke.md").read_text()
    assert "every variant: paired comparisons with gru, sa-rnn" in md
    assert (
        r"\label{tab:seizures-smoke.r.against}"
        in (tmp_path / "paper_seizures_smoke.tex").read_text()
    )
    write_paper_report(recs, ["r"], tmp_path / "b", formats=("md",), figures=False)
    assert "paired comparisons" not in (tmp_path / "b" / "paper_seizures_smoke.md").read_text()


def test_no_named_method_with_a_row_leaves_the_main_table_and_a_note_in_both_formats(tmp_path):
    recs, _ = _records()
    write_paper_report(recs, ["r"], tmp_path, formats=("md", "tex"), figures=False,
                       against=("lstm",))  # fmt: skip
    note = "lstm: no row in this table, so no comparison with it."
    md = (tmp_path / "paper_seizures_smoke.md").read_text()
    tex = (tmp_path / "paper_seizures_smoke.tex").read_text()
    assert "paired comparisons" not in md and ".against}" not in tex  # no empty table
    main = md.split("## seizures (smoke preset), every variant; harness")[1].split("\n## ")[0]
    assert f"- {note}" in main and note in tex  # under the main table, in both


def test_the_headline_note_says_who_has_the_best_sqrt_and_by_how_much():
    recs, _ = _records()
    titles, rows, notes = _table(recs, ["sa-rnn"])
    # sqrt(acc * skip): sa-rnn 83.9, vc-rnn 79, skip-rnn about 75, gru 0
    best = next(n for n in notes if n.startswith("√(Acc×Skip): "))
    assert best.startswith("√(Acc×Skip): sa-rnn has the best mean of the method rows (83.9); ")
    assert "the next, vc-rnn, is 4.86 below it (p " in best
    # a worse named method: its rank and the best row (vc-rnn's runs, now at 99)
    recs += [rec("vc-rnn", s, accuracy=99.0, skip_pct=99.0, geo_mean=99.0) for s in (7, 8, 9)]
    agg = aggregate(runs_frame(recs), KEYS, [])
    notes = against_table(agg, "accuracy", True, ["skip-rnn"])[2]
    line = next(n for n in notes if n.startswith("√(Acc×Skip): "))
    assert line.startswith("√(Acc×Skip): skip-rnn ranks 3 of 4 method rows (74.1); ")
    assert "the best is vc-rnn (99, 24.9 above; p " in line
