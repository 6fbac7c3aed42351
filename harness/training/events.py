"""What happened while a run trained: the ``events`` a record keeps, and the rules behind them.

The training loop (``harness.training.train.train_model``) appends an event for an epoch in which
the gradient norm overflowed float32 and was clipped in float64 (``grad_overflow_clipped``), for an
epoch whose mean training loss is above ``SPIKE_FACTOR`` times the lowest of the epochs before
(``loss_spike``), and for the non-finite loss or gradient that ends a run. Reports mark the table
rows whose runs had such events; for a record made before events were recorded, ``derive_events``
finds the loss spikes in its history.
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
    """The spike event of an epoch whose training ``loss`` exceeds ``SPIKE_FACTOR`` x its best.

    Args:
        epoch: the epoch.
        loss: its mean training loss.
        best: ``(lowest training loss of the epochs before, its epoch)``; None at the first.
    """
    if best is None or not math.isfinite(loss) or not loss > SPIKE_FACTOR * best[0]:
        return None
    detail = (
        f"training loss {loss:.4g}, {loss / best[0]:.3g}x its best ({best[0]:.4g}, epoch {best[1]})"
    )
    return event(epoch, "loss_spike", detail)


def derive_events(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's ``events``; for a record made before events were recorded, its history's.

    That is the training-loss spikes; an overflow clipped in float64 leaves no trace there.
    """
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
