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
import io
import json
import os
import warnings
import zlib
from collections.abc import Callable, Iterable
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


# --- content sums, cached per file in the user cache ---------------------------------------------

_SUM_CACHES: dict[Path, dict[str, list]] = {}


def _sum_cache() -> tuple[Path, dict[str, list]]:
    path = cache_dir() / "sha256-cache.json"
    if path not in _SUM_CACHES:
        try:
            loaded = json.loads(path.read_text())
            _SUM_CACHES[path] = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            _SUM_CACHES[path] = {}
    return path, _SUM_CACHES[path]


def stat_key(st: os.stat_result) -> list[int]:
    """What a cached sum is keyed on: device, inode, size, mtime and ctime (nanoseconds).

    A user can set a file's mtime back (``touch -r``, ``cp -p``, ``rsync -t``, ``tar x`` do) but
    not its ctime, which any write or ``utime`` call moves; a file copied or replaced gets a new
    inode. So a changed file never matches its old entry, whatever its size and mtime say.
    """
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def cached_content_sha256(path: str | os.PathLike, fresh: bool = False) -> str:
    """``content_sha256`` remembered per file under ``stat_key`` (``save_sum_cache``).

    A file whose key is unchanged is not read again, so checking a dataset before a second run
    costs a ``stat`` per file.

    Args:
        path: the file.
        fresh: hash it whatever the cache says (``harness data verify``), and remember the sum.
    """
    p = Path(path).absolute()
    st = p.stat()
    _, sums = _sum_cache()
    hit = sums.get(str(p))
    key = stat_key(st)
    if not fresh and isinstance(hit, list) and len(hit) == len(key) + 1 and hit[:-1] == key:
        return hit[-1]
    digest = content_sha256(p)
    sums[str(p)] = [*key, digest]
    return digest


def save_sum_cache() -> None:
    """Write the remembered sums to ``cache_dir()/sha256-cache.json`` (atomically; best effort)."""
    path, sums = _sum_cache()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(sums))
        os.replace(tmp, path)
    except OSError:  # an unwritable cache costs time on the next run, not this run
        tmp.unlink(missing_ok=True)


def file_sums(
    folder: str | os.PathLike,
    keys: Iterable[str],
    fresh: bool = False,
    members: dict[str, dict[str, str]] | None = None,
) -> tuple[dict[str, str], list, int]:
    """The content sums of the files ``keys`` name under ``folder`` (as ``verify_sha256`` reads).

    Args:
        folder: the dataset folder the keys are relative to.
        keys: relative paths (``NAME`` also finds ``NAME.gz``) or globs.
        fresh: hash every file, whatever the cache says (``cached_content_sha256``).
        members: filled, when given, with ``{glob: {relative path: sha256}}`` of each glob's
            files.

    Returns:
        ``({key: sha256, or manifest_digest of the files a glob matches}, absent keys, files)``.
    """
    root, got, absent, n = Path(folder), {}, [], 0
    for rel in keys:
        if any(c in rel for c in "*?["):
            files = sorted(p for p in root.glob(rel) if p.is_file())
            sums = {_rel(p, root): cached_content_sha256(p, fresh) for p in files}
            got[rel] = manifest_digest(sums)
            if members is not None:
                members[rel] = sums
            n += len(files)
            continue
        try:
            p = find_file(root / rel)
        except MissingDataError:
            absent.append(rel)
            continue
        got[rel] = cached_content_sha256(p, fresh)
        n += 1
    save_sum_cache()
    return got, absent, n


def check_sha256(
    folder: str | os.PathLike,
    known: dict[str, str],
    fresh: bool = False,
    known_members: dict[str, dict[str, str]] | None = None,
) -> tuple[str, str, str]:
    """``verify_sha256`` plus the digest of the files as found (``manifest_digest`` of their sums).

    The digest equals ``manifest_digest(known)`` exactly when every file matches.

    Args:
        folder: the dataset folder.
        known: as ``verify_sha256``.
        fresh: hash every file, whatever the cache says.
        known_members: for a glob of ``known``, the published sum of each of its files
            (``read_sums``), so that a mismatch names the files that differ, are absent or are
            extra; without it a mismatch names the glob.
    """
    root = Path(folder)
    members: dict[str, dict[str, str]] = {}
    got, absent, n = file_sums(root, known, fresh, members)
    bad = [f"{rel} (absent)" for rel in absent]
    for rel, want in known.items():
        if rel in got and got[rel] != want:
            if rel in (known_members or {}):
                bad += member_differences(members.get(rel, {}), known_members[rel])
            elif any(c in rel for c in "*?["):
                count = sum(1 for p in root.glob(rel) if p.is_file())
                bad.append(f"one or more of the {count} files {rel}")
            else:
                bad.append(find_file(root / rel).relative_to(root).as_posix())
    digest = manifest_digest({**got, **{rel: "absent" for rel in absent}})
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        return "checksum mismatch", "sha256 differs for " + shown, digest
    return "found", f"sha256 verified for {n} files", digest


def member_differences(got: dict[str, str], want: dict[str, str]) -> list[str]:
    """The files of a glob whose sums differ from the published ones: changed, absent, extra."""
    out = [rel for rel in sorted(want) if rel in got and got[rel] != want[rel]]
    out += [f"{rel} (absent)" for rel in sorted(want) if rel not in got]
    out += [f"{rel} (not in the published data)" for rel in sorted(got) if rel not in want]
    return out or ["the file list"]


def read_sums(path: str | os.PathLike) -> dict[str, str]:
    """A ``sha256sum`` listing (``<hex>  <relative path>`` per line) as ``{path: sha256}``."""
    sums = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        digest, _, rel = line.strip().partition("  ")
        if digest and rel:
            sums[rel.lstrip("*")] = digest
    return sums


def verify_sha256(folder: str | os.PathLike, known: dict[str, str]) -> tuple[str, str]:
    """Check the files under ``folder`` against known content sha256 sums.

    Sums are cached per file (``cached_content_sha256``), so a second check is nearly free.

    Args:
        folder: the dataset folder the keys are relative to.
        known: ``{relative path: sha256}`` (``NAME`` also matches ``NAME.gz``, hashed
            decompressed), or ``{glob: digest}`` where the digest is ``manifest_digest`` of every
            file the glob matches (one constant for a folder of hundreds of files).

    Returns:
        ``(status, detail)`` with status ``"found"`` or ``"checksum mismatch"``.
    """
    return check_sha256(folder, known)[:2]


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
    files: list[str] | None = None,
) -> dict[str, Any]:
    """A ``Task.data_status()`` dict, built by calling ``check()``.

    ``check()`` loads and parses the data and returns a detail line: the status is ``found`` on
    success, ``missing``/``corrupt`` on a DataError. ``sums`` (see ``verify_sha256``) are the
    published checksums ``task_row(verify=True)`` checks; data without them name the files they
    read in ``files`` (relative paths or globs), whose content digest then identifies them. A
    task whose sums hold a glob's one digest may add the published sum of each of its files to
    the row as ``sha256_members`` (``{glob: {path: sha256}}``, ``check_sha256``), so that a
    mismatch names the files.
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

    With ``verify`` a found dataset is checked against the task's published sums and the row
    gains ``digest`` (``manifest_digest`` of the files as found) and ``verified`` (True when
    they match the published sums; False when they differ or the task publishes none). With
    ``fresh`` every file is hashed again, whatever the sum cache says.
    """
    try:
        st = task.data_status()
    except DataError as e:
        st = {"status": "corrupt", "detail": str(e)}
    if st is None:
        return None
    sums, files = st.pop("sha256", None), st.pop("files", None)
    members = st.pop("sha256_members", None)
    row = {
        "task": name,
        "dataset": st.get("dataset", name),
        "status": st.get("status", "?"),
        "path": st.get("path") or str(data_root(task.data_dir)),
        "source": st.get("source", ""),
        "detail": st.get("detail", ""),
    }
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


def status_rows(
    data_dir: str | os.PathLike | None = None,
    verify: bool = False,
    tasks: list[str] | None = None,
    fresh: bool = False,
) -> list[dict[str, Any]]:
    """One row per registered real-data task: ``task, dataset, status, path, source, detail``.

    Args:
        data_dir: the data root (resolved as in ``data_root``).
        verify: also check the files against the sha256 sums the task ships (the ``sha256``
            entry of its ``data_status()``, see ``status``); status becomes
            ``"checksum mismatch"`` when they differ, and the row gains ``check`` (the result,
            e.g. ``sha256 verified for 3 files``), ``digest`` and ``verified`` (``task_row``).
        tasks: only these task names (default: all registered).
        fresh: with ``verify``, hash every file again whatever the sum cache says (``harness
            data verify`` does: a check that trusts the cache is not a check).

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
        except DataError as e:
            rows.append(
                {
                    "task": name,
                    "dataset": name,
                    "status": "corrupt",
                    "path": str(data_root(data_dir)),
                    "source": "",
                    "detail": str(e),
                }
            )
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
    """Verify the data of every run that reads data files and key the runs by it.

    Each distinct (task, task config) is checked once (``task_row(verify=True)``; sums are
    cached per file, so a rerun costs nothing) and its runs get ``RunConfig.data``, which is part
    of their run id: a record made on other data never stands in for one made on the published
    data. Runs of generated tasks are returned unchanged.

    Args:
        cfgs: ``RunConfig`` s (``harness.sweep.build_configs``).
        data_dir: the data root (``data_root``).
        allow_unverified: run on data that differ from the published sums (recorded as
            ``verified: false`` with their own digest) instead of refusing them.

    Returns:
        The configs with their data identity, and notes for data without published sums.

    Raises:
        DataError: one line naming, per task, the files that differ (or why the data cannot be
            read), unless ``allow_unverified`` covers it.
    """
    import dataclasses

    from harness.config import DataIdentity
    from harness.registry import TASKS

    known: dict[tuple[str, str], DataIdentity | None] = {}
    bad: list[str] = []
    notes: list[str] = []
    out = []
    for cfg in cfgs:
        key = (cfg.task, repr(cfg.task_cfg))
        if key not in known:
            row = task_row(cfg.task, TASKS.get(cfg.task)(cfg.task_cfg, data_dir), verify=True)
            known[key] = None
            if row is None:
                pass
            elif row["status"] == "found" or (
                row["status"] == "checksum mismatch" and allow_unverified
            ):
                known[key] = DataIdentity(row["digest"], row["verified"])
                if not row["verified"]:
                    notes.append(f"task '{cfg.task}' runs on unverified data ({row['check']})")
            elif row["status"] == "checksum mismatch":
                bad.append(
                    f"the data of task '{cfg.task}' under {row['path']} do not match the "
                    f"published checksums ({row['check']})"
                )
            else:
                bad.append(f"task '{cfg.task}': {row['detail']}")
        ident = known[key]
        out.append(cfg if ident is None else dataclasses.replace(cfg, data=ident))
    if bad:
        hint = " (--allow-unverified-data runs on them anyway)" if not allow_unverified else ""
        raise DataError("; ".join(bad) + (hint if "checksums" in "".join(bad) else ""))
    return out, notes


# --- downloads (``harness data fetch``) ----------------------------------------------------------

MIRROR_ENV = "HARNESS_DATA_MIRROR"


class Fetcher:
    """Downloads a task's published files and installs them, verified, under the data root.

    Every download goes to a temporary file that is renamed when complete; a dataset is built in
    a staging folder next to its destination, checked against the published sums and only then
    moved into place, so a failed or corrupt download leaves nothing half-unpacked.

    Args:
        root: the data root (``data_root``).
        mirror: a base URL that replaces every official address: a file is fetched from
            ``MIRROR/<dataset folder>/<file name>`` (default: ``$HARNESS_DATA_MIRROR``, else the
            official addresses).
        say: called with one line per download.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        mirror: str | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.mirror = mirror or os.environ.get(MIRROR_ENV) or None
        self.say = say or (lambda line: None)

    def address(self, url: str, dataset: str) -> str:
        """Where ``url`` is fetched from (the mirror's copy when a mirror is set)."""
        from urllib.parse import quote, unquote

        if not self.mirror:
            return url
        name = unquote(url.rstrip("/").rsplit("/", 1)[-1])
        return f"{self.mirror.rstrip('/')}/{quote(dataset)}/{quote(name)}"

    def download(self, url: str, dataset: str, folder: Path) -> Path:
        """Download ``url`` into ``folder`` (via a temporary file); DataError if it fails."""
        import shutil
        import urllib.request
        from urllib.parse import unquote

        src = self.address(url, dataset)
        dest = folder / (unquote(src.rstrip("/").rsplit("/", 1)[-1]) or "download")
        part = folder / f".{dest.name}.{os.getpid()}.part"
        self.say(f"downloading {src}")
        try:
            with urllib.request.urlopen(src, timeout=60) as r, open(part, "wb") as f:
                shutil.copyfileobj(r, f, 1 << 20)
            os.replace(part, dest)
        except (OSError, ValueError) as e:  # URLError and HTTPError are OSErrors
            part.unlink(missing_ok=True)
            raise DataError(f"cannot download {src}: {getattr(e, 'reason', e)}") from None
        return dest

    def install(
        self,
        dataset: str,
        sums: dict[str, str] | None,
        build: Callable[[Path, Callable[[str], Path]], Any],
    ) -> str:
        """Build ``<root>/<dataset>`` from downloads, verify it, move it into place.

        Args:
            dataset: the dataset folder under the root.
            sums: the published sums (``verify_sha256``); None when none are published (the
                data are then installed unverified and the line says so).
            build: ``build(stage, get)`` writes the dataset's layout into ``stage``; ``get(url)``
                downloads a file and returns its local path.

        Returns:
            One line: installed (and verified), or already present and verified.

        Raises:
            DataError: a download failed, or the files do not match ``sums`` (nothing installed).
        """
        import shutil

        target = self.root / dataset
        if sums and target.is_dir():
            st, detail = verify_sha256(target, sums)
            if st == "found":
                return f"already present in {target} ({detail})"
        work = self.root / f".{dataset}.fetch-{os.getpid()}"
        try:
            shutil.rmtree(work, ignore_errors=True)
            (work / "stage").mkdir(parents=True)
            (work / "downloads").mkdir()
        except OSError as e:
            raise DataError(f"cannot write under {self.root}: {e.strerror or e}") from None
        try:
            stage = work / "stage"
            build(stage, lambda url: self.download(url, dataset, work / "downloads"))
            if sums:
                st, detail, _ = check_sha256(stage, sums)
                if st != "found":
                    raise DataError(
                        f"the download of {dataset} does not match the published checksums "
                        f"({detail}); nothing was installed"
                    )
            else:
                got, _, n = file_sums(stage, ["**/*"])
                detail = (
                    f"no published checksums; content digest {manifest_digest(got)[:12]} "
                    f"of {n} files"
                )
            target.mkdir(parents=True, exist_ok=True)
            for entry in sorted(stage.iterdir()):
                dest = target / entry.name
                if dest.exists() or dest.is_symlink():
                    os.replace(dest, work / f"replaced-{entry.name}")
                os.replace(entry, dest)
        except OSError as e:
            raise DataError(f"cannot install {dataset} under {self.root}: {e}") from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return f"installed in {target} ({detail})"


def extract(archive: Path, pick: Callable[[str], str | None], stage: Path, depth: int = 2) -> int:
    """Copy the members of a zip or tar archive that ``pick`` names into ``stage``.

    Archives inside the archive (``.zip``, ``.tar``, ``.tar.gz``, ``.tgz``) are opened too, up to
    ``depth`` levels (some official downloads wrap the dataset's own archive).

    Args:
        archive: a zip or (compressed) tar file.
        pick: member path (posix, as stored) -> relative destination, or None to leave it.
        stage: the folder destinations are relative to.
        depth: how many nested archives deep to look.

    Returns:
        How many files were written.

    Raises:
        CorruptDataError: the file is no readable archive.
    """
    import shutil
    import tarfile
    import tempfile
    import zipfile

    def members():
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                for info in z.infolist():
                    if not info.is_dir():
                        with z.open(info) as f:
                            yield info.filename, f
        else:
            with tarfile.open(archive) as t:
                for info in t:
                    f = t.extractfile(info) if info.isfile() else None
                    if f is not None:
                        yield info.name, f

    n = 0
    try:
        for name, f in members():
            if depth and name.lower().endswith((".zip", ".tar", ".tar.gz", ".tgz")):
                with tempfile.TemporaryDirectory(dir=stage.parent) as tmp:
                    inner = Path(tmp) / Path(name).name
                    with open(inner, "wb") as out:
                        shutil.copyfileobj(f, out)
                    n += extract(inner, pick, stage, depth - 1)
                continue
            rel = pick(name)
            if rel is None or rel.startswith("/") or ".." in Path(rel).parts:
                continue
            dest = stage / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as out:
                shutil.copyfileobj(f, out)
            n += 1
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError) as e:
        raise CorruptDataError(f"corrupt download {archive.name}: {e}") from None
    return n


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
