"""Rows and columns under one convention: Skip % (updates), activity sparsity (reads), MACs."""

import pytest
import torch

from harness.components import config
from harness.components.flops import effective_step_macs
from harness.components.method import SeqOut, StepCost
from harness.training.train import run


def test_effective_macs_charge_only_the_columns_read():
    V, D = 2, 4
    cost = StepCost(D, always=5, per_unit=3 * (V + D))
    reads = torch.tensor([[[1, 1, 1, 1, 1, 1], [1, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0]]])
    mask = torch.ones(1, 3, D)
    macs = effective_step_macs(cost, SeqOut(torch.zeros(1, 3, D), mask, reads=reads))
    # per step: 5 + 3 * D * (columns read): 3 * 4 * 6, 3 * 4 * 2, 0
    assert macs.tolist() == [[5 + 72, 5 + 24, 5 + 0]]
    # rows and columns together: 2 of 4 units updated, reading 3 of 6 columns
    half = torch.tensor([[[1.0, 1, 0, 0]]])
    out = SeqOut(torch.zeros(1, 1, D), half, reads=torch.tensor([[[1, 1, 1, 0, 0, 0]]]))
    assert effective_step_macs(cost, out).tolist() == [[5 + 3 * 2 * 3]]
    # no reads: every column (the row-skipping methods, as before)
    assert effective_step_macs(cost, SeqOut(torch.zeros(1, 1, D), half)).tolist() == [[5 + 36]]


@pytest.mark.parametrize("method", ["delta-gru", "egru"])
def test_records_carry_activity_sparsity_beside_skip(method):
    rec = run(config.resolve(method, "adding", 0, "smoke"))
    m, trace = rec["metrics"], rec["trace"]
    assert m["skip_pct"] == 0.0 and 0.0 < m["read_skip_pct"] < 100.0
    # fixed-length sequences: the per-step shares average to the totals
    steps = trace["read_skip_pct_per_step"]
    assert sum(steps) / len(steps) == pytest.approx(m["read_skip_pct"], abs=0.01)
    assert set(trace["skip_pct_per_step"]) == {0.0} and len(trace["first_reads"]) == 1
    # one layer, every unit updated: effective MACs are the dense ones times the share read
    share = 1.0 - m["read_skip_pct"] / 100.0
    assert rec["macs"]["effective"] == pytest.approx(rec["macs"]["dense"] * share, rel=1e-6)


def test_row_skipping_methods_have_no_read_measure():
    rec = run(config.resolve("sa-rnn", "adding", 0, "smoke"))
    assert "read_skip_pct" not in rec["metrics"] and "first_reads" not in rec["trace"]
    steps = rec["trace"]["skip_pct_per_step"]
    assert sum(steps) / len(steps) == pytest.approx(rec["metrics"]["skip_pct"], abs=0.01)


def test_leaderboard_shows_activity_sparsity_next_to_skip():
    from harness.reporting.leaderboard import leaderboard_markdown

    recs = [run(config.resolve(m, "adding", 0, "smoke")) for m in ("delta-gru", "sa-rnn")]
    md = leaderboard_markdown(recs, ["r"])
    head = next(line for line in md.splitlines() if line.startswith("| Method"))
    titles = [t.strip() for t in head.strip("|").split("|")]
    assert titles.index("Activity sparsity % ↑") == titles.index("Skip % ↑") + 1
    rows = {r.split("|")[1].strip(): r.split("|") for r in md.splitlines() if r.startswith("| ")}
    col = titles.index("Activity sparsity % ↑") + 1
    read = recs[0]["metrics"]["read_skip_pct"]
    assert rows["delta-gru"][col].strip() == f"{read:.1f}" and rows["sa-rnn"][col].strip() == "–"
    assert "Activity sparsity % (activity-sparse methods)" in md
    only_rows = leaderboard_markdown(recs[1:], ["r"]).splitlines()
    assert "Activity sparsity" not in next(x for x in only_rows if x.startswith("| Method"))


def test_paper_tables_show_activity_sparsity_when_a_row_has_it(tmp_path):
    import json

    from harness.cli import main

    recs = [run(config.resolve(m, "adding", 0, "smoke")) for m in ("egru", "gru")]
    store = tmp_path / "r.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in recs))
    # --allow-dirty: these runs are made from the working tree, which may have changes
    args = ["report", str(store), "--paper", "--out-dir", str(tmp_path), "--no-figures"]
    assert main([*args, "--allow-dirty"]) == 0
    md = (tmp_path / "paper_adding_smoke.md").read_text()
    head = next(x for x in md.splitlines() if x.startswith("| Method"))
    assert "| Skip % ↑ " in head and "Activity sparsity % ↑" in head
    assert f"{recs[0]['metrics']['read_skip_pct']:.1f}" in md
