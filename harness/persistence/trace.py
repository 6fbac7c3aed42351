"""The traced update pattern of a record (``trace``): masks and micro-step counts, packed.

A record keeps the first test sequence's update mask per layer as one hex string per step
(``pack_mask``) and, for depth-adaptive methods, its micro-steps per unit as one base-36 digit
per unit (``pack_depth``); reports decode them (``unpack_mask``, ``unpack_depth``) without
importing the trainer or torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def pack_mask(mask: Any) -> list[str]:
    """A ``[T, D]`` {0,1} mask (tensor or array) as one hex string per step (bit i = unit i)."""
    arr = mask.detach().cpu().numpy() if hasattr(mask, "detach") else np.asarray(mask)
    rows = ["".join("1" if b else "0" for b in reversed(row)) for row in (arr > 0).tolist()]
    return [format(int(bits, 2), f"0{(len(bits) + 3) // 4}x") if bits else "" for bits in rows]


def unpack_mask(rows: list[str], units: int) -> list[list[int]]:
    """Inverse of ``pack_mask``: ``[T][D]`` lists of 0/1."""
    return [[(int(r, 16) >> i) & 1 for i in range(units)] for r in rows]


DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def pack_depth(depth: Any) -> list[str]:
    """A ``[T, D]`` micro-step count (0-35) as one string per step, one base-36 digit per unit."""
    arr = depth.detach().cpu().numpy() if hasattr(depth, "detach") else np.asarray(depth)
    return ["".join(DIGITS[min(int(n), 35)] for n in row) for row in arr.tolist()]


def unpack_depth(rows: list[str]) -> np.ndarray:
    """Inverse of ``pack_depth``: a ``[T, D]`` integer array."""
    return np.array([[int(c, 36) for c in r] for r in rows], dtype=np.int64).reshape(len(rows), -1)
