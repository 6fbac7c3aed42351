"""The records store: an append-only JSONL file of run records, its lock, claims and fallback.

Its guarantees (one locked, durable write per finished run; reading drops nothing; a full disk
loses no record) are in docs/architecture.md ("The records store"), its two modes (``lock``,
``files``: a lock file and a record file per run, merged in order) in docs/clusters.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import count
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
STORE_MODES = ("lock", "files")
LOCK_STALE_S = 60.0  # a lock file this old, of a holder on another host, was left by a crash
# flock errors that mean the filesystem has no (working) flock: Lustre without its mount option
NO_FLOCK = {errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL}
HOST = socket.gethostname()


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
    """``store_path`` for a store to write (``run --out``); RecordError for any other file."""
    p = Path(out)
    if p.suffix != ".jsonl" and p.exists() and not p.is_dir():
        raise RecordError(
            f"--out {out}: it is {file_kind(p)}, not a folder; give a folder (the records go to "
            f"its {DEFAULT_FILE}) or a .jsonl file"
        )
    return store_path(p)


@dataclass
class Line:
    """One line of a store: number (from 1), bytes (with the newline), record or problem."""

    number: int
    raw: bytes
    record: RunRecord | None = None
    problem: str | None = None


def parse_lines(data: bytes, complete: bool = True, legacy: Legacy | None = None) -> list[Line]:
    """Every line of a store's bytes, checked, blank ones included.

    ``complete``: ``data`` is the whole file (a last line without a newline is torn; otherwise
    it was cut by the read and is left out). ``legacy`` migrates the records, as in ``Store``.
    """
    out = []
    parts = data.split(b"\n")
    for n, part in enumerate(parts, 1):
        last = n == len(parts)
        if last and not (part and complete):  # nothing after the last newline, or cut by the read
            break
        line = Line(n, part if last else part + b"\n")
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
    """What ``Store.repair`` did: records kept, ``(line, problem)`` moved, the side file."""

    kept: int
    moved: list[tuple[int, str]] = field(default_factory=list)
    side: Path | None = None


class Store:
    """An append-only JSONL file of records (``legacy`` migrates reads; ``mode``: lock, files)."""

    def __init__(
        self, path: str | os.PathLike, legacy: Legacy | None = None, mode: str | None = None
    ) -> None:
        self.path = Path(path)
        self.legacy = legacy
        self._mode = mode

    @property
    def mode(self) -> str:
        """``lock`` or ``files``: as given, else ``files`` where ``parts_path`` is a folder."""
        return self._mode or ("files" if self.parts_path.is_dir() else "lock")

    def _beside(self, suffix: str) -> Path:
        return self.path.with_name(self.path.name + suffix)

    @property
    def parts_path(self) -> Path:
        """The folder of the records not merged yet, one file each (``files`` mode)."""
        return self._beside(".parts")

    @property
    def checkpoints_path(self) -> Path:
        """The folder beside it where its runs keep their checkpoints: ``STORE.checkpoints/``."""
        return self._beside(".checkpoints")

    @property
    def claims_path(self) -> Path:
        """The side file of the runs that sweeps have claimed (``Claims``)."""
        return self._beside(".claims")

    def check_writable(self, create: bool = True) -> None:
        """Create the directory and open the file for appending, or raise RecordError.

        A store is a regular file (not a folder, device, pipe or socket, nor below a file).
        ``create=False``: check, leaving nothing behind.
        """
        if not create or (self.path.exists() and not self.path.is_file()):
            try:  # a folder, device, pipe or socket is refused unopened
                check_writable(self.path)
            except HarnessError as e:
                msg = str(e).replace("cannot write", "cannot write results to", 1)
                raise RecordError(msg) from None
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            open(self.path, "a").close()
            if self._mode == "files":
                self.parts_path.mkdir(exist_ok=True)
        except OSError as e:
            raise RecordError(
                f"cannot write results to {self.path}: {explain(self.path, e)}"
            ) from None

    def check_target(self) -> None:
        """RecordError for an existing file with content and no record in its first MiB."""
        data = self._read(CHECK_TARGET_BYTES + 1)  # none: no file, nothing to check
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

        ``lock`` mode: ``flock`` on the file that is at ``path`` once locked (a store replaced by
        ``repair`` meanwhile is locked again). ``files`` mode: ``STORE.lock`` (``lock_file``).
        """
        self.check_writable()
        files = self.mode == "files"
        with lock_file(self._beside(".lock")) if files else contextlib.nullcontext():
            while True:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    if not files:
                        fcntl.flock(fd, fcntl.LOCK_EX)
                    with contextlib.suppress(FileNotFoundError):
                        if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                            break
                except BaseException:
                    os.close(fd)
                    raise
                os.close(fd)
            try:
                yield fd
            finally:
                if not files:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def check_lock(self) -> None:
        """RecordError (naming ``--store-mode files``) for ``lock`` mode where ``flock`` fails."""
        if self.mode != "lock":
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return  # check_writable names what is wrong with the path
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as e:
            if e.errno in NO_FLOCK:
                raise RecordError(
                    f"cannot lock {self.path}: its filesystem has no flock ({e.strerror or e}); "
                    "give --store-mode files (see docs/clusters.md)"
                ) from None
        finally:
            os.close(fd)

    def append(self, record: dict[str, Any]) -> None:
        """Append one finished run as one line, atomically with respect to other writers.

        The run's claim is dropped under the same lock. A write that fails for want of space is
        undone and retried after ``APPEND_RETRY_DELAYS_S``, then raises AppendError. ``files``
        mode: written to its own file (``write_part``), then merged (a failed merge leaves it).
        """
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            raise RecordError(f"record lacks required keys {missing}")
        files = self.mode == "files"
        for delay in (*APPEND_RETRY_DELAYS_S, None):
            try:
                if files:
                    write_part(self.parts_path, record)
                else:
                    with self.locked() as fd:
                        _write_line(self.path, fd, (to_json(record) + "\n").encode())
                        with contextlib.suppress(OSError):
                            drop_claims(self.claims_path, {record["run_id"]})
                break
            except OSError as e:
                if delay is None or e.errno not in _RETRYABLE:
                    raise AppendError(self.parts_path if files else self.path, e) from None
                time.sleep(delay)
        if files:
            with contextlib.suppress(OSError, HarnessError):
                self.merge()

    def parts(self) -> list[Path]:
        """The record files not merged yet, in the order they were written (their names)."""
        try:
            found = [
                p for p in self.parts_path.iterdir() if p.suffix == ".json" and p.name[0] != "."
            ]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(found, key=lambda p: p.name)  # ".NAME": a temporary file, left out

    def unmerged(self) -> tuple[list[tuple[Path, Line]], list[tuple[Path, str]]]:
        """The record files whose line the store lacks, and the unusable ones with why."""
        parts = self.parts()
        if not parts:
            return [], []
        have = set()
        with contextlib.suppress(FileNotFoundError):
            have = set(self.path.read_bytes().splitlines())
        good, bad = [], []
        for p in parts:
            with contextlib.suppress(FileNotFoundError):  # merged meanwhile
                data = p.read_bytes()
                lines = parse_lines(data.rstrip(b"\n") + b"\n", legacy=self.legacy)
                if len(lines) != 1 or lines[0].record is None:
                    why = lines[0].problem if len(lines) == 1 else "not one line"
                    bad.append((p, why or "empty"))
                elif data.rstrip(b"\n") not in have:
                    good.append((p, lines[0]))
        return good, bad

    def reject_parts(self) -> list[tuple[Path, Path, str]]:
        """Move each unusable record file beside the store: ``(file, where it went, why)`` each."""
        moved = []
        with self.locked():
            for part, why in self.unmerged()[1]:
                aside = self.path.with_name(f"{self.path.name}.rejected-{part.name}")
                try:
                    part.rename(aside)
                except OSError as e:
                    raise RecordError(f"cannot move {part}: {e.strerror or e}") from None
                moved.append((part, aside, why))
        return moved

    def merge(self) -> int:
        """Append the record files of ``parts_path`` to the store, in their order, each once.

        A file whose line the store holds already (a merge killed before removing it) is only
        removed; an unusable one is left. Returns how many records were appended.
        """
        if not self.parts():
            return 0
        merged, ids = 0, set()
        with self.locked() as fd:
            have = set(self.path.read_bytes().splitlines())
            for p in self.parts():
                try:
                    data = p.read_bytes()
                except FileNotFoundError:
                    continue
                lines = parse_lines(data)
                if len(lines) != 1 or lines[0].record is None:
                    continue
                line = data.rstrip(b"\n")
                if line not in have:
                    _write_line(self.path, fd, line + b"\n")
                    have.add(line)
                    merged += 1
                ids.add(lines[0].record["run_id"])
                p.unlink()
            with contextlib.suppress(OSError):
                drop_claims(self.claims_path, ids)
        return merged

    def lines(self) -> list[Line]:
        """Every line of the file, checked (``parse_lines``); empty when there is no file."""
        return parse_lines(self._read(), legacy=self.legacy)

    def _read(self, size: int = -1) -> bytes:
        """The first ``size`` bytes (-1: all); none without a file (RecordError: unreadable)."""
        try:
            with open(self.path, "rb") as f:
                return f.read(size)
        except FileNotFoundError:
            return b""
        except OSError as e:
            raise RecordError(f"cannot read {self.path}: {e.strerror or e}") from None

    def read(self) -> tuple[list[RunRecord], list[str]]:
        """All usable records in file order (unmerged files last), a message per unusable line."""
        lines = self.lines()
        records = [line.record for line in lines if line.record is not None]
        problems = [
            f"{self.path}:{line.number}: malformed record skipped ({line.problem})"
            for line in lines
            if line.problem
        ]
        good, bad = self.unmerged()  # files mode: records a crash left unmerged count too
        records += [line.record for _, line in good if line.record is not None]
        problems += [f"{p}: malformed record skipped ({why})" for p, why in bad]
        return records, problems

    def repair(self) -> Repair:
        """Move every unusable line to a side file ``<store>.rejected-<UTC time>``.

        The side file is made durable before the usable and blank lines replace the store: the
        two hold every byte of the old one (a torn last line gets a newline in the side file).
        """
        with self.locked():
            lines = self.lines()
            bad = [line for line in lines if line.problem]
            res = Repair(kept=sum(line.record is not None for line in lines))
            if not bad:
                return res
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            tries = (self._beside(f".rejected-{stamp}" + f"-{n}" * (n > 1)) for n in count(1))
            side = next(path for path in tries if not path.exists())
            rejected = b"".join(line.raw.rstrip(b"\n") + b"\n" for line in bad)
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
    old = None
    with contextlib.suppress(AttributeError, OSError, ValueError):
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _write_line(path: Path, fd: int, data: bytes) -> None:
    """Append whole lines durably to the locked store open as ``fd`` (a failed write cut off)."""
    size = os.fstat(fd).st_size
    if size:  # a line cut short by a killed writer must not swallow the next record
        with open(path, "rb") as f:
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


# --- ``files`` mode: a record per file, a lock file ---------------------------------------------


def write_part(parts: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write one finished run's record to its own file in ``parts`` (``files`` mode); no lock.

    ``TIME_NS-RUN_ID-HOST-PID.json`` (names sort in the order written), written atomically and
    durably; ``Store.merge`` appends it later. Returns the file.
    """
    folder = Path(parts)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.time_ns():020d}-{record['run_id']}-{HOST}-{os.getpid()}.json"
    write_atomically(path, (to_json(record) + "\n").encode(), 0o644, durable=True)
    return path


def process_start(pid: int) -> str | None:
    """The start time of a process (Linux ``/proc``), to tell a reused pid from the claimant."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19]
    return None


def gone(pid: Any, started: str | None) -> bool:
    """Whether process ``pid`` of this host is gone (or its pid is now a later process's)."""
    if type(pid) is not int:  # from JSON: not a bool, not a string
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return started is not None and process_start(pid) not in (None, started)


@contextlib.contextmanager
def lock_file(path: Path) -> Iterator[None]:
    """Hold ``path`` as a lock: created exclusively (``O_EXCL``), removed on leaving.

    The file says who holds it (host, pid and its start, thread, time); one left by a crash
    (``_break_if_stale``) is moved aside and removed, if what was moved is what was judged stale.
    """
    pid = os.getpid()
    me = {"host": HOST, "pid": pid, "started": process_start(pid), "thread": threading.get_ident()}
    token = json.dumps({**me, "time": time.time()}).encode()
    delay = 0.005
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:
            _break_if_stale(path)
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
    try:
        os.write(fd, token)
    finally:
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if path.read_bytes() == token:  # not removed as stale meanwhile (a stopped holder)
                path.unlink()


def _break_if_stale(path: Path) -> None:
    try:
        seen, age = path.read_bytes(), time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return
    holder: Any = {}
    with contextlib.suppress(ValueError):
        holder = json.loads(seen)
    # left by a crash: its holder's process is gone (this host) or, held from another host (or
    # unreadable), it is older than LOCK_STALE_S (a lock is held for milliseconds)
    if isinstance(holder, dict) and holder.get("host") == HOST and type(holder.get("pid")) is int:
        if not gone(holder["pid"], holder.get("started")):
            return
    elif age <= LOCK_STALE_S:
        return
    aside = path.with_name(f"{path.name}.stale-{HOST}-{os.getpid()}-{time.time_ns()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    with contextlib.suppress(OSError):
        if aside.read_bytes() != seen:  # a lock taken since: put it back, unless another is there
            with contextlib.suppress(FileExistsError):
                os.link(aside, path)
        aside.unlink()


# --- the claims side file (``harness.persistence.claims``), under the store's lock -------------


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

    On a full disk fewer claims are written over it in place (no new space needed), so that a
    sweep a full disk stopped still releases its claims.
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
    claims = read_claims(path)
    if run_ids & claims.keys():
        write_claims(path, {k: c for k, c in claims.items() if k not in run_ids})


# --- records that could not be written -----------------------------------------------------------


def save_unwritten(record: dict[str, Any], store: Path, into: Path | None = None) -> Path:
    """Keep a record that could not go to ``store`` in a fallback file; returns the file.

    The file, ``<store name>-<UTC time>-<pid>.jsonl`` in the cache's ``unwritten/`` (else the
    temp directory), or ``into`` (an earlier record's of the same sweep), is a store itself.
    RecordError: no fallback could be written either.
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
    """Records and problems from several stores (files or ``--out`` folders), as ``Store``."""
    records, problems = [], []
    for p in paths:
        path = store_path(p)
        if not path.exists():
            raise RecordError(f"no records file at {path}")
        r, pr = Store(path, legacy).read()
        records += r
        problems += pr
    return records, problems
