"""Generated blocks of the docs: numbers that come from the records, filled by one command.

A block is a marker line naming the command that makes it, the command's output, and an end
line, each marker at the start of its line::

    <!-- generated: harness report STORE --paper --task TASK --print main -->
    (the command's stdout)
    <!-- end -->

``fill`` runs each block's command (in-process, through the ``run`` it is given: the command
line's) and rewrites the block's body with its stdout, every other byte of the file kept (its
line endings too); with ``check`` it writes nothing and returns the blocks whose body differs.
A block's command is ``harness report ... --print PART`` (``harness.reporting.reports.
print_parts``: the records' tables) or ``harness bench --from STORE ... --print PART``
(``harness.bench.excerpts``: the timing and speedup reports' data), each of which writes nothing
and prints Markdown that names no time, commit of the renderer or absolute path, so that a body
changes only with the records.
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
    """One generated block: where it is, its command, and its body's line span.

    Attributes:
        path: the Markdown file.
        line: the marker's line number (1-based).
        command: the command line the marker names.
        body: the indices (0-based, end excluded) of the body's lines in the file.
    """

    path: Path
    line: int
    command: str
    body: tuple[int, int]

    def where(self) -> str:
        """``FILE:LINE: `COMMAND```, how messages name the block."""
        return f"{self.path}:{self.line}: `{self.command}`"


def blocks(path: Path, lines: Sequence[str]) -> list[Block]:
    """The generated blocks of a file's ``lines``.

    Raises:
        HarnessError: a marker without ``-->`` or without a command, a block without its end
            line (or with another marker inside it), an end line outside any block.
    """
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

    Each line ends with ``newline`` (the marker's line ending: a file keeps its own).

    Raises:
        HarnessError: the command is not ``harness report|bench ... --print PART``, cannot be
            split into words, fails (with its last line on stderr) or warns (with its first).
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

    Every file's blocks are found before any command runs, and every body computed before any
    file is written, so a bad block leaves every file as it was.

    Args:
        paths: Markdown files.
        run: runs a command line (the words after ``harness``): (exit code, stdout, stderr).
        check: only compare.

    Returns:
        The blocks whose body differed from their command's output (rewritten unless
        ``check``).

    Raises:
        HarnessError: a file cannot be read, a block is malformed or its command fails.
    """
    files = []
    for p in map(Path, paths):
        try:
            raw = p.read_bytes().decode("utf-8")  # the line endings as they are (CRLF stays)
        except (OSError, UnicodeDecodeError) as e:
            raise HarnessError(f"cannot read {p}: {getattr(e, 'strerror', None) or e}") from None
        lines = raw.splitlines(keepends=True)
        files.append((p, lines, blocks(p, lines)))
    stale, new = [], []
    for p, lines, found in files:
        out, at = [], 0
        for b in found:
            text = body(b, run, "\r\n" if lines[b.line - 1].endswith("\r\n") else "\n")
            if lines[b.body[0] : b.body[1]] != text:
                stale.append(b)
            out += lines[at : b.body[0]] + text
            at = b.body[1]
        new.append((p, lines, out + lines[at:]))
    if not check:
        for p, lines, out in new:
            if out != lines:
                write_text(p, "".join(out))
    return stale
