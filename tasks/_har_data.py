"""HAR's data: its two sources, read into the same windows (``tasks.har`` is the task).

1. The official UCI HAR layout (``load_uci``): the 9 ``Inertial Signals/`` files, labels and
   subjects of each split.
2. The HAPT raw recordings of the same 30 volunteers, rebuilt into UCI HAR-style windows
   (``rebuild_hapt``) with the pipeline of ``hapt/PROVENANCE.md``: ``filter_recording``'s median
   and Butterworth filters and gravity split, then 128-sample windows with step 64 inside each
   labelled segment of activities 1-6, UCI HAR's 21/9 subject split.

Both give ``x_{split} [N, 128, 9]`` (float32, channels ``CHANNELS``), ``y_{split}`` (1..6) and
``s_{split}`` (subject) for ``train`` and ``test``; a bad file is a DataError naming it.
"""

from __future__ import annotations

import warnings
import zlib
from pathlib import Path

import numpy as np

from harness.data import find_file
from harness.errors import DataError

UCI_URL = "https://archive.ics.uci.edu/dataset/240/human+activity+recognition+using+smartphones"
HAPT_URL = "https://archive.ics.uci.edu/dataset/341"
HAPT_ZIP = (  # ``harness data fetch``: UCI's archive of dataset 341
    "https://archive.ics.uci.edu/static/public/341/"
    "smartphone+based+recognition+of+human+activities+and+postural+transitions.zip"
)
PIPELINE_VERSION = 1  # bump whenever the rebuild or the cached arrays change
WINDOW, STEP, FS = 128, 64, 50.0
TRAIN_SUBJECTS = (1, 3, 5, 6, 7, 8, 11, 14, 15, 16, 17, 19, 21, 22, 23, 25, 26, 27, 28, 29, 30)
TEST_SUBJECTS = (2, 4, 9, 10, 12, 13, 18, 20, 24)
CHANNELS = tuple(f"{s}_{a}" for s in ("body_acc", "body_gyro", "total_acc") for a in "xyz")
# sha256 of the sorted "<sha256 of uncompressed bytes>  RawData/<name>\n" lines of the 123 HAPT
# RawData files (hapt/PROVENANCE.md checksum table); independent of NAME vs NAME.gz storage.
HAPT_RAW_DIGEST = "64088bcf0d7d910bdaafecd29568b4929ab0c408c3a98b95fb9f56928f4a7d1f"


def parse_rows(path: Path, cols: int, small: bool = False) -> np.ndarray:
    """A whitespace-separated numeric file (``NAME`` or ``NAME.gz``) as ``[rows, cols]`` floats.

    pandas' C parser reads the recordings about 4x faster than numpy; a ``small`` file (HAPT's
    labels.txt, 22 KB, read by every process of a sweep that plans or trains HAR) numpy reads in
    a millisecond, where importing pandas takes 0.1 s."""
    p = find_file(path)
    try:
        if small:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # numpy only warns of an empty file
                arr = np.loadtxt(p, ndmin=2)
        else:
            import pandas as pd

            arr = pd.read_csv(p, sep=r"\s+", header=None, dtype=np.float64).to_numpy()
    except (ValueError, UserWarning, OSError, EOFError, zlib.error) as e:  # bad numbers, empty
        why = str(e).splitlines()[0].split("; use `usecols`")[0]  # numpy's advice is not ours
        raise DataError(f"corrupt data file {p}: {why}") from None
    if arr.shape[1] != cols or not np.isfinite(arr).all():  # short rows are padded with NaN
        raise DataError(f"corrupt data file {p}: expected {cols} finite numbers on every row")
    return arr


# --- source 1: the official UCI HAR layout -------------------------------------------------------
def uci_files(folder: Path, split: str) -> list[Path]:
    """The 9 inertial files (UCI HAR order), then ``y_`` and ``subject_`` of a split."""
    sig = [folder / split / "Inertial Signals" / f"{c}_{split}.txt" for c in CHANNELS]
    return sig + [folder / split / f"y_{split}.txt", folder / split / f"subject_{split}.txt"]


def load_uci(folder: Path) -> dict[str, np.ndarray]:
    """``x_{split} [N, 128, 9]``, ``y_{split}`` (1..6), ``s_{split}`` (subject) from UCI HAR."""
    out = {}
    for split in ("train", "test"):
        *sig, yp, sp = uci_files(folder, split)
        y = parse_rows(yp, 1)[:, 0].astype(np.int64)
        subj = parse_rows(sp, 1)[:, 0].astype(np.int64)
        chans = [parse_rows(p, WINDOW) for p in sig]
        for p, a in zip([sp, *sig], [subj, *chans], strict=True):
            if len(a) != len(y):
                raise DataError(f"corrupt data file {p}: {len(a)} rows, {yp.name} has {len(y)}")
        if not np.isin(y, np.arange(1, 7)).all():
            raise DataError(f"corrupt data file {yp}: labels must be 1..6")
        out[f"x_{split}"] = np.stack(chans, -1).astype(np.float32)  # [N, 128, 9]
        out[f"y_{split}"], out[f"s_{split}"] = y, subj
    return out


# --- source 2: rebuilt from the HAPT raw recordings ----------------------------------------------
def hapt_labels(folder: Path) -> np.ndarray:
    """``labels.txt`` rows (experiment, user, activity, start, end), 1-based inclusive."""
    path = folder / "RawData" / "labels.txt"
    labels = parse_rows(path, 5, small=True).astype(np.int64)
    if (labels[:, 3] < 1).any() or (labels[:, 4] < labels[:, 3]).any():
        raise DataError(f"corrupt data file {path}: bad segment bounds")
    return labels


def hapt_files(folder: Path) -> list[Path]:
    """labels.txt plus the acc/gyro files of every labelled experiment (each found or DataError)."""
    raw = folder / "RawData"
    files = [find_file(raw / "labels.txt", HAPT_URL)]
    for e, u in sorted({(int(e), int(u)) for e, u in hapt_labels(folder)[:, :2]}):
        for sensor in ("acc", "gyro"):
            files.append(find_file(raw / f"{sensor}_exp{e:02d}_user{u:02d}.txt", HAPT_URL))
    return files


def filter_recording(acc: np.ndarray, gyro: np.ndarray) -> np.ndarray:
    """Raw ``acc [n, 3]`` (g) and ``gyro [n, 3]`` (rad/s) -> the 9 UCI HAR channels ``[n, 9]``."""
    from scipy.ndimage import median_filter
    from scipy.signal import butter, sosfiltfilt

    noise = butter(3, 20.0, fs=FS, output="sos")
    grav = butter(3, 0.3, fs=FS, output="sos")
    total, body_gyro = (
        sosfiltfilt(noise, median_filter(s, size=(3, 1), mode="nearest"), axis=0)
        for s in (acc, gyro)
    )
    body_acc = total - sosfiltfilt(grav, total, axis=0)  # total = body + gravity
    return np.concatenate([body_acc, body_gyro, total], 1)  # [n, 9]


def rebuild_hapt(folder: Path) -> dict[str, np.ndarray]:
    """UCI HAR-style windows from HAPT RawData, in the layout of ``load_uci``."""
    labels = hapt_labels(folder)
    parts: dict[str, list] = {f"{k}_{s}": [] for s in ("train", "test") for k in "xys"}
    raw = folder / "RawData"
    for e, u in sorted({(int(e), int(u)) for e, u in labels[:, :2]}):
        segs = labels[(labels[:, 0] == e) & (labels[:, 2] <= 6)]
        if len(segs) == 0:
            continue
        acc, gyro = (
            parse_rows(raw / f"{s}_exp{e:02d}_user{u:02d}.txt", 3) for s in ("acc", "gyro")
        )
        if len(acc) != len(gyro):
            name = f"gyro_exp{e:02d}_user{u:02d}.txt"
            raise DataError(f"corrupt data file {raw / name}: {len(gyro)} rows, acc has {len(acc)}")
        if segs[:, 4].max() > len(acc):
            raise DataError(f"corrupt data file {raw / 'labels.txt'}: exp {e} ends past its data")
        sig = filter_recording(acc, gyro)  # [n, 9]
        split = "train" if u in TRAIN_SUBJECTS else "test"
        for _, _, act, start, end in segs:
            for s0 in range(start - 1, end - WINDOW + 1, STEP):  # windows inside the segment
                parts[f"x_{split}"].append(sig[s0 : s0 + WINDOW])
                parts[f"y_{split}"].append(act)
                parts[f"s_{split}"].append(u)
    for split in ("train", "test"):
        if not parts[f"x_{split}"]:
            raise DataError(f"corrupt data file {raw / 'labels.txt'}: no {split} windows")
    return {
        k: np.stack(v).astype(np.float32) if k[0] == "x" else np.array(v, dtype=np.int64)
        for k, v in parts.items()
    }
