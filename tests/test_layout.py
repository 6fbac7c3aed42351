"""The layout rules that keep the machinery generic.

``harness/`` knows no method or task by name: it looks them up in the registry, and what a
measurement needs from a method is a hook the method implements. A registry key written anywhere
under ``harness/`` (code, comments, docstrings, help texts, data files) is a method or task the
machinery has been taught about by hand, and the next method added would not get the same
treatment.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.registry import METHODS, TASKS

HARNESS = Path(__file__).resolve().parent.parent / "harness"


def key_pattern(keys: list[str]) -> re.Pattern[str]:
    """Whole-token, case-sensitive matches of registry keys.

    A key inside a longer kebab- or snake-case token (``sa-rnn`` does not name ``rnn``) does not
    count, nor does a torch op name such as ``aten::gru`` (torch's op, not the registered method).
    """
    alternatives = "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))
    return re.compile(rf"(?<![\w\-])(?<!::)({alternatives})(?![\w\-])")


def named_keys(root: Path, keys: list[str]) -> list[str]:
    """``path:line: key`` for every registry key found in the text files under ``root``."""
    pattern = key_pattern(keys)
    hits = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            hits += [f"{path}:{number}: {m.group(1)}" for m in pattern.finditer(line)]
    return hits


def test_harness_names_no_registered_method_or_task():
    keys = METHODS.names() + TASKS.names()
    assert len(keys) > 10
    assert named_keys(HARNESS, keys) == []


def test_the_check_finds_a_key(tmp_path):
    (tmp_path / "m.py").write_text(
        'ref = "gru"  # the reference\nx = "sa-rnn"\nok = ("aten::gru", "gru_cell", "my-gru")\n'
    )
    (tmp_path / "d.toml").write_text("task = 'adding'\n")
    hits = named_keys(tmp_path, ["gru", "sa-rnn", "rnn", "adding"])
    assert [h.split(":", 1)[1] for h in hits] == ["1: adding", "1: gru", "2: sa-rnn"]


# --- the shape of the library -----------------------------------------------------------------

ROOT = HARNESS.parent
MAX_LINES = 500
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def long_module_exceptions(text: str) -> dict[str, str]:
    """The modules ``docs/architecture.md`` lets run over ``MAX_LINES``, with the reason given.

    They are the items ``- `PATH`: REASON`` of its section "Modules over 500 lines".
    """
    section = text.split("## Modules over 500 lines", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^- `([^`]+)`: (.+)$", section, re.M))


def test_no_module_is_over_500_lines_unless_the_architecture_says_why():
    allowed = long_module_exceptions(ARCHITECTURE.read_text())
    long = {
        p.relative_to(ROOT).as_posix(): n
        for folder in ("harness", "baselines", "tasks")
        for p in (ROOT / folder).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    unexplained = {p: n for p, n in long.items() if p not in allowed}
    assert not unexplained, f"over {MAX_LINES} lines with no reason in {ARCHITECTURE.name}"
    assert not set(allowed) - set(long), "exceptions listed for modules that are short now"
    assert all(len(why.split()) >= 5 for why in allowed.values()), "give the reason"


def test_the_exceptions_are_read_from_the_document():
    text = "## Modules over 500 lines\n\n- `harness/x.py`: one table of forty entries, kept whole\n"
    assert long_module_exceptions(text + "\n## Next\n- `harness/y.py`: not this one at all") == {
        "harness/x.py": "one table of forty entries, kept whole"
    }


def test_nothing_below_the_command_line_imports_it():
    # the CLI parses, calls harness.api and prints; the library never reaches back up into it
    pattern = re.compile(
        r"^\s*(from harness\.cli\b|import harness\.cli\b|from harness import cli\b)"
    )
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in HARNESS.rglob("*.py")
        if "cli" not in p.relative_to(HARNESS).parts and p.name != "__main__.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.match(line)
    ]
    assert offenders == []
