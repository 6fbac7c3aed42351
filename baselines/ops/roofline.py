"""The machine measures of the speedup report's physical bound, as ops of the kernel library
(``csrc/roofline.cpp``): ``condrnn::roofline_triad`` (a STREAM-like triad ``a = b + s c``,
``reps`` passes inside one call, so that the call's dispatch is amortised),
``condrnn::roofline_product`` (ATen's ``mv`` of ``w [m, n]`` by ``x [n]``, or its ``mm`` of
``x [B, n]`` by ``w^T``, ``reps`` times in one call) and ``condrnn::roofline_empty_loop`` (a loop
of ``steps`` steps that each store one value: the least a whole-sequence kernel costs). The triad
is built with the kernels' flags, so that the bandwidth it measures is the one a kernel's loops
reach.

No method runs them: ``harness.bench.roofline`` calls them through ``torch.ops.condrnn`` where
the library is loaded (its time per call is the measure), and where it is not measures with
torch's own ops instead. Inference only (no backward); the fake implementations give the output
shapes (the triad's is its inputs', the product's ``[m]`` or ``[B, m]``, the loop's
``[steps]``). This module is imported by the op
tests (tests/op_cases/roofline.py), not by a method: its source is part of no method's code
version.
"""

from __future__ import annotations

from baselines.ops.library import Kernel, fake

# its source, like every family's (no method uses it: ``harness.bench.roofline`` measures with it)
roofline_family = Kernel("roofline", "roofline measurement")


@fake("roofline_triad")
def _triad_fake(b, c, s, reps):
    return b.new_empty(b.shape)


@fake("roofline_product")
def _product_fake(w, x, reps):
    return x.new_empty(w.shape[0]) if x.dim() == 1 else x.new_empty(x.shape[0], w.shape[0])


@fake("roofline_empty_loop")
def _empty_loop_fake(x, steps):
    return x.new_empty(steps)
