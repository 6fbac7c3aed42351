"""Where a command may write: never over a records store, never over one of its own inputs.

Every generated file (leaderboards, paper tables, figures, drift and timing reports) is written
through ``write_text`` / ``write_bytes`` here (atomically: a temporary file renamed over the
target) after ``refuse_overwrite`` has checked the target; the commands also call
``refuse_overwrite`` on every output path they know before any work starts, so a bad path costs
nothing and changes nothing.

A file *holds records* when one of the lines in its first MiB is a JSON object with ``schema``
and ``run_id`` (a run or timing record, usable or not: a store with one malformed line is still a
store). Such a file is written only by ``harness.persistence.store.Store.append``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from harness.errors import HarnessError, WriteFailed
from harness.persistence.files import check_writable, write_atomically  # noqa: F401  (re-exported)
from harness.persistence.store import DEFAULT_FILE, store_path

SNIFF_BYTES = 1 << 20  # how much of an existing file is read to tell whether it holds records


def holds_records(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file with a run (or timing) record among its first lines."""
    p = Path(path)
    try:
        if not p.is_file():
            return False
        with open(p, "rb") as f:
            data = f.read(SNIFF_BYTES)
    except OSError:
        return False
    for line in data.split(b"\n"):
        if not line.strip().startswith(b"{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:  # a torn line, or the read cut it
            continue
        if isinstance(obj, dict) and "schema" in obj and "run_id" in obj:
            return True
    return False


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file: the same resolved path, or (both existing) one inode."""
    pa, pb = Path(a), Path(b)
    with contextlib.suppress(OSError):
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    return pa.resolve(strict=False) == pb.resolve(strict=False)


def refuse_overwrite(
    path: str | os.PathLike,
    option: str,
    inputs: Iterable[tuple[str, str | os.PathLike]] = (),
) -> None:
    """Refuse an output path that is one of the command's inputs or a file holding records.

    Args:
        path: the file the command would write.
        option: how the user named it (``--report``, ``--markdown``), for the message.
        inputs: ``(what, path)`` of every file the command reads or appends to (``--out``
            store, ``REFERENCE``, ``records``).

    Raises:
        HarnessError: one line naming the option, the path and why.
    """
    for what, source in inputs:
        if same_file(path, source):
            raise HarnessError(
                f"{option} {path} is {what} of this command: refusing to write over it; "
                "give another path"
            )
    if holds_records(path):
        raise HarnessError(
            f"{option} {path} holds run records (a records store): refusing to write over it; "
            "give another path"
        )


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write a generated file atomically (a temporary file beside it, renamed over it).

    A reader never sees half a file, and an interrupted write leaves the old one. The folder is
    created.

    Raises:
        HarnessError: the target holds records (``refuse_overwrite``).
        WriteFailed: an OSError (one line; a full disk names its filesystem).
    """
    p = Path(path)
    refuse_overwrite(p, "output")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        # the mode the file had, else what open() would give
        write_atomically(p, data, p.stat().st_mode if p.exists() else 0o666 & ~_umask())
    except OSError as e:
        raise WriteFailed(p, e) from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    """``write_bytes`` of UTF-8 text."""
    write_bytes(path, text.encode("utf-8"))


BOARD_FILE = "LEADERBOARD.md"  # a store's leaderboard, beside it


def beside_records(sources: Iterable[str | os.PathLike]) -> tuple[Path, Path]:
    """Where the reports of records go by default: next to them, never elsewhere.

    A store ``DIR`` or ``DIR/runs.jsonl`` gives the leaderboard ``DIR/LEADERBOARD.md``; a store
    ``X.jsonl`` of another name gives ``X.md`` beside it. The folder (the second value) is the
    one holding the records (the paper report goes to its ``paper/``).

    Raises:
        HarnessError: the sources lie in different places (the caller names the output).
    """
    places = set()
    for source in sources:
        store = store_path(source)
        own = store.name == DEFAULT_FILE
        board = store.parent / BOARD_FILE if own else store.with_suffix(".md")
        places.add((board, store.parent))
    if len(places) != 1:
        where = ", ".join(sorted(str(b) for b, _ in places)) or "none"
        raise HarnessError(
            f"the records given would put their report in several places ({where}); name the "
            "output (--out FILE, or --out-dir DIR with --paper)"
        )
    return places.pop()


def leaderboard_path(out: str, report: str | None) -> Path:
    """Where ``harness run`` writes its leaderboard: ``--report``, else next to ``--out``.

    ``--out DIR`` (records in ``DIR/runs.jsonl``) gives ``DIR/LEADERBOARD.md``; ``--out X.jsonl``
    gives ``X.md`` beside it (``beside_records``, as ``harness report``).
    """
    return Path(report) if report else beside_records([out])[0]
