"""Sample inputs of every op of ``torch.ops.condrnn``, for ``torch.library.opcheck``
(tests/test_ops.py): one module per op family (baselines/ops/<family>.py), where
``cases_<op>(dtype)`` yields the argument tuples of ``condrnn::<op>`` at the small sizes the
kernel tests use. A forward op's float inputs require grad (its registered backward is then
checked through AOT dispatch); a backward op's saved tensors come from a real forward call, its
incoming gradients are random. A family's ``NOT_DIFFERENTIABLE`` names its forward ops that have
no backward (inference only). Every op passes every check of opcheck, AOT dispatch included.

A new op adds its ``cases_`` function to its family's module (tests/test_ops.py fails for an op
without one).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any

import torch

CASES: dict[str, Callable[[torch.dtype], Iterator[tuple[Any, ...]]]] = {}
"""``condrnn::<op>`` -> its sample inputs, by dtype."""
NOT_DIFFERENTIABLE: set[str] = set()
"""The forward ops without a backward."""

for _info in pkgutil.iter_modules(__path__):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    for _name, _f in vars(_module).items():
        if _name.startswith("cases_") and callable(_f):
            CASES[_name.removeprefix("cases_")] = _f
    NOT_DIFFERENTIABLE |= set(getattr(_module, "NOT_DIFFERENTIABLE", ()))
