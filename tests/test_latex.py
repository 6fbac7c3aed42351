"""Every generated .tex compiles with pdflatex inside a minimal document, and fits the page."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from builders import make_record

from harness.reporting.leaderboard import leaderboard_tex
from harness.reporting.paper import render_tex, tex_escape, write_paper_report


def rec(method, seed, task, primary, higher, hidden=50, lam=None, **metrics):
    """An ok record (``lam`` goes into the method config)."""
    vid = f"{task}-{method}-{lam}-{hidden}"
    return make_record(
        method=method,
        task=task,
        seed=seed,
        run_id=f"{vid}-{seed}",
        variant_id=vid,
        primary=primary,
        higher_is_better=higher,
        selection=f"test metrics at the best validation {primary}",
        env={"git_sha": "abcdef1234567", "git_dirty": seed == 1, "device_name": "cpu"},
        metrics=metrics,
        val_metrics=dict(metrics),
        flops={"effective": 2.6e5 * (1 - metrics.get("skip_pct", 0) / 100), "dense": 2.6e5},
        params={"total": 7902},
        time={"train_s": 1.5},
        **({} if lam is None else {"config.method_cfg.lam": lam}),
        **{"config.model.hidden_size": hidden, "config.train.lr": 0.01, "config.train.epochs": 2},
    )


def records():
    """Synthetic records of three tasks: S-SA accuracy, S-SA adding and S-EI layouts."""
    out = []
    for s in (0, 1):
        out += [
            rec("gru", s, "seizures", "accuracy", True, accuracy=97.0 + s, skip_pct=0.0),
            rec("sa-rnn", s, "seizures", "accuracy", True, lam=2e-4, accuracy=95.0 + s,
                skip_pct=70.0 + s, geo_mean=82.0),
            rec("gru", s, "adding", "mse", False, mse=8.3e-4 + s * 1e-4, solved=1.0, skip_pct=0.0),
            rec("sa-rnn", s, "adding", "mse", False, lam=1e-5, mse=0.186, solved=0.0,
                skip_pct=95.3 + s),
            rec("rnn", s, "synthetic", "mse", False, hidden=20, mse=1.01e-3 + s * 1e-5,
                skip_pct=0.0),
            rec("ei-rehn", s, "synthetic", "mse", False, hidden=20, mse=4.7e-4, skip_pct=3.0,
                mean_depth=2.5, depth_skip_pct=40.0),
        ]  # fmt: skip
    return out


def test_tex_escape_leaves_no_special_character_outside_math():
    text = "FLOPs printed x10^5; ×10^-3; D_h, R_t and R_max; 50 % of a_b & #1 ~ {x} 2^k λ ± –"
    tex = tex_escape(text)
    assert r"$\times 10^{5}$" in tex and r"$\times 10^{-3}$" in tex
    assert "$D_{h}$" in tex and "$R_{t}$" in tex and r"$R_{\mathrm{max}}$" in tex
    plain = re.sub(r"\$[^$]*\$", "", tex)  # the text outside math
    assert "^" not in plain.replace(r"\textasciicircum{}", "")
    for ch in "_%&#{}":
        assert re.search(rf"(?<!\\){re.escape(ch)}", plain.replace("{}", "")) is None, ch


def test_caption_and_label_above_the_table():
    tex = render_tex(["A", "B"], [[("1", False), ("2", True)]], "cap x10^4", "tab:x", ["a_note"])
    assert tex.index(r"\caption{") < tex.index(r"\label{tab:x}") < tex.index(r"\begin{tabular}")
    assert r"\textbf{2}" in tex and r"a\_note" in tex


DOC = r"""\documentclass{article}
\usepackage{booktabs,graphicx}
\begin{document}
\input{%s}
\end{document}
"""


@pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex not installed (Debian: texlive-latex-base texlive-latex-recommended)",
)
def test_every_generated_tex_compiles_and_fits(tmp_path):
    paths = write_paper_report(records(), ["r.jsonl"], tmp_path, figures=False)
    texs = [p for p in paths if p.suffix == ".tex"]
    assert len(texs) == 3
    board = tmp_path / "board.tex"
    board.write_text(leaderboard_tex(records()), encoding="utf-8")
    for tex in [*texs, board]:
        text = tex.read_text(encoding="utf-8")
        n_tables = text.count(r"\begin{tabular}")
        assert text.count(r"\label{tab:") == n_tables and n_tables >= 1
        doc = tmp_path / f"doc_{tex.stem}.tex"
        doc.write_text(DOC % tex.name, encoding="utf-8")
        p = subprocess.run(
            ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        log = doc.with_suffix(".log").read_text(encoding="utf-8", errors="replace")
        errors = [line for line in log.splitlines() if line.startswith("!")]
        assert p.returncode == 0 and not errors, (tex.name, errors[:3])
        assert "Overfull \\hbox" not in log, tex.name  # every table fits the text width
