"""What a path is and whether it can be written, in words; writing a file whole or not at all."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from harness.errors import HarnessError


def cache_dir() -> Path:
    """The per-user cache directory of the harness: derived data, sums, unwritten records."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "condrnn-harness"


def file_kind(path: str | os.PathLike) -> str:
    """What an existing path is, for messages: ``a folder``, ``a character device``, ..."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "unreadable"
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def explain(path: str | os.PathLike, error: OSError) -> str:
    """Why ``path`` could not be created or written, in words (a parent that is a file named)."""
    p = Path(path)
    if isinstance(error, (FileExistsError, NotADirectoryError)):
        for parent in [*reversed(p.parents), p]:
            if parent.exists() and not parent.is_dir():
                return f"{parent} is a file, not a folder"
    if p.exists() and not p.is_file() and not p.is_dir():
        return f"it is {file_kind(p)}, not a regular file"
    return error.strerror or str(error)


def check_writable(path: str | os.PathLike, directory: bool = False) -> None:
    """HarnessError (one line) before the work, not after it, when ``path`` cannot be written.

    A temporary file is made in the folder (``path`` itself when ``directory``), an existing file
    opened for appending; any other kind of file is refused unopened (a named pipe would block).
    Folders this check created are removed again: it leaves nothing behind.
    """
    p = Path(path)
    folder = p if directory else p.parent
    created = [f for f in (folder, *folder.parents) if not f.exists()]  # deepest first
    try:
        if p.exists() and not (p.is_dir() if directory else p.is_file()):
            raise HarnessError(f"cannot write {p}: it is {file_kind(p)}, not a regular file")
        folder.mkdir(parents=True, exist_ok=True)
        if not directory and p.exists():
            open(p, "a").close()  # opened for appending: what a write needs
        else:
            tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise HarnessError(f"cannot write {p}: {explain(p, e)}") from None
    finally:
        for f in created:
            with contextlib.suppress(OSError):
                f.rmdir()


def write_atomically(path: Path, data: bytes, mode: int | None, durable: bool = False) -> None:
    """Write ``data`` beside ``path``, rename it over (``durable``: fsync the file and folder)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        with contextlib.suppress(OSError):  # the rename itself reaches the disk
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
