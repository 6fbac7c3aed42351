"""Anomaly detection in Yahoo! Webscope S5 traffic series, as set up in S-SA (Table 3).

Paper (S-SA): Hartvigsen, Sen, Kong, Rundensteiner, "Learning to Selectively Update State Neurons
in Recurrent Networks", CIKM 2020, https://doi.org/10.1145/3340531.3412058, section 4.1. Data:
Yahoo! Webscope "S5 - A Labeled Anomaly Detection Dataset" v1.0, A1Benchmark (Laptev, Amizadeh,
Flint, KDD 2015). Yahoo's terms forbid redistribution: each user obtains it from Yahoo.

Files: ``real_1.csv`` ... ``real_67.csv`` (``timestamp,value,is_anomaly``; a copy without the
header line is accepted) in ``<root>/yahoo_s5/ydata-labeled-time-series-anomalies-v1_0/
A1Benchmark/`` (the archive's layout) or ``<root>/yahoo_s5/A1Benchmark/``.

Preprocessing (S-SA: "chunk into subsequences of length 25; all subsequences with anomalies +
equal number without -> 418"): the 67 series are concatenated in numeric file order, cut into
consecutive non-overlapping length-25 windows (the final remainder dropped), and a window is an
anomaly when any of its points is one. This reproduces S-SA's count: 3,794 windows, 209 with an
anomaly, 209 + 209 = 418 series (yahoo_s5/PROVENANCE.md). V = 1 (the value), binary
classification (2 logits, cross-entropy), last-step read-out, accuracy in percent.

Differences from the paper:
- Windows may straddle two series (that is what reproduces 209; per-file chunking gives 179).
- The values are used as they are (S-SA describes no scaling for Yahoo).
- The balancing sample and the stratified 80/10/10 split are drawn from the run seed.
- Epochs (50) and batch size (32) of the paper preset are [INFERRED]; S-SA states neither.
- The data are not shipped; the loader is tested on generated files in the same format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import (
    MAX_SEQ_LEN,
    MAX_SPLIT,
    ModelConfig,
    Preset,
    TrainConfig,
    check_knobs,
    knob,
)
from harness.data import (
    CorruptDataError,
    MissingDataError,
    NotFetchableError,
    balanced_splits,
    cached,
    data_root,
    read_text,
    status,
)
from harness.registry import register_task
from harness.task import Splits, Task

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


def _presets() -> dict[str, Preset]:
    return {
        "smoke": Preset(
            train=TrainConfig(epochs=2, batch_size=32, lr=1e-2, eval_batch_size=500),
            model=ModelConfig(hidden_size=10),
            task={"max_series": 200},
        ),
        "quick": Preset(
            train=TrainConfig(epochs=30, batch_size=32, lr=1e-3, eval_batch_size=500),
            model=ModelConfig(hidden_size=50),
            methods={"sa-rnn": {"lam": 1e-3}},
        ),
        # S-SA section 4.1 / Table 3: D = 50, Adam 1e-3, SA-RNN lambda = 1e-3.
        "paper": Preset(
            train=TrainConfig(epochs=50, batch_size=32, lr=1e-3, eval_batch_size=500),
            model=ModelConfig(hidden_size=50),
            methods={"sa-rnn": {"lam": 1e-3}},
        ),
    }


@register_task("yahoo")
class Yahoo(Task):
    """Does a length-25 window of Yahoo A1 traffic contain an anomaly (accuracy %)."""

    kind = "classification"
    readout = "last"
    primary = "accuracy"
    higher_is_better = True
    config_cls = YahooConfig
    presets = _presets()
    description = "Yahoo Webscope S5 A1, balanced length-25 windows, anomaly or not (accuracy %)"

    @property
    def folder(self) -> Path:
        return data_root(self.data_dir) / "yahoo_s5"

    @property
    def input_size(self) -> int:
        return 1

    @property
    def output_size(self) -> int:
        return 2

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

    def splits(self, seed: int) -> Splits:
        x, y, d, n_files = self.windows()
        out = balanced_splits(x, y, seed, self.cfg.max_series)
        out.info.update(source=str(d), files=n_files, windows=len(x))
        return out

    def data_status(self) -> dict[str, Any]:
        found: dict[str, Path] = {}

        def check() -> str:
            x, y, d, n = self.windows()
            found["dir"] = d
            return f"{n} files, {len(x):,} windows ({int(y.sum()):,} with an anomaly) in {d}"

        row = status("yahoo_s5", self.folder, SOURCE, check)
        if "dir" in found:  # the checksums are relative to the A1Benchmark folder
            row.update(path=str(found["dir"]), sha256=A1_SHA256)
        return row

    def fetch(self, fetcher: Any) -> str:
        """Yahoo's terms forbid redistribution: say how to obtain the data."""
        raise NotFetchableError(
            f"Yahoo S5 cannot be downloaded for you (its licence forbids redistribution): request "
            f"it from {SOURCE}, then put A1Benchmark/real_*.csv under {self.folder / FOLDERS[0]}"
        )
