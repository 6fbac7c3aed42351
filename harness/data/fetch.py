"""Downloads (``harness data fetch``): a task's published files, verified, under the data root."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.data.files import CorruptDataError
from harness.data.sums import check_sha256, file_sums, manifest_digest, verify_sha256
from harness.errors import DataError

MIRROR_ENV = "HARNESS_DATA_MIRROR"


class Fetcher:
    """Downloads a task's published files and installs them, verified, under ``root``.

    Built in a staging folder, checked, only then moved into place. ``mirror`` (default
    ``$HARNESS_DATA_MIRROR``): fetch ``MIRROR/<dataset folder>/<file name>`` instead.
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

    def download(self, url: str, dataset: str, folder: Path) -> Path:
        """Download ``url`` (the mirror's copy when a mirror is set) into ``folder``; DataError."""
        import shutil
        import urllib.request
        from urllib.parse import quote, unquote

        name = unquote(url.rstrip("/").rsplit("/", 1)[-1])
        src = f"{self.mirror.rstrip('/')}/{quote(dataset)}/{quote(name)}" if self.mirror else url
        dest = folder / (name or "download")
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
        """Build ``<root>/<dataset>`` from downloads, verify it against ``sums``, move it in place.

        ``build(stage, get)`` writes the layout into ``stage``; ``get(url)`` downloads a file.
        Returns one line: installed, or already present. DataError: a failed download, or files
        that do not match ``sums`` (nothing installed).
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
                digest = manifest_digest(got)[:12]
                detail = f"no published checksums; content digest {digest} of {n} files"
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
    """Copy the members of a zip or tar ``archive`` that ``pick`` names into ``stage``; how many.

    ``pick``: member path -> destination in ``stage``, or None; nested archives too, ``depth`` deep.
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
