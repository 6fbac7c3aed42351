"""Column-skipping helpers of the activity-sparse methods' fast paths (Delta GRU, EGRU).

Kept apart from ``baselines._cells`` so that the code digest
(``harness.components.code.method_code``) of the methods that share those cells does not change with
these.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def addmm_read_columns(acc: Tensor, v: Tensor, w: Tensor) -> Tensor:
    """``acc + v @ w`` multiplying only the rows of ``w`` whose column of ``v`` is read.

    The column-skipping product of the activity-sparse methods' fast paths (Delta GRU's deltas,
    EGRU's events): ``v [B, K]`` is mostly zeros, ``w [K, N]`` is row-major (row k is what column
    k of ``v`` multiplies). Row k takes part only where ``v[:, k]`` is non-zero for some sequence
    (the union over the batch). At batch 1 the rows are summed by ``embedding_bag``, weighted by
    the non-zero entries, without copying them; at batch > 1 the union's rows are gathered once
    and multiplied with one ``addmm``. When no column is read, ``acc`` itself is returned (no op);
    when every column is, one dense ``addmm``. Equal to ``torch.addmm(acc, v, w)`` to rounding
    (the zero columns add exact zeros there).
    """
    if v.shape[0] == 1:
        idx = v[0].nonzero().view(-1)
    else:
        idx = v.any(0).nonzero().view(-1)
    k = idx.numel()
    if k == 0:
        return acc
    if k == w.shape[0]:
        return torch.addmm(acc, v, w)
    if v.shape[0] == 1:
        vals = v[0].index_select(0, idx)
        bag = F.embedding_bag(idx.view(1, -1), w, mode="sum", per_sample_weights=vals.view(1, -1))
        return acc + bag
    return torch.addmm(acc, v.index_select(1, idx), w.index_select(0, idx))


def bisect_level(
    share: Callable[[float], float], target: float, lo: float, hi: float, iters: int = 16
) -> tuple[float, float]:
    """The level in ``[lo, hi]`` whose ``share(level)`` is nearest ``target``, by bisection.

    For the ``at_skip`` hooks that calibrate a threshold on a batch: ``share`` must be
    non-decreasing in the level (up to the noise of one batch). Ends stand for themselves when
    the target lies beyond them.

    Returns:
        ``(level, share(level))``; the last call of ``share`` was at that level, so whatever it
        set on a model is left in place.
    """
    s_lo, s_hi = share(lo), share(hi)
    best = min(((abs(s_lo - target), lo, s_lo), (abs(s_hi - target), hi, s_hi)))
    if target > s_lo and target < s_hi:
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            s = share(mid)
            best = min(best, (abs(s - target), mid, s))
            if s < target:
                lo = mid
            else:
                hi = mid
    _, level, s = best
    return level, share(level)
