"""Where datasets live (one folder per dataset in its published layout) and how files are opened.

A text file may be stored as ``NAME.gz``. A missing file raises ``MissingDataError``, an
unreadable one ``CorruptDataError``. Import these names from ``harness.data``.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from pathlib import Path

from harness.errors import DataError
from harness.persistence.files import cache_dir


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data root: ``data_dir``, else ``$HARNESS_DATA_DIR``, else the user cache directory."""
    root = data_dir or os.environ.get("HARNESS_DATA_DIR")
    return Path(root).expanduser() if root else cache_dir() / "data"


class MissingDataError(DataError):
    """A dataset file that is not where the harness looked."""


class CorruptDataError(DataError):
    """A dataset file that is present but cannot be read or parsed."""


class NotFetchableError(DataError):
    """A dataset ``harness data fetch`` may not download (e.g. its licence); says how to get it."""


def find_file(path: str | os.PathLike, source: str = "") -> Path:
    """``path`` or ``path.gz``, whichever exists; else a DataError naming both and the source."""
    p = Path(path)
    for cand in (p, p.with_name(p.name + ".gz")):
        if cand.is_file():
            return cand
    where = f" Get it from {source}." if source else ""
    raise MissingDataError(f"missing data file {p} (or {p.name}.gz).{where}")


def read_text(path: str | os.PathLike, source: str = "") -> str:
    """The whole text of a data file (``NAME`` or ``NAME.gz``); corrupt gzip is a DataError."""
    p = find_file(path, source)
    try:
        raw = gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")
    except OSError as e:
        raise DataError(f"cannot read data file {p}: {e}") from None
    try:
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
        raise CorruptDataError(f"corrupt data file {p}: {e}") from None
