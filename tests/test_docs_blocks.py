"""``harness docs``: the generated blocks of the docs are filled from the records and checked.

A block is ``<!-- generated: harness report ... --print PART -->``, the command's stdout, and
``<!-- end -->``. Filling rewrites only the bodies; ``--check`` writes nothing, names each stale
block (file:line and command) and exits 1; a malformed block, or one whose command is not a
``harness report ... --print`` or fails, is one line on stderr and exit 2, the files untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

STORE = Path(__file__).resolve().parents[1] / "results" / "paper" / "adding_tuned.jsonl"
MAIN = "harness report store.jsonl --paper --task adding --print main"
COUNT = "harness report store.jsonl --where method=gru --print count"
DOC = f"""# Results

Prose that stays.

<!-- generated: {MAIN} -->
stale text
<!-- end -->

Between the blocks.

<!-- generated: {COUNT} -->
<!-- end -->
"""
GOOD = f"<!-- generated: {COUNT} -->\n<!-- end -->\n"


@pytest.fixture
def doc(tmp_path):
    shutil.copy(STORE, tmp_path / "store.jsonl")
    path = tmp_path / "doc.md"
    path.write_text(DOC, encoding="utf-8")
    return path


def test_a_doc_with_blocks_is_filled_and_then_checks_clean(harness, doc):
    res = harness("docs", "doc.md")
    assert res.returncode == 0, res.stderr
    assert "doc.md:5:" in res.stdout and "doc.md:11:" in res.stdout  # both rewritten
    text = doc.read_text(encoding="utf-8")
    assert "stale text" not in text
    assert text.startswith("# Results\n\nProse that stays.\n\n<!-- generated: ")
    assert "<!-- end -->\n\nBetween the blocks.\n\n" in text
    # the body is the command's stdout between empty lines
    printed = harness(*MAIN.split()[1:], check=True).stdout
    assert printed.startswith("*adding (paper preset), every variant")
    assert f"<!-- generated: {MAIN} -->\n\n{printed}\n<!-- end -->" in text
    assert "| gru " in printed and "| sa-rnn " in printed
    gru = [json.loads(s) for s in (doc.parent / "store.jsonl").read_text().splitlines()]
    gru = [r for r in gru if r["method"] == "gru"]
    runs = len({r["run_id"] for r in gru})
    failed = sum(r["status"] == "failed" for r in gru)
    count = f"{len(gru)} records ({failed} failed, 0 from a dirty tree), {runs} runs"
    assert f"\n\n{count}\n\n<!-- end -->" in text

    again = harness("docs", "--check", "doc.md")
    assert (again.returncode, again.stderr) == (0, "")
    assert doc.read_text(encoding="utf-8") == text


def test_a_changed_record_makes_check_fail_naming_the_block(harness, doc):
    harness("docs", "doc.md", check=True)
    filled = doc.read_text(encoding="utf-8")
    store = doc.parent / "store.jsonl"
    lines = store.read_text().splitlines()
    i = next(i for i, s in enumerate(lines) if json.loads(s)["method"] == "sa-rnn")
    rec = json.loads(lines[i])
    rec["metrics"]["mse"] *= 2
    lines[i] = json.dumps(rec)
    store.write_text("\n".join(lines) + "\n")

    res = harness("docs", "--check", "doc.md")
    assert res.returncode == 1, res.stderr
    stale = [s for s in res.stdout.splitlines() if s.endswith("stale")]
    assert stale == [f"doc.md:5: `{MAIN}`: stale"]  # the count block did not change
    assert doc.read_text(encoding="utf-8") == filled  # --check writes nothing

    harness("docs", "doc.md", check=True)
    assert doc.read_text(encoding="utf-8") != filled
    assert harness("docs", "--check", "doc.md").returncode == 0


@pytest.mark.parametrize(
    "block, says",
    [
        # unended: the next block's marker, or the end of the file, comes first
        (
            f"<!-- generated: {COUNT} -->\ntext\n",
            "doc.md:3: generated block without '<!-- end -->'",
        ),
        (
            f"{GOOD}<!-- generated: {COUNT} -->\n",
            "doc.md:5: generated block without '<!-- end -->'",
        ),
        ("text\n<!-- end -->\n", "doc.md:4: '<!-- end -->' outside a generated block"),
        (f"<!-- generated: {COUNT}\n<!-- end -->\n", "doc.md:3: a block marker is"),
        ("<!-- generated: -->\n<!-- end -->\n", "doc.md:3: a block marker is"),
        ("<!-- generated: harness run --tasks adding -->\n<!-- end -->\n", "unknown block command"),
        ("<!-- generated: harness report store.jsonl -->\n<!-- end -->\n", "unknown block command"),
        ("<!-- generated: harness report 'store.jsonl -->\n<!-- end -->\n", "cannot split it"),
        (
            "<!-- generated: harness report store.jsonl --print tables -->\n<!-- end -->\n",
            "failed (exit 2): argument --print: unknown value 'tables'",
        ),
        (
            "<!-- generated: harness report gone.jsonl --print count -->\n<!-- end -->\n",
            "failed (exit 2): no records file at gone.jsonl",
        ),
        (
            "<!-- generated: harness report store.jsonl --where nope=1 --print count -->\n"
            "<!-- end -->\n",
            "failed (exit 2): --where nope: no record has this field",
        ),
        (
            "<!-- generated: harness report store.jsonl --print main -->\n<!-- end -->\n",
            "failed (exit 2): --print main: tables of the paper report, with --paper",
        ),
    ],
)
@pytest.mark.parametrize("check", [False, True])
def test_a_bad_block_is_one_line_on_stderr_and_exit_2(harness, doc, block, says, check):
    text = f"# Doc\n\n{block}\n{GOOD}" if not block.startswith(GOOD) else f"# Doc\n\n{block}"
    doc.write_text(text, encoding="utf-8")
    res = harness("docs", *(["--check"] if check else []), "doc.md")
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
    assert says in res.stderr
    assert "Traceback" not in res.stderr
    assert doc.read_text(encoding="utf-8") == text  # the good block is not filled either


def test_print_writes_nothing_and_keeps_its_flags_apart(harness, doc):
    shown = harness(
        "report", "store.jsonl", "--paper", "--where", "train.lr=3e-3", "--print", "main"
    )
    assert shown.returncode == 0, shown.stderr
    rows = [s.split("|")[1].strip() for s in shown.stdout.splitlines() if s.startswith("| ")]
    # lr 3e-3 only: SA-RNN's run there failed, the reference has no learning rate
    assert rows == ["Method", "gru", "skip-rnn"]
    assert sorted(p.name for p in doc.parent.iterdir()) == ["doc.md", "store.jsonl"]
    bad = harness("report", "store.jsonl", "--paper", "--out-dir", "x", "--print", "main")
    assert bad.returncode == 2 and "--out-dir: not used with --print" in bad.stderr
    bad = harness("report", "store.jsonl", "--where", "lam=1")
    assert bad.returncode == 2 and "--where: only used with --print" in bad.stderr


def test_a_crlf_file_keeps_every_byte_around_its_blocks(harness, doc):
    lf = DOC.replace("Between", "Between\u00a0") + "no line end after this"
    doc.write_bytes(lf.encode("utf-8"))
    assert harness("docs", "doc.md").returncode == 0
    filled = doc.read_bytes().decode("utf-8")
    assert "stale text" not in filled
    assert filled.endswith("\nno line end after this")  # the last line still has none
    doc.write_bytes(lf.replace("\n", "\r\n").encode("utf-8"))
    assert harness("docs", "doc.md").returncode == 0
    assert doc.read_bytes().decode("utf-8") == filled.replace("\n", "\r\n")
    assert harness("docs", "--check", "doc.md").returncode == 0


PLUGIN = """from baselines.gru import GRU
from harness.components.registry import register_method


@register_method("my-gru")
class MyGRU(GRU):
    \"\"\"A GRU under another name.\"\"\"
"""


def test_a_block_runs_as_its_command_line_alone_includes_and_all(harness, doc):
    """A block's --include is imported for it, and forgotten before the next block."""
    store = doc.parent / "store.jsonl"
    mine = []
    for line in store.read_text().splitlines():
        rec = json.loads(line)
        if rec["method"] == "gru":
            rec["method"] = rec["config"]["method"] = "my-gru"
            mine.append(json.dumps(rec) + "\n")
    (doc.parent / "mine.jsonl").write_text("".join(mine))
    (doc.parent / "myplugin.py").write_text(PLUGIN)
    count = "harness report mine.jsonl --include myplugin.py --where method=my-gru --print count"
    blocks = f"<!-- generated: {count} -->\n<!-- end -->\n\n" * 2  # imported again, not cached
    doc.write_text(f"# Doc\n\n{blocks}", encoding="utf-8")
    assert harness("docs", "doc.md").returncode == 0
    assert doc.read_text(encoding="utf-8").count(f"\n\n{len(mine)} records (0 failed") == 2
    alone = "harness report mine.jsonl --where method=my-gru --print count"
    doc.write_text(f"# Doc\n\n{blocks}<!-- generated: {alone} -->\n<!-- end -->\n")
    res = harness("docs", "--check", "doc.md")
    assert res.returncode == 2  # the blocks before it registered my-gru for themselves only
    said = f"doc.md:9: `{alone}` failed (exit 2): --where method=my-gru: Unknown method"
    assert said in res.stderr


REPORTS = Path(__file__).resolve().parents[1] / "reports"
TIMES = "harness bench --from TIMING.jsonl --print times --where task=har --where method=rnn,lstm"
COST = "harness bench --from TIMING.jsonl --print cost --suite sei-table2 --seeds 0-2 " + (
    "--epoch-batches 32"
)
ROWS = "harness bench --speedup --from SPEEDUP.jsonl --print rows --where method=sa-rnn " + (
    "--where D=1024 --where B=1 --where target_skip=0.9"
)


@pytest.fixture
def bench_doc(tmp_path):
    """A doc with a times, a cost and a speedup block over copies of the committed data."""
    for name in ("TIMING.jsonl", "SPEEDUP.jsonl"):
        shutil.copy(REPORTS / name, tmp_path / name)
    path = tmp_path / "doc.md"
    blocks = "".join(f"<!-- generated: {c} -->\n<!-- end -->\n\n" for c in (TIMES, COST, ROWS))
    path.write_text(f"# Speed\n\n{blocks}", encoding="utf-8")
    return path


def _lines(path: Path) -> list[dict]:
    return [json.loads(s) for s in path.read_text().splitlines()]


def test_timing_and_speedup_blocks_hold_the_data_and_go_stale_with_it(harness, bench_doc):
    from harness.bench.timing_report import format_ms

    harness("docs", "doc.md", check=True)
    text = bench_doc.read_text(encoding="utf-8")
    timings = _lines(bench_doc.parent / "TIMING.jsonl")
    train = {
        r["method"]: r
        for r in timings
        if r["task"] == "har" and r["phase"] == "train" and not r.get("reference")
    }
    rnn = train["rnn"]
    assert "| rnn | RNN | 32 | 2 | " in text
    assert f"| {format_ms(rnn['median_s'])} ({format_ms(rnn['min_s'])}–" in text
    # the cost, computed here from the records: 9 runs a method at 3 seeds, 32 batches x 100 epochs
    methods = ("rnn", "lstm", "rhn", "ei-rehn")
    hours = {m: 9 * 32 * 100 * train[m]["median_s"] / 3600 for m in methods}
    assert f"| 9 | {hours['ei-rehn']:.1f} h |" in text
    assert f"Total: {sum(hours.values()):.1f} h of one core (36 runs)" in text
    row = next(
        r
        for r in _lines(bench_doc.parent / "SPEEDUP.jsonl")
        if (r["method"], r["D"], r["B"], r["target_skip"]) == ("sa-rnn", 1024, 1, 0.9)
    )
    fused = f"{row['speedup_fused']:.2f}x ({row['mac_ratio_fused']:.2f}x, "
    assert f"| GRU: {fused}{row['realised_frac_fused']:.2f}) |" in text

    # a changed train step makes the times and cost blocks stale, not the speedup one
    rnn["median_s"] *= 2
    (bench_doc.parent / "TIMING.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timings))
    res = harness("docs", "--check", "doc.md")
    assert res.returncode == 1
    assert f"doc.md:3: `{TIMES}`: stale" in res.stdout
    line = text.splitlines().index(f"<!-- generated: {COST} -->") + 1
    assert f"doc.md:{line}: `{COST}`: stale" in res.stdout
    assert "SPEEDUP.jsonl" not in res.stdout and "1 file(s)" not in res.stdout
    harness("docs", "doc.md", check=True)
    assert harness("docs", "--check", "doc.md").returncode == 0


@pytest.mark.parametrize(
    "command, says",
    [
        ("harness bench --from TIMING.jsonl", "unknown block command"),
        ("harness bench --print times", "failed (exit 2): --print: name the records"),
        (
            "harness bench --from TIMING.jsonl --print times --where method=nope",
            "warning: --where method=nope: no record matches",
        ),
        (
            "harness bench --speedup --from TIMING.jsonl --print rows",
            "TIMING.jsonl:1: not a speedup row",
        ),
    ],
)
def test_a_bad_bench_block_is_one_line_and_exit_2(harness, bench_doc, command, says):
    text = f"# Doc\n\n<!-- generated: {command} -->\n<!-- end -->\n"
    bench_doc.write_text(text, encoding="utf-8")
    res = harness("docs", "--check", "doc.md")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert says in res.stderr and res.stderr.startswith("error: doc.md:3: ")
    assert bench_doc.read_text(encoding="utf-8") == text
