"""Vanilla (Elman) RNN with tanh, a baseline of S-EI.

Paper: Elman 1990, "Finding Structure in Time", https://doi.org/10.1207/s15516709cog1402_1;
equation as in S-EI (Park & Yoo, https://arxiv.org/abs/1708.04116) eq. 2:
``h_t = tanh(W_R [h_{t-1}; x_t; 1])``.

Differences from the paper:
- One bias vector (D(D+V+1) parameters, as S-EI's counts imply); weights U(+-1/sqrt(D))
  (PyTorch's nn.RNN default) where S-EI used TensorFlow defaults.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from baselines._cells import OneChunk
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method


@register_method("rnn")
class RNN(OneChunk, Method):
    """Dense tanh RNN; the sequence forward runs torch's fused kernel on the same weights (one
    chunk off the CPU, ``OneChunk``)."""

    fused_cell = "RNN"  # a tanh RNN: held against torch.nn.RNN, not the GRU
    _chunk = ("weight_ih", "weight_hh", "bias", "zero_bias")

    def __init__(self, input_size: int, hidden_size: int, cfg=None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        D, V = hidden_size, input_size
        self.weight_ih = nn.Parameter(torch.empty(D, V))
        self.weight_hh = nn.Parameter(torch.empty(D, D))
        self.bias = nn.Parameter(torch.empty(D))
        self.register_buffer("zero_bias", torch.zeros(D), persistent=False)
        b = 1.0 / math.sqrt(D)
        with torch.no_grad():
            for p in (self.weight_ih, self.weight_hh, self.bias):
                p.uniform_(-b, b)
        self.pack_chunk()

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=D + V)  # D(D+V) per step

    def init_state(self, batch_size: int, ref: Tensor) -> Tensor:
        return ref.new_zeros(batch_size, self.hidden_size)

    def step(self, x_t: Tensor, state: Tensor, t: int) -> StepOut:
        h = torch.tanh(x_t @ self.weight_ih.t() + self.bias + state @ self.weight_hh.t())  # eq. 2
        return StepOut(h, h, torch.ones_like(h))

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        h0 = self.init_state(x.shape[0], x) if state is None else state
        params = [self.weight_ih, self.weight_hh, self.bias, self.zero_bias]
        hx = h0.unsqueeze(0)
        out, hn = torch.rnn_tanh(x, hx, params, True, 1, 0.0, self.training, False, True)
        return SeqOut(out, torch.ones_like(out), state=hn[0])
