"""The generic model wrapper: input embedding, stacked layers of one method, read-out.

Methods only map ``[B, T, V] -> [B, T, D]``; everything around them (token embeddings tied to the
output layer, stacking, last-step or every-step read-out) is done here once, for every method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from harness.components.config import ModelConfig
from harness.components.method import Method, SeqOut
from harness.components.task import Task


@dataclass
class ModelOut:
    """Predictions plus the per-layer compute traces and the summed auxiliary loss."""

    pred: Tensor
    layers: list[SeqOut]
    aux_loss: Tensor | None


class SeqModel(nn.Module):
    """``[embedding] -> method layer x num_layers -> linear read-out``, sized by the task."""

    def __init__(self, method_cls: type, method_cfg, task: Task, model_cfg: ModelConfig) -> None:
        super().__init__()
        D = model_cfg.hidden_size
        self.readout_mode = task.readout
        E = model_cfg.embed_size or D  # token inputs: their embedding's size
        self.embed = nn.Embedding(task.input_size, E) if task.token_input else None
        in_size = E if task.token_input else task.input_size
        self.layers = nn.ModuleList(
            method_cls(in_size if i == 0 else D, D, method_cfg) for i in range(model_cfg.num_layers)
        )
        self.readout = nn.Linear(D, task.output_size)
        self.tied = bool(
            model_cfg.tie_embeddings
            and self.embed is not None
            and self.embed.embedding_dim == D
            and self.embed.num_embeddings == task.output_size
        )
        if self.tied:
            self.readout.weight = self.embed.weight

    @property
    def methods(self) -> list[Method]:
        """The method layers, first to last."""
        return list(self.layers)

    def forward(
        self, x: Tensor, lengths: Tensor | None = None, times: Tensor | None = None
    ) -> ModelOut:
        """Run the layers over ``x`` (embedded first if it holds tokens) and read out predictions.

        Of each sequence's last true step (``last`` mode) or of every step; the auxiliary losses
        summed. ``times`` go only to the layers whose method sets ``uses_times``.
        """
        h = self.embed(x) if self.embed is not None else x
        traces: list[SeqOut] = []
        for layer in self.layers:
            out = layer(h, lengths, times=times) if layer.uses_times else layer(h, lengths)
            traces.append(out)
            h = out.outputs
        if self.readout_mode == "last":
            B, T = h.shape[:2]
            idx = (lengths - 1) if lengths is not None else torch.full((B,), T - 1, device=h.device)
            h = h[torch.arange(B, device=h.device), idx.long()]
        pred = self.readout(h)
        aux = [o.aux_loss for o in traces if o.aux_loss is not None]
        return ModelOut(pred, traces, torch.stack(aux).sum() if aux else None)

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Pass the trainer's start of epoch ``epoch`` (0-based) on to every layer."""
        for layer in self.layers:
            layer.on_epoch_start(epoch, num_epochs)

    def train_diagnostics(self) -> dict[str, float]:
        """The layers' ``Method.train_diagnostics``, each averaged over the layers that give it."""
        seen: dict[str, list[float]] = {}
        for layer in self.methods:
            for k, v in layer.train_diagnostics().items():
                seen.setdefault(k, []).append(v)
        return {k: sum(v) / len(v) for k, v in seen.items()}

    def train_state(self) -> list[dict[str, Any]]:
        """Every layer's ``Method.train_state``, in order (a run's checkpoint keeps it)."""
        return [layer.train_state() for layer in self.methods]

    def load_train_state(self, state: list[dict[str, Any]]) -> None:
        """Give every layer back what ``train_state`` took."""
        for layer, s in zip(self.methods, state, strict=True):
            layer.load_train_state(s)

    def method_param_count(self) -> int:
        """The number of parameters in the method layers (no embedding or read-out)."""
        return sum(p.numel() for p in self.layers.parameters())
