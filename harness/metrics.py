"""Measures computed from compute traces and from per-seed results.

Skip % follows docs/methods.md 1.1 (S-SA eq. 10 with its off-by-one fixed): per sequence,
``1 - sum_{t,i} u_{t,i} / (T_true * D)``, then averaged over sequences. Depth-adaptive methods also
get depth-skip % ``1 - sum n / (T D R_max)`` and mean depth ``mean_t max_i n_{t,i}``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import torch
from torch import Tensor


def valid_steps(batch: int, steps: int, lengths: Tensor | None, device=None) -> Tensor:
    """``[B, T]`` float mask of the steps inside each sequence's true length."""
    t = torch.arange(steps, device=device)
    if lengths is None:
        return torch.ones(batch, steps, device=device)
    return (t[None, :] < lengths.to(device)[:, None]).float()


def skip_fraction(mask: Tensor, lengths: Tensor | None = None) -> Tensor:
    """Per-sequence share of unit updates skipped, ``[B]``, from a ``[B, T, D]`` update mask."""
    B, T, D = mask.shape
    valid = valid_steps(B, T, lengths, mask.device)
    updates = (mask.detach() > 0).float().sum(-1)  # [B, T] ceiling rule: any update counts
    return 1.0 - (updates * valid).sum(1) / (valid.sum(1) * D)


def depth_stats(depth: Tensor, max_depth: int, lengths: Tensor | None = None) -> dict[str, Tensor]:
    """Per-sequence ``depth_skip`` (fraction) and ``mean_depth`` (mean over steps of max_i n)."""
    B, T, D = depth.shape
    valid = valid_steps(B, T, lengths, depth.device)
    n = depth.detach().float()
    steps = valid.sum(1)
    return {
        "depth_skip": 1.0 - (n.sum(-1) * valid).sum(1) / (steps * D * max_depth),
        "mean_depth": (n.amax(-1) * valid).sum(1) / steps,
    }


def geometric_mean(accuracy_pct: float, skip_pct: float) -> float:
    """S-SA's headline metric ``sqrt(Accuracy% x Skip%)``; 0 for a method that never skips."""
    return math.sqrt(max(accuracy_pct, 0.0) * max(skip_pct, 0.0))


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value); NaNs are dropped."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan")
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0
