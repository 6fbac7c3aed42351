"""Epileptic seizure detection from single-channel EEG, as set up in S-SA (Table 1).

The paper, and what the three S-SA tasks share (scoring, balanced splits, presets and their
differences from the paper): ``tasks/_ssa.py``. Data: UCI 388 "Epileptic Seizure Recognition" (Wu
& Fokoue 2017), cut from the Bonn EEG sets A-E (Andrzejak et al., Phys. Rev. E 64, 061907, 2001).

Sources, in this order (knob ``source``, default ``auto``), under ``<root>/epileptic_seizure/``:
1. the UCI CSV in its official layout, ``data.csv`` or ``Epileptic Seizure Recognition.csv``
   (or ``.gz``): a header ``<id>,X1..X178,y`` and 11,500 rows, ``y`` = 1 for a seizure;
2. else the Bonn recordings ``bonn_eeg/{Z,O,N,F,S}/*.txt`` (4,097 samples each), each cut into
   23 consecutive 178-sample pieces (the last 3 samples unused) exactly as the CSV was made:
   11,500 series with the same contents, in another order; set S is the seizure class.
``Splits.info["source"]`` records which one was read.

Recordings. Each of the 500 Bonn recordings (one file, 23.6 s) gives 23 consecutive pieces, so
the 11,500 series are 500 groups of 23. From the Bonn files the recording is the file. In the
CSV, the row id ``X<k>.<tag>`` (``X21.V1.791``) names piece k (1-23, samples (k-1)*178 ... of its
recording; epileptic_seizure/PROVENANCE.md checked 17 rows against the Bonn files: ``X21.V1.791``
is ``O080.txt`` piece 21) and the recording's tag; as the tags are not known to be unique across
the five sets, the recording is the tag together with the row's label y. ``split=recording``
checks that this gives whole recordings (every one holds pieces 1..23 once) and refuses the CSV
otherwise (one line; ``task.source=bonn`` reads the recordings themselves). The shared data hold
no copy of the CSV, so this mapping is checked on generated files here, and on the real CSV by
``tests/test_seizures.py`` where one is present (also against the Bonn files, by content).

Splits (knob ``split``):
- ``series`` (default): S-SA's split, by series (``tasks._ssa.balanced_splits``). The 23 pieces of
  a recording are scattered over train, validation and test: on the Bonn data at seed 0, 458 of
  the 460 test series (99.6 %) share their recording with a training series.
- ``recording``: every piece of a recording in one split (``tasks._ssa.group_splits``): per
  class, 80/10/10 of the recordings the balancing sample keeps (all 100 seizure recordings and
  100 of the 400 others: 80/10/10 recordings per class, 3,680 / 460 / 460 series, as ``series``
  gives), drawn from the seed. It asks whether a model recognises a recording it has not seen a
  piece of, which S-SA's split does not.

S-SA's preprocessing: keep the 2,300 seizure series and sample as many non-seizure ones (4,600),
centre each series (subtract its mean over all 178 samples), then average chunks of 10 samples:
178 // 10 = 17 steps, the trailing 8 samples dropped. V = 1.

Differences from the paper:
- A run seed draws the balancing sample, the 80/10/10 split, the initialisation and the batch
  order; S-SA's stds are over 10 random splits (it does not say whether the negatives or the
  initialisation were redrawn), so the harness's std over seeds holds the split's variation and
  the model's together, as S-SA's probably does.
- S-SA's "11,800" series are read as UCI's 11,500 (2,300 per class; the seizure count matches).
- ``scale`` (default ``none``, S-SA's text: centre only). ``series`` also divides each series
  by its own standard deviation, removing the amplitude; it is there to test one explanation of
  why S-SA's GRU reaches 84.7 % where the harness's reaches 96-98 % (docs/papers.md).
- ``split`` (default ``series``, S-SA's split by series, under which 99.6 % of the test series
  share a recording with a training series). ``recording`` keeps every piece of a recording in
  one split; a run's ``Splits.info["split"]`` (its record's ``data.split``) says which it used.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.components.config import MAX_SPLIT, check_knobs, knob
from harness.components.registry import register_task
from harness.data import (
    CorruptDataError,
    MissingDataError,
    disk_cached,
    extract,
    find_file,
    read_sums,
    read_text,
)
from tasks._ssa import SSATask, ssa_presets

SOURCE = "https://archive.ics.uci.edu/dataset/388/epileptic+seizure+recognition"
BONN_SOURCE = (
    "https://www.ukbonn.de/epileptologie/arbeitsgruppen/ag-lehnertz-neurophysik/downloads/"
)
CSV_NAMES = ("data.csv", "Epileptic Seizure Recognition.csv")
# ``harness data fetch``: the official zips of the five Bonn sets (set -> URL)
BONN_ZIPS = {
    "Z": "https://www.ukbonn.de/site/assets/files/21874/z.zip",
    "O": "https://www.ukbonn.de/site/assets/files/21872/o.zip",
    "N": "https://www.ukbonn.de/site/assets/files/21871/n.zip",
    "F": "https://www.ukbonn.de/site/assets/files/21870/f.zip",
    "S": "https://www.ukbonn.de/site/assets/files/21875/s.zip",
}
BONN_SETS = ("Z", "O", "N", "F", "S")  # UCI y = 5, 4, 3, 2, 1; S (y = 1) is the seizure set
SERIES_LEN, PIECES = 178, 23
SOURCES = ("auto", "csv", "bonn")
SCALES = ("none", "series")
SPLITS = ("series", "recording")  # S-SA's split by series | every piece of a recording together
_CSV_ID = re.compile(r"X(\d+)\.(.+)")  # X<piece>.<recording tag>
# manifest_digest of the 500 Bonn files (epileptic_seizure/SHA256SUMS): the data identity of
# every seizures record made on them (part of its run id).
BONN_SHA256 = {"bonn_eeg/*/*": "77845819d1d90e33588bda0dbb42d72d7b6a44b8275953184e63337e4158b0e6"}
# The sum of each of those files, whose manifest_digest is BONN_SHA256's (a test checks): when
# the digest differs, the check names the files that do (``harness data verify seizures``).
BONN_FILE_SUMS = Path(__file__).with_name("sums") / "bonn_eeg.sha256"


@dataclass(frozen=True)
class SeizuresConfig:
    source: str = knob("auto", choices=SOURCES)  # auto: the CSV if present, else Bonn
    chunk: int = knob(10, ge=1, le=SERIES_LEN)  # samples averaged into one step
    # none (S-SA's text: centre only) | series (also divide by the std)
    scale: str = knob("none", choices=SCALES, legacy="none")  # a knob since 76f0e60
    max_series: int = knob(0, ge=0, le=MAX_SPLIT)  # keep at most this many (0: all 4,600)
    # series (S-SA's split) | recording (every piece of a recording in one split)
    split: str = knob("series", choices=SPLITS, legacy="series")  # not in the ids at series

    def __post_init__(self) -> None:
        check_knobs(self, "task", "seizures")


def parse_csv(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The UCI CSV: ``x [N, 178]``, ``y [N]`` in 1..5 and the row ids ``[N]`` (``X21.V1.791``)."""
    rows = list(csv.reader(io.StringIO(read_text(path))))
    if not rows:
        raise CorruptDataError(f"corrupt data file {path}: empty")
    header = [h.strip().strip('"') for h in rows[0]]
    try:
        cols = [header.index(f"X{k}") for k in range(1, SERIES_LEN + 1)]
        ycol = header.index("y")
        data = np.array([[float(r[c]) for c in (*cols, ycol)] for r in rows[1:] if r])
    except (ValueError, IndexError) as e:
        raise CorruptDataError(
            f"corrupt data file {path}: expected header <id>,X1..X178,y and numeric rows ({e})"
        ) from None
    y = data[:, -1].astype(np.int64)
    if len(data) == 0 or not np.isin(y, [1, 2, 3, 4, 5]).all():
        raise CorruptDataError(f"corrupt data file {path}: no rows, or labels outside 1..5")
    ids = np.array([r[0].strip().strip('"') for r in rows[1:] if r])
    return data[:, :-1], y, ids


def csv_recordings(ids: np.ndarray, y: np.ndarray, path: Path | str) -> np.ndarray:
    """The recording of each CSV row (``[N]`` ints): its id's tag and its label, checked whole.

    ``X<k>.<tag>`` is piece k of the recording ``(y, tag)``; every recording must hold pieces
    1..23 once each (the module notes say why the label is part of it).

    Raises:
        CorruptDataError: an id not of that form, or a recording that is not whole.
    """
    parsed = [_CSV_ID.fullmatch(i) for i in ids]
    bad = next((i for i, m in zip(ids, parsed, strict=True) if m is None), None)
    if bad is not None:
        raise CorruptDataError(
            f"corrupt data file {path}: row id '{bad}' is not X<piece>.<recording>, so "
            "split=recording cannot group its rows (task.source=bonn reads the recordings)"
        )
    keys = np.array([f"{label}:{m.group(2)}" for label, m in zip(y, parsed, strict=True)])
    pieces = np.array([int(m.group(1)) for m in parsed])
    names, rec = np.unique(keys, return_inverse=True)
    order = np.lexsort((pieces, rec))
    whole = np.arange(1, PIECES + 1)
    split_at = np.cumsum(np.bincount(rec))[:-1]
    broken = [
        names[r]
        for r, p in enumerate(np.split(pieces[order], split_at))
        if not np.array_equal(p, whole)
    ]
    if broken:
        raise CorruptDataError(
            f"corrupt data file {path}: {len(broken)} of {len(names)} recordings (label:tag of "
            f"the row ids, e.g. '{broken[0]}') do not hold pieces 1..{PIECES} once each, so "
            "split=recording cannot trust them (task.source=bonn reads the recordings)"
        )
    return rec


def parse_bonn(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """The Bonn sets cut UCI-style: ``x [N, 178]`` and UCI labels ``y [N]`` (S -> 1, Z -> 5)."""
    xs, ys = [], []
    for label, name in zip((5, 4, 3, 2, 1), BONN_SETS, strict=True):
        files = sorted(p for p in (folder / name).glob("*") if p.suffix.lower() in (".txt", ".gz"))
        if not files:
            raise MissingDataError(
                f"missing data: no {name}*.txt recordings in {folder / name}. Get the Bonn sets "
                f"from {BONN_SOURCE} or the UCI CSV from {SOURCE}."
            )
        for f in files:
            try:
                v = np.array(read_text(f).split(), dtype=np.float64)
            except ValueError:
                raise CorruptDataError(f"corrupt data file {f}: not one number per line") from None
            if len(v) < PIECES * SERIES_LEN:
                raise CorruptDataError(f"corrupt data file {f}: {len(v)} samples, expected 4,097")
            xs.append(v[: PIECES * SERIES_LEN].reshape(PIECES, SERIES_LEN))
            ys.append(np.full(PIECES, label))
    return np.concatenate(xs), np.concatenate(ys)


# The parsed series are kept on disk (``disk_cached``: parsing the 500 Bonn files takes about
# 0.15 s, which a sweep's planning and each of its worker processes would pay); change this key
# when ``parse_csv`` or ``parse_bonn`` changes.
PARSED = "parsed-v1"


def _csv(path: Path) -> dict[str, np.ndarray]:
    x, y, ids = parse_csv(path)
    return {"x": x, "y": y, "ids": ids}


def _bonn(folder: Path) -> dict[str, np.ndarray]:
    x, y = parse_bonn(folder)
    return {"x": x, "y": y}


def preprocess(x: np.ndarray, chunk: int, scale: str = "none") -> np.ndarray:
    """Centre each series, then mean of each ``chunk``-sample piece: ``[N, 178] -> [N, T, 1]``.

    ``scale="series"`` also divides each centred series by its standard deviation over the 178
    samples, which removes the amplitude (the seizure class's strongest cue); S-SA's text says
    only "centred", see the module notes.
    """
    x = x - x.mean(1, keepdims=True)
    if scale == "series":
        x = x / np.maximum(x.std(1, keepdims=True), 1e-12)
    T = x.shape[1] // chunk  # 17; the trailing 178 mod 10 = 8 samples are dropped
    return x[:, : T * chunk].reshape(len(x), T, chunk).mean(2)[..., None]


@register_task("seizures")
class Seizures(SSATask):
    """Seizure vs non-seizure EEG series, S-SA's balanced 17-step version (accuracy %)."""

    config_cls = SeizuresConfig
    presets = ssa_presets(smoke_series=400, quick_epochs=15, lam=2e-4)  # lambda: S-SA Table 1
    description = "Epileptic seizure EEG (UCI 388 / Bonn), balanced, 17 steps (accuracy %)"
    dataset = "epileptic_seizure"
    data_source = SOURCE

    @property
    def input_size(self) -> int:
        return 1

    def raw(self) -> tuple[np.ndarray, np.ndarray, str]:
        """The 11,500 raw series, UCI labels and a description of the source used (cached)."""
        x, y, _, source = self.load()
        return x, y, source

    def groups(self) -> np.ndarray:
        """The recording of each series (``[N]`` ints; ``split=recording``)."""
        x, y, ids, source = self.load()
        if ids is None:  # the Bonn files, read one after the other: 23 pieces each
            return np.arange(len(x)) // PIECES
        return csv_recordings(ids, y, source.split(": ", 1)[1])

    def load(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str]:
        """``raw``'s series and labels, the CSV's row ids (None for the Bonn files), the source."""
        if self.cfg.source in ("auto", "csv"):
            for name in CSV_NAMES:
                try:
                    path = find_file(self.folder / name)
                except MissingDataError:
                    continue
                a, _ = disk_cached("seizures", PARSED + "-csv", [path], lambda p=path: _csv(p))
                return a["x"], a["y"], a["ids"], f"uci-csv: {path}"
            if self.cfg.source == "csv":
                raise MissingDataError(
                    f"missing data file {self.folder / CSV_NAMES[0]} (or "
                    f"'{CSV_NAMES[1]}', or .gz). Get it from {SOURCE}."
                )
        bonn = self.folder / "bonn_eeg"
        if not bonn.is_dir():
            raise MissingDataError(
                f"missing data: neither the UCI CSV {self.folder / CSV_NAMES[0]} nor the Bonn "
                f"sets {bonn}/{{Z,O,N,F,S}}. Get the CSV from {SOURCE} or the sets from "
                f"{BONN_SOURCE}."
            )
        files = sorted(p for p in bonn.glob("*/*") if p.is_file())
        a, _ = disk_cached("seizures", PARSED + "-bonn", files, lambda: _bonn(bonn))
        return a["x"], a["y"], None, f"bonn-eeg: {bonn}"

    def series(self) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        x, y, source = self.raw()
        labels = (y == 1).astype(np.int64)  # seizure vs the four other sets
        x = preprocess(x, self.cfg.chunk, self.cfg.scale)
        return x, labels, {"source": source, "series": len(x)}

    def found(self) -> tuple[str, dict[str, Any]]:
        x, y, source = self.raw()
        detail = f"{len(x):,} series x {x.shape[1]} ({(y == 1).sum():,} seizure) from {source}"
        if source.startswith("bonn"):
            members = {"bonn_eeg/*/*": read_sums(BONN_FILE_SUMS)}
            return detail, {"sha256": BONN_SHA256, "sha256_members": members}
        # no published sums for the CSV: its content digest identifies it
        csv_file = Path(source.split(": ", 1)[1]).relative_to(self.folder)
        return detail, {"files": [csv_file.as_posix()]}

    def fetch(self, fetcher: Any) -> str:
        """The five Bonn sets into ``bonn_eeg/{Z,O,N,F,S}/``, verified against their digest.

        The UCI CSV is not fetched: no published sums cover it, and the Bonn files hold the same
        series.
        """

        def build(stage: Path, get: Any) -> None:
            for name, url in BONN_ZIPS.items():
                pattern = re.compile(rf"{name}\d{{3}}\.txt", re.IGNORECASE)

                def pick(
                    member: str, pattern: re.Pattern = pattern, name: str = name
                ) -> str | None:
                    base = member.rsplit("/", 1)[-1]
                    ok = "__MACOSX" not in member and pattern.fullmatch(base)
                    return f"bonn_eeg/{name}/{base}" if ok else None

                extract(get(url), pick, stage)

        return fetcher.install("epileptic_seizure", BONN_SHA256, build)
