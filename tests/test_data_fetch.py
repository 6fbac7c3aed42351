"""`harness data fetch` against a local HTTP server on 127.0.0.1 serving small archives in the
official layouts (no test reaches the internet): download, verify, unpack; a corrupt download
leaves nothing behind."""

from __future__ import annotations

import functools
import http.server
import io
import tarfile
import threading
import zipfile

import pytest

import tasks.har
import tasks.ptb
import tasks.seizures
from harness import data
from harness.cli import main


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A folder served on 127.0.0.1; ``HARNESS_DATA_MIRROR`` points at it."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(Quiet, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(data.MIRROR_ENV, f"http://127.0.0.1:{server.server_port}")
    yield served
    server.shutdown()
    server.server_close()


def errors(capsys) -> list[str]:
    """The error lines on stderr (progress lines, ``downloading ...``, go there too)."""
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]


def sums_of(texts: dict[str, str]) -> dict[str, str]:
    """Content sums of ``{relative path: text}`` as ``content_sha256`` gives them."""
    import hashlib

    return {k: hashlib.sha256(v.encode()).hexdigest() for k, v in texts.items()}


PTB = {"ptb.train.txt": " a b c\n b a\n", "ptb.valid.txt": " a b\n", "ptb.test.txt": " b c\n"}


def serve_ptb(served, texts=PTB):
    (served / "ptb").mkdir(exist_ok=True)
    for name, text in texts.items():
        (served / "ptb" / name).write_text(text)


def test_fetch_ptb_hapt_and_bonn_into_the_loaders_layout(tmp_path, mirror, monkeypatch, capsys):
    root = tmp_path / "root"
    serve_ptb(mirror)
    monkeypatch.setattr(tasks.ptb, "SHA256", sums_of(PTB))
    # HAPT: UCI's zip, with a top folder and macOS junk
    raw = {"RawData/acc_exp01_user01.txt": "1 2 3\n", "RawData/labels.txt": "1 1 1 1 1\n"}
    (mirror / "hapt").mkdir()
    with zipfile.ZipFile(mirror / "hapt" / tasks.har.HAPT_ZIP.rsplit("/", 1)[1], "w") as z:
        for rel, text in raw.items():
            z.writestr(f"HAPT Data Set/{rel}", text)
        z.writestr("HAPT Data Set/README.txt", "readme\n")
        z.writestr("__MACOSX/HAPT Data Set/RawData/._labels.txt", "junk")
    monkeypatch.setattr(tasks.har, "HAPT_RAW_DIGEST", data.manifest_digest(sums_of(raw)))
    # Bonn: five zips (N's files end in .TXT, as published)
    bonn = {}
    (mirror / "epileptic_seizure").mkdir()
    for s, url in tasks.seizures.BONN_ZIPS.items():
        with zipfile.ZipFile(mirror / "epileptic_seizure" / url.rsplit("/", 1)[1], "w") as z:
            for i in (1, 2):
                name = f"{s}{i:03d}.{'TXT' if s == 'N' else 'txt'}"
                z.writestr(name, f"{i}\r\n{s}\r\n")
                bonn[f"bonn_eeg/{s}/{name}"] = f"{i}\r\n{s}\r\n"
            z.writestr(f"__MACOSX/._{s}001.txt", "junk")
    monkeypatch.setattr(
        tasks.seizures, "BONN_SHA256", {"bonn_eeg/*/*": data.manifest_digest(sums_of(bonn))}
    )
    assert main(["data", "fetch", "ptb", "har", "seizures", "--data-dir", str(root)]) == 0
    err = capsys.readouterr().err
    assert err.count("installed in") == 3 and "127.0.0.1" in err
    assert (root / "ptb" / "ptb.valid.txt").read_text() == PTB["ptb.valid.txt"]
    assert sorted(p.name for p in (root / "hapt" / "RawData").iterdir()) == [
        "acc_exp01_user01.txt",
        "labels.txt",
    ]
    assert (root / "hapt" / "README.txt").is_file()
    assert (root / "epileptic_seizure" / "bonn_eeg" / "N" / "N002.TXT").is_file()
    assert len(list((root / "epileptic_seizure" / "bonn_eeg").glob("*/*"))) == 10
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []  # no leftovers
    # the loaders see verified data; a second fetch downloads nothing
    (row,) = data.status_rows(root, verify=True, tasks=["ptb"])
    assert row["verified"], row
    folder, sums = root / "epileptic_seizure", tasks.seizures.BONN_SHA256
    assert data.verify_sha256(folder, sums)[0] == "found"
    assert main(["data", "fetch", "ptb", "--data-dir", str(root)]) == 0
    err = capsys.readouterr().err
    assert "already present" in err and "downloading" not in err


def test_a_corrupt_download_installs_nothing(tmp_path, mirror, monkeypatch, capsys):
    root = tmp_path / "root"
    serve_ptb(mirror, {**PTB, "ptb.test.txt": " tampered\n"})
    monkeypatch.setattr(tasks.ptb, "SHA256", sums_of(PTB))
    assert main(["data", "fetch", "ptb", "--data-dir", str(root)]) == 2
    err = errors(capsys)
    assert len(err) == 1 and "ptb.test.txt" in err[0] and "nothing was installed" in err[0]
    assert not (root / "ptb").exists() and list(root.iterdir()) == []
    # an older copy in place stays as it was
    (root / "ptb").mkdir()
    (root / "ptb" / "ptb.test.txt").write_text("old\n")
    assert main(["data", "fetch", "ptb", "--data-dir", str(root)]) == 2
    assert [p.name for p in root.iterdir()] == ["ptb"]
    assert [p.read_text() for p in (root / "ptb").iterdir()] == ["old\n"]


def test_missing_file_and_licensed_data_are_one_line_errors(tmp_path, mirror, capsys):
    root = str(tmp_path / "root")
    assert main(["data", "fetch", "ptb", "--data-dir", root]) == 2  # nothing served: 404
    err = errors(capsys)
    assert len(err) == 1 and "cannot download" in err[0] and "ptb.train.txt" in err[0]
    assert main(["data", "fetch", "yahoo", "--data-dir", root]) == 2
    err = errors(capsys)
    assert len(err) == 1 and "licence" in err[0] and "webscope" in err[0]


def test_buzz_tar_is_unpacked_unverified(tmp_path, mirror, capsys):
    root = tmp_path / "root"
    rel = "classification/Twitter/Absolute_labeling/Twitter-Absolute-Sigma-500.data"
    (mirror / "buzz_twitter").mkdir()
    with tarfile.open(mirror / "buzz_twitter" / "classification.tar.gz", "w:gz") as t:
        for name in (rel, "classification/TomsHardware/x.data"):
            info = tarfile.TarInfo(name)
            info.size = 4
            t.addfile(info, io.BytesIO(b"1,0\n"))
    assert main(["data", "fetch", "twitter-buzz", "--data-dir", str(root)]) == 0
    assert "no published checksums" in capsys.readouterr().err
    assert (root / "buzz_twitter" / rel).read_text() == "1,0\n"
    assert not (root / "buzz_twitter" / "classification" / "TomsHardware").exists()
