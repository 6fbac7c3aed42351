"""Where datasets live and how their files are opened and checked.

Resolution order for the data root: an explicit ``--data-dir``, then ``HARNESS_DATA_DIR``, then a
per-user cache directory (``$XDG_CACHE_HOME/condrnn-harness/data`` or ``~/.cache/...``). The root
holds one folder per dataset in its original published layout (see the project README).
Text files may be stored gzip-compressed as ``NAME.gz``; ``find_file`` and ``open_text`` accept
both forms.

A missing file raises ``MissingDataError`` and an unreadable one ``CorruptDataError`` (both
``DataError``: one line naming the file and where to get it). Real-data tasks report their state
through ``status()``; ``status_rows()`` collects those rows for ``harness data list|verify`` and,
with ``verify``, checks files against the sha256 sums the tasks ship (``verify_sha256``).
"""

from __future__ import annotations

import gzip
import hashlib
import inspect
import io
import os
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.errors import DataError

if TYPE_CHECKING:
    from harness.task import Splits


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data root: ``data_dir``, else ``$HARNESS_DATA_DIR``, else the user cache directory."""
    if data_dir:
        return Path(data_dir).expanduser()
    env = os.environ.get("HARNESS_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return cache_dir() / "data"


def cache_dir() -> Path:
    """The per-user cache directory of the harness (also used for derived, cached data)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "condrnn-harness"


class MissingDataError(DataError):
    """A dataset file that is not where the harness looked."""


class CorruptDataError(DataError):
    """A dataset file that is present but cannot be read or parsed."""


def find_file(path: str | os.PathLike, source: str = "") -> Path:
    """``path`` or ``path.gz``, whichever exists; else a DataError naming both and the source."""
    p = Path(path)
    for cand in (p, p.with_name(p.name + ".gz")):
        if cand.is_file():
            return cand
    where = f" Get it from {source}." if source else ""
    raise MissingDataError(f"missing data file {p} (or {p.name}.gz).{where}")


def open_text(path: str | os.PathLike, source: str = "") -> io.TextIOBase:
    """Open a text data file, transparently decompressing ``.gz``; accepts either name."""
    p = find_file(path, source)
    try:
        if p.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8", errors="replace")
        return open(p, encoding="utf-8", errors="replace")
    except OSError as e:
        raise DataError(f"cannot read data file {p}: {e}") from None


def read_text(path: str | os.PathLike, source: str = "") -> str:
    """The whole text of a data file (``NAME`` or ``NAME.gz``); corrupt gzip is a DataError."""
    try:
        with open_text(path, source) as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
        raise CorruptDataError(f"corrupt data file {find_file(path)}: {e}") from None


def sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def content_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's content: the decompressed bytes of ``NAME.gz``, else the bytes."""
    p = Path(path)
    if p.suffix != ".gz":
        return sha256(p)
    h = hashlib.sha256()
    try:
        with gzip.open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except (OSError, EOFError, zlib.error) as e:
        raise CorruptDataError(f"corrupt data file {p}: {e}") from None
    return h.hexdigest()


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix().removesuffix(".gz")


def manifest_digest(sums: dict[str, str]) -> str:
    """One digest for a set of files: sha256 of their ``sha256sum`` lines sorted by path.

    ``sums`` maps relative paths (without a ``.gz`` suffix) to content sha256 sums, so the digest
    is the same whether the files are stored compressed or not.
    """
    lines = "".join(f"{h}  {rel}\n" for rel, h in sorted(sums.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def verify_sha256(folder: str | os.PathLike, known: dict[str, str]) -> tuple[str, str]:
    """Check the files under ``folder`` against known content sha256 sums.

    Args:
        folder: the dataset folder the keys are relative to.
        known: ``{relative path: sha256}`` (``NAME`` also matches ``NAME.gz``, hashed
            decompressed), or ``{glob: digest}`` where the digest is ``manifest_digest`` of every
            file the glob matches (one constant for a folder of hundreds of files).

    Returns:
        ``(status, detail)`` with status ``"found"`` or ``"checksum mismatch"``.
    """
    root, bad, n = Path(folder), [], 0
    for rel, want in known.items():
        if any(c in rel for c in "*?["):
            files = sorted(p for p in root.glob(rel) if p.is_file())
            got = manifest_digest({_rel(p, root): content_sha256(p) for p in files})
            n += len(files)
            if got != want:
                bad.append(f"the {len(files)} files {rel}")
            continue
        try:
            p = find_file(root / rel)
        except MissingDataError:
            bad.append(f"{rel} (absent)")
            continue
        n += 1
        if content_sha256(p) != want:
            bad.append(p.relative_to(root).as_posix())
    if bad:
        return "checksum mismatch", "sha256 differs for " + ", ".join(bad)
    return "found", f"sha256 verified for {n} files"


# --- parsed-data cache ----------------------------------------------------------------------------

_CACHE: dict[tuple, Any] = {}


def cached(name: str, files: list[Path], load: Callable[[], Any]) -> Any:
    """``load()`` once per process for the same files (keyed by path, size and mtime)."""
    key = (name, *((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if key not in _CACHE:
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = load()
    return _CACHE[key]


def disk_cached(
    subdir: str, name: str, files: list[Path], build: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], str]:
    """Arrays derived from data files, cached on disk under ``cache_dir()/subdir``.

    The key is ``name`` (include a pipeline version in it) plus every source file's name and
    sha256, so a changed file or pipeline rebuilds. Returns the arrays and ``"hit"`` or
    ``"built"``; an unreadable entry is rebuilt and an unwritable cache only warns.
    """
    import zipfile

    import numpy as np

    h = hashlib.sha256(f"{name}\n".encode())
    for p in files:
        h.update(f"{p.name} {sha256(p)}\n".encode())
    path = cache_dir() / subdir / f"{name}-{h.hexdigest()[:20]}.npz"
    if path.is_file():
        try:
            with np.load(path) as z:
                return {k: z[k] for k in z.files}, "hit"
        except (OSError, ValueError, zipfile.BadZipFile):
            pass
    arrays = build()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError as e:  # a read-only cache costs time on the next run, not this run
        warnings.warn(f"could not write the cache {path}: {e}", stacklevel=2)
    return arrays, "built"


# --- status rows (``harness data list|verify``) ---------------------------------------------------


def status(
    dataset: str,
    path: str | os.PathLike,
    source: str,
    check: Callable[[], str],
    sums: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ``Task.data_status()`` dict, built by calling ``check()``.

    ``check()`` loads and parses the data and returns a detail line: the status is ``found`` on
    success, ``missing``/``corrupt`` on a DataError. ``sums`` (see ``verify_sha256``) are kept
    for ``status_rows(verify=True)``.
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
    return row


def status_rows(
    data_dir: str | os.PathLike | None = None,
    verify: bool = False,
    tasks: list[str] | None = None,
) -> list[dict[str, Any]]:
    """One row per registered real-data task: ``task, dataset, status, path, source, detail``.

    Args:
        data_dir: the data root (resolved as in ``data_root``).
        verify: also check the files against the sha256 sums the task ships (the ``sha256``
            entry of its ``data_status()``, see ``status``; or ``data_status(verify=True)`` when
            the task takes that argument); status becomes ``"checksum mismatch"`` when they
            differ (a task without sums says so in ``detail``).
        tasks: only these task names (default: all registered).

    Status is one of ``found``, ``missing``, ``checksum mismatch``, ``corrupt``; tasks whose data
    are generated (``data_status()`` is None) are left out.
    """
    from harness.registry import TASKS

    rows = []
    for name, cls in TASKS.items():
        if tasks is not None and name not in tasks:
            continue
        try:
            task = cls(data_dir=str(data_dir) if data_dir else None)
            self_check = "verify" in inspect.signature(task.data_status).parameters
            st = task.data_status(verify=verify) if self_check else task.data_status()
        except DataError as e:
            self_check, st = False, {"status": "corrupt", "detail": str(e)}
        if st is None:
            continue
        sums = st.pop("sha256", None)
        row = {
            "task": name,
            "dataset": st.get("dataset", name),
            "status": st.get("status", "?"),
            "path": st.get("path") or str(data_root(data_dir)),
            "source": st.get("source", ""),
            "detail": st.get("detail", ""),
        }
        if verify and row["status"] == "found":
            if sums:
                try:
                    row["status"], checked = verify_sha256(row["path"], sums)
                    row["detail"] = f"{row['detail']}; {checked}"
                except DataError as e:
                    row["status"], row["detail"] = "corrupt", str(e)
            elif not self_check:
                row["detail"] += "; no known checksums to verify against"
        rows.append(row)
    return rows


# --- balanced, stratified splits (the S-SA time-series tasks) -----------------------------------


def balanced_splits(
    x: np.ndarray,
    y: np.ndarray,
    seed: int,
    limit: int = 0,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> Splits:
    """Balance a binary dataset and split it (80/10/10 by default), all drawn from ``seed``.

    Every series of the smaller class is kept and as many of the larger class are sampled
    without replacement; each class is then split by ``fractions`` (stratified, so every split is
    balanced) and each split shuffled. ``limit`` > 0 keeps at most that many series (half per
    class) for smoke runs.

    Args:
        x: ``[N, T, V]`` inputs.
        y: ``[N]`` labels in {0, 1}.
        seed: the run seed; the balancing sample and the split both depend on it.
        limit: when > 0, keep at most ``limit // 2`` series per class (at least 3); 0 keeps all.
        fractions: the (train, validation, test) shares of each class; the test split takes
            what is left, and validation and test get at least one series each.

    Returns:
        Splits of float32 ``x`` and int64 ``y``, with class counts in ``info``.
    """
    import torch

    from harness.task import Split, Splits

    rng = np.random.default_rng(seed)
    by_class = [rng.permutation(np.flatnonzero(y == c)) for c in (0, 1)]
    k = min(len(c) for c in by_class)
    if k < 3:
        raise CorruptDataError(f"too few series to split: {k} in the smaller class (need 3)")
    if limit:
        k = min(k, max(limit // 2, 3))
    parts: list[list[np.ndarray]] = [[], [], []]
    for idx in by_class:
        idx = idx[:k]
        n_va = max(1, round(fractions[1] * k))  # never an empty validation or test split
        n_tr = min(round(fractions[0] * k), k - n_va - 1)
        for i, seg in enumerate((idx[:n_tr], idx[n_tr : n_tr + n_va], idx[n_tr + n_va :])):
            parts[i].append(seg)
    splits = []
    for segs in parts:
        idx = rng.permutation(np.concatenate(segs))
        xs = torch.tensor(x[idx], dtype=torch.float32)
        splits.append(Split(xs, torch.tensor(y[idx], dtype=torch.int64)))
    info = {"n_positive": int((y == 1).sum()), "n_negative": int((y == 0).sum()), "per_class": k}
    return Splits(*splits, info=info)
