"""Content sums of dataset files: verification against published sums, and the sum cache.

A file's sum is the sha256 of its content (decompressed for ``NAME.gz``); a folder has one digest
(``manifest_digest``). Sums are cached per file under ``stat_key``. Import from ``harness.data``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.data.files import CorruptDataError, MissingDataError, cache_dir, find_file


def sha256(path: str | os.PathLike, opener: Any = open) -> str:
    """Hex sha256 of a file's bytes (as ``opener`` reads them)."""
    h = hashlib.sha256()
    with opener(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def content_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's content: the decompressed bytes of ``NAME.gz``, else the bytes."""
    p = Path(path)
    if p.suffix != ".gz":
        return sha256(p)
    try:
        return sha256(p, gzip.open)
    except (OSError, EOFError, zlib.error) as e:
        raise CorruptDataError(f"corrupt data file {p}: {e}") from None


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix().removesuffix(".gz")


def manifest_digest(sums: dict[str, str]) -> str:
    """One digest of ``sums`` (path without ``.gz`` -> sha256): of their sorted sha256sum lines."""
    lines = "".join(f"{h}  {rel}\n" for rel, h in sorted(sums.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


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

    A user can set a file's mtime back (``touch -r``, ``cp -p``) but not its ctime, and a file
    copied or replaced gets a new inode: a changed file never matches its old entry.
    """
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def cached_content_sha256(path: str | os.PathLike, fresh: bool = False) -> str:
    """``content_sha256`` remembered per file under ``stat_key`` (``fresh``: hash it anyway)."""
    p = Path(path).absolute()
    _, sums = _sum_cache()
    hit, key = sums.get(str(p)), stat_key(p.stat())
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
    """``({key: sum, a glob's manifest_digest}, absent keys, files)`` of ``keys`` under ``folder``.

    ``members`` gets each glob's ``{relative path: sha256}``.
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
    """``verify_sha256`` plus the files' digest as found (``manifest_digest(known)`` if all match).

    ``known_members``: a glob's published sum per file, so that a mismatch names the files.
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
    """``(status, detail)``: the files under ``folder`` against ``known`` content sums.

    ``known``: ``{relative path: sha256}`` (``NAME`` also matches ``NAME.gz``) or ``{glob:
    manifest_digest}``. Status ``"found"`` or ``"checksum mismatch"``.
    """
    return check_sha256(folder, known)[:2]
