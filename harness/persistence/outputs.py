"""Where a command may write: never over a records store, never over one of its own inputs.

Every generated file is written atomically through ``write_text`` / ``write_bytes``, after
``refuse_overwrite``; the commands also call it on every output path before any work starts.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from harness.errors import HarnessError, WriteFailed
from harness.persistence.files import check_writable, write_atomically  # noqa: F401  (re-exported)
from harness.persistence.store import CHECK_TARGET_BYTES, DEFAULT_FILE, store_path


def holds_records(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file with a record (usable or not) in its first MiB."""
    p = Path(path)
    try:
        if not p.is_file():
            return False
        with open(p, "rb") as f:
            data = f.read(CHECK_TARGET_BYTES)
    except OSError:
        return False
    for line in data.split(b"\n"):
        with contextlib.suppress(ValueError):  # a torn line, or the read cut it
            obj = json.loads(line) if line.strip().startswith(b"{") else None
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
    """HarnessError naming ``option`` when ``path`` holds records or is one of ``inputs``."""
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
    """Write a generated file atomically, its folder created (``refuse_overwrite``; WriteFailed)."""
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
    """``(leaderboard, folder)`` beside the records: ``DIR/LEADERBOARD.md``, or ``X.md``."""
    places = set()
    for store in map(store_path, sources):
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
    """Where ``harness run`` writes its leaderboard: ``--report``, else beside ``--out``."""
    return Path(report) if report else beside_records([out])[0]
