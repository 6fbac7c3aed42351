"""The records store: an append-only JSONL file of run records, its lock, claims and fallback.

One JSON line per finished run (``harness.persistence.records``). A line is written with a single
``write`` on a file opened for appending, under an exclusive lock, only when the run has finished: a
killed sweep loses at most the runs in flight and never corrupts what is already recorded.

- Reading checks every line (``harness.persistence.records.from_json``: the required keys, their
  types, strict JSON, a known ``schema`` version) and reports each unusable line with its line
  number; nothing is ever dropped from the file by reading. ``Store.repair`` moves unusable lines (a
  torn last line left by a killed writer or a full disk) to a side file, keeping every byte.
- A full disk does not lose a finished run: ``Store.append`` retries, then raises
  ``AppendError`` and the caller keeps the record in a fallback file (``save_unwritten``); a
  sweep then stops (``harness.persistence.claims.SweepStore``).
- Concurrent sweeps on one store split the work: a sweep claims each run (``Claims``, a side
  file ``<store>.claims``) under the store's lock just before starting it.
- ``SweepStore`` is a sweep's side of all that: claim just in time, append or fall back, release.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, RecordError, is_disk_full
from harness.persistence.files import (
    cache_dir,
    check_writable,
    explain,
    file_kind,
    write_atomically,
)
from harness.persistence.records import (
    REQUIRED,
    Legacy,
    NotJSON,
    RecordProblem,
    RunRecord,
    from_json,
    to_json,
)

DEFAULT_FILE = "runs.jsonl"
APPEND_RETRY_DELAYS_S = (0.5, 2.0, 5.0)  # waits before each retry of a failed append
_RETRYABLE = {errno.ENOSPC, errno.EDQUOT, errno.EINTR, errno.EAGAIN}
CHECK_TARGET_BYTES = 1 << 20  # how much of an existing --out file is read to tell if it is a store


class AppendError(RecordError):
    """A finished run's record could not be appended (after retries)."""

    def __init__(self, path: Path, error: OSError) -> None:
        self.path, self.error = path, error
        super().__init__(f"cannot append to {path}: {error.strerror or error}")


def store_path(out: str | os.PathLike) -> Path:
    """The JSONL file for ``--out``: a ``.jsonl`` path as given, else ``OUT/runs.jsonl``."""
    p = Path(out)
    return p if p.suffix == ".jsonl" else p / DEFAULT_FILE


def output_store_path(out: str | os.PathLike) -> Path:
    """``store_path`` for a store to write (``run --out``): a folder or a ``.jsonl`` file.

    Raises:
        RecordError: ``out`` names neither: an existing file that is not ``.jsonl``, or a
            device (``/dev/null``), pipe or socket.
    """
    p = Path(out)
    if p.suffix != ".jsonl" and p.exists() and not p.is_dir():
        raise RecordError(
            f"--out {out}: it is {file_kind(p)}, not a folder; give a folder (the records go to "
            f"its {DEFAULT_FILE}) or a .jsonl file"
        )
    return store_path(p)


@dataclass
class Line:
    """One line of a store as found on disk.

    Attributes:
        number: 1-based line number.
        raw: the bytes, with the newline that ends the line (none on a torn last line).
        record: the record, when the line is usable.
        problem: why the line is unusable (None when usable or blank).
    """

    number: int
    raw: bytes
    record: RunRecord | None = None
    problem: str | None = None


def parse_lines(data: bytes, complete: bool = True, legacy: Legacy | None = None) -> list[Line]:
    """Split a store's bytes into checked lines.

    Args:
        data: the file's bytes (or its beginning).
        complete: whether ``data`` is the whole file (a last line without a newline is then
            torn; otherwise it is just cut by the read and is left out).
        legacy: migrates the records read, as in ``Store``.

    Returns:
        Every line, blank ones included (with neither record nor problem).
    """
    out = []
    parts = data.split(b"\n")
    for n, part in enumerate(parts, 1):
        last = n == len(parts)
        if last and not (part and complete):  # nothing after the last newline, or cut by the read
            break
        raw = part if last else part + b"\n"
        line = Line(n, raw)
        out.append(line)
        if not part.strip():
            continue
        torn = " (the last line has no newline: a writer was killed or the disk filled)"
        try:
            line.record = from_json(part, legacy)
        except NotJSON as e:
            line.problem = str(e) + (torn if last else "")
        except RecordProblem as e:
            line.problem = str(e)
    return out


@dataclass
class Repair:
    """What ``Store.repair`` did.

    Attributes:
        kept: usable records left in the store.
        moved: ``(line number, problem)`` of each line moved out.
        side: the file the moved lines went to (None when nothing was moved).
    """

    kept: int
    moved: list[tuple[int, str]] = field(default_factory=list)
    side: Path | None = None


class Store:
    """An append-only JSONL file of run records.

    Args:
        path: the ``.jsonl`` file (created on first append with its parent directories).
        legacy: the declared legacy values of the config fields added since a record was written
            (``harness.components.config.legacy_values``, passed by the layer that knows the
            configs): read records are migrated with them (``harness.persistence.records.migrate``).
            None: read as written.
    """

    def __init__(self, path: str | os.PathLike, legacy: Legacy | None = None) -> None:
        self.path = Path(path)
        self.legacy = legacy

    @property
    def checkpoints_path(self) -> Path:
        """The folder beside it where its runs keep their checkpoints: ``STORE.checkpoints/``."""
        return self.path.with_name(self.path.name + ".checkpoints")

    @property
    def claims_path(self) -> Path:
        """The side file of the runs that sweeps have claimed (``Claims``)."""
        return self.path.with_name(self.path.name + ".claims")

    def check_writable(self, create: bool = True) -> None:
        """Create the directory and open the file for appending, or raise RecordError.

        A store is a regular file: a folder, a device (``/dev/null``), a pipe or a socket at its
        path is refused, and so is a path below a file.

        Args:
            create: create the folder and the (empty) file; without it the check leaves
                nothing behind (``harness.persistence.files.check_writable``).
        """
        if self.path.exists() and not self.path.is_file():
            raise RecordError(
                f"cannot write results to {self.path}: it is {file_kind(self.path)}, "
                "not a regular file"
            )
        if not create:
            try:
                check_writable(self.path)
            except HarnessError as e:
                msg = str(e).replace("cannot write", "cannot write results to", 1)
                raise RecordError(msg) from None
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            open(self.path, "a").close()
        except OSError as e:
            raise RecordError(
                f"cannot write results to {self.path}: {explain(self.path, e)}"
            ) from None

    def check_target(self) -> None:
        """Refuse an existing file that holds something other than records (an empty one is fine).

        Reads at most ``CHECK_TARGET_BYTES``: a store has a usable record among them.

        Raises:
            RecordError: the file has content and no line of it is a record.
        """
        try:
            with open(self.path, "rb") as f:
                data = f.read(CHECK_TARGET_BYTES + 1)
        except FileNotFoundError:
            return
        except OSError as e:
            raise RecordError(f"cannot read {self.path}: {e.strerror or e}") from None
        lines = parse_lines(data[:CHECK_TARGET_BYTES], complete=len(data) <= CHECK_TARGET_BYTES)
        if any(line.record for line in lines):
            return
        bad = next((line for line in lines if line.problem), None)
        if bad is None and len(data) > CHECK_TARGET_BYTES:
            bad = Line(1, b"", problem=f"no line ends in its first {CHECK_TARGET_BYTES} bytes")
        if bad is not None:
            raise RecordError(
                f"{self.path} is not a records store (line {bad.number}: {bad.problem}); "
                "give --out a new path or an existing records store"
            )

    @contextlib.contextmanager
    def locked(self) -> Iterator[int]:
        """Hold the store's exclusive lock; yields a descriptor open for appending.

        The lock is taken on the file that is at ``path`` once locked: a store replaced by
        ``repair`` meanwhile is locked again, so no record goes to the replaced file.
        """
        self.check_writable()
        while True:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def append(self, record: dict[str, Any]) -> None:
        """Append one finished run as one line, atomically with respect to other writers.

        The run's claim (``Claims``), if any, is dropped under the same lock. A write that fails
        for want of space is undone (the file is cut back to its size before it) and retried
        after ``APPEND_RETRY_DELAYS_S``.

        Raises:
            RecordError: the record lacks required keys.
            AppendError: the line could not be written, retries included.
        """
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            raise RecordError(f"record lacks required keys {missing}")
        data = (to_json(record) + "\n").encode()
        for delay in (*APPEND_RETRY_DELAYS_S, None):
            try:
                self._append_once(data, record["run_id"])
                return
            except OSError as e:
                if delay is None or e.errno not in _RETRYABLE:
                    raise AppendError(self.path, e) from None
                time.sleep(delay)

    def _append_once(self, data: bytes, run_id: str) -> None:
        with self.locked() as fd:
            size = os.fstat(fd).st_size
            if size:  # a line cut short by a killed writer must not swallow the next record
                with open(self.path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        data = b"\n" + data
            try:
                with _signals_deferred():  # Ctrl-C or SIGTERM cannot cut a line short
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # no torn line of ours is left behind
                raise
            with contextlib.suppress(OSError):
                drop_claims(self.claims_path, {run_id})

    def lines(self) -> list[Line]:
        """Every line of the file, checked (``parse_lines``); empty when there is no file."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise RecordError(f"cannot read {self.path}: {e.strerror or e}") from None
        return parse_lines(data, legacy=self.legacy)

    def read(self) -> tuple[list[RunRecord], list[str]]:
        """All usable records in file order, and one message per unusable line."""
        records, problems = [], []
        for line in self.lines():
            if line.record is not None:
                records.append(line.record)
            elif line.problem:
                problems.append(
                    f"{self.path}:{line.number}: malformed record skipped ({line.problem})"
                )
        return records, problems

    def repair(self) -> Repair:
        """Move every unusable line to a side file ``<store>.rejected-<UTC time>``.

        Under the store's lock, the usable and blank lines are written to a temporary file that
        then replaces the store, after the side file is safely on disk: the side file and the new
        store hold every byte of the old one (a torn last line gets a newline in the side file).

        Returns:
            What was kept and moved, and where to.
        """
        with self.locked():
            lines = self.lines()
            bad = [line for line in lines if line.problem]
            res = Repair(kept=sum(line.record is not None for line in lines))
            if not bad:
                return res
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            side = self.path.with_name(f"{self.path.name}.rejected-{stamp}")
            n = 1
            while side.exists():
                n += 1
                side = self.path.with_name(f"{self.path.name}.rejected-{stamp}-{n}")
            rejected = b"".join(
                line.raw if line.raw.endswith(b"\n") else line.raw + b"\n" for line in bad
            )
            kept = b"".join(line.raw for line in lines if not line.problem)
            try:
                write_atomically(side, rejected, None, durable=True)
                write_atomically(self.path, kept, self.path.stat().st_mode, durable=True)
            except OSError as e:
                raise RecordError(f"cannot repair {self.path}: {e.strerror or e}") from None
            res.moved = [(line.number, line.problem or "") for line in bad]
            res.side = side
            return res


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back (in this thread) until the block is done."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    except (AttributeError, OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# --- the claims side file (``harness.persistence.claims``), read and written under the store's lock
# --------


def read_claims(path: Path) -> dict[str, dict[str, Any]]:
    """The claims in a store's claims file, by run id (unreadable lines are skipped)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return {}
    claims = {}
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            c = json.loads(line)
            if isinstance(c, dict) and isinstance(c.get("run_id"), str):
                claims[c["run_id"]] = c
    return claims


def write_claims(path: Path, claims: dict[str, dict[str, Any]]) -> None:
    """Replace the claims file (durably); no claim left removes it.

    On a full disk, fewer claims than the file holds are written over it in place (which needs
    no new space), so that a sweep a full disk stopped still releases its claims.
    """
    if not claims:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    data = "".join(json.dumps(c, sort_keys=True) + "\n" for c in claims.values()).encode()
    try:
        write_atomically(path, data, None, durable=True)
    except OSError as e:
        if not is_disk_full(e) or not path.is_file() or path.stat().st_size < len(data):
            raise
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())


def drop_claims(path: Path, run_ids: set[str]) -> None:
    """Remove the claims on ``run_ids`` (call under the store's lock)."""
    if not path.exists():
        return
    claims = read_claims(path)
    if run_ids & claims.keys():
        write_claims(path, {k: c for k, c in claims.items() if k not in run_ids})


# --- records that could not be written -----------------------------------------------------------


def save_unwritten(record: dict[str, Any], store: Path, into: Path | None = None) -> Path:
    """Keep a record that could not go to ``store`` in a fallback file; returns the file.

    The file (``<store name>-<UTC time>-<pid>.jsonl`` in ``unwritten/`` of the harness's cache,
    ``harness.persistence.files.cache_dir()``, else in the temp directory) is a store itself:
    append it to the real one once there is room.

    Args:
        record: the finished run's record.
        store: the store it was meant for (names the file).
        into: the fallback file of an earlier record of the same sweep, to append to.

    Raises:
        RecordError: no fallback location could be written either.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = f"{store.stem}-{stamp}-{os.getpid()}.jsonl"
    fallbacks = [cache_dir() / "unwritten" / name, Path(tempfile.gettempdir()) / name]
    line = to_json(record) + "\n"
    errors = []
    for path in [into] if into else fallbacks:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            return path
        except OSError as e:
            errors.append(f"{path}: {e.strerror or e}")
    raise RecordError(
        f"run {record.get('run_id')} lost: cannot keep it anywhere ({'; '.join(errors)})"
    )


def load(
    paths: Iterable[str | os.PathLike], legacy: Legacy | None = None
) -> tuple[list[RunRecord], list[str]]:
    """Records and problems from several stores (files or ``--out`` directories).

    ``legacy`` migrates what is read, as in ``Store``.
    """
    records, problems = [], []
    for p in paths:
        path = store_path(p)
        if not path.exists():
            raise RecordError(f"no records file at {path}")
        r, pr = Store(path, legacy).read()
        records += r
        problems += pr
    return records, problems
