"""The kernels' operator namespace, ``torch.ops.condrnn``: every op has a fake implementation, a
forward op its backward registered with it, and each passes ``torch.library.opcheck`` (its schema,
its fake implementation against its CPU one, its autograd registration and AOT dispatch with
dynamic shapes) in float32 and float64, on the sample inputs of tests/op_cases/ (a module per op
family).
"""

from __future__ import annotations

import pytest
import torch
from kernel_support import built
from op_cases import CASES, NOT_DIFFERENTIABLE

from baselines.ops import library
from baselines.ops.library import LIBRARY
from baselines.ops.masked_cell import masked_cell_kernel

pytestmark = pytest.mark.kernel

# torch.library.opcheck's checks (its documented ``test_utils``, all of them by default)
OPCHECKS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)


@pytest.fixture
def ops():
    """Both parts of the library built (or found built) and loaded; every op family's module
    imported."""
    for found in built(masked_cell_kernel):
        assert library.load_library("the op tests", "infer"), library.library_status("infer")
        yield found


def namespace_ops() -> list[str]:
    """Every op of the namespace, ``condrnn::<name>`` without the prefix."""
    prefix = f"{LIBRARY}::"
    return sorted(
        name.removeprefix(prefix)
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith(prefix)
    )


def has_kernel(op: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"{LIBRARY}::{op}", key)


def test_every_op_has_a_fake_implementation_and_sample_inputs(ops):
    names = namespace_ops()
    assert names, "the library registered no op"
    assert [n for n in names if not has_kernel(n, "Meta")] == []
    assert [n for n in names if n not in CASES] == []
    assert [n for n in CASES if n not in names] == []


def test_every_fake_and_backward_declared_names_an_op_of_the_library(ops):
    parts = library.python_parts
    assert sorted(set(parts.fakes) - set(namespace_ops())) == []
    assert sorted(set(parts.backwards) - set(namespace_ops())) == []
    assert {op for kind, op in parts.done if kind == "fake"} == set(parts.fakes)


def test_every_forward_op_has_its_backward_registered(ops):
    forwards = [n for n in namespace_ops() if not n.endswith("backward")]
    assert [n for n in forwards if not has_kernel(n, "Autograd")] == [
        n for n in forwards if n in NOT_DIFFERENTIABLE
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("op", sorted(CASES))
def test_opcheck(ops, op, dtype):
    overload = getattr(torch.ops.condrnn, op).default
    count = 0
    for args in CASES[op](dtype):  # every check, AOT dispatch included: EI-REHN's whole step too
        torch.library.opcheck(overload, args, test_utils=OPCHECKS)
        count += 1
    assert count > 0
