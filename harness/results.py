"""Run records in an append-only JSONL store.

One JSON line per finished run (schema in ``harness.train.run``). A line is written with a single
``write`` on a file opened for appending, under an exclusive lock, only when the run has finished:
a killed sweep loses at most the runs in flight and never corrupts what is already recorded.
Reading reports every malformed line with its line number and skips it; nothing is ever
rewritten or dropped from the file.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.errors import RecordError

REQUIRED = ("schema", "run_id", "method", "task", "seed", "preset", "status", "config")
DEFAULT_FILE = "runs.jsonl"


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


class Store:
    """An append-only JSONL file of run records.

    Args:
        path: the ``.jsonl`` file (created on first append with its parent directories).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def check_writable(self) -> None:
        """Create the directory and open the file for appending, or raise RecordError."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a"):
                pass
        except OSError as e:
            raise RecordError(f"cannot write results to {self.path}: {e.strerror or e}") from None

    def append(self, record: dict[str, Any]) -> None:
        """Append one finished run as one line, atomically with respect to other writers."""
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            raise RecordError(f"record lacks required keys {missing}")
        line = json.dumps(_clean(record), sort_keys=True, separators=(",", ":")) + "\n"
        self.check_writable()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A line cut short by a killed writer must not swallow the next record.
            size = os.fstat(fd).st_size
            if size:
                with open(self.path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        line = "\n" + line
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def read(self) -> tuple[list[dict[str, Any]], list[str]]:
        """All well-formed records in file order, and one message per malformed line."""
        if not self.path.exists():
            return [], []
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise RecordError(f"cannot read {self.path}: {e.strerror or e}") from None
        records, problems = [], []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{self.path}:{n}: malformed record skipped ({e.msg})")
                continue
            if not isinstance(rec, dict) or any(k not in rec for k in REQUIRED):
                lacking = [k for k in REQUIRED if not isinstance(rec, dict) or k not in rec]
                problems.append(f"{self.path}:{n}: malformed record skipped (missing {lacking})")
                continue
            records.append(rec)
        return records, problems

    def recorded_ids(self) -> set[str]:
        """Run ids already in the store (any status): a resumed sweep skips them."""
        return {r["run_id"] for r in self.read()[0]}


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
