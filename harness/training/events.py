"""What happened while a run trained: the ``events`` a record keeps, and the rules behind them.

An epoch whose gradient norm overflowed float32 and was clipped in float64, an epoch whose mean
training loss is above ``SPIKE_FACTOR`` times the lowest before, and the non-finite loss or
gradient that ends a run. Reports mark the rows whose runs had events.
"""

from __future__ import annotations

import math
from typing import Any

SPIKE_FACTOR = 10.0  # an epoch whose training loss is this many times its best so far is a spike
EVENT_KINDS = ("grad_overflow_clipped", "loss_spike", "non_finite_loss", "non_finite_gradient")


def event(epoch: int, kind: str, detail: str) -> dict[str, Any]:
    """One entry of a record's ``events``: the epoch, one of ``EVENT_KINDS``, what was seen."""
    return {"epoch": epoch, "kind": kind, "detail": " ".join(detail.split())}


def overflow_event(epoch: int, norms: list[float], clip: float) -> dict[str, Any]:
    """An epoch in which the gradient norm overflowed float32 and was clipped in float64."""
    detail = (
        f"{len(norms)} batch(es) with a gradient norm above float32's range, largest "
        f"{max(norms):.3g} (float64), clipped to {clip:g}"
    )
    return event(epoch, "grad_overflow_clipped", detail)


def loss_spike(epoch: int, loss: float, best: tuple[float, int] | None) -> dict[str, Any] | None:
    """The event of an epoch whose ``loss`` exceeds ``SPIKE_FACTOR`` x ``best`` (loss, epoch)."""
    if best is None or not math.isfinite(loss) or not loss > SPIKE_FACTOR * best[0]:
        return None
    detail = (
        f"training loss {loss:.4g}, {loss / best[0]:.3g}x its best ({best[0]:.4g}, epoch {best[1]})"
    )
    return event(epoch, "loss_spike", detail)


def derive_events(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's ``events``; for one made before events were recorded, its history's spikes."""
    if isinstance(rec.get("events"), list):
        return rec["events"]
    out, best = [], None
    for row in rec.get("history") or []:
        loss, epoch = row.get("train_loss"), row.get("epoch")
        if not isinstance(loss, (int, float)) or not isinstance(epoch, int):
            continue
        spike = loss_spike(epoch, float(loss), best)
        if spike is not None:
            spike["detail"] += " (from the recorded history)"
            out.append(spike)
        if math.isfinite(loss) and (best is None or loss < best[0]):
            best = (float(loss), epoch)
    return out
