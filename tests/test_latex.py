"""Every generated .tex compiles with pdflatex, fits its float, and prints no table below 8 pt.

Each table is compiled alone in a one-column paper (6.5 in text width: US letter, 1 in margins)
and a two-column one (7 in text width, 3.3 in columns, where a ``table*`` spans both); the width
pdflatex sets each tabular at is read from the log and must be no more than the line width of its
float, and the size its text was printed at is read from the PDF's content stream (font size
times any scaling), so a table shrunk to the line width fails however it was shrunk. A table's
column version (``--width column``) is compiled in the two-column paper, every float a ``table``.
The documents of docs/reports.md ("LaTeX in a paper") are compiled as written there, each with
two seizures reports: no label twice, no figure from the other report's folder, no overfull line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from builders import make_record

from harness.components.selection import parse_rule
from harness.reporting.latex import tex_key, tex_layout, tex_width
from harness.reporting.leaderboard import leaderboard_tex
from harness.reporting.paper import write_paper_report
from harness.reporting.render import render_tex, tex_escape


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


# Minimal papers: one column of 6.5 in and two columns of 3.3 in (7 in text width), both 10 pt.
# The content streams are left uncompressed and each tabular is bracketed by two marked-content
# points, so the test reads the size every glyph of every table was printed at.
PREAMBLE = r"""\documentclass[10pt%s]{article}
\usepackage{booktabs,graphicx,xcolor}
\setlength{\textwidth}{%s}\setlength{\columnsep}{0.4in}\setlength{\oddsidemargin}{-0.25in}
\setlength{\textheight}{9.5in}\setlength{\topmargin}{-0.75in}
\pdfcompresslevel=0 \pdfobjcompresslevel=0
\AddToHook{env/tabular/before}{\pdfliteral{/TabStart MP}}
\AddToHook{env/tabular/after}{\pdfliteral{/TabEnd MP}}
\begin{document}
\typeout{COLUMNWIDTH=\the\columnwidth}
%s
\end{document}
"""
LAYOUTS = {"two-column": (",twocolumn", "7in"), "one-column": ("", "6.5in")}
WIDTH_IN = {"two-column": 3.3, "one-column": 6.5}  # the column width
FLOAT = re.compile(r"\\begin\{(table\*?)\}.*?\\end\{\1\}", re.S)
_TOKEN = re.compile(
    rb"\((?:\\.|[^\\()])*\)|<[0-9A-Fa-f\s]*>|\[|\]|/[^\s/\[\]()<>{}%]+|[-+]?(?:\d+\.?\d*|\.\d+)"
    rb"|[A-Za-z'\"*]+"
)


def _glyphs(s: bytes) -> int:
    return len(re.sub(rb"\\(\d{1,3}|.)", b"x", s[1:-1])) if s.startswith(b"(") else len(s) // 4


def table_font_sizes(pdf: bytes) -> list[dict[float, int]]:
    """Per tabular of ``pdf`` (uncompressed, marked as PREAMBLE marks them), glyphs per size.

    The size is the one printed, in TeX points: the font size of ``Tf`` times the scale of the
    text matrix and of the graphics state (``\\resizebox`` / ``\\scalebox`` set the latter).
    """
    regions: list[dict[float, int]] = []
    for m in re.finditer(rb"stream\r?\n(.*?)endstream", pdf, re.S):
        if b"/TabStart MP" not in m.group(1):
            continue
        ctm, stack, tm, size, depth, args = np.eye(2), [], np.eye(2), 0.0, 0, []
        for tok in _TOKEN.findall(m.group(1)):
            if tok[:1] in b"([<]" or tok[:1] == b"/" or re.fullmatch(rb"[-+.\d]+", tok):
                args.append(tok)
                continue
            op, nums = tok, [float(a) for a in args if re.fullmatch(rb"[-+.\d]+", a)]
            if op == b"q":
                stack.append(ctm)
            elif op == b"Q":
                ctm = stack.pop()
            elif op == b"cm":
                ctm = np.array(nums[:4]).reshape(2, 2) @ ctm
            elif op == b"BT":
                tm = np.eye(2)
            elif op == b"Tm":
                tm = np.array(nums[:4]).reshape(2, 2)
            elif op == b"Tf":
                size = nums[-1]
            elif op == b"MP" and args == [b"/TabStart"]:
                depth += 1
                if depth == 1:
                    regions.append({})
            elif op == b"MP" and args == [b"/TabEnd"]:
                depth -= 1
            elif op in (b"Tj", b"TJ", b"'", b'"') and depth > 0:
                pt = round(size * abs(np.linalg.det(tm @ ctm)) ** 0.5 * 72.27 / 72, 1)
                n = sum(_glyphs(a) for a in args if a[:1] in b"(<")
                regions[-1][pt] = regions[-1].get(pt, 0) + n
            args = [] if op != b"[" else args
        assert depth == 0
    return regions


def body_size(sizes: dict[float, int]) -> float:
    """The size most of a table's glyphs are printed at (sub- and superscripts are few)."""
    return max(sizes, key=lambda s: (sizes[s], s))


def compile_float(tmp_path, name: str, body: str, layout: str) -> tuple[str, list[float]]:
    """Compile ``body`` in the ``layout`` paper: the log and each tabular's body size."""
    doc = tmp_path / f"{name}-{layout}.tex"
    doc.write_text(PREAMBLE % (*LAYOUTS[layout], body), encoding="utf-8")
    p = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = doc.with_suffix(".log").read_text(encoding="utf-8", errors="replace")
    errors = [line for line in log.splitlines() if line.startswith("!")]
    assert p.returncode == 0 and not errors, (name, layout, errors[:3])
    width = float(re.search(r"COLUMNWIDTH=([\d.]+)pt", log).group(1)) / 72.27
    assert width == pytest.approx(WIDTH_IN[layout], abs=0.01)  # the paper is the one meant
    pdf = doc.with_suffix(".pdf")
    sizes = table_font_sizes(pdf.read_bytes()) if pdf.exists() else []
    return log, [body_size(s) for s in sizes]


needs_pdflatex = pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex not installed (Debian: texlive-latex-base texlive-latex-recommended)",
)


# Each tabular set in a box first, so that the log gives its width and its float's line width.
MEASURED = (
    r"\setbox0\hbox{\begin{tabular}",
    r"\end{tabular}}\typeout{TABLEWIDTH=\the\wd0/\the\linewidth}\leavevmode\box0",
)


def table_widths(log: str) -> list[tuple[float, float]]:
    """``(tabular width, its float's line width)`` in pt of each ``MEASURED`` tabular."""
    return [(float(w), float(lw)) for w, lw in re.findall(r"TABLEWIDTH=([\d.]+)pt/([\d.]+)pt", log)]


def check_tables(tmp_path, tex: Path, layouts: tuple[str, ...] = tuple(LAYOUTS)) -> list[float]:
    """Every float of ``tex`` compiles alone in the papers, fits and prints at 8 pt or more.

    Fits: its tabular is no wider than the float's line width (a ``table``: 3.3 in in the
    two-column paper; a ``table*``: 7 in there; either: 6.5 in in the one-column paper).
    ``layouts``: the papers (a column version: the two-column one, every float a ``table``).
    Returns every table's body size (all layouts).
    """
    text = tex.read_text(encoding="utf-8")
    floats = [m.group(0) for m in FLOAT.finditer(text)]
    assert floats and len(floats) == text.count(r"\begin{tabular}")
    assert text.count(r"\label{tab:") == len(floats)
    if layouts == ("two-column",):
        assert {FLOAT.match(body).group(1) for body in floats} == {"table"}, tex.name
    seen = []
    for k, body in enumerate(floats):
        label = re.search(r"\\label\{([^}]*)\}", body).group(1)
        for layout in layouts:
            measured = body.replace(r"\begin{tabular}", MEASURED[0])
            log, sizes = compile_float(
                tmp_path, f"{tex.stem}-{k}", measured.replace(r"\end{tabular}", MEASURED[1]), layout
            )
            assert len(sizes) == 1, (label, sizes)
            ((width, line),) = table_widths(log)
            wide = {"table": 3.3, "table*": 7.0}[FLOAT.match(body).group(1)]
            assert line == pytest.approx(72.27 * (6.5 if layout == "one-column" else wide))
            assert width <= line, f"{label} is {width - line:.1f} pt too wide in the {layout} paper"
            assert sizes[0] >= 8.0, f"{label} prints at {sizes[0]} pt in the {layout} paper"
            assert "Overfull \\hbox" not in log, (label, layout)  # nothing wider than its float
            assert "Float too large" not in log, (label, layout)  # nor taller than a page
            seen += sizes
    return seen


def check_versions(tmp_path, texs: list[Path]) -> list[float]:
    """``check_tables`` of text versions in both papers, of column versions in two columns."""
    assert texs
    sizes = []
    for tex in texs:
        column = tex.stem.endswith("_column")
        sizes += check_tables(tmp_path, tex, ("two-column",) if column else tuple(LAYOUTS))
    return sizes


@needs_pdflatex
def test_every_generated_tex_compiles_and_fits(tmp_path):
    widths = ("text", "column")
    paths = write_paper_report(records(), ["r.jsonl"], tmp_path, figures=False, widths=widths)
    texs = [p for p in paths if p.suffix == ".tex"]
    assert len(texs) == 6 and sum(p.stem.endswith("_column") for p in texs) == 3
    for width, name in zip(widths, ("board.tex", "board_column.tex"), strict=True):
        texs.append(tmp_path / name)
        texs[-1].write_text(leaderboard_tex(records(), width=width), encoding="utf-8")
    check_versions(tmp_path, texs)


SEIZURE_METHODS = {  # method: [(config overrides, accuracy, Skip %, activity sparsity %)]
    "gru": [({"train.lr": lr}, 96.2 - k, 0.0, None) for k, lr in enumerate(["0.001", "0.01"])],
    "lstm": [({"train.lr": lr}, 96.8 - k, 0.0, None) for k, lr in enumerate(["0.001", "0.01"])],
    "clockwork-rnn": [({}, 94.5, 81.2, None)],
    "phased-lstm": [({}, 95.3, 65.0, None)],
    "vc-rnn": [({}, 96.4, 59.0, None)],
    "skip-rnn": [({"lam": lam}, 92.7, sk, None) for lam, sk in [("0.01", 40.0), ("0.1", 58.0)]],
    "random-updates": [({}, 95.2, 75.9, None)],
    "sa-rnn": [
        ({"lam": lam, "train.lr": "0.001"}, acc, sk, None)
        for lam, acc, sk in [("0.0002", 96.2, 46.4), ("0.001", 96.0, 66.0), ("0.01", 96.1, 74.1)]
    ],
    "delta-gru": [({}, 96.1, 0.0, 68.0)],
    "egru": [({}, 96.1, 0.0, 55.5)],
}


def seizure_records():
    """A report as wide as the real seizures paper report: 10 methods, 5 seeds, every column."""
    out = []
    for method, variants in SEIZURE_METHODS.items():
        for cfg, acc, skip, sparse in variants:
            for seed in range(5):
                a, sk = (
                    acc + 0.7 * ((seed * 7 + len(method)) % 5 - 2),
                    skip + 0.3 * seed * bool(skip),
                )
                metrics = {"accuracy": a, "skip_pct": sk, "geo_mean": (a * sk) ** 0.5}
                if sparse is not None:
                    metrics["read_skip_pct"] = sparse + seed * 0.4
                out.append(
                    make_record(
                        method=method,
                        task="seizures",
                        preset="paper",
                        seed=seed,
                        set=cfg,
                        primary="accuracy",
                        higher_is_better=True,
                        selection="test metrics at the epoch with the highest validation accuracy",
                        env={"git_sha": "76f0e60ccd1234", "git_dirty": False, "device_name": "cpu"},
                        metrics=metrics,
                        val_metrics={**metrics, "accuracy": a + 0.4},
                        flops={"effective": 2.6e5 * (1 - sk / 100), "dense": 2.6e5},
                        data={"n_positive": 2300, "n_negative": 9200, "per_class": 2300},
                    )
                )
    return out


@needs_pdflatex
@pytest.mark.parametrize("rule", [None, "val-skip-nearest:76"])
def test_a_realistic_report_prints_no_table_below_8pt(tmp_path, rule):
    """S-SA Table 1 printed at 1.8 pt when every table was shrunk to the line width."""
    recs = seizure_records()
    select = parse_rule(rule) if rule else None
    paths = write_paper_report(
        recs, ["r.jsonl"], tmp_path, figures=False, select=select, widths=("text", "column")
    )
    texs = [p for p in paths if p.suffix == ".tex"]
    assert [p.name for p in texs] == ["paper_seizures_paper.tex", "paper_seizures_paper_column.tex"]
    for tex in texs:
        text = tex.read_text(encoding="utf-8")
        assert r"\resizebox" not in text and r"\scalebox" not in text
        assert "Picked by" in text or rule is None
    sizes = check_versions(tmp_path, texs)
    assert min(sizes) >= 8.0
    assert r"\\$\pm$" in texs[1].read_text(encoding="utf-8")  # a mean over its ± std
    board = tmp_path / "board.tex"
    board.write_text(leaderboard_tex(recs, select), encoding="utf-8")
    column = tmp_path / "board_column.tex"
    column.write_text(leaderboard_tex(recs, select, width="column"), encoding="utf-8")
    check_versions(tmp_path, [board, column])


def test_a_wide_table_splits_its_columns_and_keeps_the_row_keys():
    titles = ["Method", "Variant", *[f"Measure {k} %" for k in range(14)], "Picked by"]
    rows = [
        [("m" + str(r), False), ("lam=0.1, lr=0.001", False)]
        + [(f"{90 + k / 10:.2f} ± 0.{k}", k == r) for k in range(14)]
        + [("val-skip-nearest:76 of 13, 2 beaten on validation (val Skip % 58.1)", False)]
        for r in range(10)
    ]
    parts = tex_layout(titles, rows, keep=["Measure 13 %"])
    assert len(parts) >= 2
    assert all(p.columns[0] == 0 for p in parts)  # every part names its rows
    assert 15 in parts[0].columns  # a kept column stays in the main part
    assert sorted({i for p in parts for i in p.columns}) == list(range(len(titles)))
    assert all(p.size >= 8 for p in parts)
    tex = render_tex(titles, rows, "wide", "tab:wide", ["a note"])
    assert tex.count(r"\begin{tabular}") == len(parts)
    assert r"\label{tab:wide}" in tex and r"\label{tab:wide-cont2}" in tex
    assert r"Table~\ref{tab:wide}" in tex.split(r"\label{tab:wide}")[1]  # the second refers back
    assert tex.count("a note") == 1
    # A narrow table is a one-column table at 9 pt.
    (small,) = tex_layout(["Method", "MSE"], [[("gru", False), ("0.1", False)]])
    assert (small.env, small.size) == ("table", 9.0)


@needs_pdflatex
def test_width_estimate_is_never_short_and_close(tmp_path):
    """tex_width against the width pdflatex sets: at least it, at most 10 % more."""
    texts = [
        ("val-skip-nearest:76 of 13 (val Skip % 58.1, val accuracy 93.39)", False),
        ("FLOPs, effective (×10^4) ↓", False),
        ("√(Acc×Skip) ↑", False),
        ("87.59 ± 0.77", True),
        ("WMQ random-updates D_h [94.8, 97.6]", False),
    ]
    body = "\n".join(
        rf"\sbox0{{\fontsize{{{s:g}}}{{{s + 2:g}}}\selectfont "
        + (rf"\textbf{{{tex_escape(t)}}}" if b else tex_escape(t))
        + rf"}}\typeout{{W{i}-{s:g}=\the\wd0}}"
        for i, (t, b) in enumerate(texts)
        for s in (8, 9)
    )
    log, _ = compile_float(tmp_path, "widths", body, "one-column")
    for i, (t, b) in enumerate(texts):
        for s in (8, 9):
            real = float(re.search(rf"W{i}-{s}=([\d.]+)pt", log).group(1))
            assert real <= tex_width(t, s, b) <= 1.1 * real, (t, s, real, tex_width(t, s, b))


ROOT = Path(__file__).resolve().parents[1]


def doc_blocks() -> list[str]:
    """The LaTeX documents of docs/reports.md's "LaTeX in a paper", as written there."""
    text = (ROOT / "docs" / "reports.md").read_text(encoding="utf-8")
    section = text.split("\n## LaTeX in a paper\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```latex\n(.*?)```", section, re.S)


def pdflatex(folder: Path, name: str) -> str:
    """Compile ``folder/name`` twice (the references settle on the second run): its log."""
    env = {**os.environ, "max_print_line": "100000"}  # one log line per message
    for _ in range(2):
        p = subprocess.run(
            ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", name],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
    log = (folder / name).with_suffix(".log").read_text(encoding="utf-8", errors="replace")
    errors = [line for line in log.splitlines() if line.startswith("!")]
    assert p.returncode == 0 and not errors, (name, errors[:3])
    return log


# The seizures reports the documents input, rendered as the committed ones are: their folder
# under reports/, their records and their rule.
DOC_REPORTS = (
    ("paper", "results/paper/runs.jsonl", "val-skip-nearest:76"),
    ("paper/seizures-recording", "results/paper/seizures_recording.jsonl", "val-skip-nearest:76"),
)


@needs_pdflatex
def test_two_seizures_reports_go_into_one_document(tmp_path):
    """The documents of docs/reports.md compile with two seizures reports and their figures.

    The two reports have the same tables and figures (``seizures_paper_tradeoff.pdf`` in two
    folders): every label is defined once, every reference resolves, each figure is read from
    its own report's folder, no line or float is too large, and the text width (one-column
    document) or column width (two-column document) is the one the tables were set for.
    """
    root = tmp_path / "reports"
    figures = set()
    for folder, store, rule in DOC_REPORTS:
        paths = write_paper_report(
            seizure_records(),
            [store],
            root / folder,
            formats=("tex",),
            select=parse_rule(rule),
            widths=("text", "column"),
            tex_root=root,
        )
        pdfs = {p.relative_to(root).as_posix() for p in paths if p.suffix == ".pdf"}
        assert len(pdfs) >= 2  # figures to include, under the same names in both folders
        figures |= pdfs
    docs = doc_blocks()
    assert len(docs) == 2 and ",twocolumn" not in docs[0] and "[twocolumn]" in docs[1]
    for k, (doc, width) in enumerate(zip(docs, (6.5, 3.3), strict=True)):
        doc = doc.replace(r"\begin{document}", r"\begin{document}\typeout{W=\the\linewidth}")
        (tmp_path / f"doc{k}.tex").write_text(doc, encoding="utf-8")
        log = pdflatex(tmp_path, f"doc{k}.tex")
        line = float(re.search(r"^W=([\d.]+)pt", log, re.M).group(1)) / 72.27
        assert line == pytest.approx(width, abs=0.01)
        assert "multiply defined" not in log, k
        assert "undefined references" not in log and "Warning: Reference" not in log, k
        assert "Overfull" not in log and "Float too large" not in log, k
        used = set(re.findall(r"<use reports/+([^>]*\.pdf)>", log))  # reports/ + paper/...
        assert used == figures, k  # both reports' figures, each from its own folder


@needs_pdflatex
def test_the_committed_reports_go_into_one_document_in_either_version(tmp_path):
    """Every committed report, text and column versions, in the documents of docs/reports.md.

    Their figures come from the committed ``reports/`` through the documents' ``\\graphicspath``.
    """
    texs = sorted((ROOT / "reports").rglob("paper_*.tex"))
    text = [p for p in texs if not p.stem.endswith("_column")]
    assert len(text) >= 9  # the nine seizures reports among them
    assert sorted(p.with_name(f"{p.stem}_column.tex") for p in text) == sorted(set(texs) - {*text})
    (tmp_path / "reports").symlink_to(ROOT / "reports")
    for k, (doc, suffix) in enumerate(zip(doc_blocks(), ("", "_column"), strict=True)):
        lines = [line for line in doc.splitlines() if not line.startswith(r"\input{")]
        lines[-1:-1] = [  # each report, then the floats it left waiting
            rf"\input{{reports/{p.relative_to(ROOT / 'reports').with_suffix('').as_posix()}"
            rf"{suffix}}}\clearpage"
            for p in text
        ]
        doc = "\n".join(lines) + "\n"
        (tmp_path / f"all{k}.tex").write_text(doc, encoding="utf-8")
        log = pdflatex(tmp_path, f"all{k}.tex")
        assert "multiply defined" not in log, k
        assert "undefined references" not in log and "Warning: Reference" not in log, k
        assert "Overfull" not in log and "Float too large" not in log, k


def test_the_label_key_tells_reports_apart_and_reads_the_same_each_time(tmp_path):
    stores = ["results/paper/runs.jsonl", "results/paper/seizures_recording.jsonl"]
    stores += ["results/paper/seizures_scaled.jsonl"]
    rules = [parse_rule(f"val-skip-nearest:{t}") for t in (76, 50, 90)]
    keys = {tex_key("seizures", "paper", [s], r) for s in stores for r in rules}
    assert len(keys) == 9  # the nine committed seizures reports
    assert all(re.fullmatch(r"[a-z0-9.+-]+", k) for k in keys)
    assert (
        tex_key("seizures", "paper", [stores[1]], rules[1])
        == "seizures-paper.seizures-recording.val-skip-nearest-50"
    )
    tuned = tex_key("adding", "paper", ["results/paper/adding_tuned.jsonl"], parse_rule("best-val"))
    assert tuned == "adding-paper.adding-tuned.best-val" != tex_key("adding", "paper", stores[:1])
    # a store named by its folder, its runs.jsonl or an absolute path: one key
    named = ["results/quick", "results/quick/runs.jsonl", str(tmp_path / "results/quick")]
    assert {tex_key("adding", "quick", [s]) for s in named} == {"adding-quick.quick"}


@needs_pdflatex
def test_a_column_part_too_narrow_for_its_numbers_wraps_their_text(tmp_path):
    """Two wide row keys beside a numeric column of words (freq-discrimination quick's p)."""
    titles = ["Method", "Variant", "Accuracy % ↑", "p vs reference (Accuracy %, Holm)"]
    rows = [
        [(m, False), (f"task.time_input={v}", False), (acc, False), (p, False)]
        for m, acc, p in [
            ("ref:majority (reference)", "50.0 ± 0 (n=3)", "–"),
            ("random-updates", "87.1 ± 2.3", "0.00066 (paired t)"),
            ("gru", "91.4 ± 1.1", "best val (reference)"),
        ]
        for v in ("none", "time")
    ]
    tex = tmp_path / "narrow_column.tex"
    tex.write_text(render_tex(titles, rows, "narrow", "tab:narrow", width="column"))
    check_tables(tmp_path, tex, ("two-column",))


@needs_pdflatex
def test_a_tall_column_table_is_cut_into_floats_of_fewer_rows(tmp_path):
    """A float cannot break across pages: a column version's part taller than a page is cut."""
    titles = ["Method", "Variant", "Accuracy % ↑", "Picked by"]
    rows = [
        [(f"method-{m}", False), (f"lam={lam}", False), ("95.2 ± 1.4", False)]
        + [(f"at matched budget 76 % (val-skip-nearest:76 of {m + 3}, val Skip % 7{m})", False)]
        for m in range(20)
        for lam in ("0.01", "0.1")
    ]
    tex = tmp_path / "tall_column.tex"
    tex.write_text(render_tex(titles, rows, "tall", "tab:tall", ["a note"], width="column"))
    text = tex.read_text()
    assert re.search(r"\{tall \(rows 1--\d+\)\}", text) and "Notes to" in text
    assert re.search(r"\(continued: rows \d+--40 of Table~\\ref\{tab:tall\}\)", text)
    check_tables(tmp_path, tex, ("two-column",))


def test_the_cli_writes_the_column_version_with_figure_paths_from_the_tex_root(tmp_path):
    import json

    from harness.cli import main

    store = tmp_path / "mine.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in records()))
    root = tmp_path / "reports"
    args = ["report", str(store), "--paper", "--task", "seizures", "--out-dir", str(root / "p")]
    assert main([*args, "--width", "column", "--tex-root", str(root)]) == 0
    written = sorted(p.name for p in (root / "p").iterdir())
    assert written == ["figures", "paper_seizures_smoke.md", "paper_seizures_smoke_column.tex"]
    tex = (root / "p" / "paper_seizures_smoke_column.tex").read_text(encoding="utf-8")
    assert r"{p/figures/seizures_smoke_tradeoff.pdf}" in tex
    assert r"\label{tab:seizures-smoke.mine.main}" in tex
    assert r"\label{fig:seizures-smoke.mine.tradeoff}" in tex
