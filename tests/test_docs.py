"""The method spec lives in the repository: every citation of ``docs/methods.md`` or
``docs/papers.md`` names a section (or a lettered / numbered item) that exists there, the spec keeps
its section numbering, and nothing cites the design documents that used to live outside the
repository.

Citation grammar (what code may write after the document's path):

- ``2.3``, ``section 3``: a numbered heading (``### 2.3 ...``, ``## 3 ...``), or ``P1.6``;
- ``2.14(g)``, ``2.14(e, h)``, ``P1.6 (v)``, ``P2.0 pitfall b``: lettered or roman items, lines
  starting with ``(g)`` or ``**(g)`` under that heading (before the next heading);
- ``1.2 item 3``, ``4 item 7`` and ``4.7`` (when there is no heading 4.7): numbered items, lines
  starting with ``**1.2.3**`` / ``**4.7**`` under heading 1.2 / 4;
- a list continues the citation: ``1.1, 2.14(e, h)``, ``2.9 / 4.5`` (continuations must contain
  a dot, so ``2.3, 3 layers`` is one citation).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = {"methods": "docs/methods.md", "papers": "docs/papers.md"}
SCANNED = ("harness", "baselines", "tasks", "tests", "benchmarks", "docs", "README.md")

# The outside documents the code used to cite, and where they lived. Spelled in pieces so that
# this file does not itself cite them.
OLD_METHODS = "METHODS" + ".md"
OLD_RESULTS = "PAPER_RESULTS" + ".md"
OUTSIDE = "/work/" + "shared"
CURRENT = {path: key for key, path in DOCS.items()}  # a cited path -> its key in DOCS

_ITEM = r"(?:[a-z]|[ivx]{1,5})"
_TAIL = (
    rf"(?:\s?\(({_ITEM}(?:\s*,\s*{_ITEM})*)\)"  # (g) / (e, h) / " (v)"
    r"|\s+(?:item|pitfall)\s+(\d+|[a-z])\b)?"  # item 3 / pitfall b
)
_MORE = re.compile(rf"\s*(?:,|/|and)\s*(?:section\s+|§\s*)?(P?\d+\.\d+(?:\.\d+)*){_TAIL}")
_HEADING = re.compile(r"^#{1,6}\s+(P?\d+(?:\.\d+)*)\.?(?:\s|$)")
_LETTERED = re.compile(rf"^\s*(?:[-*]\s+)?(?:\*\*)?\(({_ITEM})\)")
_NUMBERED = re.compile(r"^\s*(?:[-*]\s+)?\*\*(P?\d+(?:\.\d+)*)\.(\d+)\*\*")
_TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".rst", ".cfg", ".ini", ".cpp", ".h", ".sh"}


@dataclass
class Anchors:
    """What a document lets one cite: numbered headings, and items under each heading."""

    sections: set[str] = field(default_factory=set)
    lettered: dict[str, set[str]] = field(default_factory=dict)
    numbered: dict[str, set[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Citation:
    line: int
    doc: str  # key of DOCS
    section: str
    letters: tuple[str, ...]
    number: str | None
    text: str  # as written, for messages


def anchors(text: str) -> Anchors:
    """The citable places of a Markdown document (fenced code is skipped)."""
    out, current, fenced = Anchors(), None, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        m = _HEADING.match(line)
        if m:
            current = m.group(1)
            out.sections.add(current)
            continue
        if line.startswith("#"):  # an unnumbered heading ends the numbered section
            current = None
            continue
        if current is None:
            continue
        m = _LETTERED.match(line)
        if m:
            out.lettered.setdefault(current, set()).add(m.group(1))
        m = _NUMBERED.match(line)
        if m and m.group(1) == current:
            out.numbered.setdefault(current, set()).add(m.group(2))
    return out


def find_citations(text: str) -> list[Citation]:
    """Every citation in ``text`` of a document of ``DOCS``, one per cited section, with the line
    of the document's path."""
    alternatives = "|".join(re.escape(n) for n in sorted(CURRENT, key=len, reverse=True))
    head = re.compile(rf"({alternatives})\s+(?:section\s+|§\s*)?(P?\d+(?:\.\d+)*){_TAIL}")
    found = []
    for m in head.finditer(text):
        name = m.group(1)
        doc = CURRENT[name]
        line = text.count("\n", 0, m.start()) + 1
        groups, piece, end = m.groups()[1:], m.group(0)[len(name) :], m.end()
        while True:
            section, letters, item = groups
            letters = tuple(x.strip() for x in letters.split(",")) if letters else ()
            number = None
            if item is not None and item.isdigit():
                number = item
            elif item is not None:
                letters = (item,)
            text_as_cited = f"{name} {' '.join(piece.split())}"
            found.append(Citation(line, doc, section, letters, number, text_as_cited))
            more = _MORE.match(text, end)
            if not more:
                break
            piece = re.sub(r"^\s*(?:,|/|and)\s*", "", more.group(0))
            groups, end = more.groups(), more.end()
            line = text.count("\n", 0, more.start(1)) + 1
    return found


def problem(c: Citation, a: Anchors) -> str | None:
    """Why the citation leads nowhere, or None when it resolves."""
    sec = c.section
    if c.letters or c.number is not None:
        if sec not in a.sections:
            return f"no section {sec}"
        for x in c.letters:
            if x not in a.lettered.get(sec, set()):
                return f"section {sec} has no item ({x})"
        if c.number is not None and c.number not in a.numbered.get(sec, set()):
            return f"section {sec} has no item {c.number}"
        return None
    if sec in a.sections:
        return None
    parent, _, last = sec.rpartition(".")
    if parent in a.sections and last in a.numbered.get(parent, set()):
        return None  # "4.7": item 7 of section 4
    return f"no section {sec}"


def scanned_files(root: Path) -> list[Path]:
    """The text files whose citations must resolve (the project's code, tests and docs)."""
    files = []
    for name in SCANNED:
        p = root / name
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files += [
                f
                for f in sorted(p.rglob("*"))
                if f.is_file() and f.suffix in _TEXT_SUFFIXES and "__pycache__" not in f.parts
            ]
    return files


def unresolved_citations(root: Path, files: Iterable[Path]) -> tuple[int, list[str]]:
    """``(number of citations, ["path:line: citation: problem", ...])`` over ``files``."""
    cache: dict[str, Anchors] = {}
    count, bad = 0, []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        for c in find_citations(text):
            count += 1
            if c.doc not in cache:
                doc = root / DOCS[c.doc]
                text_of_doc = doc.read_text(encoding="utf-8") if doc.is_file() else ""
                cache[c.doc] = anchors(text_of_doc)
            why = problem(c, cache[c.doc])
            if why:
                bad.append(f"{f.relative_to(root)}:{c.line}: {c.text}: {why}")
    return count, bad


def repository_files(root: Path) -> list[Path]:
    """Tracked files and new files git does not ignore; without git, a walk of the tree."""
    try:
        listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        out = subprocess.run(
            ["git", "-C", str(root), *listing],
            capture_output=True,
            check=True,
        ).stdout.decode()
        return sorted({root / p for p in out.split("\0") if p and (root / p).is_file()})
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", "__pycache__", ".venv", ".tox", "build", "dist", ".ruff_cache"}
        return [
            f
            for f in sorted(root.rglob("*"))
            if f.is_file()
            and not skip.intersection(f.relative_to(root).parts)
            and not any(part.endswith(".egg-info") for part in f.relative_to(root).parts)
        ]


def outside_references(root: Path, files: Iterable[Path]) -> list[str]:
    """``["path:line: what", ...]`` for every line citing the outside documents or their folder.

    Run records (``results/**.jsonl``) may name the data folder they were measured from
    (``<outside>/data/...`` in ``data.source``): that is provenance of a measurement, not a
    citation, and rewriting it would change the records.
    """
    hits = []
    for f in files:
        try:
            text = f.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary (figures, PDFs)
        rel = f.relative_to(root)
        record = rel.parts[0] == "results" and f.suffix == ".jsonl"
        for n, line in enumerate(text.splitlines(), 1):
            if record:
                line = line.replace(OUTSIDE + "/data/", "")
            for what in (OLD_METHODS, OLD_RESULTS, OUTSIDE):
                if what in line:
                    hits.append(f"{rel}:{n}: {what}")
    return hits


# --- the repository -----------------------------------------------------------------------------


def test_every_citation_of_the_docs_resolves():
    count, bad = unresolved_citations(ROOT, scanned_files(ROOT))
    assert count > 0, "no citation found at all: the scanner is broken (methods.md cites itself)"
    assert not bad, "citations that lead nowhere:\n" + "\n".join(bad)


def test_nothing_cites_the_outside_design_documents():
    hits = outside_references(ROOT, repository_files(ROOT))
    assert not hits, (
        f"{len(hits)} places still cite {OLD_METHODS}, {OLD_RESULTS} or {OUTSIDE} "
        "(rewrite them to docs/methods.md):\n" + "\n".join(hits)
    )


def test_methods_doc_keeps_the_spec_numbering():
    a = anchors((ROOT / DOCS["methods"]).read_text(encoding="utf-8"))
    sections = {"0.1", "0.2", "1.1", "1.2", "1.3", "1.4", "3", "4"}
    sections |= {f"2.{i}" for i in range(1, 15)}
    sections |= {"P1.1", "P1.6", "P2.0", "P2.6"}
    assert sections <= a.sections, sorted(sections - a.sections)
    assert a.lettered["2.14"] == set("abcdefghijk")
    assert a.numbered["4"] == {str(i) for i in range(1, 9)}
    assert a.numbered["1.2"] == {"1", "2", "3"}
    assert a.lettered["P1.6"] == {"i", "ii", "iii", "iv", "v"}
    assert a.lettered["P2.0"] == {"a", "b"}


# --- the resolver on a hand-made document -------------------------------------------------------

SAMPLE = """# A spec
(a) before any numbered heading: not an item
## 1 Definitions
### 1.2 Counting
**1.2.1** dense
**1.2.3** exact
### 2.14 A method
**(a) First.** text
- **(g)** the trap
(k) plain
```
## 2.15 inside a code fence, not a heading
```
## 4 Decisions
**4.1** one
**4.7** seven
## Notes
(z) under an unnumbered heading: not an item of section 4
### P1.6 Checks
**(v)** four entries
### P2.0 Setups
**(b)** the noise
"""

M = DOCS["methods"]


@pytest.fixture
def sample() -> Anchors:
    return anchors(SAMPLE)


@pytest.mark.parametrize(
    "cited",
    [
        "2.14",
        "section 4",
        "2.14(g)",
        "2.14(a, g, k)",
        "1.2 item 3",
        "1.2.1",
        "4.7",
        "4 item 7",
        "P1.6 (v)",
        "P2.0 pitfall b",
        "1.2, 2.14(g)",
        "2.14(k) / 4.1",
    ],
)
def test_resolver_accepts_existing_places(sample, cited):
    found = find_citations(f"see {M} {cited}: done")
    assert found, cited
    assert [problem(c, sample) for c in found] == [None] * len(found)


@pytest.mark.parametrize(
    "cited, why",
    [
        ("2.15", "no section 2.15"),
        ("2.14(z)", "section 2.14 has no item (z)"),
        ("2.14(a, z)", "section 2.14 has no item (z)"),
        ("1.2 item 2", "section 1.2 has no item 2"),
        ("4.9", "no section 4.9"),
        ("4 item 9", "section 4 has no item 9"),
        ("3", "no section 3"),
        ("P1.7", "no section P1.7"),
        ("P1.6 (vi)", "section P1.6 has no item (vi)"),
        ("P2.0 pitfall a", "section P2.0 has no item (a)"),
        ("1.2, 2.15", "no section 2.15"),
        ("4.1 / 4.8", "no section 4.8"),
    ],
)
def test_resolver_rejects_missing_places(sample, cited, why):
    problems = [problem(c, sample) for c in find_citations(f"see {M} {cited}: done")]
    assert why in problems, problems


def test_citation_grammar_edges():
    text = f"x\n({M} 2.14(e, h)).\n{M}\n2.3 [DECISION]; {M} 2.3, 3 layers; {M} 2.10 (coupled)\n"
    got = [(c.line, c.section, c.letters, c.number) for c in find_citations(text)]
    assert got == [
        (2, "2.14", ("e", "h"), None),
        (3, "2.3", (), None),  # the path and the number on different lines (a wrapped docstring)
        (4, "2.3", (), None),  # ", 3 layers" is prose, not a second citation
        (4, "2.10", (), None),  # "(coupled)" is not an item
    ]
    assert [c.section for c in find_citations(f"{M} P2.0 pitfall b")] == ["P2.0"]
    assert find_citations(f"{OLD_METHODS} 4 item 7") == []  # the outside documents: not citations
    assert find_citations(f"{M} has no number here") == []


def test_failures_name_file_and_line(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "methods.md").write_text(SAMPLE)
    code = tmp_path / "harness" / "x.py"
    code.parent.mkdir()
    code.write_text(f'"""Doc.\n\nFine: {M} 2.14(g).\nBroken: {M} 2.15 and {M} 1.2,\n2.14(z)."""\n')
    count, bad = unresolved_citations(tmp_path, scanned_files(tmp_path))
    assert count == 4
    assert bad == [
        f"harness/x.py:4: {M} 2.15: no section 2.15",
        f"harness/x.py:5: {M} 2.14(z): section 2.14 has no item (z)",  # the list's second entry
    ]
    (tmp_path / "docs" / "methods.md").unlink()  # a missing document resolves nothing
    _, bad = unresolved_citations(tmp_path, scanned_files(tmp_path))
    assert len(bad) == 4


def test_outside_references_are_listed_with_their_place(tmp_path):
    files = {
        "baselines/a.py": f"# see {OLD_METHODS} 2.3\nok\n",
        "README.md": f"ok\n{OLD_RESULTS} 1.6 and {OUTSIDE}/design\n",
        "results/quick/runs.jsonl": f'{{"source": "x: {OUTSIDE}/data/hapt"}}\n',
        "results/other.jsonl": f'{{"spec": "{OUTSIDE}/design/x"}}\n',
        "reports/fig.png": b"\x89PNG\r\n\x1a\n\xff\xfe",
        "docs/clean.md": "nothing here\n",
    }
    for rel, body in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body if isinstance(body, bytes) else body.encode())
    hits = outside_references(tmp_path, repository_files(tmp_path))
    assert sorted(hits) == sorted(
        [
            f"baselines/a.py:1: {OLD_METHODS}",
            f"README.md:2: {OLD_RESULTS}",
            f"README.md:2: {OUTSIDE}",
            f"results/other.jsonl:1: {OUTSIDE}",
        ]
    )
