"""One leaderboard model, four renderings: a measure registered by a plugin reaches every one.

``harness.reporting.leaderboard`` builds one table per (task, preset) from the records and the
metric registry; the terminal (``harness.cli.progress``), the Markdown file, LaTeX and csv render
it.
A metric that an ``--include`` file registers gets a column in each, and the terminal shows the
effective FLOPs the file shows, not a second count of its own.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from builders import make_record
from plugins import isolated_registry
from rich.console import Console

from harness.cli import main
from harness.cli.progress import print_tables
from harness.components import metrics
from harness.reporting.leaderboard import boards, leaderboard_markdown

PLUGIN = """
from harness.components.metrics import Metric, register_metric

register_metric(Metric("calm_pct", "Calm share %", "%", higher=True, percent=True,
                       range=(0.0, 100.0)))
"""


@pytest.fixture
def calm(tmp_path):
    """Records of two methods over two seeds that hold ``calm_pct``, a plugin's measure."""
    path = tmp_path / "calm_metric.py"
    path.write_text(PLUGIN)
    before = dict(metrics.METRICS._items)
    recs = [
        make_record(
            method=m,
            seed=s,
            **{"metrics.calm_pct": 40.0 + 10 * s + j, "macs.effective": 3006.0, "flops": {}},
        )
        for j, m in enumerate(("gru", "lstm"))
        for s in (0, 1)
    ]
    for r in recs:  # what a run records: effective FLOPs = 2 x MACs
        r["flops"] = {"effective": 2 * r["macs"]["effective"], "dense": 2 * r["macs"]["dense"]}
    with isolated_registry():
        yield path, recs
    metrics.METRICS._items.clear()
    metrics.METRICS._items.update(before)


def _terminal(recs, width: int = 200) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    print_tables(recs, None, "runs.jsonl", console, Path("LEADERBOARD.md"))
    return console.file.getvalue()


def _md_column(md: str, title: str) -> list[str]:
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    j = next(i for i, c in enumerate(head) if c.startswith(title))
    return [[c.strip() for c in ln.strip("|").split("|")][j] for ln in lines[2:]]


def test_a_plugin_metric_reaches_terminal_markdown_latex_and_csv(calm, tmp_path, capsys):
    plugin, recs = calm
    store = tmp_path / "runs.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "board.md"
    args = ["report", str(store), "--include", str(plugin), "--out", str(out), "--no-figures"]
    assert main([*args, "--format", "md,tex,csv"]) == 0
    capsys.readouterr()
    assert "Calm share % ↑" in out.read_text()
    assert "Calm\\\\share \\% $\\uparrow$" in out.with_suffix(".tex").read_text()  # 2 lines
    csv = out.with_suffix(".csv").read_text().splitlines()
    head = csv[0].split(",")
    assert {"calm_pct", "calm_pct_std", "calm_pct_ci95", "calm_pct_seed1"} <= set(head)
    gru = dict(zip(head, next(r for r in csv[1:] if ",gru," in r).split(","), strict=True))
    assert float(gru["calm_pct"]) == 45.0 and float(gru["calm_pct_seed1"]) == 50.0
    text = _terminal(recs)
    assert "Calm share % ↑" in text
    (board,) = boards(recs)
    calm_cells = [r["Calm share % ↑"] for r in board.rows]
    assert calm_cells == ["45.0 ± 7.1", "46.0 ± 7.1"]  # gru 40 / 50, lstm 41 / 51
    assert all(c in text for c in calm_cells)


def test_the_terminal_and_the_file_show_the_same_flops(calm):
    _, recs = calm
    md = leaderboard_markdown(recs, ["runs.jsonl"])
    (flops,) = {c for c in _md_column(md, "Effective FLOPs")}
    assert flops == "6012 ± 0 (n=2)"  # 2 x 3006 MACs: FLOPs, in the file and on the terminal
    text = _terminal(recs)
    assert "Effective FLOPs ↓" in text and "MACs" not in text
    rows = [ln.split() for ln in text.splitlines() if ln.split()[:1] in (["gru"], ["lstm"])]
    assert len(rows) == 2 and all(" ".join(r[-4:]) == flops for r in rows)


def test_the_leaderboard_and_the_paper_table_share_one_aggregation_and_column_model(tmp_path):
    """A measure's cell reads the same in both tables, and their csv rows hold the same numbers.

    Three seeds of two methods; the GRU records ``calm`` on one seed only: a mean over one value,
    no std (``_std`` empty in either csv), the same cell text in either table.
    """
    from harness.reporting.leaderboard import leaderboard_numbers
    from harness.reporting.runs import aggregate, runs_frame, tidy
    from harness.reporting.tables import build_main_table

    mse = {"gru": (2e-3, 3e-3, 4e-3), "lstm": (1e-3, 1.5e-3, 5e-3)}
    recs = [
        make_record(method=m, seed=s, **{"metrics.mse": mse[m][s], "flops": {}})
        for m in mse
        for s in range(3)
    ]
    recs[0]["metrics"]["skip_pct"] = 12.5  # the gru's seed 0 alone holds a Skip %
    for r in recs[1:]:
        r["metrics"].pop("skip_pct")
    (board,) = boards(recs)
    agg = aggregate(runs_frame(recs), ["mse", "skip_pct", "flops", "params", "hidden_size"])
    main = build_main_table(agg, "mse", False)
    titles = [c.title for c in board.columns]
    mse_title = next(t for t in titles if t.startswith("MSE"))
    assert mse_title in main.titles  # one column model: the same title, unit and direction
    j = main.titles.index(mse_title)
    paper = {r[0][0]: r[j][0] for r in main.rows}
    board_cells = {r["Method"]: r[mse_title] for r in board.rows}
    assert board_cells == paper == {"gru": "3.0 ± 1.0", "lstm": "2.5 ± 2.2"}
    assert {r["Method"]: r["Skip % ↑"] for r in board.rows} == {
        "gru": "12.5",
        "lstm": "–",
    }
    numbers = {r["method"]: r for r in leaderboard_numbers(recs)}
    for r in tidy(agg, "adding", "smoke", None, ["mse", "skip_pct"]):
        for k in ("mse", "mse_std", "mse_ci95", "skip_pct", "skip_pct_std", "mse_seed2"):
            a, b = numbers[r["method"]][k], r[k]
            assert a == b or (math.isnan(a) and math.isnan(b)), (r["method"], k)
    assert math.isnan(numbers["gru"]["skip_pct_std"]) and numbers["gru"]["skip_pct"] == 12.5
