"""Sample inputs of every op of ``torch.ops.condrnn``, for ``torch.library.opcheck``
(tests/test_ops.py): ``cases_<op>(dtype)`` yields the argument tuples of ``condrnn::<op>``, at
the small sizes the kernel tests use. A forward op's float inputs require grad (its registered
backward is checked through AOT dispatch); a backward op's saved tensors come from a real forward
call, its gradients are random.

One section per op family (baselines/ops/<family>.py); a new op adds its ``cases_`` function to
its family's section (tests/test_ops.py fails for an op without one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from baselines.ops.masked_cell import CELLS

Args = tuple[Any, ...]


def randn(*shape: int, dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


def leaf(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached, a new leaf that requires grad."""
    return t.detach().clone().requires_grad_(True)


# --- masked_cell -------------------------------------------------------------------------------

_MC = {"S": 5, "B": 3, "D": 4}
_GATES = {"tanh": 1, "gru": 3, "lstm": 4}


def _masked_cell_inputs(cell: str, dtype: torch.dtype, grad: bool) -> Args:
    S, B, D = _MC["S"], _MC["B"], _MC["D"]
    G = _GATES[cell]
    c0 = randn(B, D, dtype=dtype, grad=grad) if cell == "lstm" else torch.empty(0, dtype=dtype)
    m = torch.rand(B, S, D, dtype=dtype).requires_grad_(grad)
    return (
        randn(S, B, G * D, dtype=dtype, grad=grad),
        randn(B, D, dtype=dtype, grad=grad),
        c0,
        (randn(G * D, D, dtype=dtype) * 0.5).requires_grad_(grad),
        m,
        CELLS[cell],
    )


def cases_masked_cell_forward(dtype: torch.dtype) -> Iterator[Args]:
    for cell in CELLS:
        yield _masked_cell_inputs(cell, dtype, grad=True)


def cases_masked_cell_backward(dtype: torch.dtype) -> Iterator[Args]:
    for cell in CELLS:
        xp, h0, c0, weight, m, code = _masked_cell_inputs(cell, dtype, grad=False)
        hs, _c_T, H, A, X, C = torch.ops.condrnn.masked_cell_forward(xp, h0, c0, weight, m, code)
        grad_c = torch.randn_like(h0) if cell == "lstm" else torch.empty(0, dtype=dtype)
        yield (torch.randn_like(hs), grad_c, weight, m, H, A, X, C, code)


# --- the table ---------------------------------------------------------------------------------

CASES: dict[str, Callable[[torch.dtype], Iterator[Args]]] = {
    name.removeprefix("cases_"): f
    for name, f in list(globals().items())
    if name.startswith("cases_")
}
"""``condrnn::<op>`` -> its sample inputs, by dtype."""
