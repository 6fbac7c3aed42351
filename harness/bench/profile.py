"""What a training step dispatches, per time step: the profile behind ``harness bench``'s ratios.

A recurrent method that decides per step (skip, update some units, halt) runs a Python loop over
the steps, and at the paper presets' sizes a step's arithmetic is small: its time is mostly the
cost of dispatching each operation. ``count_ops`` counts, over one call of a phase's work,

- ``python``: the torch functions called from Python (``TorchFunctionMode``), each paying the
  Python-to-ATen overhead (a few µs on a CPU);
- ``aten``: the ATen operators dispatched, forward and backward (``TorchDispatchMode``),
  including those torch's own C++ loops issue (on a CPU, ``nn.GRU`` with gradients runs its
  steps as ATen operators too, from C++, without the Python overhead).

Divided by the steps of the batch, they say how much more a method dispatches per step than
its fused cell: the reason a row of ``reports/TIMING.md`` is above ``MAC_BOUND`` when its MACs
are not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


class _PythonCalls(TorchFunctionMode):
    n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


class _AtenOps(TorchDispatchMode):
    n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[[], Any]) -> tuple[int, int]:
    """``(python, aten)`` of one call of ``fn``.

    The torch functions it called from Python, and the ATen operators it dispatched, backward
    included.
    """
    with _PythonCalls() as py, _AtenOps() as aten:
        fn()
    return py.n, aten.n


def ops_per_step(fn: Callable[[], Any], steps: int) -> dict[str, float]:
    """``count_ops`` of one call of ``fn`` per time step of its batch (``steps`` = T)."""
    py, aten = count_ops(fn)
    return {"python": py / max(steps, 1), "aten": aten / max(steps, 1)}
