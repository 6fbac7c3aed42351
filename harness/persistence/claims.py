"""Concurrent sweeps on one store (``Claims``), and a running sweep's side of it (``SweepStore``).

Claims are leases a heartbeat renews (docs/clusters.md). A sweep claims each run just in time,
appends or falls back, and releases its claims however it ends.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError, WriteFailed, write_failure
from harness.persistence.store import (
    HOST,
    AppendError,
    Store,
    drop_claims,
    gone,
    process_start,
    read_claims,
    save_unwritten,
    write_claims,
)

CLAIM_TIMEOUT_S = 48 * 3600  # a claim this old is stale whoever holds it (and one with no lease)
LEASE_ENV = "HARNESS_CLAIM_LEASE_S"
DEFAULT_LEASE_S = 300.0
MIN_LEASE_S = 1.0


def lease_s() -> float:
    """This process's claims' lease in seconds: ``$HARNESS_CLAIM_LEASE_S`` (1 s..48 h), else 300."""
    raw = os.environ.get(LEASE_ENV, "").strip()
    if not raw:
        return DEFAULT_LEASE_S
    value = math.nan
    with contextlib.suppress(ValueError):
        value = float(raw)
    if not MIN_LEASE_S <= value <= CLAIM_TIMEOUT_S:  # NaN fails too
        raise ConfigError(
            f"{LEASE_ENV} must be a number of seconds from {MIN_LEASE_S:g} to "
            f"{CLAIM_TIMEOUT_S:g} (48 h) (got {raw!r})"
        )
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def claim_is_stale(claim: dict[str, Any], now: float | None = None) -> bool:
    """Whether a claim no longer holds its run.

    Its ``time`` (last renewed) is older than ``CLAIM_TIMEOUT_S``; or, from another host, older
    than its ``lease_s`` (an older harness's claim has none); or, from this host, its process is
    gone.
    """
    now = time.time() if now is None else now
    if not _number(claim.get("time")) or now - claim["time"] > CLAIM_TIMEOUT_S:
        return True
    if claim.get("host") != HOST:
        lease = claim.get("lease_s")
        return _number(lease) and now - claim["time"] > lease
    return gone(claim.get("pid"), claim.get("started"))


class Claims:
    """This process's claims on runs of a store, so that concurrent sweeps split the work.

    ``take`` claims a run just before it starts; from the first claim on, a heartbeat thread
    renews this process's claims every third of the lease (None: ``lease_s()``). Appending a
    run's record drops its claim; ``release`` drops the rest. ``say`` shows a claim taken over.
    """

    def __init__(
        self, store: Store, lease: float | None = None, say: Callable[[str], None] | None = None
    ) -> None:
        self.store = store
        self.mine: set[str] = set()
        self.host, self.pid = HOST, os.getpid()
        self._me = (self.pid, self.host)
        self.lease = lease_s() if lease is None else lease
        self.say = say or (lambda line: None)
        self._started = process_start(self.pid)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._offset = 0  # how much of the store ``_scan_new_records`` has read
        with contextlib.suppress(FileNotFoundError):
            self._offset = store.path.stat().st_size
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
        """Claim a run; None if claimed, else what holds it (a claim, or ``{"recorded": True}``).

        Raises WriteFailed when the claims file cannot be written (nothing is claimed).
        """
        with self.store.locked():
            self._scan_new_records()
            if run_id in self._recorded_since:
                return {"run_id": run_id, "recorded": True}
            claims = read_claims(self.store.claims_path)
            other = claims.get(run_id)
            mine = other is not None and (other.get("pid"), other.get("host")) == self._me
            now = time.time()
            if other and not mine and not claim_is_stale(other, now):
                return other
            claims = {k: c for k, c in claims.items() if not claim_is_stale(c, now)}
            mark = {"run_id": run_id, "started": self._started, "time": now, "lease_s": self.lease}
            claims[run_id] = {**mark, "pid": self.pid, "host": self.host}
            try:
                write_claims(self.store.claims_path, claims)
            except OSError as e:
                raise WriteFailed(self.store.claims_path, e) from None
            self.mine.add(run_id)
        if other and not mine and _number(other.get("time")):
            ago = (now - other["time"]) / 60
            why = "lease ran out" if other.get("host") != self.host else "process is gone"
            self.say(
                f"run {run_id}: took over the claim of pid {other.get('pid')} on "
                f"{other.get('host')}, whose {why} (last renewed {ago:.0f} min ago)"
            )
        if self._beat is None:
            self._beat = threading.Thread(
                target=self._heartbeat, name="claims-heartbeat", daemon=True
            )
            self._beat.start()
        return None

    def renew(self) -> None:
        """Set the time of this process's claims to now, under the store's lock."""
        mine = set(self.mine)
        if not mine:
            return
        with self.store.locked():
            claims = read_claims(self.store.claims_path)
            now, renewed = time.time(), False
            for run_id, c in claims.items():
                if run_id in mine and (c.get("pid"), c.get("host")) == self._me:
                    c["time"], renewed = now, True
            if renewed:
                write_claims(self.store.claims_path, claims)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.lease / 3):
            with contextlib.suppress(OSError, HarnessError):  # tried again a third lease later
                self.renew()

    def release(self) -> None:
        """Stop the heartbeat; drop this sweep's remaining claims (claimed and not recorded)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        self._stop.clear()
        if not self.mine:
            return
        with contextlib.suppress(OSError), self.store.locked():
            drop_claims(self.store.claims_path, self.mine)
        self.mine.clear()


class SweepStore:
    """A sweep's side of its store: claims, records that cannot be written, release at the end.

    ``taken`` keeps the runs another sweep holds or has recorded. A record the store cannot take
    (a full disk, after retries) goes to a fallback file (``fallback``) and stops the sweep: no
    run starts any more. Leaving ``with`` (an interrupt too) drops the claims not recorded.
    """

    def __init__(self, store: Store, say: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.claims = Claims(store, say=say)
        self.taken: list[tuple[Any, dict[str, Any]]] = []  # (config, what holds it)
        self.unwritten: list[dict[str, Any]] = []
        self.fallback: Path | None = None  # the fallback file, once a record went there
        self.stopped: str = ""  # why no run starts any more (a write that failed), in one line

    def __enter__(self) -> SweepStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.claims.release()

    def claimed(self, todo: Iterable[Any]) -> Iterator[Any]:
        """The configs of ``todo`` this sweep claimed, claimed as they are read, until stopped."""
        for cfg in todo:
            if self.stopped:
                return
            holder = self.claims.take(cfg.run_id)
            if holder is None:
                yield cfg
            else:
                self.taken.append((cfg, holder))

    def append(self, rec: dict[str, Any], written: bool = False) -> bool:
        """Append ``rec`` (``written``: merge its own file); False when it went to ``fallback``."""
        if written:
            with contextlib.suppress(OSError, HarnessError):
                self.store.merge()
            return True
        try:
            self.store.append(rec)
            return True
        except AppendError as e:
            self.fallback = save_unwritten(rec, self.store.path, self.fallback)
            self.unwritten.append(rec)
            self.stop(write_failure(self.store.path, e.error))
            return False

    def stop(self, why: str) -> None:
        """Start no run any more, for ``why`` (one line; the first reason given is kept)."""
        self.stopped = self.stopped or why
