"""Human activity recognition (UCI HAR): 6 activities from 128-step windows of 9 inertial channels.

Paper: S-EI (Park & Yoo, "Early Improving Recurrent Elastic Highway Network",
https://arxiv.org/abs/1708.04116) section 4.2, Table 2: raw inertial windows, two stacked layers,
6-way softmax on the last step, Adam 0.0025, batch 200, 100 epochs.
Data: UCI HAR (Anguita et al., ESANN 2013, https://archive.ics.uci.edu/dataset/240), read from its
``Inertial Signals/`` files when present; otherwise rebuilt from the HAPT raw recordings of the same
30 volunteers (Reyes-Ortiz et al., Neurocomputing 2016, https://archive.ics.uci.edu/dataset/341)
with the pipeline of ``hapt/PROVENANCE.md``: median filter (3 samples) and 3rd-order 20 Hz
Butterworth low-pass on acc and gyro, 0.3 Hz Butterworth gravity split of the total acceleration,
128-sample windows with step 64 cut inside each labelled segment of activities 1-6, UCI HAR's
21/9 subject split. Channels in UCI HAR's order (body_acc, body_gyro, total_acc; x, y, z), acc in
g (total_acc includes gravity), gyro in rad/s, no normalisation. The rebuilt windows are cached
under ``harness.data.cache_dir()/har``, keyed by the source files' sha256 and ``PIPELINE_VERSION``.
Reading both sources is ``tasks._har_data``'s; this module is the task.

Differences from the paper:
- The official inertial files are not shipped; the rebuild gives 7,415 / 2,996 windows against
  UCI HAR's 7,352 / 2,947 and is close to, not identical with, its signals (the median length and
  the Butterworth design are unstated; we use zero-phase ``sosfiltfilt`` over each whole
  recording so that filtering does not shift signals against the labels). ``Splits.info["source"]``
  says which data a run used ("uci-har" or "hapt-rebuilt").
- S-EI does not say how it validated. We hold out ``val_subjects`` (3) whole training subjects:
  windows overlap by 50 %, so a window-level split would leak samples into validation.
- Every split is by subject, the dataset's natural group: UCI HAR's own split is by subject (21
  training vs 9 test volunteers, kept as it is), and validation takes whole training subjects,
  so no volunteer has windows in two splits (``Splits.info["subjects"]`` lists each split's).
  Unlike ``seizures`` (``task.split``), there is no split by window to choose instead.
- Validation subjects and subsets are a fixed function of ``data_seed`` (run seeds vary only the
  model, as in the other tasks); the test split is always UCI HAR's 9 test subjects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.components.config import (
    MAX_SEED,
    MAX_SPLIT,
    ModelConfig,
    Preset,
    TrainConfig,
    check_knobs,
    knob,
)
from harness.components.registry import register_task
from harness.components.task import Split, Splits, Task, TaskKind
from harness.data import data_root, disk_cached, extract, find_file, verify_sha256
from harness.errors import ConfigError, DataError
from tasks._har_data import (
    CHANNELS,
    HAPT_RAW_DIGEST,
    HAPT_URL,
    HAPT_ZIP,
    PIPELINE_VERSION,
    TRAIN_SUBJECTS,
    UCI_URL,
    hapt_files,
    load_uci,
    rebuild_hapt,
    uci_files,
)

SOURCES = ("auto", "uci", "hapt")


@dataclass(frozen=True)
class HARConfig:
    # auto: official UCI HAR files when complete, else the HAPT rebuild
    source: str = knob("auto", choices=SOURCES)
    val_subjects: int = knob(3, ge=1, le=len(TRAIN_SUBJECTS) - 1)  # one subject left to train
    max_train: int = knob(0, ge=0, le=MAX_SPLIT)  # 0: all windows
    max_val: int = knob(0, ge=0, le=MAX_SPLIT)
    max_test: int = knob(0, ge=0, le=MAX_SPLIT)
    data_seed: int = knob(0, ge=0, le=MAX_SEED)

    def __post_init__(self) -> None:
        check_knobs(self, "task", "har")


CW8 = {"num_modules": 8}  # Clockwork: 10 modules do not divide D = 32


def _presets() -> dict[str, Preset]:
    return {
        "smoke": Preset(
            train=TrainConfig(epochs=2, batch_size=100, lr=0.01, eval_batch_size=500),
            model=ModelConfig(hidden_size=10, num_layers=2),
            task={"max_train": 200, "max_val": 100, "max_test": 100},
        ),
        "quick": Preset(
            train=TrainConfig(epochs=10, batch_size=100, lr=0.0025, eval_batch_size=1000),
            model=ModelConfig(hidden_size=32, num_layers=2),
            task={"max_train": 2000, "max_val": 500},
            methods={"clockwork-rnn": CW8},
        ),
        # S-EI section 4.2: Adam 0.0025, batch 200, 100 epochs, 2 stacked layers, D = 32.
        "paper": Preset(
            train=TrainConfig(epochs=100, batch_size=200, lr=0.0025, eval_batch_size=1000),
            model=ModelConfig(hidden_size=32, num_layers=2),
            # S-EI Table 2's best rows: RHN L=1; EI-REHN 48, one layer, R_max 5 (docs/methods.md
            # 2.14(j)).
            methods={
                "rhn": {"depth": 1},
                "srehn": {"method.r_max": 5},
                "clockwork-rnn": CW8,
                "ei-rehn": {"hidden_size": 48, "num_layers": 1, "method.r_max": 5},
            },
        ),
    }


@register_task("har")
class HAR(Task):
    """Six-way activity classification from the last step of a 128 x 9 window (accuracy, %)."""

    kind = TaskKind.CLASSIFICATION
    readout = "last"
    primary = "accuracy"
    higher_is_better = True
    config_cls = HARConfig
    presets = _presets()
    description = "UCI HAR 6 activities, 128-step x 9-channel inertial windows, last-step accuracy"

    @property
    def input_size(self) -> int:
        return len(CHANNELS)

    @property
    def output_size(self) -> int:
        return 6

    def locate(self) -> tuple[str, Path]:
        """("uci-har" | "hapt-rebuilt", dataset folder); DataError naming what is missing."""
        root = data_root(self.data_dir)
        uci, hapt = root / "uci_har" / "UCI HAR Dataset", root / "hapt"
        errors = []
        if self.cfg.source in ("auto", "uci"):
            try:
                for split in ("train", "test"):
                    for p in uci_files(uci, split):
                        find_file(p, UCI_URL)
                return "uci-har", uci
            except DataError as e:
                errors.append(str(e))
        if self.cfg.source in ("auto", "hapt"):
            try:
                find_file(hapt / "RawData" / "labels.txt", HAPT_URL)
                return "hapt-rebuilt", hapt
            except DataError as e:
                errors.append(str(e))
        raise DataError("HAR data not found: " + " Or: ".join(errors))

    def load(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The full train/test arrays (via the cache) and facts about where they came from."""
        source, folder = self.locate()
        key = f"{source}-v{PIPELINE_VERSION}"
        if source == "uci-har":
            files = [find_file(p) for p in uci_files(folder, "train") + uci_files(folder, "test")]
            arrays, hit = disk_cached("har", key, files, lambda: load_uci(folder))
        else:
            arrays, hit = disk_cached("har", key, hapt_files(folder), lambda: rebuild_hapt(folder))
        return arrays, {"source": source, "path": str(folder), "cache": hit}

    def splits(self, seed: int) -> Splits:
        cfg, rng = self.cfg, np.random.default_rng(self.cfg.data_seed)
        a, info = self.load()
        subjects = np.unique(a["s_train"])
        if len(subjects) <= cfg.val_subjects:
            raise ConfigError(f"har: val_subjects={cfg.val_subjects} leaves no training subject")
        val_subj = np.sort(rng.choice(subjects, cfg.val_subjects, replace=False))
        is_val = np.isin(a["s_train"], val_subj)
        picks = {
            "train": ("train", np.flatnonzero(~is_val), cfg.max_train),
            "val": ("train", np.flatnonzero(is_val), cfg.max_val),
            "test": ("test", np.arange(len(a["y_test"])), cfg.max_test),
        }
        out, subj = {}, {}
        for name, (src, idx, cap) in picks.items():
            if cap and len(idx) > cap:
                idx = np.sort(rng.choice(idx, cap, replace=False))
            x = torch.from_numpy(np.ascontiguousarray(a[f"x_{src}"][idx], dtype=np.float32))
            y = torch.from_numpy(a[f"y_{src}"][idx] - 1)  # activity ids 1..6 -> classes 0..5
            out[name] = Split(x, y)
            subj[name] = [int(v) for v in np.unique(a[f"s_{src}"][idx])]
        info.update(subjects=subj, windows={k: len(v) for k, v in out.items()})
        return Splits(out["train"], out["val"], out["test"], info=info)

    def data_status(self, verify: bool = False) -> dict[str, Any]:
        """Whether the data are usable; ``verify`` also checks the HAPT files' contents against
        ``HAPT_RAW_DIGEST`` (about a second; ``harness.data.task_row`` does it from ``sha256``)."""
        status = {"dataset": "har", "status": "found", "path": "", "source": UCI_URL, "detail": ""}
        try:
            source, folder = self.locate()
            if source == "hapt-rebuilt":
                hapt_files(folder)  # every labelled experiment's acc and gyro file
        except DataError as e:
            bad = "corrupt" if str(e).startswith("corrupt") else "missing"
            status.update(status=bad, path=str(data_root(self.data_dir)), detail=str(e))
            return status
        status["path"] = str(folder)
        if source == "uci-har":  # no published sums: its content digest identifies it
            files = uci_files(folder, "train") + uci_files(folder, "test")
            status.update(
                detail="official UCI HAR inertial signals",
                files=[f.relative_to(folder).as_posix() for f in files],
            )
            return status
        status.update(
            source=HAPT_URL,
            detail="UCI HAR windows rebuilt from HAPT raw data",
            sha256={"RawData/*": HAPT_RAW_DIGEST},
        )
        if verify:
            st, detail = verify_sha256(folder, {"RawData/*": HAPT_RAW_DIGEST})
            status.update(status=st, detail=status["detail"] + "; " + detail)
        return status

    def fetch(self, fetcher: Any) -> str:
        """HAPT's RawData (the source of the rebuilt windows), verified against its digest.

        UCI HAR's own inertial files are not fetched: no published sums cover them.
        """

        def pick(name: str) -> str | None:
            parts = name.split("/")
            if "__MACOSX" in parts:
                return None
            if len(parts) >= 2 and parts[-2] == "RawData":
                return f"RawData/{parts[-1]}"
            if parts[-1] in ("README.txt", "activity_labels.txt") and len(parts) <= 2:
                return parts[-1]
            return None

        def build(stage: Path, get: Any) -> None:
            extract(get(HAPT_ZIP), pick, stage)

        return fetcher.install("hapt", {"RawData/*": HAPT_RAW_DIGEST}, build)
