"""No figure of a committed report is copied by hand into the docs' prose.

Numbers that come from the records or a committed report sit in generated blocks (``harness
docs``: docs/reports.md, "Numbers in the docs"), which ``harness docs --check`` keeps current; a
figure typed into the prose goes stale when the report is regenerated (issue 67: five passages
quoted timing reports two regenerations old). A simple scan finds them: a paragraph outside the
generated blocks that names a committed report (``TIMING.md``, ``SPEEDUP.md``, a file or folder
under ``reports/``, "the committed report", "the timing report", ...) and holds a figure (a number
with a unit: ms, s, h, min, us, GiB, MACs, GMAC/s, ``2.65x``, ``1.5×``, ``52.5 %``; or a metric's
name and its value: "loss 0.167") fails, naming the file and the paragraph's first line.

What the scan lets pass: a whole percentage (a budget or target, ``76 %``: results carry a
decimal), ``20 × 35`` (a product, spaced), a section number (``docs/methods.md 2.14``), numbers in
fenced code, and figures in a paragraph that names no report (a measurement made for the text, an
event of the past with its commit). A paragraph is a run of non-empty lines; a list item starts
one; a table belongs to the paragraph before it (its caption).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

REPORT = re.compile(
    r"\b(?:TIMING|SPEEDUP|LEADERBOARD)\.(?:md|jsonl)\b"
    r"|(?<![\w./-])reports/"
    r"|\b[Cc]ommitted (?:timing |speedup )?reports?\b"
    r"|\b(?:[Tt]iming|[Ss]peedup) reports?\b"
)
FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|h|min|us|µs|GiB|MiB|KiB|GB|MB|GMAC/s|MACs?)(?![\w/])"
    r"|(?<![\w.])\d[\d,]*\.\d+\s?%"
    r"|(?<![\w.])\d[\d,]*(?:\.\d+)?[x×](?![\w\d])"
    r"|\b(?:loss|MSE|accuracy|perplexity|NLL)\s+(?:of\s+)?\d[\d.]*(?:e-?\d+)?"
)
START, END = "<!-- generated:", "<!-- end -->"
ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")


def paragraphs(text: str) -> list[tuple[int, str]]:
    """``(first line, text)`` of each paragraph outside generated blocks and fenced code."""
    found: list[tuple[int, list[str]]] = []
    para: list[str] = []
    start, block, fence = 0, False, False

    def close() -> None:
        nonlocal para
        if para:
            if para[0].lstrip().startswith("|") and found:  # a table: its caption's paragraph
                found[-1][1].extend(para)
            else:
                found.append((start, para))
        para = []

    for i, line in enumerate(text.splitlines(), 1):
        if block or line.startswith(START):
            block = line.rstrip() != END
            close()
        elif line.lstrip().startswith("```"):
            fence = not fence
            close()
        elif fence:
            continue
        elif not line.strip():
            close()
        else:
            table = line.lstrip().startswith("|")
            if ITEM.match(line) or (para and para[-1].lstrip().startswith("|") != table):
                close()
            if not para:
                start = i
            para.append(line)
    close()
    return [(n, " ".join(lines)) for n, lines in found]


def findings(path: Path, text: str | None = None) -> list[str]:
    """``FILE:LINE: ...`` for each paragraph naming a committed report beside a figure."""
    text = path.read_text(encoding="utf-8") if text is None else text
    out = []
    for line, para in paragraphs(text):
        report, figure = REPORT.search(para), FIGURE.search(para)
        if report and figure:
            name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            out.append(
                f"{name}:{line}: names {report.group(0)!r} and gives {figure.group(0)!r}: put the "
                "report's figures in a generated block (harness bench --from ... --print)"
            )
    return out


def test_no_paragraph_quotes_a_committed_report_by_hand():
    found = [f for path in SCANNED for f in findings(path)]
    assert not found, "\n".join(found)


# The five passages issue 67 found (as they stood at cabfecd, shortened), each flagged.
QUOTED = {
    "speedup.md:146": """- Delta GRU and EGRU run PyTorch per step. In
  `reports/SPEEDUP.md` (commit de6b9b8, one thread, D = 1024, 90 %, a training run on the
  other core): 8.3 and 8.2 ms a sequence against 22.0 and 22.8 ms for the fused GRU, 2.65x
  (Delta GRU) and 2.81x (EGRU) against MAC ratios of 10.4x and 9.4x, 0.26 and 0.30 of them.
""",
    "speedup.md:69": """kernels of SA-RNN and VC-RNN at batch 1 dispatch once per sequence):
the report of 83eb45a had 12 of its 84 rows above their MAC ratio there (SA-RNN at
D 256, batch 1: 5.30x against 1.98x).
The report counts the rows whose realised fraction passes 1, per comparison, and
`tests/test_committed_timing.py` checks that the committed report calls nothing a bound.
""",
    "reproduction.md:861": """What they would cost on one core: a training epoch is the
train-step time `harness bench` measured (`reports/TIMING.md`, commit 9b1b439, AMD EPYC,
median of 3 rounds)
times the batches of an epoch (HAR: 32 of 200 windows; PTB: 1,328 of 20 × 35 tokens).

| Suite | Method (size timed) | Train step | Epoch | Run | Epochs | Runs | Total |
|---|---|---|---|---|---|---|---|
| sei-table2 (HAR) | RNN (D 32, 2 layers) | 28 ms | 0.9 s | 1 min | 100 | 9 | 0.2 h |
""",
    "methods.md:883": """18.1, 33.0 and 86.5 ms (1.5×, 2.8×, 7.3×). `harness bench` on the idle
machine (`reports/TIMING.md`) gives 322 ms at HAR's sizes at commit 9b1b439 against 708 ms
at 83eb45a,
before this training path (2.2×), and 9.35 ms at the synthetic sizes.
""",
    "reproduction.md:706": """At 50 epochs the GRU had only just left the
plateau of a constant prediction (training loss 0.167, the target's variance, the `ref:mean`
row) in the last epochs (the learning curves, `reports/paper/figures/`).
""",
}


@pytest.mark.parametrize("where", QUOTED)
def test_the_passages_of_issue_67_are_found(where, tmp_path):
    path = tmp_path / "doc.md"
    text = f"# Doc\n\nProse.\n\n{QUOTED[where]}\nMore prose.\n"
    got = findings(path, text)
    assert len(got) == 1 and got[0].startswith(f"{path}:5: names "), got


@pytest.mark.parametrize(
    "text",
    [
        # the figures in a generated block
        "<!-- generated: harness bench --from reports/TIMING.jsonl --print times -->\n\n"
        "*`reports/TIMING.jsonl`*\n\n| gru | 28 ms |\n\n<!-- end -->\n",
        # fenced code
        "```\nharness bench --report reports/TIMING.md  # 3.9 h\n```\n",
        # a budget, a product, a section number, a constant of the code
        "The tables in `reports/paper/matched-50` keep the λ nearest 76 % and 50 %.\n",
        "An epoch is 1,328 batches of 20 × 35 tokens (`reports/TIMING.md`).\n",
        "The fused step (docs/methods.md 2.14) is in `reports/TIMING.md`.\n",
        # a measurement in a paragraph of its own, the report named in the next
        "On this machine the backward took 5 s with subnormals and 0.65 s without.\n\n"
        "The timing report of commit d888433 was measured before this.\n",
        # a list item is a paragraph of its own
        "- `reports/SPEEDUP.md` gives the measured figures.\n- a step took about 100 us.\n",
        # docs/speedup.md is not SPEEDUP.md
        "See docs/speedup.md; an earlier run took 14.2 s.\n",
    ],
)
def test_what_the_scan_lets_pass(text, tmp_path):
    assert findings(tmp_path / "doc.md", f"# Doc\n\n{text}") == []


def test_a_table_belongs_to_its_caption_and_a_block_ends_where_it_ends(tmp_path):
    text = (
        "From `reports/TIMING.md`:\n\n| Method | ms |\n|---|---|\n| gru | 28 ms |\n\n"
        "<!-- generated: harness bench --from reports/TIMING.jsonl --print times -->\n"
        "| gru | 28 ms |\n<!-- end -->\n\nThe committed report gives 322 ms.\n"
    )
    got = findings(tmp_path / "doc.md", text)
    assert [g.split(": names")[0] for g in got] == [f"{tmp_path}/doc.md:1", f"{tmp_path}/doc.md:11"]
