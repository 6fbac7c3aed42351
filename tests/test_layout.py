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

from harness.components.registry import METHODS, TASKS

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
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def module_map(text: str) -> dict[str, str]:
    """``docs/architecture.md``'s module map: module path -> what it owns.

    The items ``- `NAME.py`: WHAT`` under the headings ``### `FOLDER/``` of "Module map".
    """
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    out, folder = {}, None
    for line in section.splitlines():
        if m := re.match(r"^### `([\w/]+/)`$", line):
            folder = m.group(1)
        elif (m := re.match(r"^- `([\w.]+\.py)`: (.+)$", line)) and folder:
            out[folder + m.group(1)] = m.group(2)
    return out


def test_every_module_of_harness_is_on_the_module_map_and_the_map_names_only_modules():
    mapped = module_map(ARCHITECTURE.read_text())
    modules = {p.relative_to(ROOT).as_posix() for p in HARNESS.rglob("*.py")}
    assert not sorted(modules - mapped.keys()), "modules missing from the module map"
    assert not sorted(mapped.keys() - modules), "the module map names modules that do not exist"
    assert all(len(what.split()) >= 2 for what in mapped.values()), "say what each one owns"


def test_the_module_map_is_read_from_the_document():
    text = "## Module map\n\n### `harness/x/`\n- `a.py`: the a of x\n- not an item\n\n## Next\n"
    assert module_map(text + "### `harness/y/`\n- `b.py`: not this one") == {
        "harness/x/a.py": "the a of x"
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
