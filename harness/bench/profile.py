"""What a training step dispatches per time step: the profile behind ``harness bench``'s ratios.

Torch calls from Python (each paying the Python-to-ATen overhead) and ATen operators, backward
and torch's own C++ loops included: why a train step is above ``MAC_BOUND`` per MAC.
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
    """``(python, aten)``: the torch calls from Python and ATen operators of one call of ``fn``."""
    with _PythonCalls() as py, _AtenOps() as aten:
        fn()
    return py.n, aten.n


def ops_per_step(fn: Callable[[], Any], steps: int) -> dict[str, float]:
    """``count_ops`` of one call of ``fn`` per time step of its batch (``steps`` = T)."""
    py, aten = count_ops(fn)
    return {"python": py / max(steps, 1), "aten": aten / max(steps, 1)}
