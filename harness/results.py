"""Run records in an append-only JSONL store.

One JSON line per finished run (schema in ``harness.train.run``). A line is written with a single
``write`` on a file opened for appending, under an exclusive lock, only when the run has finished:
a killed sweep loses at most the runs in flight and never corrupts what is already recorded.

- Reading checks every line (``validate_record``: the required keys, their types, a known
  ``schema`` version) and reports each unusable line with its line number; nothing is ever
  dropped from the file by reading. ``Store.repair`` moves unusable lines (a torn last line left
  by a killed writer or a full disk) to a side file, keeping every byte.
- A full disk does not lose a finished run: ``Store.append`` retries, then raises ``AppendError``
  and the caller keeps the record in a fallback file (``save_unwritten``).
- Concurrent sweeps on one store split the work: a sweep claims each run (``Claims``, a side
  file ``<store>.claims``) under the store's lock just before starting it.
- Records carry their method's code version (``method_code``); resuming a sweep
  (``plan_resume``) reruns records made by other code for a method unless told to keep them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import math
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, RecordError

REQUIRED = ("schema", "run_id", "method", "task", "seed", "preset", "status", "config")
STATUSES = ("ok", "failed")  # what a record's status can be; any other is an unusable line
DEFAULT_FILE = "runs.jsonl"
# record kind (``kind``; a run record has none) -> the schema versions this harness reads
KNOWN_SCHEMAS: dict[str, tuple[int, ...]] = {"run": (1,), "timing": (1, 2)}
# what the reports read from a run that finished (status ok), beyond REQUIRED
OK_RUN_REQUIRED = ("metrics", "variant_id", "primary", "higher_is_better")
CLAIM_TIMEOUT_S = 48 * 3600  # a claim this old is stale whoever holds it
APPEND_RETRY_DELAYS_S = (0.5, 2.0, 5.0)  # waits before each retry of a failed append
_RETRYABLE = {errno.ENOSPC, errno.EDQUOT, errno.EINTR, errno.EAGAIN}
CHECK_TARGET_BYTES = 1 << 20  # how much of an existing --out file is read to tell if it is a store


class AppendError(RecordError):
    """A finished run's record could not be appended (after retries)."""

    def __init__(self, path: Path, error: OSError) -> None:
        self.path, self.error = path, error
        super().__init__(f"cannot append to {path}: {error.strerror or error}")


def _clean(obj: Any) -> Any:
    """Replace NaN/inf by None so every line is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


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
    from harness.outputs import file_kind

    p = Path(out)
    if p.suffix != ".jsonl" and p.exists() and not p.is_dir():
        raise RecordError(
            f"--out {out}: it is {file_kind(p)}, not a folder; give a folder (the records go to "
            f"its {DEFAULT_FILE}) or a .jsonl file"
        )
    return store_path(p)


# --- the record schema ---------------------------------------------------------------------------


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names.update({list: "an array", dict: "an object"})
    shown = json.dumps(v)[:24] if isinstance(v, (bool, int, float, str)) else ""
    return names.get(type(v), type(v).__name__) + (f" ({shown})" if shown else "")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number_or_null(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _numbers(v: Any) -> bool:
    return isinstance(v, dict) and all(_is_number_or_null(x) for x in v.values())


def _str_or_null(v: Any) -> bool:
    return v is None or isinstance(v, str)


# key -> (check, what it expects); checked whenever the key is present
_TYPES: dict[str, tuple[Any, str]] = {
    "run_id": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "method": (lambda v: isinstance(v, str), "a string"),
    "task": (lambda v: isinstance(v, str), "a string"),
    "preset": (lambda v: isinstance(v, str), "a string"),
    "status": (lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}"),
    "seed": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "config": (lambda v: isinstance(v, dict), "an object"),
}
# run records only
_RUN_TYPES: dict[str, tuple[Any, str]] = {
    "metrics": (_numbers, "an object of numbers"),
    "val_metrics": (_numbers, "an object of numbers"),
    "macs": (_numbers, "an object of numbers"),
    "flops": (_numbers, "an object of numbers"),
    "params": (_numbers, "an object of numbers"),
    "diagnostics": (_numbers, "an object of numbers"),
    "variant_id": (_str_or_null, "a string"),
    "primary": (_str_or_null, "a string"),
    "error": (_str_or_null, "a string"),
    "method_code": (_str_or_null, "a string"),
    "higher_is_better": (lambda v: isinstance(v, bool), "a boolean"),
    "env": (lambda v: isinstance(v, dict), "an object"),
    "time": (lambda v: isinstance(v, dict), "an object"),
    "trace": (lambda v: isinstance(v, dict), "an object"),
    "history": (lambda v: isinstance(v, list), "an array"),
}


def validate_record(rec: Any) -> list[str]:
    """What is wrong with one parsed record line; empty when the reports can use it.

    Checks the required keys and their types (``seed`` a non-negative integer, ``config`` an
    object, ``metrics`` an object of numbers or nulls, ...), that the ``schema`` version is one
    this harness reads for the record's ``kind``, and that a run that finished (``status`` ok)
    has what the reports read from it (``metrics``, ``variant_id``, ``primary``,
    ``higher_is_better``, ``config.model``).

    Args:
        rec: the JSON value of one line.

    Returns:
        One short message per problem.
    """
    if not isinstance(rec, dict):
        return [f"not a record: {_json_type(rec)}"]
    missing = [k for k in REQUIRED if k not in rec]
    problems = [f"missing {missing}"] if missing else []
    kind = rec.get("kind", "run")
    if kind not in KNOWN_SCHEMAS:
        return [*problems, f"unknown record kind {kind!r}"]
    if "schema" in rec:
        schema, known = rec["schema"], KNOWN_SCHEMAS[kind]
        if not _is_int(schema):
            problems.append(f"schema: expected an integer, got {_json_type(schema)}")
        elif schema not in known:
            problems.append(
                f"schema version {schema} is unknown (this harness reads {kind} records of "
                f"schema {', '.join(map(str, known))}; was it written by a newer harness?)"
            )
    types = {**_TYPES, **(_RUN_TYPES if kind == "run" else {})}
    for key, (ok, want) in types.items():
        if key in rec and not ok(rec[key]):
            problems.append(f"{key}: expected {want}, got {_json_type(rec[key])}")
    if kind == "run" and isinstance(rec.get("config"), dict):
        for sec in ("train", "model", "method_cfg", "task_cfg"):
            if sec in rec["config"] and not isinstance(rec["config"][sec], dict):
                problems.append(f"config.{sec}: expected an object")
    if kind == "run" and rec.get("status") == "ok":
        lacking = [k for k in OK_RUN_REQUIRED if k not in rec]
        if lacking:
            problems.append(f"a finished (ok) run lacks {lacking}")
        model = rec["config"].get("model") if isinstance(rec.get("config"), dict) else None
        if not (isinstance(model, dict) and _is_int(model.get("hidden_size"))):
            problems.append("a finished (ok) run lacks config.model.hidden_size")
    return problems


class NonFiniteError(ValueError):
    """A ``NaN`` or ``Infinity`` token in a record line (not JSON; the harness writes null)."""


def _non_finite(token: str) -> Any:
    raise NonFiniteError(
        f"{token} is not a JSON value (the harness writes a number that is not finite as null)"
    )


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
    record: dict[str, Any] | None = None
    problem: str | None = None


def parse_lines(data: bytes, complete: bool = True) -> list[Line]:
    """Split a store's bytes into checked lines.

    Args:
        data: the file's bytes (or its beginning).
        complete: whether ``data`` is the whole file (a last line without a newline is then
            torn; otherwise it is just cut by the read and is left out).

    Returns:
        Every line, blank ones included (with neither record nor problem).
    """
    out = []
    parts = data.split(b"\n")
    for n, part in enumerate(parts, 1):
        last = n == len(parts)
        if last and not part:
            break
        if last and not complete:
            break
        raw = part if last else part + b"\n"
        line = Line(n, raw)
        out.append(line)
        if not part.strip():
            continue
        torn = " (the last line has no newline: a writer was killed or the disk filled)"
        try:
            rec = json.loads(part.decode("utf-8"), parse_constant=_non_finite)
        except UnicodeDecodeError:
            line.problem = "not UTF-8 text"
            continue
        except json.JSONDecodeError as e:
            line.problem = e.msg + (torn if last else "")
            continue
        except NonFiniteError as e:
            line.problem = str(e)
            continue
        problems = validate_record(rec)
        if problems:
            line.problem = "; ".join(problems)
        else:
            line.record = rec
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
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

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
                nothing behind (``harness.outputs.check_writable``).
        """
        from harness.outputs import check_writable, explain, file_kind

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
            with open(self.path, "a"):
                pass
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
        data = (json.dumps(_clean(record), sort_keys=True, separators=(",", ":")) + "\n").encode()
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
                _drop_claims(self.claims_path, {run_id})

    def lines(self) -> list[Line]:
        """Every line of the file, checked (``parse_lines``); empty when there is no file."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise RecordError(f"cannot read {self.path}: {e.strerror or e}") from None
        return parse_lines(data)

    def read(self) -> tuple[list[dict[str, Any]], list[str]]:
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

    def recorded_ids(self) -> set[str]:
        """Run ids already in the store (any status): a resumed sweep skips them."""
        return {r["run_id"] for r in self.read()[0]}

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
                _write_durably(side, rejected, mode=None)
                _write_durably(self.path, kept, mode=self.path.stat().st_mode)
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


def _write_durably(path: Path, data: bytes, mode: int | None) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync, and rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself reaches the disk
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


# --- claims: concurrent sweeps on one store split the work ---------------------------------------


def _read_claims(path: Path) -> dict[str, dict[str, Any]]:
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


def _write_claims(path: Path, claims: dict[str, dict[str, Any]]) -> None:
    if not claims:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    text = "".join(json.dumps(c, sort_keys=True) + "\n" for c in claims.values())
    _write_durably(path, text.encode(), mode=None)


def _drop_claims(path: Path, run_ids: set[str]) -> None:
    """Remove the claims on ``run_ids`` (call under the store's lock)."""
    if not path.exists():
        return
    claims = _read_claims(path)
    if run_ids & claims.keys():
        _write_claims(path, {k: c for k, c in claims.items() if k not in run_ids})


def _process_start(pid: int) -> str | None:
    """The start time of a process (Linux ``/proc``), to tell a reused pid from the claimant."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim_is_stale(claim: dict[str, Any], now: float | None = None) -> bool:
    """Whether a claim no longer holds its run.

    It is stale when it is older than ``CLAIM_TIMEOUT_S`` or, made on this host, when its process
    is gone (or its pid now belongs to a process started later).
    """
    now = time.time() if now is None else now
    if not isinstance(claim.get("time"), (int, float)) or now - claim["time"] > CLAIM_TIMEOUT_S:
        return True
    if claim.get("host") != socket.gethostname():
        return False
    pid = claim.get("pid")
    if not _is_int(pid) or not _alive(pid):
        return True
    started = claim.get("started")
    return started is not None and _process_start(pid) not in (None, started)


class Claims:
    """This process's claims on runs of a store, so that concurrent sweeps split the work.

    A sweep calls ``take`` just before it starts a run: under the store's lock, the run is
    refused when another sweep recorded it since this one began, or holds a claim on it that is
    not stale (``claim_is_stale``); otherwise the claim (run id, pid, host, time) is written to
    ``<store>.claims``. Appending the run's record drops its claim; ``release`` drops the rest.

    Args:
        store: the store the sweep appends to.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.mine: set[str] = set()
        self.host, self.pid = socket.gethostname(), os.getpid()
        self._started = _process_start(self.pid)
        try:
            self._offset = store.path.stat().st_size
        except FileNotFoundError:
            self._offset = 0
        self._recorded_since: set[str] = set()

    def _scan_new_records(self) -> None:
        """Run ids appended to the store since the last look (call under the lock)."""
        with open(self.store.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < self._offset:  # the store was repaired meanwhile
                self._offset = size
                return
            f.seek(self._offset)
            data = f.read(size - self._offset)
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                self._recorded_since.add(json.loads(line)["run_id"])

    def take(self, run_id: str) -> dict[str, Any] | None:
        """Claim a run; None if claimed, else what holds it (a claim, or ``{"recorded": True}``)."""
        with self.store.locked():
            self._scan_new_records()
            if run_id in self._recorded_since:
                return {"run_id": run_id, "recorded": True}
            claims = _read_claims(self.store.claims_path)
            other = claims.get(run_id)
            mine = other is not None and (other.get("pid"), other.get("host")) == (
                self.pid,
                self.host,
            )
            if other and not mine and not claim_is_stale(other):
                return other
            claims = {k: c for k, c in claims.items() if not claim_is_stale(c)}
            claims[run_id] = {
                "run_id": run_id,
                "pid": self.pid,
                "host": self.host,
                "started": self._started,
                "time": time.time(),
            }
            _write_claims(self.store.claims_path, claims)
            self.mine.add(run_id)
            return None

    def release(self) -> None:
        """Drop this sweep's remaining claims (runs it claimed and did not record)."""
        if not self.mine:
            return
        with contextlib.suppress(OSError), self.store.locked():
            _drop_claims(self.store.claims_path, self.mine)
        self.mine.clear()


# --- records that could not be written -----------------------------------------------------------


def fallback_dir() -> Path:
    """Where records that could not be appended are kept: ``$XDG_CACHE_HOME/harness/unwritten``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "harness" / "unwritten"


def save_unwritten(record: dict[str, Any], store: Path, into: Path | None = None) -> Path:
    """Keep a record that could not go to ``store`` in a fallback file; returns the file.

    The file (``<store name>-<UTC time>-<pid>.jsonl`` in ``fallback_dir()``, else in the temp
    directory) is a store itself: append it to the real one once there is room.

    Args:
        record: the finished run's record.
        store: the store it was meant for (names the file).
        into: the fallback file of an earlier record of the same sweep, to append to.

    Raises:
        RecordError: no fallback location could be written either.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = f"{store.stem}-{stamp}-{os.getpid()}.jsonl"
    candidates = [into] if into else [fallback_dir() / name, Path(tempfile.gettempdir()) / name]
    line = json.dumps(_clean(record), sort_keys=True, separators=(",", ":")) + "\n"
    errors = []
    for path in candidates:
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


# --- code versions and resume --------------------------------------------------------------------


def _package_files(module: Any) -> set[str]:
    """The source files of ``module`` and of the modules of its package it uses, transitively.

    The package's ``__init__`` (which imports every module) is left out.
    """
    pkg = module.__name__.partition(".")[0]
    seen: dict[str, Any] = {}
    todo = [module]
    while todo:
        mod = todo.pop()
        if mod.__name__ in seen:
            continue
        seen[mod.__name__] = mod
        for obj in vars(mod).values():
            name = obj.__name__ if type(obj) is type(sys) else getattr(obj, "__module__", None)
            if not isinstance(name, str) or name == pkg or name.partition(".")[0] != pkg:
                continue
            other = sys.modules.get(name)
            if other is not None and name not in seen:
                todo.append(other)
    return {m.__file__ for m in seen.values() if getattr(m, "__file__", None)}


@functools.cache
def method_code(method: str) -> str:
    """The code version of a registered method: a digest of its source files.

    The files are the module that registers the method and the modules of its package that it
    uses (shared cells, kernels), transitively; not the harness itself.

    Args:
        method: the registry key.

    Returns:
        16 hex digits of the SHA-256 of the files' names and contents.
    """
    from harness.registry import METHODS

    module = sys.modules[METHODS.get(method).__module__]
    h = hashlib.sha256()
    for path in sorted(_package_files(module)):
        h.update(Path(path).name.encode() + b"\0")
        h.update(Path(path).read_bytes() + b"\0")
    return h.hexdigest()[:16]


@dataclass
class ResumePlan:
    """Which runs of a sweep to run, given the records already in the store.

    Attributes:
        todo: the configs to run.
        done: how many are recorded and kept.
        failed: the latest records of failed runs that are rerun (``retry_failed``).
        stale: the latest records made by other code of their method (``method_code``).
        kept_stale: whether the stale records were kept (not rerun).
    """

    todo: list[Any]
    done: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)
    kept_stale: bool = False


def plan_resume(
    configs: Sequence[Any],
    records: Iterable[dict[str, Any]],
    *,
    force: bool = False,
    retry_failed: bool = False,
    keep_stale: bool = False,
) -> ResumePlan:
    """Decide what a (resumed) sweep runs.

    A config whose run id has no record runs. With a record (the latest line of that id), it is
    skipped, except: ``force`` reruns everything; ``retry_failed`` reruns runs whose record is not
    ``ok``; a record whose ``method_code`` differs from the method's code now is stale and reruns
    unless ``keep_stale`` (records without a code version, older than it, are kept).

    Args:
        configs: the sweep's ``RunConfig``s.
        records: the store's records.
        force: rerun every run.
        retry_failed: rerun the failed runs.
        keep_stale: keep the records made by other code instead of rerunning them.

    Returns:
        The plan; the reruns append records and the latest line of a run id wins (``latest``).
    """
    if force:
        return ResumePlan(list(configs))
    by_id = {r["run_id"]: r for r in latest(records)}
    plan = ResumePlan([], kept_stale=keep_stale)
    for cfg in configs:
        rec = by_id.get(cfg.run_id)
        if rec is None:
            plan.todo.append(cfg)
            continue
        code = rec.get("method_code")
        if code is not None and code != method_code(cfg.method):
            plan.stale.append(rec)
            if not keep_stale:
                plan.todo.append(cfg)
                continue
        if retry_failed and rec.get("status") != "ok":
            plan.failed.append(rec)
            plan.todo.append(cfg)
            continue
        plan.done += 1
    return plan


def flat_config(rec: dict[str, Any]) -> dict[str, Any]:
    """A record's resolved config as one flat dict, keyed as ``--set`` and ``--grid`` accept.

    Method and model fields are keyed by name, trainer and task fields as ``train.x`` /
    ``task.x``.
    """
    c = rec["config"]
    out = {**c.get("method_cfg", {}), **c.get("model", {})}
    out.update({f"train.{k}": v for k, v in c.get("train", {}).items()})
    out.update({f"task.{k}": v for k, v in c.get("task_cfg", {}).items()})
    return out


def latest(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last record of each run id (a ``--force`` rerun supersedes the earlier line)."""
    by_id: dict[str, dict[str, Any]] = {}
    for r in records:
        by_id.pop(r["run_id"], None)
        by_id[r["run_id"]] = r
    return list(by_id.values())


def load(paths: Iterable[str | os.PathLike]) -> tuple[list[dict[str, Any]], list[str]]:
    """Records and problems from several stores (files or ``--out`` directories)."""
    records, problems = [], []
    for p in paths:
        path = store_path(p)
        if not path.exists():
            raise RecordError(f"no records file at {path}")
        r, pr = Store(path).read()
        records += r
        problems += pr
    return records, problems
