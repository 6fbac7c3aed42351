"""Anomaly detection in Yahoo! Webscope S5 traffic series, as set up in S-SA (Table 3).

The paper, and what the three S-SA tasks share (scoring, balanced splits, presets and their
differences from the paper): ``tasks/_ssa.py``. Data: Yahoo! Webscope "S5 - A Labeled Anomaly
Detection Dataset" v1.0, A1Benchmark (Laptev, Amizadeh, Flint, KDD 2015). Yahoo's terms forbid
redistribution: each user obtains it from Yahoo.

Files: ``real_1.csv`` ... ``real_67.csv`` (``timestamp,value,is_anomaly``; a copy without the
header line is accepted) in ``<root>/yahoo_s5/ydata-labeled-time-series-anomalies-v1_0/
A1Benchmark/`` (the archive's layout) or ``<root>/yahoo_s5/A1Benchmark/``.

Preprocessing (S-SA: "chunk into subsequences of length 25; all subsequences with anomalies +
equal number without -> 418"): the 67 series are concatenated in numeric file order, cut into
consecutive non-overlapping length-25 windows (the final remainder dropped), and a window is an
anomaly when any of its points is one. This reproduces S-SA's count: 3,794 windows, 209 with an
anomaly, 209 + 209 = 418 series (yahoo_s5/PROVENANCE.md). V = 1 (the value).

Differences from the paper:
- Windows may straddle two series (that is what reproduces 209; per-file chunking gives 179).
- The values are used as they are (S-SA describes no scaling for Yahoo).
- The data are not shipped; the loader is tested on generated files in the same format.
- Splits: S-SA's, by series (``tasks/_ssa.py``), the only one. The files are natural groups (67
  traffic series), but S-SA's windows straddle them (that is what gives 209), so a window can
  belong to two series and a split by file is not a partition of S-SA's windows; it would need
  per-file windows, which give 179, not S-SA's count. Left alone: consecutive windows of one
  series may fall in different splits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.components.config import MAX_SEQ_LEN, MAX_SPLIT, check_knobs, knob
from harness.components.registry import register_task
from harness.data import CorruptDataError, MissingDataError, NotFetchableError, cached, read_text
from tasks._ssa import SSATask, ssa_presets

SOURCE = (
    "https://webscope.sandbox.yahoo.com/catalog.php?datatype=s&did=70 (after Yahoo's agreement)"
)
FOLDERS = ("ydata-labeled-time-series-anomalies-v1_0/A1Benchmark", "A1Benchmark")
# manifest_digest of the 67 A1Benchmark files as checked in yahoo_s5/PROVENANCE.md (LF endings,
# with the header line); a copy with other line endings differs only in this checksum.
A1_SHA256 = {"real_*.csv*": "d20669a0ed038baeb66e8497397f6314439275e378760913cd3bcffa1ed574aa"}
_NUM = re.compile(r"real_(\d+)\.csv(\.gz)?$")


@dataclass(frozen=True)
class YahooConfig:
    seq_len: int = knob(25, ge=1, le=MAX_SEQ_LEN)  # points per window
    max_series: int = knob(0, ge=0, le=MAX_SPLIT)  # keep at most this many (0: all 418)

    def __post_init__(self) -> None:
        check_knobs(self, "task", "yahoo")


def parse(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One ``real_N.csv``: values ``[n]`` and 0/1 anomaly flags ``[n]``."""
    lines = [ln for ln in read_text(path).splitlines() if ln.strip()]
    if lines and lines[0].replace(" ", "").lower().startswith("timestamp"):
        lines = lines[1:]
    try:
        rows = np.array([ln.split(",") for ln in lines], dtype=np.float64)
    except ValueError as e:
        raise CorruptDataError(
            f"corrupt data file {path}: expected rows timestamp,value,is_anomaly ({e})"
        ) from None
    if rows.ndim != 2 or rows.shape[1] != 3 or not np.isin(rows[:, 2], [0.0, 1.0]).all():
        raise CorruptDataError(f"corrupt data file {path}: expected rows timestamp,value,0|1")
    return rows[:, 1], rows[:, 2].astype(np.int64)


def windows(series: list[tuple[np.ndarray, np.ndarray]], seq_len: int):
    """Concatenate, cut into ``[M, seq_len, 1]`` windows; label 1 if any point is anomalous."""
    v = np.concatenate([s[0] for s in series])
    a = np.concatenate([s[1] for s in series])
    m = len(v) // seq_len
    return v[: m * seq_len].reshape(m, seq_len, 1), a[: m * seq_len].reshape(m, seq_len).max(1)


@register_task("yahoo")
class Yahoo(SSATask):
    """Does a length-25 window of Yahoo A1 traffic contain an anomaly (accuracy %)."""

    config_cls = YahooConfig
    presets = ssa_presets(smoke_series=200, quick_epochs=30, lam=1e-3)  # lambda: S-SA Table 3
    description = "Yahoo Webscope S5 A1, balanced length-25 windows, anomaly or not (accuracy %)"
    dataset = "yahoo_s5"
    data_source = SOURCE

    @property
    def input_size(self) -> int:
        return 1

    def files(self) -> tuple[Path, list[Path]]:
        """The A1Benchmark folder and its ``real_N.csv`` files in numeric order."""
        for sub in FOLDERS:
            d = self.folder / sub
            found = {int(m.group(1)): p for p in d.glob("real_*") if (m := _NUM.match(p.name))}
            if found:
                return d, [found[k] for k in sorted(found)]
        raise MissingDataError(
            f"missing data: no real_N.csv files in {self.folder / FOLDERS[0]} (or "
            f"{self.folder / FOLDERS[1]}). Get Yahoo S5 from {SOURCE}."
        )

    def windows(self) -> tuple[np.ndarray, np.ndarray, Path, int]:
        d, files = self.files()
        series = cached("yahoo", files, lambda: [parse(p) for p in files])
        return (*windows(series, self.cfg.seq_len), d, len(files))

    def series(self) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        x, y, d, n_files = self.windows()
        return x, y, {"source": str(d), "files": n_files, "windows": len(x)}

    def found(self) -> tuple[str, dict[str, Any]]:
        x, y, d, n = self.windows()
        detail = f"{n} files, {len(x):,} windows ({int(y.sum()):,} with an anomaly) in {d}"
        # the checksums are relative to the A1Benchmark folder
        return detail, {"path": str(d), "sha256": A1_SHA256}

    def fetch(self, fetcher: Any) -> str:
        """Yahoo's terms forbid redistribution: say how to obtain the data."""
        raise NotFetchableError(
            f"Yahoo S5 cannot be downloaded for you (its licence forbids redistribution): request "
            f"it from {SOURCE}, then put A1Benchmark/real_*.csv under {self.folder / FOLDERS[0]}"
        )
