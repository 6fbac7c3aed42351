"""Errors the CLI turns into one line and exit code 2, never a traceback; failures in one line.

Allocation failures (``out_of_memory``), a run's (``failure_reason``), a write's (``WriteFailed``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

FULL_DISK = {errno.ENOSPC: "ENOSPC", errno.EDQUOT: "EDQUOT"}  # the errors of a full filesystem
# A finished run's record holds this key (``write_failure``'s line) when one of its optional
# writes (a checkpoint, TensorBoard events) met a full disk; the sweep pops it and stops.
DISK_FULL_NOTE = "_disk_full"


class HarnessError(Exception):
    """Bad input or a missing resource: shown to the user as one line, exit code 2."""


class ConfigError(HarnessError):
    """An unknown, ill-typed or out-of-range configuration value."""


class DataError(HarnessError):
    """A dataset file that is missing, unreadable or corrupt."""


class RecordError(HarnessError):
    """A results store that cannot be read or written."""


class WriteFailed(HarnessError):
    """A write failed (``write_failure``: what, why); ``dropped``: the runs it left unstarted."""

    def __init__(self, path: str | os.PathLike, error: OSError, dropped: list | tuple = ()) -> None:
        self.path, self.error, self.dropped = Path(path), error, list(dropped)
        super().__init__(write_failure(path, error))


def is_disk_full(e: BaseException) -> bool:
    """Whether ``e`` says the filesystem is full (``ENOSPC``) or the quota used up (``EDQUOT``)."""
    return isinstance(e, OSError) and e.errno in FULL_DISK


def mount_point(path: str | os.PathLike) -> Path:
    """The mount point of the filesystem ``path`` is (or would be) on."""
    p = Path(os.path.abspath(path))
    with contextlib.suppress(OSError):
        while not p.exists() and p != p.parent:
            p = p.parent
        dev = p.stat().st_dev
        while p != p.parent and p.parent.stat().st_dev == dev:
            p = p.parent
    return p


def write_failure(path: str | os.PathLike, error: OSError) -> str:
    """One line: ``path`` could not be written, and why; a full filesystem is named."""
    if is_disk_full(error):
        why = f"{FULL_DISK[error.errno]}: {error.strerror or os.strerror(error.errno)}"
        return f"no space on the filesystem at {mount_point(path)} ({why}) writing {path}"
    return f"cannot write {path}: {error.strerror or error}"


class DivergedError(RuntimeError):
    """A non-finite gradient norm: the run is recorded failed, with its epochs' ``history``."""

    # the type names the event that ends the run (harness.training.events)
    event = "non_finite_gradient"

    def __init__(
        self, message: str, history: list[dict] | None = None, train_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.history, self.train_s = history or [], train_s


class NonFiniteLoss(DivergedError):
    """Training produced a non-finite loss (see ``DivergedError``)."""

    event = "non_finite_loss"


class Interrupted(KeyboardInterrupt):
    """A sweep stopped by a signal ``signum`` (SIGTERM, ...): exit code 128 + its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def allocation_failure(e: BaseException) -> str | None:
    """Whether ``e`` is a failed allocation: ``"; it asked for N GiB"`` (or ``""``), else None."""
    torch = sys.modules.get("torch")  # without torch imported, no torch error was raised
    typed = (MemoryError, torch.OutOfMemoryError) if torch else MemoryError
    text = str(e)
    if not isinstance(e, typed) and not (isinstance(e, RuntimeError) and "CPUAllocator" in text):
        return None
    asked = re.search(r"allocate (\d+) bytes", text)
    return f"; it asked for {int(asked.group(1)) / 2**30:,.1f} GiB" if asked else ""


@contextlib.contextmanager
def out_of_memory(what: str, error: type[HarnessError] = HarnessError) -> Iterator[None]:
    """An allocation failure inside the block: ``error(WHAT + "; it asked for N GiB")``."""
    try:
        yield
    except (MemoryError, RuntimeError) as e:
        need = allocation_failure(e)
        if need is None:
            raise
        raise error(f"{what}{need}") from None


def failure_reason(e: BaseException, where: bool = True) -> str:
    """One line saying why a run (a plugin import, a submission) failed, and where.

    A syntax error names the bad source's place; ``where=False``: no place (an outside program's
    refusal); an allocation failure starts with ``out of memory: ``.
    """
    text = " ".join(str(e).split())  # one line, however the message was laid out
    if len(text) > 500:
        text = text[:500] + " ..."
    place = ""
    if where and isinstance(e, SyntaxError) and e.filename:  # the bad source, not the parser
        place = f" ({e.filename}:{e.lineno})"
    elif where and e.__traceback__ is not None:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        place = f" ({tb.filename}:{tb.lineno})"
    head = "out of memory: " if allocation_failure(e) is not None else ""
    return f"{head}{type(e).__name__}: {text}{place}"
