"""The elastic highway methods' whole-sequence inference in C++ (issue 65), as the ops
``condrnn::highway_infer_ei_rehn`` and ``condrnn::highway_infer_srehn``
(``csrc/highway_infer.cpp``): the fast paths of ``EIREHN.fast_forward`` and
``SREHN.fast_forward`` on the CPU.

Each step of each sequence decides first (the local rate, the elastic gate of every layer and its
depth trace, the sequence's halting depth ``R_b``), then runs only that sequence's layers
``1..R_b``: the sequences that still run a layer are gathered into its matmuls, so at B > 1 the
cost follows each sequence's own depth, not the batch's deepest. EI-REHN's layer 1 starts from the
learned ``s^0, g^0, z^0``, so its hypernetwork output at layer 1 is the same at every step: the op
computes it once a call. SREHN's layer computes only the rows of the units whose gate ``d^r`` is
> 0 (the others are exact copies of h), by per-unit dot products on a unit-major copy of the
shared weight (``pack_srehn``), or one matmul where every unit is needed.

Inference only: no backward is registered. The outputs ``hs``, ``n``, ``mask`` ``[B, T, D]`` and
the mean of d^1 over the units ``[B, T]`` have shapes that follow from the inputs', so the fake
implementations need no value. The methods' dense eval loop (``model.eval()(x)``) is the
reference: the op equals it to float rounding, the decisions (mask, depth) exactly at the tested
seeds (tests/test_kernel_highway_infer.py). Where the op cannot run (not CPU: one warning line,
``library.on_cpu``; not float32/64; not built; ``HARNESS_NO_KERNELS=1``) the methods run their
PyTorch step loop.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from baselines.ops.library import Kernel, fake

# Its source is part of the code version of the methods that run it (``method_code``).
highway_infer_kernel = Kernel("highway_infer", "elastic highway inference")
highway_infer_status = highway_infer_kernel.status
inference_kernel = highway_infer_kernel.for_tensors


def pack_srehn(weight: Tensor) -> Tensor:
    """SREHN's shared weight ``[W_H; W_T]`` ``[2D, D]`` unit-major: row ``2i`` is unit i's candidate
    row, ``2i + 1`` its transform-gate row (the two rows a unit needs, adjacent)."""
    D = weight.shape[1]
    return weight.view(2, D, D).transpose(0, 1).reshape(2 * D, D).contiguous()


def _outs(p: Any, h0: Any) -> list[Any]:
    T, B, D = p.shape[0], h0.shape[0], h0.shape[1]
    return [p.new_empty(B, T, D), p.new_empty(B, T, D), p.new_empty(B, T, D), p.new_empty(B, T)]


@fake("highway_infer_ei_rehn")
def _ei_rehn_fake(p, h0, rate_t, alpha, beta, w0_t, bias, proj_t, mix_bias, hyper_t, hyper_b,
                  init, r_max):  # fmt: skip
    return _outs(p, h0)  # hs, n, mask, d1 mean


@fake("highway_infer_srehn")
def _srehn_fake(p, h0, rate_t, alpha, beta, wu, bias, r_max):
    return _outs(p, h0)  # hs, n, mask, d1 mean
