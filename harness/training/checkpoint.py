"""Checkpoints of a run in training, so that a run longer than its process's life still finishes.

``Checkpointer`` keeps all the loop needs to go on as if it had not stopped: the resumed run's
record is the uninterrupted run's, plus ``time.resumed``. A checkpoint serves only its run id with
the same method code and harness commit, is written atomically and removed once the run is
recorded. One that cannot be written costs only resuming (a full disk goes into the record).
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import DISK_FULL_NOTE, is_disk_full, write_failure
from harness.persistence import records

FORMAT = 1


def _say(msg: str) -> None:
    print(f"harness: {msg}", file=sys.stderr, flush=True)


@dataclass
class TrainState:
    """The training loop's own variables, which it updates and a checkpoint keeps whole."""

    epoch: int = -1  # the last epoch finished
    history: list[dict[str, Any]] = field(default_factory=list)  # a row per finished epoch
    best_loss: tuple[float, int] | None = None  # (lowest epoch training loss, its epoch)
    stale: int = 0  # epochs since the validation metric last improved (patience)
    best_val: float | None = None  # the best validation primary metric, and at its epoch:
    best_epoch: int = -1
    best_state: dict[str, Any] | None = None
    best_metrics: dict[str, float] | None = None
    train_s: float = 0.0  # every process's together
    events: list[dict[str, Any]] = field(default_factory=list)


def training_state(
    loop: TrainState,
    model: Any,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    device: torch.device | str,
) -> dict[str, Any]:
    """What ``Checkpointer.save`` keeps: ``loop``, model, Adam, batch order and random states."""
    rng = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.device(device).type == "cuda" and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {
        **vars(loop),
        "model": model.state_dict(),
        "train_state": model.train_state(),
        "optimizer": opt.state_dict(),
        "generator": gen.get_state(),
        "random": rng,
    }


def restore_training(
    saved: dict[str, Any], model: Any, opt: torch.optim.Optimizer, gen: torch.Generator
) -> TrainState:
    """Load what ``training_state`` took into ``model``, ``opt``, ``gen``; the loop's state."""
    model.load_state_dict(saved["model"])
    model.load_train_state(saved["train_state"])
    opt.load_state_dict(saved["optimizer"])
    gen.set_state(saved["generator"])
    rng = saved["random"]
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    if "cuda" in rng:
        torch.cuda.set_rng_state_all(rng["cuda"])
    return TrainState(**{f.name: saved[f.name] for f in fields(TrainState)})


class Checkpointer:
    """The checkpoint of one run, ``folder/RUN_ID.pt``, saved at most every ``every_s`` seconds."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        run_id: str,
        identity: dict[str, Any],
        every_s: float,
        start: str | None = None,
    ) -> None:
        self.path = Path(folder) / f"{run_id}.pt"
        self.run_id, self.identity, self.every_s = run_id, dict(identity), float(every_s)
        self._last = time.monotonic()
        self._broken = False  # a save failed: stop trying, the run goes on
        self.full = ""  # a save met a full disk: what the record tells the sweep
        # what the record keeps across processes (a loaded checkpoint's replaces it)
        self.meta: dict[str, Any] = {"start": start, "resumed": []}
        self.resumed_at: int | None = None  # the epoch this process resumed at

    def finish(self, rec: dict[str, Any]) -> None:
        """The run is over: remove the checkpoint; ``rec`` gets ``time.resumed``, a full disk."""
        if self.resumed_at is not None:
            rec["time"].update(start=self.meta["start"], resumed=self.meta["resumed"])
        if self.full:
            rec.setdefault(DISK_FULL_NOTE, self.full)
        self.discard()

    def load(self, device: torch.device | str = "cpu") -> dict[str, Any] | None:
        """The saved state; None where there is none or one this run cannot use (removed)."""
        if not self.path.exists():
            return None
        try:
            state = torch.load(self.path, map_location=device, weights_only=False)
        except Exception as e:  # a file of another torch, a truncated copy: start afresh
            _say(f"checkpoint {self.path} unreadable ({type(e).__name__}), run starts afresh")
            self.discard()
            return None
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            why = "another format"
        elif state.get("run_id") != self.run_id:
            why = "another run"
        elif state.get("identity") != self.identity:
            why = f"other code ({state.get('identity')} vs {self.identity})"
        else:
            self.resumed_at = int(state["epoch"]) + 1
            meta = dict(state.get("meta") or {})
            resumed = [*meta.get("resumed", []), {"epoch": self.resumed_at, "at": records.now()}]
            self.meta = {**meta, "resumed": resumed}
            return state
        _say(f"checkpoint {self.path} is of {why}: not used, run starts afresh")
        self.discard()
        return None

    def due(self) -> bool:
        """Whether ``every_s`` seconds have passed since the last save (or the start)."""
        return not self._broken and time.monotonic() - self._last >= self.every_s

    def save(self, state: dict[str, Any]) -> bool:
        """Write ``state`` atomically; False where it cannot (then it tries no more)."""
        full = dict(
            state, format=FORMAT, run_id=self.run_id, identity=self.identity, meta=self.meta
        )
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            for attempt in (1, 2):  # another run may remove the emptied folder in between
                self.path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    with open(tmp, "wb") as f:
                        torch.save(full, f)
                        f.flush()
                        os.fsync(f.fileno())
                    break
                except FileNotFoundError:
                    if attempt == 2:
                        raise
            os.replace(tmp, self.path)
        except OSError as e:
            self._broken = True
            if is_disk_full(e):
                self.full = write_failure(self.path, e)
            else:
                _say(f"cannot write the checkpoint {self.path} ({e}); the run goes on without one")
            with contextlib.suppress(OSError):  # the folder is not there (or not a folder)
                tmp.unlink(missing_ok=True)
            return False
        self._last = time.monotonic()
        return True

    def discard(self) -> None:
        """Remove the checkpoint (the run is recorded, or the file is of no use)."""
        with contextlib.suppress(OSError):  # not empty (other runs' checkpoints), or gone
            self.path.unlink(missing_ok=True)
            self.path.parent.rmdir()  # the folder goes with the last checkpoint
