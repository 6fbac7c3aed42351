"""MAC/FLOP accounting (docs/methods.md 1.2): ``dense``, ``effective``, ``exact``; 1 MAC = 2 FLOPs.

Note for method authors: fvcore counts a jit trace, which drops computation that feeds no output
(a decision projection computed after the last step), while FlopCounterMode counts every
executed op; compute such terms where they are used so both counters agree.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor, nn

from harness.components.method import Method, SeqOut, StepCost, evaluating
from harness.components.metrics import FLOPS_PER_MAC, valid_steps


def effective_step_macs(cost: StepCost, out: SeqOut) -> Tensor:
    """Paper-effective MACs of every step, ``[B, T]`` (float64), from the mask, depth and reads.

    An updated unit costs its row of every gate matrix (``per_unit``), of which only the columns
    the step reads: ``per_unit * k * c / (V + D)`` for k units updated and c columns read.
    """
    mask = out.mask.detach()
    k = (mask > 0).sum(-1).double()  # [B, T] updated units
    active = (k > 0).double()
    # executed depth R_t = max_i n_{t,i}
    R = active if out.depth is None else out.depth.detach().amax(-1).double()
    rows = k if out.reads is None else k * (out.reads.detach() > 0).double().mean(-1)
    return cost.always + cost.per_unit * rows + cost.per_active_step * active + cost.per_layer * R


def per_sequence(step_macs: Tensor, lengths: Tensor | None = None) -> Tensor:
    """Sum ``[B, T]`` per-step MACs over each sequence's true length -> ``[B]``."""
    return (step_macs * valid_steps(*step_macs.shape, lengths, step_macs.device).double()).sum(1)


def realisable_step_macs(method: Method, out: SeqOut, effective: Tensor | None = None) -> Tensor:
    """Exact-realisable MACs of every step, ``[B, T]``: the method's, else ``effective``'s."""
    exact = method.exact_step_macs(out)
    if exact is not None:
        return exact.double()
    return effective_step_macs(method.cost(), out) if effective is None else effective


def sequence_macs(method: Method, out: SeqOut, lengths: Tensor | None = None) -> dict[str, Tensor]:
    """Per-sequence ``effective``, ``exact`` and ``dense`` (analytic) MACs, each ``[B]``."""
    cost = method.cost()
    eff = effective_step_macs(cost, out)
    dense = torch.full(eff.shape, float(cost.dense_step()), dtype=torch.float64, device=eff.device)
    return {
        "effective": per_sequence(eff, lengths),
        "exact": per_sequence(realisable_step_macs(method, out, eff), lengths),
        "dense": per_sequence(dense, lengths),
    }


# --- fvcore ---------------------------------------------------------------------------------


def _rnn_handle(gates: int):
    """The fvcore handle for a fused multi-layer RNN op: MACs of every gate matmul at every step."""

    def handle(inputs: list[Any], outputs: list[Any]) -> int:
        from fvcore.nn.jit_handles import get_shape

        # the op's arguments: input, ..., num_layers (4), ..., bidirectional (7), batch_first (8)
        x_shape, dirs = get_shape(inputs[0]), 2 if inputs[7].toIValue() else 1
        B, T = (x_shape[0], x_shape[1]) if inputs[8].toIValue() else (x_shape[1], x_shape[0])
        D = get_shape(outputs[0])[-1] // dirs
        total, v = 0, x_shape[-1]
        for _ in range(int(inputs[4].toIValue())):
            total += B * T * dirs * gates * D * (v + D)
            v = dirs * D
        return total

    return handle


RNN_HANDLES = {
    "aten::gru": _rnn_handle(3),
    "aten::lstm": _rnn_handle(4),
    "aten::rnn_tanh": _rnn_handle(1),
    "aten::rnn_relu": _rnn_handle(1),
}
# Substrings of op names whose FLOPs must never be silently zero: products, convolutions and
# torch's recurrent ops, fused or per cell (named as in RNN_HANDLES, without the namespace).
_MATMUL_LIKE = ("mm", "matmul", "linear", "einsum", "bmm", "conv")
_MATMUL_LIKE += tuple(op.split("::", 1)[1] for op in RNN_HANDLES)


class _OutputsOnly(nn.Module):
    def __init__(self, method: nn.Module) -> None:
        super().__init__()
        self.method = method

    def forward(self, x: Tensor) -> Tensor:
        return self.method(x).outputs


def fvcore_macs(method: nn.Module, x: Tensor) -> tuple[int, dict[str, int]]:
    """MACs fvcore counts for ``method(x)`` and the ops it could not count (none matmul-like)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fvcore.nn import FlopCountAnalysis

        with evaluating(method):
            fca = FlopCountAnalysis(_OutputsOnly(method), (x,)).set_op_handle(**RNN_HANDLES)
            fca.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
            fca.tracer_warnings("none")
            total = int(fca.total())
            unsupported = dict(fca.unsupported_ops())
    missed = [op for op in unsupported if any(m in op for m in _MATMUL_LIKE)]
    if missed:
        raise RuntimeError(f"fvcore left matmul-like ops uncounted: {missed}")
    return total, unsupported


def torch_flops(method: nn.Module, x: Tensor) -> int:
    """FLOPs torch's FlopCounterMode counts for ``method(x)`` (it counts 2 per MAC)."""
    from torch.utils.flop_counter import FlopCounterMode

    # oneDNN's fused CPU LSTM has no FlopCounterMode formula; without it the op decomposes
    # into matmuls that are counted.
    with evaluating(method), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as fc:
            method(x)
    return int(fc.get_total_flops())


# --- per-method table ------------------------------------------------------------------------


def model_costs(
    model: nn.Module, x: Tensor, lengths: Tensor | None = None, times: Tensor | None = None
) -> dict[str, Any]:
    """MACs, FLOPs and parameters per sequence of a ``SeqModel`` on a batch, summed over layers.

    Sequences are charged their true ``lengths``, as the records charge them; fvcore counts the
    padded batch, scaled to the mean true length. Returns ``seq_len`` (padded), ``mean_len``,
    ``params_*`` and ``macs_*`` / ``flops_*`` of ``dense_fvcore``, ``dense`` and ``effective``.
    """
    model.eval()
    with torch.no_grad():
        out = model(x, lengths, times)
    T = x.shape[1]
    mean_len = float(lengths.double().mean()) if lengths is not None else float(T)
    row: dict[str, Any] = {
        "seq_len": T,
        "mean_len": mean_len,
        "params_total": sum(p.numel() for p in model.parameters()),
        "params_method": model.method_param_count(),
        **dict.fromkeys(("macs_dense_fvcore", "macs_dense", "macs_effective"), 0.0),
    }
    for layer, trace in zip(model.methods, out.layers, strict=True):
        p = next(layer.parameters())  # fvcore's count on random inputs, per sequence
        rand = torch.randn(2, T, layer.input_size, device=p.device, dtype=p.dtype)
        row["macs_dense_fvcore"] += fvcore_macs(layer, rand)[0] // 2 * mean_len / T
        macs = sequence_macs(layer, trace, lengths)
        row["macs_dense"] += float(macs["dense"].mean())
        row["macs_effective"] += float(macs["effective"].mean())
    for k in ("dense_fvcore", "dense", "effective"):
        row[f"flops_{k}"] = FLOPS_PER_MAC * row[f"macs_{k}"]
    return row
