"""Datasets: where they live, how they are read, checked and identified, and how they are fetched.

Tasks and commands import every data name from here (``files``: the data root, readers, errors;
``sums``: content sums and verification; ``fetch``: downloads). This module holds the parsed-data
caches, the status rows of ``harness data list|verify`` and a run's data identity. It imports no
torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.components.config import DataIdentity
from harness.components.registry import TASKS
from harness.data.fetch import MIRROR_ENV as MIRROR_ENV
from harness.data.fetch import Fetcher as Fetcher
from harness.data.fetch import extract as extract
from harness.data.files import CorruptDataError as CorruptDataError
from harness.data.files import MissingDataError, cache_dir, data_root
from harness.data.files import NotFetchableError as NotFetchableError
from harness.data.files import find_file as find_file
from harness.data.files import read_text as read_text
from harness.data.sums import check_sha256, file_sums, manifest_digest, sha256, stat_key
from harness.data.sums import content_sha256 as content_sha256
from harness.data.sums import read_sums as read_sums
from harness.data.sums import verify_sha256 as verify_sha256
from harness.errors import DataError

_CACHE: dict[tuple, Any] = {}


def cached(name: str, files: list[Path], load: Callable[[], Any]) -> Any:
    """``load()`` once per process for the same files (keyed by path, size and mtime)."""
    key = (name, *((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if key not in _CACHE:
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = load()
    return _CACHE[key]


_DISK: dict[tuple, dict[str, Any]] = {}


def disk_cached(
    subdir: str, name: str, files: list[Path], build: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], str]:
    """Arrays derived from data files, cached on disk (and in memory): arrays, "hit"/"built".

    Keyed by ``name`` (with a pipeline version) and every file's name and sha256 (in memory: the
    files' ``stat_key``); an unreadable entry is rebuilt and an unwritable cache only warns.
    """
    import zipfile

    import numpy as np

    stamp = (str(cache_dir()), subdir, name, *((str(p), *stat_key(p.stat())) for p in files))
    if stamp in _DISK:
        return _DISK[stamp], "hit"
    h = hashlib.sha256(f"{name}\n".encode())
    for p in files:
        h.update(f"{p.name} {sha256(p)}\n".encode())
    path = cache_dir() / subdir / f"{name}-{h.hexdigest()[:20]}.npz"
    if path.is_file():
        with contextlib.suppress(OSError, ValueError, zipfile.BadZipFile), np.load(path) as z:
            return _remember(stamp, {k: z[k] for k in z.files}), "hit"
    arrays = build()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError as e:  # a read-only cache costs time on the next run, not this run
        warnings.warn(f"could not write the cache {path}: {e}", stacklevel=2)
    return _remember(stamp, arrays), "built"


def _remember(stamp: tuple, arrays: dict[str, Any]) -> dict[str, Any]:
    """Keep ``arrays`` (made read-only: every caller shares them) for ``disk_cached``."""
    for a in arrays.values():
        a.setflags(write=False)
    if len(_DISK) > 8:
        _DISK.clear()
    _DISK[stamp] = arrays
    return arrays


def status(
    dataset: str,
    path: str | os.PathLike,
    source: str,
    check: Callable[[], str],
    sums: dict[str, str] | None = None,
    files: list[str] | None = None,
) -> dict[str, Any]:
    """A ``Task.data_status()`` dict: ``check()`` parses the data and returns a detail line.

    ``sums``: the published checksums (``verify_sha256``); data without them name the ``files``
    they read, whose content digest identifies them. ``sha256_members``: ``check_sha256``.
    """
    row: dict[str, Any] = {"dataset": dataset, "path": str(path), "source": source}
    try:
        row.update(status="found", detail=check())
    except MissingDataError as e:
        row.update(status="missing", detail=str(e))
    except DataError as e:
        row.update(status="corrupt", detail=str(e))
    if sums:
        row["sha256"] = dict(sums)
    if files:
        row["files"] = list(files)
    return row


def task_row(
    name: str, task: Any, verify: bool = False, fresh: bool = False
) -> dict[str, Any] | None:
    """The data row of one task instance (``status_rows``); None for generated data.

    With ``verify``, a found dataset is checked against the published sums (every file hashed
    again with ``fresh``): the row gains ``check``, ``digest`` (of the files as found) and
    ``verified`` (False where they differ or none are published).
    """
    try:
        st = task.data_status()
    except DataError as e:
        st = {"status": "corrupt", "detail": str(e)}
    if st is None:
        return None
    sums, files = st.pop("sha256", None), st.pop("files", None)
    members = st.pop("sha256_members", None)
    row = _row(name, st, task.data_dir)
    if not verify or row["status"] != "found":
        return row
    try:
        if sums:
            row["status"], checked, row["digest"] = check_sha256(row["path"], sums, fresh, members)
            row["verified"] = row["status"] == "found"
        else:
            got, absent, n = file_sums(row["path"], files or ["**/*"], fresh)
            if absent:
                raise MissingDataError(f"missing data file {Path(row['path']) / absent[0]}")
            row["digest"], row["verified"] = manifest_digest(got), False
            checked = f"no published checksums; content digest {row['digest'][:12]} of {n} files"
    except DataError as e:
        row["status"], row["detail"] = "corrupt", str(e)
        return row
    row["check"] = checked
    return row


def _row(name: str, st: dict[str, Any], data_dir: str | os.PathLike | None) -> dict[str, Any]:
    """A task's row from its ``data_status()`` dict (the data root's path where it names none)."""
    return {
        "task": name,
        "dataset": st.get("dataset", name),
        "status": st.get("status", "?"),
        "path": st.get("path") or str(data_root(data_dir)),
        "source": st.get("source", ""),
        "detail": st.get("detail", ""),
    }


def status_rows(
    data_dir: str | os.PathLike | None = None,
    verify: bool = False,
    tasks: list[str] | None = None,
    fresh: bool = False,
) -> list[dict[str, Any]]:
    """One row per registered real-data task (``tasks``: only these), as ``task_row`` gives it.

    Status: ``found``, ``missing``, ``checksum mismatch`` or ``corrupt``.
    """
    rows = []
    for name, cls in TASKS.items():
        if tasks is not None and name not in tasks:
            continue
        try:
            task = cls(data_dir=str(data_dir) if data_dir else None)
        except DataError as e:
            rows.append(_row(name, {"status": "corrupt", "detail": str(e)}, data_dir))
            continue
        row = task_row(name, task, verify, fresh)
        if row is not None:
            if verify and "check" in row:
                row["detail"] = f"{row['detail']}; {row['check']}"
            rows.append(row)
    return rows


def attach_identity(
    cfgs: list[Any], data_dir: str | None = None, allow_unverified: bool = False
) -> tuple[list[Any], list[str]]:
    """Verify the data of every run that reads data files, and key the runs (``cfg.data``) by it.

    Returns the configs and notes for data without published sums. DataError: one line per task
    whose files differ (unless ``allow_unverified``: recorded as unverified) or cannot be read.
    """
    known: dict[tuple[str, str], DataIdentity | None] = {}
    bad: list[str] = []
    notes: list[str] = []
    out = []
    for cfg in cfgs:
        key = (cfg.task, repr(cfg.task_cfg))
        if key not in known:
            row = task_row(cfg.task, TASKS.get(cfg.task)(cfg.task_cfg, data_dir), verify=True)
            status = None if row is None else row["status"]  # None: generated data
            known[key] = None
            if status == "found" or (status == "checksum mismatch" and allow_unverified):
                known[key] = DataIdentity(row["digest"], row["verified"])
                if not row["verified"]:
                    notes.append(f"task '{cfg.task}' runs on unverified data ({row['check']})")
            elif status == "checksum mismatch":
                bad.append(
                    f"the data of task '{cfg.task}' under {row['path']} do not match the "
                    f"published checksums ({row['check']})"
                )
            elif status is not None:
                bad.append(f"task '{cfg.task}': {row['detail']}")
        ident = known[key]
        out.append(cfg if ident is None else replace(cfg, data=ident))
    if bad:
        hint = " (--allow-unverified-data runs on them anyway)" if not allow_unverified else ""
        raise DataError("; ".join(bad) + (hint if "checksums" in "".join(bad) else ""))
    return out, notes
