"""Buzz detection in Twitter activity series, as set up in S-SA (Table 2).

The paper, and what the three S-SA tasks share (scoring, balanced splits, presets and their
differences from the paper): ``tasks/_ssa.py``. Data: UCI 248 "Buzz in social media" (Kawala et
al., MARAMI 2013), Twitter part.

File (official layout of UCI's ``classification.tar.gz``, under ``<root>/buzz_twitter/``):
``classification/Twitter/Absolute_labeling/Twitter-Absolute-Sigma-500.data`` (knob
``labeling``: ``absolute``; ``relative-500`` / ``relative-1000`` pick the files under
``Relative_labeling/sigma=500|1000/``); the file name alone anywhere under ``buzz_twitter/`` and
``.gz`` copies are accepted too. 140,707 comma-separated rows of 77 features (11 primary features
x 7 time steps) then the 0/1 buzz label; each row is read as one time step, as S-SA does.

S-SA's preprocessing: the mean of every 5 rows is one step, each feature is centred (its mean over
the whole averaged series subtracted), the series is cut into consecutive length-15 windows, and
the windows with a buzz event are balanced by as many without. V = 77.

Differences from the paper:
- A 5-row step is a buzz step when any of its rows is labelled buzz; a window "contains a buzz
  event" when any of its steps does. S-SA does not say how labels are pooled.
- S-SA's counts do not agree with each other ("28,000 steps" into "2,800" length-15 windows):
  140,707 rows give 28,141 steps and 1,876 windows (the remainders dropped). S-SA reports 776 buzz
  windows (1,552 series); ``Splits.info`` records the counts this loader finds.
- Which of UCI's three Twitter labelings S-SA used is not stated; ``absolute`` (sigma 500) is the
  default.
- The data are not shipped with the project (none could be obtained); the loader is tested on
  generated files in the official layout.
- Splits: S-SA's, by series (``tasks/_ssa.py``), the only one: the file is one stream of rows
  with no identifier (77 features and the label; no topic, source or time stamp column), so it
  has no natural group to split by, and the harness invents none. Consecutive windows of the
  stream are neighbours in time and may fall in different splits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.components.config import MAX_SEQ_LEN, MAX_SPLIT, check_knobs, knob
from harness.components.registry import register_task
from harness.data import CorruptDataError, MissingDataError, cached, extract, find_file, read_text
from tasks._ssa import SSATask, ssa_presets

SOURCE = "https://archive.ics.uci.edu/dataset/248/buzz+in+social+media (classification.tar.gz)"
FILES = {
    "absolute": "classification/Twitter/Absolute_labeling/Twitter-Absolute-Sigma-500.data",
    "relative-500": "classification/Twitter/Relative_labeling/sigma=500/"
    "Twitter-Relative-Sigma-500.data",
    "relative-1000": "classification/Twitter/Relative_labeling/sigma=1000/"
    "Twitter-Relative-Sigma-1000.data",
}
FEATURES = 77
# ``harness data fetch``: UCI's archive (CC BY 4.0); no checksums are published for it
FETCH_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/00248/classification.tar.gz"


@dataclass(frozen=True)
class TwitterBuzzConfig:
    labeling: str = knob("absolute", choices=tuple(FILES))
    # rows averaged into one time step; a window of step * seq_len rows longer than the file is a
    # DataError when the data are read (the file's length is not known before)
    step: int = knob(5, ge=1, le=MAX_SEQ_LEN)
    seq_len: int = knob(15, ge=1, le=MAX_SEQ_LEN)  # steps per series
    max_series: int = knob(0, ge=0, le=MAX_SPLIT)  # keep at most this many balanced series (0: all)

    def __post_init__(self) -> None:
        check_knobs(self, "task", "twitter-buzz")


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def parse(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A Buzz ``.data`` file: features ``[N, 77]`` and 0/1 labels ``[N]``."""
    lines = [ln for ln in read_text(path).splitlines() if ln.strip()]
    if lines and not _is_number(lines[0].split(",")[0]):
        lines = lines[1:]  # a header line
    try:
        data = np.array(",".join(lines).split(","), dtype=np.float64)
    except ValueError as e:
        raise CorruptDataError(f"corrupt data file {path}: non-numeric field ({e})") from None
    if not lines or data.size != len(lines) * (FEATURES + 1):
        raise CorruptDataError(f"corrupt data file {path}: expected rows of 77 features + label")
    data = data.reshape(len(lines), FEATURES + 1)
    y = data[:, -1]
    if not np.isin(y, [0.0, 1.0]).all():
        raise CorruptDataError(f"corrupt data file {path}: the last column is not a 0/1 label")
    return data[:, :-1], y.astype(np.int64)


def preprocess(
    x: np.ndarray, y: np.ndarray, step: int, seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mean of every ``step`` rows, centre each feature, cut into ``[M, seq_len, 77]`` windows."""
    n = len(x) // step
    xs = x[: n * step].reshape(n, step, -1).mean(1)  # [n, 77]
    ys = y[: n * step].reshape(n, step).max(1)  # a step with any buzz row is a buzz step
    xs = xs - xs.mean(0)
    m = n // seq_len
    if m == 0:
        raise CorruptDataError(f"too few rows ({len(x)}) for one window of {seq_len} x {step}")
    wx = xs[: m * seq_len].reshape(m, seq_len, -1)
    wy = ys[: m * seq_len].reshape(m, seq_len).max(1)  # the window contains a buzz event
    return wx, wy


@register_task("twitter-buzz")
class TwitterBuzz(SSATask):
    """Does a 15-step window of Twitter activity contain a buzz event (accuracy %)."""

    config_cls = TwitterBuzzConfig
    presets = ssa_presets(smoke_series=300, quick_epochs=20, lam=2e-3)  # lambda: S-SA Table 2
    description = "Buzz in social media (UCI 248), Twitter, balanced length-15 windows (accuracy %)"
    dataset = "buzz_twitter"
    data_source = SOURCE

    @property
    def input_size(self) -> int:
        return FEATURES

    def path(self) -> Path:
        """The labelled file: the official path, else the same name anywhere under the folder."""
        rel = FILES[self.cfg.labeling]
        try:
            return find_file(self.folder / rel)
        except MissingDataError:
            name = Path(rel).name
            hits = sorted(self.folder.rglob(name)) + sorted(self.folder.rglob(name + ".gz"))
            if hits:
                return hits[0]
            raise MissingDataError(
                f"missing data file {self.folder / rel} (or .gz). Get it from {SOURCE}."
            ) from None

    def windows(self) -> tuple[np.ndarray, np.ndarray, Path]:
        p, cfg = self.path(), self.cfg
        x, y = cached("twitter-buzz", [p], lambda: parse(p))
        return (*preprocess(x, y, cfg.step, cfg.seq_len), p)

    def series(self) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        x, y, p = self.windows()
        return x, y, {"source": str(p), "windows": len(x)}

    def found(self) -> tuple[str, dict[str, Any]]:
        x, y, p = self.windows()
        detail = f"{len(x):,} windows ({int(y.sum()):,} with buzz) from {p.name}"
        # no published sums: the file's content digest identifies the data
        return detail, {"files": [p.relative_to(self.folder).as_posix().removesuffix(".gz")]}

    def fetch(self, fetcher: Any) -> str:
        """UCI's ``classification.tar.gz``, its Twitter files in the official layout (unverified:
        no sums are published)."""

        def pick(name: str) -> str | None:
            parts = name.split("/")
            if "classification" in parts and "Twitter" in parts and "__MACOSX" not in parts:
                return "/".join(parts[parts.index("classification") :])
            return None

        def build(stage: Path, get: Any) -> None:
            if not extract(get(FETCH_URL), pick, stage):
                raise CorruptDataError(f"no classification/Twitter/ files in {FETCH_URL}")

        return fetcher.install("buzz_twitter", None, build)
