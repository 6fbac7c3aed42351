"""The report figures (harness.reporting.figures) on hand-made records: artists, not pixels."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
import torch
from builders import make_record
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.colors import to_hex
from matplotlib.text import Text

from harness.components import config
from harness.components.registry import METHODS, TASKS
from harness.persistence.records import flat_config
from harness.persistence.trace import pack_depth, pack_mask, unpack_depth
from harness.reporting import curves as C
from harness.reporting import figstyle as S
from harness.reporting import figures as F
from harness.reporting import patterns as P
from harness.reporting.latex import figure_env, figure_width
from harness.reporting.render import latex_document
from harness.training import train


def rec(method, seed, lam=None, *, mse=0.1, skip=50.0, flops=1e4, val=None, hist=(), trace=None):
    """An ok record of the adding task (lower MSE is better); ``lam`` goes into its config."""
    vid = f"{method}-{lam}"
    return make_record(
        method=method,
        seed=seed,
        run_id=f"{vid}-{seed}",
        variant_id=vid,
        metrics={"mse": mse, "skip_pct": skip},
        val_metrics={"mse": mse if val is None else val},
        flops={"effective": flops},
        params={"total": 10},
        history=[{"epoch": i, "train_loss": a, "val_mse": b} for i, (a, b) in enumerate(hist)],
        trace=trace or {},
        **({} if lam is None else {"config.method_cfg.lam": lam}),
        **{"config.model.hidden_size": 8},
    )


def runs_frame(records):
    """The per-run frame report_figures reads (as harness.reporting.paper.runs_frame builds it)."""
    rows = []
    for r in records:
        cfg = flat_config(r)
        row = {k: r[k] for k in ("task", "preset", "method", "variant_id", "seed", "primary")}
        row.update(record=r, config=cfg, flops=r["flops"]["effective"])
        rows.append({**row, **r["metrics"]})
    return pd.DataFrame(rows)


def texts(fig):
    FigureCanvasAgg(fig).draw()
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def drawn_styles(fig):
    """{label or gid: {(colour, marker)}} of the method-styled artists of ``fig``, legends too."""
    out: dict[str, set] = {}
    lines = [(t.get_text(), h) for lg in fig.legends for h, t in zip(lg.legend_handles,
             lg.get_texts(), strict=True)]  # fmt: skip
    for ax in fig.axes:
        lines += [(c.get_label(), c.lines[0]) for c in ax.containers if hasattr(c, "has_xerr")]
        lines += [(ln.get_gid() or ln.get_label(), ln) for ln in ax.get_lines()]
    for key, ln in lines:
        marker = getattr(ln, "get_marker", lambda: None)()  # a bar's patch: none
        if key and not key.startswith("_") and marker not in (None, "None", ""):
            out.setdefault(key, set()).add((to_hex(ln.get_color()), ln.get_marker()))
    return out


def test_every_method_its_own_colour_and_marker_in_every_figure(monkeypatch):
    import seaborn as sns

    names = METHODS.names()
    # 16 registered methods and 24 more: colours of seaborn's colour-blind palette times
    # markers, no (colour, marker) pair twice; neighbours in the registry differ in both.
    for k in range(12):
        monkeypatch.setitem(METHODS._items, f"zz-later-{k:02d}", object())
        monkeypatch.setitem(METHODS._items, f"aa-later-{k:02d}", object())
    pairs = [(S.method_style(m)["color"], S.method_style(m)["marker"]) for m in METHODS.names()]
    assert len(set(pairs)) == len(pairs) == len(names) + 24
    assert {c for c, _ in pairs} <= set(sns.color_palette("colorblind").as_hex())
    for (c1, m1), (c2, m2) in zip(pairs, pairs[1:], strict=False):
        assert c1 != c2 and m1 != m2
    assert S.method_style("not-registered") == S.method_style("not-registered")
    style = S.method_style("not-registered")
    assert (style["color"], style["marker"]) not in pairs
    monkeypatch.undo()
    # The same pair in every figure kind and its legend: trade-off, budget, curves, depth.
    recs = [
        rec(
            m,
            s,
            lam,
            mse=0.1 + k / 100 + s / 1000,
            skip=5.0 * k + lam_k,
            hist=[(1.0, 0.5), (0.5, 0.2)],
        )
        for k, m in enumerate(names)
        for lam_k, lam in enumerate([0.0, 1e-3] if "lam" in F.budget_knobs(m) else [None])
        for s in (0, 1)
    ]
    runs = runs_frame(recs)
    points = F.variant_points(runs, ["mse", "skip_pct", "flops"])
    every = set(zip(points["method"], points["variant_id"], strict=True))
    (lam_runs,) = F.budget_sweeps(runs).values()
    figs = {
        "tradeoff": F.tradeoff_figure(points, "mse", False, "MSE", marked=every),
        "budget": F.budget_figure(lam_runs, "lam", "mse", "MSE", False),
        "curves": C.curves_figure(recs),
        "depth": P.depth_figure({m: {"1": 3, "2": k + 1} for k, m in enumerate(names)}),
    }
    want = {m: {(S.method_style(m)["color"], S.method_style(m)["marker"])} for m in names}
    for kind, fig in figs.items():
        drawn = drawn_styles(fig)
        shown = set(lam_runs["method"]) if kind == "budget" else set(names)
        assert {m: drawn.get(m) for m in shown} == {m: want[m] for m in shown}, kind


def test_tradeoff_fronts_picks_hollow_unsolved_references_and_log_axis():
    recs = [
        rec("sa-rnn", s, lam, mse=m * (1 + s / 10), skip=k + s, flops=f)
        for s in (0, 1)
        for lam, m, k, f in [
            (0.0, 1e-3, 10.0, 4e4),
            (1e-3, 2e-3, 60.0, 2e4),
            (1e-2, 0.5, 90.0, 1e4),
        ]
    ]
    points = F.variant_points(runs_frame(recs), ["mse", "skip_pct", "flops"])
    assert points["mse_std"].iloc[0] == pytest.approx(np.std([1e-3, 1.1e-3], ddof=1))
    ci = 12.706 * np.std([2e-3, 2.2e-3], ddof=1) / np.sqrt(2)  # t(0.975, 1)
    assert points["mse_ci"].iloc[1] == pytest.approx(ci, rel=1e-4)
    points["solved"] = [1.0, 1.0, 0.5]  # one seed of lam=0.01 did not solve it
    bands = [("ref:mean", 0.1, 0.01), ("ref:far", 5.0, 0.1)]
    fig = F.tradeoff_figure(points, "mse", False, "MSE", bands, {("sa-rnn", "sa-rnn-0.001")}, [50])
    left, right = fig.axes[:2]  # Skip %, FLOPs
    assert left.get_yscale() == "log"  # 1e-3 .. 0.55 spans decades
    low, high = left.get_ylim()
    bottom = 2.1e-3 - points["mse_ci"].iloc[1]  # the pick's CI reaches below: the axis shows it
    pad = 10 ** (0.06 * np.log10(0.525 / bottom))  # 6 % of the span, on each side
    assert (low, high) == pytest.approx((bottom / pad, 0.525 * pad))
    assert right.get_xscale() == "linear"  # FLOPs within a factor 10
    colour = S.method_style("sa-rnn")["color"]
    (front,) = [ln for ln in left.get_lines() if ln.get_marker() in ("None", "", None)
                and to_hex(ln.get_color()) == colour]  # fmt: skip
    np.testing.assert_allclose(front.get_xdata(), [10.5, 60.5])  # the unsolved one is not on it
    (bars,) = left.containers  # the marked variant alone: CI error bars
    assert bars.has_yerr and bars.has_xerr
    np.testing.assert_allclose(bars.lines[0].get_ydata(), [2.1e-3])
    solved, hollow = [c for c in left.collections if isinstance(c, PathCollection)]
    assert len(solved.get_offsets()) == 2 and solved.get_facecolors()[0][3] > 0
    assert len(hollow.get_offsets()) == 1 and not np.any(hollow.get_facecolors()[:, 3])
    # ref:mean within the range: a band, named; ref:far past it: an arrow and its name at the top
    assert [t.get_text() for t in right.texts] == ["ref:mean 0.100", "↑ ref:far 5.00"]
    assert right.texts[1].get_position()[1] == 1.0
    assert [t.get_text() for t in left.texts] == ["50 %"]  # the budget's guide
    # the legend says what each kind of mark means
    (lg,) = fig.legends
    assert [t.get_text() for t in lg.get_texts()] == [
        "sa-rnn", "front: a method's solved variants", "reference: mean ± 95 % CI",
        "matched budget",
    ]  # fmt: skip
    assert "hollow: a seed did not solve the task" in lg.get_title().get_text()
    marked = {("sa-rnn", "sa-rnn-0.001")}
    arrows = sorted(S.OFF_AXIS.values())
    for ci, want in ((1e-6, []), (1e4, arrows)):  # within the axis; past both ends
        points.loc[points.index[1], "mse_ci"] = ci
        fig = F.tradeoff_figure(points, "mse", False, "MSE", bands, marked, [50])
        for ax in fig.axes[:2]:
            heads = [ln for ln in ax.get_lines() if not ln.get_clip_on()]  # at the edge
            assert sorted(ln.get_marker() for ln in heads) == want
            assert {to_hex(ln.get_color()) for ln in heads} <= {to_hex(S.OFF_AXIS_COLOR)}
    for ax in fig.axes[:2]:
        heads = [ln for ln in ax.get_lines() if not ln.get_clip_on()]
        assert {ln.get_ydata()[0] for ln in heads} == set(ax.get_ylim())
    # the CI is drawn up to the points' span (2.7 decades) past them, never further
    lo, hi = np.log10(1.05e-3), np.log10(0.525)
    top = hi + (hi - lo)  # the CI's lower end is below 0: not on a log axis
    assert np.log10(fig.axes[0].get_ylim()[1]) == pytest.approx(top + 0.06 * (top - lo))
    assert "CI past the axis" in [t.get_text() for t in fig.legends[0].get_texts()]
    # Within a decade: linear axes.
    points["mse"] = [0.2, 0.3, 0.4]
    assert F.tradeoff_figure(points, "mse", False, "MSE").axes[0].get_yscale() == "linear"


def test_tradeoff_draws_no_degenerate_axis_and_activity_sparsity_apart():
    recs = [rec("gru", s, mse=0.2 + s / 100, skip=0.0, flops=1e4) for s in (0, 1)]
    recs += [
        rec("delta-gru", s, th, mse=0.1 * (1 + k), skip=0.0, flops=1e4) for s in (0, 1)
        for k, th in enumerate([0.1, 0.3])
    ]  # fmt: skip
    for r in recs[2:]:
        r["metrics"]["read_skip_pct"] = 40.0 + 30 * ("0.3" in r["variant_id"])
    runs = runs_frame(recs)
    caption, fig = F.tradeoff(runs, "mse", False, "MSE", [], F.variant_labels(runs), None, "")
    # Skip % is 0 and FLOPs one value everywhere: no such panel; activity sparsity, its own
    (ax,) = fig.axes
    assert ax.get_xlabel().startswith("Activity sparsity %")
    assert "vs activity sparsity %, one panel each" in caption
    assert "Activity-sparse methods (delta-gru)" in caption
    runs = runs[runs["method"] == "gru"]
    assert F.tradeoff(runs, "mse", False, "MSE", [], {}, None, "") == ("", None)


def test_tradeoff_caption_names_the_unsolved_variants_and_the_budgets():
    recs = [
        rec("sa-rnn", s, lam, skip=k + s) for s in (0, 1) for lam, k in [(0.0, 10.0), (1e-2, 80.0)]
    ]
    for r in recs:
        r["metrics"]["solved"] = 0.0 if r["variant_id"].endswith("0.01") else 1.0
    runs = runs_frame(recs)
    labels = F.variant_labels(runs)
    caption, fig = F.tradeoff(runs, "mse", False, "MSE", [], labels, None, "val-skip-nearest:74")
    assert "Hollow: variants with a run that did not solve the task: sa-rnn (lam=0.01)." in caption
    # the rule's 74 replaces 76; 90 is past every variant's Skip % (at most 81) by more than 5
    assert "at each matched budget (50, 74 %, dotted)" in caption
    assert [t.get_text() for t in fig.axes[0].texts] == ["50 %", "74 %"]
    # a report without a matched budget draws none: best-val's pick is marked
    caption, fig = F.tradeoff(runs, "mse", False, "MSE", [], labels, None, "")
    assert "the variant best-val picks" in caption and "matched budget" not in caption
    assert not list(fig.axes[0].texts)


def test_percent_error_bars_and_bands_stay_within_0_100():
    lo, hi = S.band(np.array([2.0, 99.0]), np.array([5.0, 5.0]), "skip_pct")
    np.testing.assert_allclose(lo, [0.0, 94.0])
    np.testing.assert_allclose(hi, [7.0, 100.0])
    lo, hi = S.band(np.array([2.0]), np.array([5.0]), "mse")
    assert lo[0] == -3.0  # not a percentage
    np.testing.assert_allclose(S.error_bars([2.0], [5.0], "skip_pct"), [[2.0], [5.0]])


def lambda_runs(recs):
    runs = runs_frame(recs)
    runs["line"] = runs["method"]
    runs["lam"] = [float(c["lam"]) for c in runs["config"]]
    return runs


def test_lambda_axis_has_a_zero_tick_and_no_negative_ticks():
    recs = [
        rec("sa-rnn", s, lam, mse=0.1 + k / 1000, skip=k + 8 * s)
        for s in (0, 1)
        for lam, k in [(0.0, 1.0), (1e-4, 40.0), (1e-2, 95.0)]
    ]
    fig = F.budget_figure(lambda_runs(recs), "lam", "mse", "MSE", False)
    texts(fig)
    assert len(fig.axes) == 2  # MSE above Skip %
    for ax in fig.axes[:2]:
        assert ax.get_xscale() == "log"
        ticks = ax.get_xticks()
        assert (ticks > 0).all() and ticks[0] == pytest.approx(1e-5)  # 0: a decade below 1e-4
        assert any(t.get_text() == "//" for t in ax.texts)  # the break
    labels = [t.get_text() for t in fig.axes[1].get_xticklabels()]  # under the lower panel
    assert labels == ["0", "0.0001", "0.001", "0.01"]  # three values: each, and the decades
    skip_ax = fig.axes[1]
    (band,) = [c for c in skip_ax.collections if isinstance(c, PolyCollection)]
    ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
    assert ys.min() >= 0 and ys.max() <= 100 and ys.max() == pytest.approx(100)
    # No 0 run: no 0 tick, no break. Over many decades: every second decade labelled.
    recs = [rec("sa-rnn", s, 10.0**-e, mse=e, skip=e + s) for s in (0, 1) for e in range(1, 9)]
    ax = F.budget_figure(lambda_runs(recs), "lam", "mse", "MSE", False).axes[1]
    texts(ax.figure)
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "0" not in labels and not ax.texts
    assert labels == ["$10^{-7}$", "$10^{-5}$", "$10^{-3}$", "$10^{-1}$"]


def test_update_patterns_at_a_matched_budget():
    g = torch.Generator().manual_seed(0)
    mask = (torch.rand(12, 6, generator=g) > 0.5).float()
    depth = torch.randint(0, 4, (12, 6), generator=g)
    marks = [3, 7]
    sparse = {"first_mask": [pack_mask(mask)], "units": [6], "first_marks": marks}
    dense = {"first_mask": [pack_mask(torch.ones(12, 6))], "units": [6]}
    deep = {**dense, "first_depth": [pack_depth(depth)], "max_depth": [5]}
    recs = [rec("gru", 0, skip=0.0, trace=dense)]
    recs += [rec("sa-rnn", 0, lam, skip=k, trace=sparse) for lam, k in [(0.0, 20), (1e-3, 61.6)]]
    recs += [rec("srhn", 0, skip=0.0, trace=deep)]
    runs = runs_frame(recs)
    target, chosen = P.matched_budget(runs, 55.0)
    assert chosen["sa-rnn"] == "sa-rnn-0.001" and target == 55.0
    assert P.matched_budget(runs)[0] == pytest.approx((20 + 61.6) / 2)  # median of skippers
    picked = {m: runs.loc[runs["variant_id"] == v, "record"].iloc[0] for m, v in chosen.items()}
    fig = P.mask_figure(picked, {"sa-rnn": "lam=0.001"})
    panels = [ax for ax in fig.axes if ax.images and ax.get_title(loc="left")]
    assert [ax.get_title(loc="left") for ax in panels] == [
        "sa-rnn: Skip 61.6 % (lam=0.001)",
        "srhn: Skip 0.0 %",
    ]  # gru is dense: a note, no all-black panel
    assert "Dense" in fig.get_suptitle() and "gru" in fig.get_suptitle()
    sa, sr = panels
    np.testing.assert_array_equal(sa.images[0].get_array(), mask.numpy().T)
    assert sorted(ln.get_xdata()[0] for ln in sa.get_lines()) == marks
    assert sr.images[0].get_cmap().name == "viridis"  # a depth heatmap, not the unit mask
    np.testing.assert_array_equal(sr.images[0].get_array(), depth.numpy().T)
    assert sr.images[0].get_clim() == (0, 5)
    assert len(fig.axes) == 3  # two panels and the depth colour bar


def test_pack_depth_round_trip_and_the_recorded_trace():
    d = torch.tensor([[0, 3, 12], [35, 1, 0]])
    np.testing.assert_array_equal(unpack_depth(pack_depth(d)), d.numpy())
    task = TASKS.get("adding")()
    x = torch.zeros(9, 2)
    x[[2, 6], 1] = 1.0
    assert task.marked_steps(x) == [2, 6]
    r = train.run(config.resolve("srhn", "adding", 0, "smoke", {"train.epochs": "1"}))
    tr = r["trace"]
    assert len(tr["first_marks"]) == 2
    T = len(tr["first_mask"][0])
    assert P.depth_image(r).shape == (tr["units"][0], T)
    assert P.depth_image(r).max() <= tr["max_depth"][0]
    assert not P.depth_image(rec("gru", 0)).size


def test_learning_curves_mean_std_over_seeds_and_chosen_on_validation():
    recs = [rec("gru", s, hist=[(2.0 + s, 1.0), (1.0 + s, 0.5 + s)]) for s in (0, 1)]
    recs += [rec("lstm", s, 8, mse=9.0, val=0.1, hist=[(3.0, 0.1)]) for s in (0, 1)]
    recs += [rec("lstm", s, 16, mse=0.01, val=0.9, hist=[(9.0, 0.9)]) for s in (0, 1)]
    recs += [rec("gru", 0, hist=[(1.0, 1.0)]) | {"task": "synthetic", "run_id": "other"}]
    chosen = C.curve_choice(recs)
    assert list(chosen) == [("adding", "smoke"), ("synthetic", "smoke")]
    assert [r["variant_id"] for r in chosen[("adding", "smoke")]["lstm"]] == ["lstm-8"] * 2
    fig = C.curves_figure(recs)
    assert fig.get_figwidth() == S.TWO_COLUMNS
    loss_ax, val_ax = fig.axes[0], fig.axes[1]  # a row per task: loss, validation
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles == ["adding (smoke)", "", "synthetic (smoke)", ""]
    gru = next(ln for ln in loss_ax.get_lines() if ln.get_label() == "gru")
    np.testing.assert_allclose(gru.get_ydata(), [2.5, 1.5])
    np.testing.assert_allclose(gru.get_xdata(), [1, 2])
    band = loss_ax.collections[0]
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.max() == pytest.approx(2.5 + np.std([2.0, 3.0], ddof=1))
    assert val_ax.get_ylabel() == "val. MSE ↓"
    one = C.curves_figure(recs[:2])
    assert one.get_figwidth() == S.ONE_COLUMN
    assert F.write_curves([rec("gru", 0)], F.Path("unused")) == []  # no history: no figure


def test_paper_sizes_fonts_and_truetype_pdf(tmp_path):
    assert S.STYLE["pdf.fonttype"] == 42 and S.STYLE["ps.fonttype"] == 42
    recs = [
        rec("sa-rnn", s, lam, skip=k, hist=[(1.0, 0.5)])
        for s in (0, 1)
        for lam, k in [(0.0, 10.0), (1e-3, 50.0)]
    ]
    runs = runs_frame(recs)
    points = F.variant_points(runs, ["mse", "skip_pct", "flops"])
    figs = [
        F.tradeoff_figure(points, "mse", False, "MSE"),
        F.budget_figure(lambda_runs(recs), "lam", "mse", "MSE"),
        C.curves_figure(recs),
        P.depth_figure({"srhn": {"1": 3, "4": 5}, "rhn": {"4": 1}}),
    ]
    for fig in figs:
        assert fig.get_figwidth() in (S.ONE_COLUMN, S.TWO_COLUMNS)
        sizes = {t.get_text(): t.get_fontsize() for t in texts(fig)}
        assert min(sizes.values()) >= 7, sizes
    png, pdf = S.save(figs[0], tmp_path / "fig")
    assert png.exists()
    data = pdf.read_bytes()
    assert b"/FontFile2" in data and b"/Type3" not in data  # embedded TrueType
    if shutil.which("pdffonts"):
        out = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True).stdout
        rows = out.splitlines()[2:]
        assert rows and all("TrueType" in r and " yes " in r for r in rows), out


def test_report_figures_writes_the_curves_and_keeps_the_order(tmp_path):
    recs = [
        rec("sa-rnn", s, lam, skip=k, hist=[(1.0, 0.5)])
        for s in (0, 1)
        for lam, k in [(0.0, 10.0), (1e-3, 50.0)]
    ]
    runs = runs_frame(recs)
    out = F.report_figures(runs, "mse", False, "MSE", tmp_path / "figs" / "adding_smoke")
    kinds = [paths[0].stem.rsplit("_", 1)[1] for _, paths in out]
    assert kinds == ["tradeoff", "budget-lam", "curves"]  # no traces: no mask or depth figure
    assert all(p.stat().st_size for _, paths in out for p in paths)


def test_report_draws_learning_curves_beside_the_leaderboard(tmp_path, capsys):
    import json

    from harness.cli import main

    store = tmp_path / "runs.jsonl"
    lines = [rec("gru", s, hist=[(1.0, 0.5), (0.5, 0.2)]) for s in (0, 1)]
    store.write_text("".join(json.dumps(r) + "\n" for r in lines))
    board = tmp_path / "out" / "board.md"
    assert main(["report", str(store), "--out", str(board)]) == 0
    assert (tmp_path / "out" / "board_curves.png").exists()
    assert (tmp_path / "out" / "board_curves.pdf").exists()
    assert "board_curves.png" in capsys.readouterr().out
    other = tmp_path / "b2" / "board.md"
    assert main(["report", str(store), "--out", str(other), "--no-figures"]) == 0
    assert sorted(p.name for p in other.parent.iterdir()) == ["board.md"]


def test_variant_points_from_a_frame():
    runs = pd.DataFrame(
        {"method": ["a", "a"], "variant_id": ["v", "v"], "seed": [0, 1], "x": [1.0, 3.0]}
    )
    p = F.variant_points(runs, ["x", "missing"])
    assert p["x"].iloc[0] == 2.0 and p["x_std"].iloc[0] == pytest.approx(np.sqrt(2))
    assert p["seeds"].iloc[0] == 2 and np.isnan(p["missing"].iloc[0])


def print_scale(fig, tmp_path):
    """How much the LaTeX report scales ``fig``: its float's width over the figure's width."""
    pdf = S.save(fig, tmp_path / "printed")[1]
    return (S.ONE_COLUMN if figure_env(pdf) == "figure" else S.TWO_COLUMNS) / fig.get_figwidth()


def test_many_learning_curves_are_legible_at_their_printed_width(tmp_path):
    """16 methods, as the freq-discrimination report: no panel squeezed, text >= 7 pt printed."""
    names = METHODS.names()
    recs = [
        rec(m, s, hist=[(1 / (e + k + 1), 0.5 - e / (100 + k)) for e in range(40)])
        for k, m in enumerate(names)
        for s in (0, 1)
    ]
    fig = C.curves_figure(recs)
    scale = print_scale(fig, tmp_path)
    sizes = [t.get_fontsize() * scale for t in texts(fig)]
    assert min(sizes) >= 7
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 2
    for ax in panels:
        box = ax.get_window_extent(renderer)
        w, h = box.width / fig.dpi * scale, box.height / fig.dpi * scale
        assert w >= 2.0 and h >= 1.4, (w, h)  # inches, as printed
        assert not box.overlaps(legend)  # the legend is outside the panels


def test_a_wide_figure_is_printed_at_the_text_width(tmp_path):
    """A 7 in figure in a one-column float would print its 7 pt text at 3.3 pt."""
    from matplotlib.figure import Figure

    figs = []
    for name, width in (("narrow", S.ONE_COLUMN), ("wide", S.TWO_COLUMNS)):
        with S.style():
            fig = Figure(figsize=(width, 2.0))
            fig.subplots().plot([0, 1])
        figs.append((name, S.save(fig, tmp_path / name)))
    assert figure_width(figs[1][1][1]) == pytest.approx(S.TWO_COLUMNS)
    tex = latex_document("<!-- head -->", [], figs, tmp_path, "t-p.runs", None, "text")
    envs = re.findall(r"\\begin\{(figure\*?)\}", tex)
    assert envs == ["figure", "figure*"]


def cls_rec(method, seed, variant, val, skip, task="seizures", data=None, mse=None):
    """An ok classification record (accuracy %) with a sparse update mask."""
    mask = torch.zeros(12, 6)
    mask[::2] = 1.0
    metrics = {"accuracy": val, "skip_pct": skip} if mse is None else {"mse": mse, "skip_pct": skip}
    return make_record(
        method=method,
        task=task,
        seed=seed,
        run_id=f"{variant}-{seed}",
        variant_id=variant,
        **({"primary": "accuracy", "higher_is_better": True} if mse is None else {}),
        metrics=metrics,
        val_metrics=dict(metrics),
        data={"n_positive": 2300, "n_negative": 9200, "per_class": 2300} if data is None else data,
        trace={"first_mask": [pack_mask(mask)], "units": [6]},
    )


def test_chance_level_from_the_records_class_counts():
    balanced = cls_rec("gru", 0, "g", 90.0, 0.0)  # per_class: the splits are balanced
    assert P.majority_share(balanced) == pytest.approx(50.0)
    counts = cls_rec("gru", 0, "g", 90.0, 0.0, data={"n_positive": 30, "n_negative": 70})
    assert P.majority_share(counts) == pytest.approx(70.0)
    share = cls_rec("gru", 0, "g", 90.0, 0.0, "freq-discrimination", {"positive_pct": 52.1})
    assert P.majority_share(share) == pytest.approx(52.1)
    six = cls_rec("gru", 0, "g", 90.0, 0.0, "har", {})
    assert P.majority_share(six) == pytest.approx(100 / 6)  # no counts: 100 / classes
    assert P.majority_share(cls_rec("gru", 0, "g", 0, 0.0, "adding", mse=0.2)) is None
    assert P.at_chance([cls_rec("gru", s, "g", 50.9 + s / 10, 0.0) for s in (0, 1)])
    assert not P.at_chance([cls_rec("gru", s, "g", 51.1 + s, 0.0) for s in (0, 1)])


def test_masks_show_the_tables_variant_and_never_one_at_chance(tmp_path):
    recs = [
        cls_rec("sa-rnn", 0, "sa-chance", 50.4, 70.0),  # the table's pick, at chance
        cls_rec("sa-rnn", 0, "sa-good", 50.2, 41.0),  # this seed at chance, the variant not
        cls_rec("sa-rnn", 1, "sa-good", 95.0, 40.0),
        cls_rec("skip-rnn", 0, "sk-a", 88.0, 60.0),
        cls_rec("skip-rnn", 0, "sk-b", 91.0, 20.0),  # the table's pick; Skip % not nearest
        cls_rec("random-updates", 0, "ru", 49.0, 50.0),  # its only variant is at chance
    ]
    runs = runs_frame(recs)
    selected = {"sa-rnn": "sa-chance", "skip-rnn": "sk-b", "random-updates": "ru"}
    choice = P.mask_choice(runs, None, selected)
    assert choice.target == pytest.approx(40.5)  # the median Skip % of the variants not at chance
    assert choice.picks == {"sa-rnn": ("sa-good", "nearest"), "skip-rnn": ("sk-b", "table")}
    assert choice.records["sa-rnn"]["seed"] == 1  # seed 0 is at chance
    assert choice.table_at_chance == ["sa-rnn"] and choice.at_chance == ["random-updates"]
    assert P.mask_choice(runs).picks["skip-rnn"] == ("sk-a", "nearest")  # no table: nearest
    out = F.report_figures(
        runs, "accuracy", True, "Accuracy %", tmp_path / "s", selected=selected,
        rule="val-skip-nearest:76",
    )  # fmt: skip
    ((caption, _),) = [(c, p) for c, p in out if p[0].stem.endswith("_masks")]
    assert "the table's rule (val-skip-nearest:76) picked: skip-rnn" in caption
    assert "nearest 40.5 %: sa-rnn (the table's pick is at chance for sa-rnn)" in caption
    assert "every variant at chance on validation: random-updates" in caption
    assert "at most 51.0 % (the majority class's share, 50.0 %, + 1 point)" in caption
    fig = P.mask_figure(choice.records)
    titles = [ax.get_title(loc="left") for ax in fig.axes if ax.images]
    assert titles == ["sa-rnn: Skip 40.0 %", "skip-rnn: Skip 20.0 %"]
    # A regression task has no chance level: the table's pick is drawn whatever its MSE.
    bad = [cls_rec("sa-rnn", 0, "a", 0, 50.0, "adding", mse=9.0)]
    bad += [cls_rec("sa-rnn", 0, "b", 0, 10.0, "adding", mse=0.1)]
    reg = P.mask_choice(runs_frame(bad), 10.0, {"sa-rnn": "a"})
    assert reg.picks == {"sa-rnn": ("a", "table")} and reg.chance is None


def test_many_update_patterns_fill_two_columns():
    mask = torch.zeros(12, 6)
    mask[::3] = 1.0
    trace = {"first_mask": [pack_mask(mask)], "units": [6]}
    names = METHODS.names()
    fig = P.mask_figure({m: rec(m, 0, trace=trace) for m in names})
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == len(names)
    assert len({round(ax.get_position().x0, 2) for ax in panels}) == 2
    assert fig.get_figheight() <= 9.0  # fits a page


# --- every figure kind on a report as wide as they come: 20 methods, references, traces --------

KNOBS = {"sa-rnn": "lam", "skip-rnn": "lam", "random-updates": "p_skip", "delta-gru": "theta_h"}
# p_skip's lowest value a factor 2 below a decade: the log axis labels the decade, not both
# theta_h: close values on a log axis (0.25, 0.34), whose labels must not collide
VALUES = {
    "lam": [0.0, 1e-3, 1e-2],
    "p_skip": [0.05, 0.25, 0.5, 0.75],
    "theta_h": [0.03, 0.25, 0.34],
}
LRS = {"sa-rnn": 10, "skip-rnn": 10, "delta-gru": 3}  # many budget panels, narrow ones
LATER = [f"zz-later-{k}" for k in range(4)]  # methods registered after today's 16


def wide_report(monkeypatch):
    """Records of 20 methods on seizures: budget sweeps, masks, reads, depths, histories, refs."""
    for name in LATER:
        monkeypatch.setitem(METHODS._items, name, METHODS.get("gru"))
    g = torch.Generator().manual_seed(0)
    T, D = 17, 6
    recs = []
    for k, m in enumerate(METHODS.names()):
        knob = KNOBS.get(m, "train.lr")
        grid = [
            (j, v, lr)
            for j, v in enumerate(VALUES.get(knob, [1e-3, 3e-3]))
            for lr in ([1e-3] if m not in LRS else [10**-i for i in range(LRS[m])])
        ]
        for j, value, lr in grid:
            skip = 0.0 if m in ("gru", "lstm", "delta-gru") or m in LATER else 20.0 + 30 * j + k
            trace = {
                "first_mask": [
                    pack_mask((torch.rand(T, D, generator=g) > skip / 100) | (skip == 0))
                ]
            }
            trace["units"] = [D]
            if m == "delta-gru":  # activity-sparse: reads 1 input and D state columns
                trace["first_reads"] = [pack_mask(torch.rand(T, 1 + D, generator=g) > 0.6)]
            if m in ("srhn", "rhn", "ei-rehn"):
                trace |= {"first_depth": [pack_depth(torch.randint(0, 4, (T, D), generator=g))]}
                trace |= {"max_depth": [5], "depth_hist": {"1": 3 + k, "3": 5, "5": j + 1}}
            for s in (0, 1, 2):
                acc = 96.0 - 0.2 * k - 3 * j + s / 2
                metrics = {"accuracy": acc, "skip_pct": skip and skip + s, "solved": float(j < 2)}
                if m == "delta-gru":
                    metrics["read_skip_pct"] = 40.0 + 20 * j + s
                r = make_record(
                    method="gru" if m in LATER else m, task="seizures", seed=s,
                    set={knob: str(value), "train.batch_size": str(16 << j),
                         "train.weight_decay": str(j / 1000), "train.lr": str(lr)},
                    primary="accuracy", higher_is_better=True, metrics=metrics,
                    val_metrics=dict(metrics), flops={"effective": 2e4 * 1.15 ** (k + j)},
                    history=[{"epoch": e, "train_loss": 1 / (e + 1), "val_accuracy": 50 + e}
                             for e in range(5)],
                    trace=trace, data={"n_positive": 2300, "n_negative": 9200, "per_class": 2300},
                )  # fmt: skip
                if m in LATER:
                    r |= {"method": m, "variant_id": f"{m}-{j}", "run_id": f"{m}-{j}-{s}"}
                recs.append(r)
    refs = [("ref:logreg", 95.0), ("ref:other", 94.7), ("ref:majority", 50.0)]
    refs += [("ref:top", 99.0), ("ref:higher", 99.4)]  # both past the top of the y range
    for name, acc in refs:
        for s in (0, 1, 2):
            r = make_record(method="gru", task="seizures", seed=s, metrics={"accuracy": acc + s})
            r |= {"method": name, "variant_id": name, "run_id": f"{name}-{s}"}
            recs.append(r | {"primary": "accuracy", "higher_is_better": True})
    return recs


def every_figure(recs):
    """{kind: figure} of every kind report_figures draws, on ``recs``."""
    runs = runs_frame(recs)
    labels = F.variant_labels(runs)
    bands = F.reference_bands(runs, "accuracy", labels)
    methods = runs[[not m.startswith("ref:") for m in runs["method"]]]
    rule = "val-skip-nearest:74"  # a target beside MATCHED_BUDGETS' 76
    _, tradeoff = F.tradeoff(methods, "accuracy", True, "Accuracy %", bands, labels, None, rule)
    choice = P.mask_choice(methods)
    picked = {m: labels[v] for m, (v, _) in choice.picks.items()}
    deep = ["srhn", "rhn", "ei-rehn"]
    figs = {
        "tradeoff": tradeoff,
        "masks": P.mask_figure(choice.records, picked),
        "curves": C.curves_figure([r for r in recs if not r["method"].startswith("ref:")]),
        "depth": P.depth_figure({m: {"1": 3, "2": k + 1, "5": 2} for k, m in enumerate(deep)}),
    }
    for knob, swept in F.budget_sweeps(methods).items():
        figs[f"budget-{knob}"] = F.budget_figure(swept, knob, "accuracy", "Accuracy %", True)
    return {kind: fig for kind, fig in figs.items() if fig is not None}


def drawn_texts(fig):
    """The texts ``fig`` draws: visible, not blank, tick labels only of ticks in view."""
    FigureCanvasAgg(fig).draw()
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if (
                    not low - 1e-9 * abs(high - low)
                    <= tick.get_loc()
                    <= high + 1e-9 * abs(high - low)
                ):
                    hidden |= {id(tick.label1), id(tick.label2)}
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
            and id(t) not in hidden]  # fmt: skip


def overlaps(fig):
    """Pairs of drawn texts whose boxes overlap (by more than a pixel), and texts off the figure."""
    texts = drawn_texts(fig)
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for t in texts]
    page = fig.bbox
    out = [
        (t.get_text(), "off the figure")
        for t, b in zip(texts, boxes, strict=True)
        if b.x0 < page.x0 - 1 or b.y0 < page.y0 - 1 or b.x1 > page.x1 + 1 or b.y1 > page.y1 + 1
    ]
    for i, (a, ba) in enumerate(zip(texts, boxes, strict=True)):
        for b, bb in zip(texts[i + 1 :], boxes[i + 1 :], strict=True):
            w = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
            h = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
            if w > 1 and h > 1:
                out.append((a.get_text(), b.get_text()))
    return out  # fmt: skip


def test_no_text_of_any_figure_overlaps_another_or_leaves_the_figure(monkeypatch):
    figs = every_figure(wide_report(monkeypatch))
    assert {"tradeoff", "masks", "curves", "depth", "budget-lam"} <= set(figs)
    assert len(figs["tradeoff"].axes) == 3  # Skip %, delta-gru's activity sparsity, FLOPs
    for kind, fig in figs.items():
        assert len(drawn_texts(fig)) > 5, kind
        assert overlaps(fig) == [], kind


def test_the_overlap_check_sees_overlapping_and_cut_off_text():
    from matplotlib.figure import Figure

    with S.style():
        fig = Figure(figsize=(3.3, 2.0), layout="constrained")
        ax = fig.subplots()
        ax.set_title("a long title on the left", loc="left")
        ax.set_title("a centred title", loc="center")
        ax.text(0.5, 0.5, "in", transform=ax.transAxes)
    assert [set(pair) for pair in overlaps(fig)] == [
        {"a long title on the left", "a centred title"}
    ]
    ax.text(1.5, 0.5, "far out right", transform=ax.transAxes)
    assert ("far out right", "off the figure") in overlaps(fig)


def test_activity_sparse_methods_are_drawn_by_the_columns_they_read():
    g = torch.Generator().manual_seed(1)
    reads = (torch.rand(12, 2 + 5, generator=g) > 0.5).float()  # adding: V = 2 inputs, D = 5
    trace = {"first_mask": [pack_mask(torch.ones(12, 5))], "units": [5]}
    sparse = rec("delta-gru", 0, skip=0.0, trace=trace | {"first_reads": [pack_mask(reads)]})
    sparse["metrics"]["read_skip_pct"] = 61.5
    image, edges = P.reads_image(sparse)
    np.testing.assert_array_equal(image, reads.numpy().T)
    assert edges == [0, 2, 7]  # two input columns, then five state columns
    dense = rec("gru", 0, skip=0.0, trace=trace)
    fig = P.mask_figure({"delta-gru": sparse, "gru": dense})
    (panel,) = [ax for ax in fig.axes if ax.images]
    assert panel.get_title(loc="left") == "delta-gru: activity sparsity 61.5 %"
    np.testing.assert_array_equal(panel.images[0].get_array(), reads.numpy().T)
    assert [ln.get_ydata()[0] for ln in panel.get_lines()] == [1.5]  # inputs | state
    assert [t.get_text() for t in panel.get_yticklabels()] == ["in", "state"]
    assert fig.get_suptitle().endswith("not drawn): gru")  # dense: a note, no panel
    assert P.mask_panels({"gru": dense}) == ([], ["gru"])  # report_figures: then no figure
    every = trace | {"first_reads": [pack_mask(torch.ones(12, 7))]}  # read every column
    assert P.mask_figure({"delta-gru": rec("delta-gru", 0, skip=0.0, trace=every)}).get_suptitle()


# --- every mark means one thing: rules over every figure report_figures draws ------------------

SHAPES = set(S.MARKERS)  # the methods' marker shapes
FAMILY = {"o": "o", "^": "triangle", "v": "triangle", "s": "s", "D": "D", "P": "+", "X": "+"}


def lab(color):
    """CIELAB (D65) of a matplotlib colour (the test's own conversion)."""
    from matplotlib.colors import to_rgb

    c = np.asarray(to_rgb(color))
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    x, y, z = m @ c / np.array([0.95047, 1.0, 1.08883])
    f = [v ** (1 / 3) if v > 216 / 24389 else (24389 / 27 * v + 16) / 116 for v in (x, y, z)]
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def report_figures_drawn(runs, monkeypatch, tmp_path, **kw):
    """{kind: figure} of what ``report_figures`` draws on ``runs`` (accuracy, higher better)."""
    drawn = {}

    def keep(fig, stem):
        drawn[stem.name.rsplit("_", 1)[1]] = fig
        return [stem.with_suffix(".png"), stem.with_suffix(".pdf")]

    monkeypatch.setattr(F, "save", keep)
    F.report_figures(runs, "accuracy", True, "Accuracy %", tmp_path / "t_p", **kw)
    return drawn


def method_of(label):
    """The method a label names (``sa-rnn`` or ``sa-rnn, k=v``), None for any other label."""
    name = str(label).split(", ")[0]
    return name if name in METHODS.names() or name in LATER else None


def shapes_misused(fig):
    """Marks in a method's marker shape that are not that method's: in the axes and legends."""
    out = []
    for ax in fig.axes:
        owners = {id(c.lines[0]): c.get_label() for c in ax.containers if hasattr(c, "has_xerr")}
        for ln in ax.get_lines():
            owner = method_of(owners.get(id(ln)) or ln.get_gid() or ln.get_label())
            if ln.get_marker() in SHAPES and (
                owner is None or S.method_style(owner)["marker"] != ln.get_marker()
            ):
                out.append((ax.get_title(loc="left"), ln.get_label(), ln.get_marker()))
        for c in ax.collections:  # scatter plots: one per method, named by its gid
            if isinstance(c, PathCollection) and method_of(c.get_gid()) is None:
                out.append((ax.get_title(loc="left"), "a scatter of no method", c.get_label()))
    for lg in fig.legends:
        for h, t in zip(lg.legend_handles, lg.get_texts(), strict=True):
            marker = getattr(h, "get_marker", lambda: None)()
            owner = method_of(t.get_text())
            if marker in SHAPES and (owner is None or S.method_style(owner)["marker"] != marker):
                out.append(("legend", t.get_text(), marker))
    return out


def constant_panels(fig):
    """Panels (not images, not colour bars) whose drawn data are one x or one y value."""
    out = []
    for ax in fig.axes:
        if not ax.get_visible() or ax.images or hasattr(ax, "_colorbar"):
            continue
        xs, ys = [], []
        for ln in ax.get_lines():
            if ln.get_transform() == ax.transData and ln.get_clip_on():  # data, not guides
                xs += list(np.asarray(ln.get_xdata(), float))
                ys += list(np.asarray(ln.get_ydata(), float))
        for c in ax.collections:
            if isinstance(c, PathCollection):
                xs += list(c.get_offsets()[:, 0])
                ys += list(c.get_offsets()[:, 1])
        for p in ax.patches:  # bars
            xs.append(p.get_x() + p.get_width() / 2)
            ys.append(p.get_height())
        xs, ys = np.array(xs), np.array(ys)
        ok = np.isfinite(xs) & np.isfinite(ys)
        if ok.sum() >= 2 and (np.ptp(xs[ok]) == 0 or np.ptp(ys[ok]) == 0):
            out.append(ax.get_xlabel() or ax.get_ylabel())
    return out


def look(handle):
    """A legend handle's (colour, marker, fill) as drawn."""
    return to_hex(handle.get_color()), handle.get_marker(), handle.get_fillstyle()


def alike_entries(fig):
    """Pairs of legend entries told apart by neither colour (CIELAB distance >= 40) nor marker.

    Markers differ when their families differ (^ and v are one: triangles) or their fill does.
    """
    out = []
    for lg in fig.legends:
        entries = [(t.get_text(), look(h)) for h, t in zip(lg.legend_handles, lg.get_texts(),
                   strict=True) if getattr(h, "get_marker", lambda: None)() in SHAPES]  # fmt: skip
        for i, (a, (ca, ma, fa)) in enumerate(entries):
            for b, (cb, mb, fb) in entries[i + 1 :]:
                same_marker = FAMILY[ma] == FAMILY[mb] and fa == fb
                if same_marker and np.linalg.norm(lab(ca) - lab(cb)) < 40:
                    out.append((a, b))
    return out


def lines_per_panel(fig):
    """Per panel, the number of lines drawn (in a method's marker shape, two points or more)."""
    return [
        sum(ln.get_marker() in SHAPES and len(ln.get_xdata()) > 1 for ln in ax.get_lines())
        for ax in fig.axes
    ]


def test_every_mark_of_every_figure_means_one_thing(monkeypatch, tmp_path):
    """No method's marker shape for anything else, no constant panel, distinct legend entries."""
    runs = runs_frame(wide_report(monkeypatch))
    figs = report_figures_drawn(runs, monkeypatch, tmp_path, rule="val-skip-nearest:76")
    assert {"tradeoff", "masks", "curves", "depth", "budget-lam"} <= set(figs)
    for kind, fig in figs.items():
        assert shapes_misused(fig) == [], kind
        assert constant_panels(fig) == [], kind
        assert alike_entries(fig) == [], kind


def test_the_rules_see_what_they_forbid():
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    with S.style():
        fig = Figure()
        ax = fig.subplots()
        ax.plot([1, 2], [3, 3], marker=S.method_style("gru")["marker"], gid="gru")  # flat
        ax.plot([1], [3], marker="^", color="grey")  # a method's shape, no method's mark
        handles = [Line2D([], [], color=c, marker="P") for c in ("#d55e00", "#de8f05")]
        fig.legend(handles, ["ei-rehn", "rnn"])  # vermilion and orange crosses
    assert constant_panels(fig) == [""]
    assert [m for *_, m in shapes_misused(fig)] == ["^", "P"]  # rnn is no cross
    assert alike_entries(fig) == [("ei-rehn", "rnn")]


def test_budget_figures_are_small_multiples_of_at_most_six_lines(monkeypatch, tmp_path):
    """Many settings of one knob: a panel per learning rate (and more), <= 6 lines, 3 ticks."""
    recs = []
    for lr in (1e-4, 1e-3, 1e-2):
        for gamma in (0.01, 1.0):
            for target in (0.05, 0.1, 0.25, 0.34, 0.5):
                for s in (0, 1):
                    r = make_record(
                        method="vc-rnn", task="seizures", seed=s, primary="accuracy",
                        higher_is_better=True,
                        set={"gamma": str(gamma), "m_target": str(target), "train.lr": str(lr)},
                        metrics={"accuracy": 90 + 10 * target - lr + s, "skip_pct": 100 * target},
                    )  # fmt: skip
                    recs.append(r | {"variant_id": f"{lr}-{gamma}-{target}"})
                    recs[-1] |= {"run_id": f"{lr}-{gamma}-{target}-{s}"}
    figs = report_figures_drawn(runs_frame(recs), monkeypatch, tmp_path)
    gamma = figs["budget-gamma"]  # 30 settings: gamma along x, 15 lines (lr x m_target)
    assert max(lines_per_panel(gamma)) <= 6
    assert len([ax for ax in gamma.axes if ax.get_visible()]) > 2
    assert alike_entries(gamma) == []
    for kind, fig in figs.items():
        if kind.startswith("budget"):
            texts(fig)
            bottom = [ax for ax in fig.axes if ax.get_visible() and ax.get_xlabel()]
            for ax in bottom:
                labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
                assert len(labels) >= 3, (kind, labels)
            assert max(lines_per_panel(fig)) <= 6, kind


def test_activity_sparse_budget_figures_draw_their_activity_sparsity(monkeypatch, tmp_path):
    recs = []
    for th, read in ((0.1, 40.0), (0.3, 60.0), (0.5, 75.0)):
        for s in (0, 1):
            r = make_record(
                method="delta-gru", task="seizures", seed=s, primary="accuracy",
                higher_is_better=True, set={"theta_h": str(th)},
                metrics={"accuracy": 95 - th + s, "skip_pct": 0.0, "read_skip_pct": read + s},
            )  # fmt: skip
            recs.append(r | {"variant_id": f"d{th}", "run_id": f"d{th}-{s}"})
    fig = report_figures_drawn(runs_frame(recs), monkeypatch, tmp_path)["budget-theta-h"]
    assert [ax.get_ylabel() for ax in fig.axes] == ["Accuracy % ↑", "Activity sparsity % ↑"]
    assert constant_panels(fig) == []  # not Skip %: 0 everywhere
    assert not any(t.get_text() == "0" for ax in fig.axes for t in ax.get_xticklabels())


def test_a_masks_panel_is_dense_only_where_the_table_gives_0_skip(monkeypatch, tmp_path):
    """Skip RNN skips on average but not in the drawn sequence: drawn, and said; GRU: dense."""
    ones = {"first_mask": [pack_mask(torch.ones(12, 6))], "units": [6]}
    recs = [cls_rec("gru", s, "g", 90.0, 0.0) | {"trace": ones} for s in (0, 1)]
    recs += [cls_rec("skip-rnn", s, "k", 90.0, 10.0 + 20 * s) | {"trace": ones} for s in (0, 1)]
    recs += [cls_rec("sa-rnn", s, "a", 90.0, 40.0) for s in (0, 1)]
    runs = runs_frame(recs)
    table = runs.groupby("method")["skip_pct"].mean()  # the table's Skip % of each (one variant)
    figs = report_figures_drawn(runs, monkeypatch, tmp_path, selected={"skip-rnn": "k"})
    fig = figs["masks"]
    dense = fig.get_suptitle().split("not drawn): ")[-1].split(", ") if fig.get_suptitle() else []
    assert dense and all(table[m.split(" ")[0]] == 0 for m in dense), dense
    titles = [ax.get_title(loc="left") for ax in fig.axes if ax.images]
    assert "skip-rnn: Skip 20.0 %; this sequence: no update skipped" in titles
    few = [cls_rec("skip-rnn", 0, "k", 90.0, 0.004) | {"trace": ones}]  # skips, but little
    fig = P.mask_figure({"skip-rnn": few[0]})
    assert [ax.get_title(loc="left") for ax in fig.axes if ax.images] == [
        "skip-rnn: Skip 0.004 %; this sequence: no update skipped"
    ]
