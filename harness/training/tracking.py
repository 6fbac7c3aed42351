"""TensorBoard event files per run (``harness run --log-dir DIR``), and records as HParams.

``TensorBoardLogger`` (a training-loop callback) holds only plain values until its first event,
so it travels to worker processes and Ray tasks; a write that fails ends the run's events, not
the run. ``write_hparams`` (``harness report --tensorboard DIR``) writes finished records.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.errors import DISK_FULL_NOTE, ConfigError, WriteFailed, is_disk_full, write_failure
from harness.persistence.records import flat_config, latest

INSTALL = "pip install 'condrnn-harness[tensorboard]'"


def check_log_dir(log_dir: str | Path, option: str = "--log-dir") -> None:
    """Create ``log_dir``; ConfigError (naming ``option``) without tensorboard or if unwritable."""
    if importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(f"{option} needs the tensorboard package: {INSTALL}")
    path = Path(log_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{option} {log_dir}: cannot create it ({e.strerror or e})") from None
    if not os.access(path, os.W_OK):
        raise ConfigError(f"{option} {log_dir}: not writable")


def run_dir(log_dir: str | Path, cfg: Any) -> Path:
    """Where one run's event file goes: ``log_dir/<task>_<preset>/<method>/<run id>``."""
    return Path(log_dir) / f"{cfg.task}_{cfg.preset}" / cfg.method / cfg.run_id


class TensorBoardLogger:
    """Per-epoch scalars of the run ``cfg`` in a TensorBoard event file under ``log_dir``."""

    def __init__(self, log_dir: str | Path, cfg: Any) -> None:
        self.path = run_dir(log_dir, cfg)
        self.config = cfg.to_dict()
        self._writer: Any = None
        self.failed = False  # a write failed: no more events, the run goes on
        self.full = ""  # it met a full disk: what the record tells the sweep

    @property
    def writer(self) -> Any:
        """The ``SummaryWriter``, opened at the first event."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            _quiet_writer_threads()
            self._writer = SummaryWriter(str(self.path))
            self._writer.add_text("config", f"```\n{json.dumps(self.config, indent=1)}\n```")
        return self._writer

    def _write(self, write: Callable[[], None]) -> None:
        """Call ``write`` unless a write failed before; an OSError ends the events, not the run."""
        if self.failed:
            return
        try:
            write()
        except OSError as e:
            self.failed = True
            if is_disk_full(e):
                self.full = write_failure(self.path, e)
            else:
                print(
                    f"harness: cannot write the TensorBoard events under {self.path} ({e}); the "
                    "run goes on without them",
                    file=sys.stderr,
                    flush=True,
                )
            writer, self._writer = self._writer, None
            with contextlib.suppress(Exception):  # it fails again on what it still holds
                if writer is not None:
                    writer.close()

    def __call__(self, epoch: int, row: dict[str, Any]) -> None:
        """Write one epoch's history row: ``train/loss`` and ``val/<metric>`` per value."""

        def write() -> None:
            for key, value in row.items():
                if key == "epoch" or not isinstance(value, (int, float)):
                    continue
                tag = "train/loss" if key == "train_loss" else key.replace("_", "/", 1)
                self.writer.add_scalar(tag, float(value), epoch)
            self.writer.flush()

        self._write(write)

    def finish(self, record: dict[str, Any]) -> None:
        """Write the run's test metrics (at its best epoch), close the file; note a full disk."""

        def write() -> None:
            step = max(int(record.get("best_epoch") or 0), 0)
            for key, value in (record.get("metrics") or {}).items():
                if isinstance(value, (int, float)):
                    self.writer.add_scalar(f"test/{key}", float(value), step)
            if record.get("status") != "ok":
                self.writer.add_text("error", str(record.get("error")))

        self._write(write)
        self.close()
        if self.full:
            record.setdefault(DISK_FULL_NOTE, self.full)

    def close(self) -> None:
        """Close the event file (if one was opened)."""
        if self._writer is not None:
            self._write(self._writer.close)
            self._writer = None


WHO = ("method", "task", "preset", "seed", "status")  # HParams besides the config's knobs


def _scalars(rec: dict[str, Any]) -> dict[str, float]:
    """A record's numbers as scalar tags: ``test/``, ``val/``, ``flops/``, ``params/`` + key."""
    groups = {"test": "metrics", "val": "val_metrics", "flops": "flops", "params": "params"}
    return {
        f"{tag}/{key}": float(value)
        for tag, field in groups.items()
        for key, value in (rec.get(field) or {}).items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def write_hparams(records: Sequence[dict[str, Any]], log_dir: str | Path) -> list[Path]:
    """Write each run's HParams and metrics under ``log_dir``; the run folders written.

    HParams: ``WHO`` and every knob (a number, a bool, else its ``str``); scalars: ``_scalars``.
    The last record of each run id counts. WriteFailed: an event file could not be written.
    """
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import Summary

    def summary(tag: str, **data: Any) -> Any:
        content = plugin_data_pb2.HParamsPluginData(version=metadata.PLUGIN_DATA_VERSION, **data)
        meta = metadata.create_summary_metadata(content)
        return Summary(value=[Summary.Value(tag=tag, metadata=meta)])

    _quiet_writer_threads()
    written = []
    for rec in latest(records):
        start = plugin_data_pb2.SessionStartInfo()
        for key, v in {**{k: rec.get(k) for k in WHO}, **flat_config(rec)}.items():
            if isinstance(v, bool):
                start.hparams[key].bool_value = v
            elif isinstance(v, (int, float)):
                start.hparams[key].number_value = v
            else:
                start.hparams[key].string_value = str(v)
        ok = rec["status"] == "ok"
        end = plugin_data_pb2.SessionEndInfo(
            status=api_pb2.STATUS_SUCCESS if ok else api_pb2.STATUS_FAILURE
        )
        where = run_dir(log_dir, SimpleNamespace(**rec))
        try:
            with SummaryWriter(str(where)) as w:
                w.file_writer.add_summary(
                    summary(metadata.SESSION_START_INFO_TAG, session_start_info=start)
                )
                for tag, value in _scalars(rec).items():
                    w.add_scalar(tag, value, 0)
                w.file_writer.add_summary(
                    summary(metadata.SESSION_END_INFO_TAG, session_end_info=end)
                )
        except OSError as e:
            raise WriteFailed(where, e) from None
        written.append(where)
    return written


def _quiet_writer_threads() -> None:
    """Keep a failed write's traceback in tensorboard's writer thread off stderr (``_write``)."""
    hook = threading.excepthook
    if getattr(hook, "harness_quiet", False):
        return

    def quiet(args: Any) -> None:
        thread = type(args.thread).__name__
        if not (thread == "_AsyncWriterThread" and isinstance(args.exc_value, OSError)):
            hook(args)

    quiet.harness_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = quiet
