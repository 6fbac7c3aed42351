"""What ``harness bench`` times: one method's model in one phase on one device, and the reference.

A method's model is built as a run builds it (``harness.config.resolve`` + ``harness.train.build``)
at the sizes of one task preset, and timed on one batch of the task's test split (so batches are
smaller when the split is):

- ``inference``: eval mode, ``no_grad``, one forward pass (a batch of ``train.eval_batch_size``);
- ``train``: train mode, forward + task loss + aux loss, backward, gradient clipping, Adam step,
  as ``harness.train.train_model`` does it (a batch of ``train.batch_size``).

The reference is the same model with its stack of method layers replaced by torch's fused
``nn.GRU`` of as many layers (cuDNN on CUDA, one ATen kernel per layer on CPU): same batch, same
embedding and read-out (copies), same loss, clipping and optimiser. One reference serves every
method timed at the same sizes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from harness import env
from harness.config import RunConfig, TrainConfig, resolve
from harness.model import SeqModel
from harness.task import Batch, Split, Task
from harness.timing import synced
from harness.train import build

PHASES = {"inference": "Inference", "train": "Train step"}
REFERENCE = "torch.nn.GRU (fused)"

SplitCache = dict[tuple[str, Any, int], Split]


@dataclass
class Phase:
    """One unit of timed work and what its timing record says about it.

    Attributes:
        fn: one round of work, no arguments; waits for the device before returning.
        info: method, task, preset, seed, phase, device, sizes (B, T, V, D, layers), params
            and config of the timing record.
        model: the module timed.
        reference_key: equal for phases whose fused-GRU reference is the same ("" for a
            reference).
        make_reference: builds that reference phase (None for a reference).
    """

    fn: Callable[[], Any]
    info: dict[str, Any]
    model: nn.Module | None = None
    reference_key: str = ""
    make_reference: Callable[[], Phase] | None = None


class FusedGRUModel(nn.Module):
    """A timed model with its method layers replaced by one fused ``nn.GRU`` of as many layers.

    Args:
        model: the method's model; its embedding and read-out are copied (ties kept).
    """

    def __init__(self, model: SeqModel) -> None:
        super().__init__()
        first = model.methods[0]
        self.embed, self.readout = copy.deepcopy((model.embed, model.readout))
        self.readout_mode = model.readout_mode
        self.recurrent = nn.GRU(
            first.input_size, first.hidden_size, num_layers=len(model.layers), batch_first=True
        )

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> Tensor:
        """Predictions ``[B, T, out]`` or, with the last-step read-out, ``[B, out]``."""
        h = self.embed(x) if self.embed is not None else x
        h = self.recurrent(h)[0]
        if self.readout_mode == "last":  # as SeqModel: the last valid step of each sequence
            B, T = h.shape[:2]
            idx = (lengths - 1) if lengths is not None else torch.full((B,), T - 1, device=h.device)
            h = h[torch.arange(B, device=h.device), idx.long()]
        return self.readout(h)


def held_out_split(cfg: RunConfig, task: Task, splits: SplitCache | None = None) -> Split:
    """The task's test split, built once per (task, task config, seed) when given a cache."""
    key = (cfg.task, cfg.task_cfg, cfg.seed)
    if splits is not None and key in splits:
        return splits[key]
    split = task.splits(cfg.seed).test
    if splits is not None:
        splits[key] = split
    return split


def train_step(
    params: list[nn.Parameter],
    task: Task,
    batch: Batch,
    tc: TrainConfig,
    forward: Callable[[], tuple[Tensor, Tensor | None]],
) -> Callable[[], None]:
    """One step of ``harness.train.train_model``'s inner loop on ``batch``.

    Args:
        params: the trainable parameters (clipped and stepped by Adam).
        task: gives the loss.
        batch: the batch, on the device.
        tc: learning rate, weight decay and clipping.
        forward: returns (predictions, auxiliary loss or None) of the model on ``batch``.

    Returns:
        The step: forward, loss (+ aux), backward, clip, Adam step.
    """
    opt = torch.optim.Adam(params, lr=tc.lr, weight_decay=tc.weight_decay)

    def step() -> None:
        pred, aux = forward()
        loss = task.loss(pred, batch)
        total = loss if aux is None else loss + aux
        opt.zero_grad(set_to_none=True)
        total.backward()
        if tc.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, tc.clip)
        opt.step()

    return step


def method_phase(
    method: str,
    phase: str,
    device: torch.device,
    task: str,
    preset: str,
    overrides: dict[str, Any] | None = None,
    *,
    seed: int = 0,
    data_dir: str | None = None,
    splits: SplitCache | None = None,
) -> Phase:
    """Build one method's model at a task preset's sizes, ready to time one phase.

    Args:
        method: a registered method.
        phase: ``inference`` or ``train``.
        device: where to time it.
        task: the registered task whose preset gives the sizes and the batch timed.
        preset: the task's preset (``smoke``, ``quick`` or ``paper``).
        overrides: config overrides (``section.field`` or a bare ``field``), applied after the
            preset as in a run.
        seed: the run seed, which seeds the model's initialisation.
        data_dir: dataset root for real-data tasks (else ``$HARNESS_DATA_DIR``).
        splits: a cache of test splits shared by the calls of one benchmark run.

    Returns:
        The phase, with the builder of its fused-GRU reference.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    cfg = resolve(method, task, seed, preset, overrides)
    task_obj, model = build(cfg, data_dir)
    model.to(device)
    split = held_out_split(cfg, task_obj, splits)
    B = cfg.train.eval_batch_size if phase == "inference" else cfg.train.batch_size
    batch = next(iter(split.batches(B))).to(device)
    sizes = {
        "B": int(batch.x.shape[0]),
        "T": int(batch.x.shape[1]),
        "V": int(task_obj.input_size),
        "D": cfg.model.hidden_size,
        "layers": cfg.model.num_layers,
    }
    info = {
        "method": method,
        "task": cfg.task,
        "preset": cfg.preset,
        "seed": cfg.seed,
        "phase": phase,
        "device": device.type,
        "device_name": env.device_name(device),
        "sizes": sizes,
        "params": sum(p.numel() for p in model.parameters()),
        "config": cfg.to_dict(),
    }
    # What shapes the reference besides the sizes: the embedding, the read-out and its mode.
    shape = {
        "input_size": model.methods[0].input_size,
        "embedding": None if model.embed is None else list(model.embed.weight.shape),
        "output_size": model.readout.out_features,
        "readout": model.readout_mode,
        "tied": model.tied,
    }
    ref_config = {
        "reference": REFERENCE,
        "task": cfg.task,
        "preset": cfg.preset,
        "seed": cfg.seed,
        "sizes": sizes,
        **shape,
    }
    key = json.dumps({"phase": phase, "device": str(device), **ref_config}, sort_keys=True)

    def make_reference() -> Phase:
        ref = FusedGRUModel(model).to(device)
        ref_info = {
            **{k: info[k] for k in ("task", "preset", "seed", "phase", "device", "device_name")},
            "method": REFERENCE,
            "sizes": sizes,
            "params": sum(p.numel() for p in ref.parameters()),
            # The optimiser settings of the first method timed at these sizes: they change the
            # work of a step only through whether clipping runs.
            "config": {
                **ref_config,
                "train": {k: info["config"]["train"][k] for k in ("lr", "weight_decay", "clip")},
            },
        }
        if phase == "inference":
            ref.eval()
            fn = torch.no_grad()(lambda: ref(batch.x, batch.lengths))
        else:
            ref.train()
            params = [p for p in ref.parameters() if p.requires_grad]
            fn = train_step(
                params, task_obj, batch, cfg.train, lambda: (ref(batch.x, batch.lengths), None)
            )
        return Phase(synced(fn, device), ref_info, ref)

    if phase == "inference":
        model.eval()

        @torch.no_grad()
        def infer() -> Tensor:
            return model(batch.x, batch.lengths).pred

        return Phase(synced(infer, device), info, model, key, make_reference)

    params = [p for p in model.parameters() if p.requires_grad]
    model.on_epoch_start(0, cfg.train.epochs)
    model.train()

    def forward() -> tuple[Tensor, Tensor | None]:
        out = model(batch.x, batch.lengths)
        return out.pred, out.aux_loss

    return Phase(
        synced(train_step(params, task_obj, batch, cfg.train, forward), device),
        info,
        model,
        key,
        make_reference,
    )
