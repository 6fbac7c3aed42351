"""What ``harness bench`` times: one method's model in one phase on one device, and the references.

A phase (``inference`` or a ``train`` step) of a model built as a run builds it, on one test
batch of a task preset; a reference (``TIMED_CELLS``) is the same model with torch's own cell.
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
from harness.components.config import resolve
from harness.components.method import Method
from harness.components.model import SeqModel
from harness.components.task import Batch, Split, Task
from harness.training.timing import synced
from harness.training.train import build, descend

PHASES = {"inference": "Inference", "train": "Train step"}
# Gate matrices per fused cell: a step of one layer is ``gates * D * (input + D)`` MACs.
FUSED_CELLS = {"GRU": 3, "LSTM": 4, "RNN": 1}
STEP_LOOP = "GRUCell"
# the rows every timing is held against (the reports' "reference" rows; no reference predictor)
TIMED_CELLS = {
    **{cell: f"torch.nn.{cell} (fused)" for cell in FUSED_CELLS},
    STEP_LOOP: f"torch.nn.{STEP_LOOP} (step loop)",
}
FUSED_GRU = TIMED_CELLS["GRU"]
TARGET_FACTOR = 2.0
# A training step should cost at most this many times its fused cell's step per dense MAC
# (issue 32): time <= MAC_BOUND x the cell's time x the method's dense MACs / the cell's.
MAC_BOUND = 1.5
# On CUDA the bound is 3 (issue 66): cuDNN's fused cell is harder to approach at small sizes.
MAC_BOUNDS = {"cpu": MAC_BOUND, "cuda": 3.0}


def mac_bound(device: str | None) -> float:
    """``MAC_BOUND`` of a device type (the CPU's where it has none of its own)."""
    return MAC_BOUNDS.get(device or "cpu", MAC_BOUND)


SplitCache = dict[tuple[str, Any, int], Split]


@dataclass
class Phase:
    """One unit of timed work and what its timing record says about it.

    ``fn``: one round of work, synced with the device; ``info``: the record's fields on what
    was timed (``_Timed``); ``reference_key``: equal for phases with the same references;
    ``make_reference``: builds the reference of a kind of ``TIMED_CELLS`` (None for a reference).
    """

    fn: Callable[[], Any]
    info: dict[str, Any]
    model: nn.Module | None = None
    reference_key: str = ""
    make_reference: Callable[[str], Phase] | None = None


def fused_macs(cell: str, input_size: int, hidden_size: int, num_layers: int = 1) -> int:
    """Dense MACs per step of torch's fused ``cell`` stack: ``gates D (in + D)`` over the layers.

    The first layer reads ``input_size``, the others D.
    """
    D = hidden_size
    return sum(
        FUSED_CELLS[cell] * D * ((input_size if i == 0 else D) + D) for i in range(num_layers)
    )


def timing_target(method: Method, layers: int, method_macs: int) -> dict[str, Any]:
    """The advisory target of a method's time, ``{"ratio", "reference", "rule"}``.

    At most ``TARGET_FACTOR`` x its fused cell, or for a depth-adaptive method (a highway cell
    runs several layers per step) x the fused GRU x its dense MACs per step (``method_macs``, of
    its ``layers``) / the GRU's. ``method``: the model's first method layer.
    """
    if method.has_depth:
        fused = fused_macs("GRU", method.input_size, method.hidden_size, layers)
        ratio = TARGET_FACTOR * method_macs / fused
        rule = f"{TARGET_FACTOR:g} x its dense MACs per step / the fused GRU's"
        return {"ratio": ratio, "reference": TIMED_CELLS["GRU"], "rule": rule}
    return {
        "ratio": TARGET_FACTOR,
        "reference": TIMED_CELLS[method.fused_cell],
        "rule": f"{TARGET_FACTOR:g} x its fused cell",
    }


class ReferenceModel(nn.Module):
    """The timed model with its method layers replaced by torch's own cell of as many layers.

    ``kind``: a key of ``FUSED_CELLS``, one fused call over the sequence and stack, or
    ``STEP_LOOP``, an eager loop of ``nn.GRUCell`` over the steps, layer by layer (the GRU's
    arithmetic with one dispatch per step and layer). The embedding and read-out are copies
    (ties kept).
    """

    def __init__(self, model: SeqModel, kind: str = "GRU") -> None:
        super().__init__()
        self.embed, self.readout = copy.deepcopy((model.embed, model.readout))
        self.readout_mode, self.kind = model.readout_mode, kind
        first, layers = model.methods[0], len(model.layers)
        V, D = first.input_size, first.hidden_size
        if kind == STEP_LOOP:
            self.recurrent = nn.ModuleList(nn.GRUCell(V if i == 0 else D, D) for i in range(layers))
        else:
            self.recurrent = getattr(nn, kind)(V, D, num_layers=layers, batch_first=True)

    def run_layers(self, h: Tensor) -> Tensor:
        """The recurrent stack over ``h [B, T, in] -> [B, T, D]``.

        The step loop runs over ``unbind(1)``: slicing would make backward quadratic in T.
        """
        if self.kind != STEP_LOOP:
            return self.recurrent(h)[0]
        for cell in self.recurrent:
            state = h.new_zeros(h.shape[0], cell.hidden_size)
            outs = []
            for x_t in h.unbind(1):
                state = cell(x_t, state)
                outs.append(state)
            h = torch.stack(outs, 1)
        return h

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> Tensor:
        """Predictions ``[B, T, out]`` or, with the last-step read-out, ``[B, out]``."""
        h = self.embed(x) if self.embed is not None else x
        h = self.run_layers(h)
        if self.readout_mode == "last":  # as SeqModel: the last valid step of each sequence
            B, T = h.shape[:2]
            idx = (lengths - 1) if lengths is not None else torch.full((B,), T - 1, device=h.device)
            h = h[torch.arange(B, device=h.device), idx.long()]
        return self.readout(h)


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
    """One method's model at a task preset's sizes, ready to time ``phase`` on ``device``.

    ``overrides`` apply after the preset as in a run, ``seed`` is the run's; ``splits`` caches
    the test splits across the calls of one benchmark run. The phase can build its references.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    cfg = resolve(method, task, seed, preset, overrides)
    task_obj, model = build(cfg, data_dir)
    first = model.methods[0]
    if first.fused_cell not in FUSED_CELLS:
        raise ValueError(
            f"{method}: fused_cell {first.fused_cell!r} is not one of {', '.join(FUSED_CELLS)}"
        )
    model.to(device)
    splits = {} if splits is None else splits  # the test split, once per task, config and seed
    key = (cfg.task, cfg.task_cfg, cfg.seed)
    if key not in splits:
        splits[key] = task_obj.splits(cfg.seed).test
    B = cfg.train.eval_batch_size if phase == "inference" else cfg.train.batch_size
    batch = next(iter(splits[key].batches(B))).to(device)
    timed = _Timed(method, phase, device, cfg, task_obj, model, batch)

    def forward() -> tuple[Tensor, Tensor | None]:
        out = model(batch.x, batch.lengths)
        return out.pred, out.aux_loss

    if phase == "train":
        model.on_epoch_start(0, cfg.train.epochs)
    return Phase(timed.of(model, forward), timed.info, model, timed.key(), timed.reference)


class _Timed:
    """One method's phase on one batch: its ``Phase.info``, how a module is timed, its references.

    ``of`` times a module in the phase; ``reference`` builds a reference phase of the same batch;
    the phases of equal ``key`` have the same references.
    """

    def __init__(
        self,
        method: str,
        phase: str,
        device: torch.device,
        cfg: Any,
        task: Task,
        model: SeqModel,
        batch: Batch,
    ) -> None:
        self.phase, self.device, self.task, self.train = phase, device, task, cfg.train
        self.model, self.batch = model, batch
        first = model.methods[0]
        sizes = {
            "B": int(batch.x.shape[0]),
            "T": int(batch.x.shape[1]),
            "V": int(task.input_size),
            "D": cfg.model.hidden_size,
            "layers": cfg.model.num_layers,
        }
        layers = len(model.layers)
        method_macs = sum(m.cost().dense_step() for m in model.methods)
        gru_macs = fused_macs("GRU", first.input_size, first.hidden_size, layers)
        self.info = {
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
            "fused_cell": first.fused_cell,
            "dense_macs": method_macs,
            "cell_macs": fused_macs(first.fused_cell, first.input_size, first.hidden_size, layers),
            "mac_ratio": method_macs / gru_macs,
            "target": timing_target(first, layers, method_macs),
        }
        # what shapes the references besides the sizes: the embedding, the read-out and its mode
        self.ref_config = {k: self.info[k] for k in ("task", "preset", "seed", "sizes")} | {
            "input_size": first.input_size,
            "embedding": None if model.embed is None else list(model.embed.weight.shape),
            "output_size": model.readout.out_features,
            "readout": model.readout_mode,
            "tied": model.tied,
        }

    def key(self) -> str:
        """Equal for the phases whose references are the same."""
        return json.dumps(
            {"phase": self.phase, "device": str(self.device), **self.ref_config}, sort_keys=True
        )

    def of(self, module: nn.Module, forward: Callable[[], tuple[Tensor, Any]]) -> Callable[[], Any]:
        """The phase on ``module``: one forward pass under no_grad, or one training step."""
        if self.phase == "inference":
            module.eval()
            return synced(torch.no_grad()(lambda: forward()[0]), self.device)
        module.train()  # a step of train_model's inner loop: forward, loss, backward, clip, Adam
        params, tc = [p for p in module.parameters() if p.requires_grad], self.train
        opt = torch.optim.Adam(params, lr=tc.lr, weight_decay=tc.weight_decay)

        def step() -> None:
            pred, aux = forward()
            loss = self.task.loss(pred, self.batch)
            descend(loss if aux is None else loss + aux, opt, params, tc.clip)

        return synced(step, self.device)

    def reference(self, kind: str = "GRU") -> Phase:
        """The reference phase of a kind of ``TIMED_CELLS`` at this phase's sizes and batch."""
        if kind != STEP_LOOP and kind not in FUSED_CELLS:
            raise ValueError(f"unknown reference {kind!r}; known: {', '.join(TIMED_CELLS)}")
        model, info, batch = self.model, self.info, self.batch
        ref = ReferenceModel(model, kind).to(self.device)
        cell = "GRU" if kind == STEP_LOOP else kind
        first = model.methods[0]
        macs = fused_macs(cell, first.input_size, first.hidden_size, len(model.layers))
        ref_info = {
            **{k: info[k] for k in ("task", "preset", "seed", "phase", "device", "device_name")},
            "method": TIMED_CELLS[kind],
            "sizes": info["sizes"],
            "params": sum(p.numel() for p in ref.parameters()),
            # The optimiser settings of the first method timed at these sizes: they change the
            # work of a step only through whether clipping runs.
            "config": {
                "reference": TIMED_CELLS[kind],
                **self.ref_config,
                "train": {k: info["config"]["train"][k] for k in ("lr", "weight_decay", "clip")},
            },
            # the step loop computes the GRU's arithmetic: its ratio to the fused GRU is dispatch
            "fused_cell": cell,
            "dense_macs": macs,
            "cell_macs": macs,
            "mac_ratio": FUSED_CELLS[cell] / FUSED_CELLS["GRU"],
        }
        return Phase(self.of(ref, lambda: (ref(batch.x, batch.lengths), None)), ref_info, ref)
