"""Checkpoints of a run in training, so that a run longer than its process's life still finishes.

A sweep resumes from its records store, run by run: a run killed in the middle (a stop, a
machine that goes away, a Slurm time limit) starts again from its first epoch. ``Checkpointer``
keeps, at most every ``every_s`` seconds and at the end of an epoch, everything the training loop
needs to go on as if it had not stopped: the parameters, Adam's state, the epoch's position, the
random states (the batch order's generator, torch's, Python's, numpy's; CUDA's where used), the
history, the best validation epoch's parameters and metrics, the patience count, the training
seconds, the events, and the methods' own training tallies (``Method.train_state``). A run that
finds its checkpoint goes on from the next epoch and gives the record the uninterrupted run
would have given (same metrics, history, diagnostics; ``time.train_s`` sums the processes'
training time), plus ``time.resumed``: the epochs it resumed at and when.

A checkpoint is used only by the run it was written for (its ``run_id``) and only with the same
method code and harness commit (``method_code``, ``env.git_state``); anything else starts the run
afresh and says so. It is written atomically (a temporary file renamed over the old one) and
removed once the run is recorded. A checkpoint that cannot be written costs only the ability
to resume: the run goes on without checkpoints. A folder a remote worker cannot see gives one
warning; a full disk gives none here: the record says so (``harness.errors.DISK_FULL_NOTE``)
and the sweep, once the run is recorded, stops with one line naming the filesystem.
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

from harness.env import git_state
from harness.errors import DISK_FULL_NOTE, is_disk_full, write_failure
from harness.persistence import records

FORMAT = 1


def _say(msg: str) -> None:
    print(f"harness: {msg}", file=sys.stderr, flush=True)


@dataclass
class TrainState:
    """The training loop's own variables, which it updates and a checkpoint keeps whole.

    Attributes:
        epoch: the last epoch finished (-1: none yet).
        history: one row per finished epoch (``epoch``, ``train_loss``, ``val_PRIMARY``).
        best_loss: the lowest epoch training loss so far and its epoch (loss spikes).
        stale: epochs since the validation metric last improved (patience).
        best_val: the best validation primary metric (None: no finite one yet); ``best_epoch``
            its epoch (-1: none), ``best_state`` and ``best_metrics`` the model's parameters
            and buffers and the validation metrics then.
        train_s: the training seconds, every process's together.
        events: what happened on the way (``harness.training.events``).
    """

    epoch: int = -1
    history: list[dict[str, Any]] = field(default_factory=list)
    best_loss: tuple[float, int] | None = None
    stale: int = 0
    best_val: float | None = None
    best_epoch: int = -1
    best_state: dict[str, Any] | None = None
    best_metrics: dict[str, float] | None = None
    train_s: float = 0.0
    events: list[dict[str, Any]] = field(default_factory=list)


def training_state(
    loop: TrainState,
    model: Any,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    device: torch.device | str,
) -> dict[str, Any]:
    """What ``Checkpointer.save`` keeps after ``loop.epoch``.

    ``loop``'s fields under their names, the model (parameters, buffers and the methods'
    ``train_state``), Adam's state, the batch order's generator and the global random states
    (torch's, Python's, numpy's; CUDA's where in use).
    """
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
    """Load what ``training_state`` took; returns the loop's state, whole.

    Into ``model`` (parameters, buffers, ``train_state``), ``opt``, ``gen`` and the global
    random states.
    """
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
    """The checkpoint of one run: ``folder/RUN_ID.pt``.

    Args:
        folder: where checkpoints live (``Store.checkpoints_path``).
        run_id: the run's id.
        identity: what must match for a checkpoint to be used (method code, harness commit).
        every_s: the least seconds between two saves (0: at the end of every epoch).
        start: the run's start (its record's ``time.start``), kept across processes.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        run_id: str,
        identity: dict[str, Any],
        every_s: float,
        start: str | None = None,
    ) -> None:
        self.path = Path(folder) / f"{run_id}.pt"
        self.run_id = run_id
        self.identity = dict(identity)
        self.every_s = float(every_s)
        self._last = time.monotonic()
        self._broken = False  # a save failed: stop trying, the run goes on
        self.full = ""  # a save met a full disk: what the record tells the sweep
        # what the record keeps across processes (a loaded checkpoint's replaces it)
        self.meta: dict[str, Any] = {"start": start, "resumed": []}
        self.resumed_at: int | None = None  # the epoch this process resumed at

    @classmethod
    def of_run(
        cls, folder: str, run_id: str, method_code: str, every_s: float, start: str
    ) -> Checkpointer:
        """The checkpoint of a run of this checkout (used with the same code only).

        Same code: the same method code and harness commit (and dirty flag).
        """
        sha, dirty = git_state()
        identity = {"method_code": method_code, "git_sha": sha, "git_dirty": dirty}
        return cls(folder, run_id, identity, every_s, start)

    def finish(self, rec: dict[str, Any]) -> None:
        """The run is over (``rec``, ok or failed): remove the checkpoint.

        A resumed run's record gets its first start and ``time.resumed``; the record of a run
        whose checkpoint met a full disk, ``DISK_FULL_NOTE`` (the sweep stops).
        """
        if self.resumed_at is not None:
            rec["time"].update(start=self.meta["start"], resumed=self.meta["resumed"])
        if self.full:
            rec.setdefault(DISK_FULL_NOTE, self.full)
        self.discard()

    def load(self, device: torch.device | str = "cpu") -> dict[str, Any] | None:
        """The saved state, or None.

        None where there is no checkpoint, or one this run cannot use (then it says why on
        stderr and removes it).
        """
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
        """Write ``state`` (``training_state``) atomically; False where it cannot be written.

        Then it tries no more: the run goes on without checkpoints. It warns once, except on a
        full disk, which ``finish`` tells the sweep instead.
        """
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
