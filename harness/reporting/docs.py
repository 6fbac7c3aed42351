"""Generated blocks of the docs: numbers that come from the records, filled by one command.

A block is a marker line naming its command, the command's stdout and an end line
(docs/reports.md, Numbers in the docs)::

    <!-- generated: harness report STORE --paper --task TASK --print main -->
    (the command's stdout)
    <!-- end -->
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.persistence.outputs import write_text

START = re.compile(r"<!-- generated:(.*?)(-->)?\s*$")
END = "<!-- end -->"
# what a block may run, with --print: it prints, writes nothing
COMMANDS = (("harness", "report"), ("harness", "bench"))

# run(argv after "harness") -> (exit code, stdout, stderr)
Runner = Callable[[list[str]], tuple[int, str, str]]


@dataclass(frozen=True)
class Block:
    """One generated block: its file, marker line (1-based), command and body's line span."""

    path: Path
    line: int
    command: str
    body: tuple[int, int]

    def where(self) -> str:
        """``FILE:LINE: `COMMAND```, how messages name the block."""
        return f"{self.path}:{self.line}: `{self.command}`"


def blocks(path: Path, lines: Sequence[str]) -> list[Block]:
    """The generated blocks of a file's ``lines``; HarnessError for a malformed marker or end."""
    found, start = [], None
    for i, line in enumerate(lines):
        if m := START.match(line):
            if start is not None:
                raise HarnessError(f"{path}:{start[0] + 1}: generated block without '{END}'")
            if not m.group(2) or not m.group(1).strip():
                raise HarnessError(
                    f"{path}:{i + 1}: a block marker is '<!-- generated: harness ... -->' on "
                    "one line"
                )
            start = (i, m.group(1).strip())
        elif line.rstrip() == END:
            if start is None:
                raise HarnessError(f"{path}:{i + 1}: '{END}' outside a generated block")
            found.append(Block(path, start[0] + 1, start[1], (start[0] + 1, i)))
            start = None
    if start is not None:
        raise HarnessError(f"{path}:{start[0] + 1}: generated block without '{END}'")
    return found


def body(block: Block, run: Runner, newline: str = "\n") -> list[str]:
    """The lines of ``block``'s body: its command's stdout, between two empty lines.

    Each line ends with ``newline``. HarnessError where the command is not ``harness report|bench
    ... --print PART``, fails, or warns.
    """
    try:
        argv = shlex.split(block.command)
    except ValueError as e:
        raise HarnessError(f"{block.where()}: cannot split it into words ({e})") from None
    if tuple(argv[:2]) not in COMMANDS or "--print" not in argv:
        raise HarnessError(
            f"{block.where()}: unknown block command; a block runs 'harness report ... --print "
            "PART' or 'harness bench --from STORE ... --print PART', which print Markdown and "
            "write nothing"
        )
    code, out, err = run(argv[1:])
    said = [s for s in err.splitlines() if s.strip()]
    if code != 0:
        last = said[-1] if said else "nothing on stderr"
        raise HarnessError(f"{block.where()} failed (exit {code}): {last.removeprefix('error: ')}")
    if said:  # a warning (a filter that matches no record): the body would not be what it says
        raise HarnessError(f"{block.where()}: {said[0]} (a block's command must run clean)")
    return [s + newline for s in ("", *out.rstrip("\n").splitlines(), "")]


def fill(paths: Sequence[str | Path], run: Runner, check: bool = False) -> list[Block]:
    """Regenerate every block of ``paths``; with ``check``, write nothing.

    Every body is computed before any file is written, so a bad block leaves every file as it was.
    ``run`` runs a command line (the words after ``harness``): (exit code, stdout, stderr). Returns
    the blocks whose body differed.
    """
    files = []
    for p in map(Path, paths):
        try:
            raw = p.read_bytes().decode("utf-8")  # the line endings as they are (CRLF stays)
        except (OSError, UnicodeDecodeError) as e:
            raise HarnessError(f"cannot read {p}: {getattr(e, 'strerror', None) or e}") from None
        lines = raw.splitlines(keepends=True)
        files.append((p, lines, blocks(p, lines)))
    stale, changed = [], []
    for p, lines, found in files:
        out, at = [], 0
        for b in found:
            text = body(b, run, "\r\n" if lines[b.line - 1].endswith("\r\n") else "\n")
            if lines[b.body[0] : b.body[1]] != text:
                stale.append(b)
            out += lines[at : b.body[0]] + text
            at = b.body[1]
        if out + lines[at:] != lines:
            changed.append((p, "".join(out + lines[at:])))
    for p, text in [] if check else changed:
        write_text(p, text)
    return stale
