"""Every measure a record holds, described once; with its computation where every run takes it.

The reports, figures and drift gate read the registry (``METRICS``); the evaluation computes
every registered ``per_sequence`` and ``of_metrics`` measure (docs/architecture.md, "Adding a
metric"). Skip % follows docs/methods.md 1.1 (S-SA eq. 10 with its off-by-one fixed): per
sequence ``1 - sum_{t,i} u_{t,i} / (T_true * D)``, averaged over sequences; depth-skip % is
``1 - sum n / (T D R_max)``, mean depth ``mean_t max_i n_{t,i}``. Torch is imported only inside
the functions that need it.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.components.plugins import load_plugins
from harness.components.registry import SNAKE_KEY, Registry

if TYPE_CHECKING:
    from torch import Tensor

FORMS = ("num", "int", "yes-no")
GROUPS = ("score", "compute", "detail")
DEFAULT_TOLERANCE = (1e-6, 1e-4)  # the drift gate's (absolute, relative) tolerance of a metric

# how the FLOPs measures count (``harness.components.flops`` computes them)
FLOPS_PER_MAC = 2
UNIT_NOTE = (
    "1 MAC = 2 FLOPs; MACs/FLOPs per sequence; "
    "biases, nonlinearities, embeddings and read-out not charged"
)


@dataclass(frozen=True)
class Metric:
    """How the reports, the figures and the drift gate treat one measure.

    Attributes:
        name: its key in a record's ``metrics`` (``val_<name>`` in the history), or a report
            column's (``flops``, ``params``).
        title: what tables and axes print for it (``Skip %``, ``MSE``).
        higher: True when higher is better, False when lower, None when neither (no arrow,
            never bold, not a sort key).
        percent: unit ``%``, range 0-100: intervals, bands and error bars clipped to it.
        range: ``(low, high)``, None unbounded; a confidence interval is clipped to it.
        large: a count (FLOPs): printed in a power of ten ``x10^k`` from 10^5 up, as S-SA does.
        form: a cell over seeds: ``num`` (mean ± std), ``int``, ``yes-no`` (a 0/1 outcome).
        group: ``score`` (a table column), ``compute`` (the leaderboard's trace columns, in
            registration order) or ``detail`` (recorded, never a column).
        tolerance: the drift gate's default ``(absolute, relative)`` tolerance (``--tol``).
        per_sequence: ``Measured`` -> a ``[B]`` tensor (None: no such value on this run); the
            record holds the mean over the split's sequences.
        of_metrics: ``(metrics, task kind) -> value`` or None, run after the ``per_sequence``
            measures and the task's scores, in registration order.
    """

    name: str
    title: str
    unit: str = ""
    higher: bool | None = None
    percent: bool = False
    range: tuple[float | None, float | None] = (None, None)
    large: bool = False
    form: str = "num"
    group: str = "score"
    tolerance: tuple[float, float] = DEFAULT_TOLERANCE
    per_sequence: Callable[[Measured], Tensor | None] | None = None
    of_metrics: Callable[[dict[str, float], str], float | None] | None = None

    def __post_init__(self) -> None:
        if self.form not in FORMS or self.group not in GROUPS:
            raise ValueError(
                f"metric {self.name!r}: form must be one of {FORMS} and group one of {GROUPS}"
            )
        if self.percent != (self.unit == "%") or (self.percent and self.range != (0.0, 100.0)):
            raise ValueError(f"metric {self.name!r}: a percentage has unit '%' and range 0-100")
        ends = self.range if isinstance(self.range, tuple) and len(self.range) == 2 else [math.nan]
        finite = all(e is None or isinstance(e, (int, float)) and math.isfinite(e) for e in ends)
        if not finite or (None not in ends and ends[0] >= ends[1]):
            raise ValueError(
                f"metric {self.name!r}: range must be (low, high), each a finite number or None "
                f"(unbounded), low below high (got {self.range!r})"
            )


@dataclass(frozen=True)
class Measured:
    """What a ``per_sequence`` measure reads: a test batch, the outputs, the ``SeqModel``."""

    batch: Any
    out: Any
    model: Any


# name -> Metric, in registration order (the leaderboard orders its trace columns by it)
METRICS = Registry(
    "metric",
    lambda obj: [] if isinstance(obj, Metric) else ["is not a Metric"],
    "harness.components.metrics.Metric",
    key=SNAKE_KEY,
)


def register_metric(metric: Metric) -> Metric:
    """Register ``metric`` (again: no change) as its caller's, for ``source_of``; returns it."""
    if "__module__" not in vars(metric):
        object.__setattr__(metric, "__module__", sys._getframe(1).f_globals.get("__name__", "?"))
    return METRICS.register(metric.name)(metric)


def get_metric(name: str) -> Metric:
    """The registered description of measure ``name``; a neutral one (no direction) if unknown."""
    if name not in METRICS.registered():  # (without loading them, the harness's own are known)
        load_plugins()
    return METRICS.registered().get(name) or Metric(name, name)


def higher_is_better(record: dict) -> bool:
    """The direction of a record's primary metric: the registry's, else the record's flag."""
    higher = get_metric(record["primary"]).higher
    return bool(record.get("higher_is_better")) if higher is None else higher


def _skip_pct(m: Measured) -> Tensor:
    """Skip % of each sequence: the unit updates skipped, each layer weighted by its units."""
    layers = m.model.methods
    units = sum(layer.hidden_size for layer in layers)
    skipped = sum(
        skip_fraction(o.mask, m.batch.lengths) * layer.hidden_size
        for o, layer in zip(m.out.layers, layers, strict=True)
    )
    return 100.0 * (skipped / units).double()


def _read_skip_pct(m: Measured) -> Tensor | None:
    """Activity sparsity % of each sequence: the column reads skipped (activity-sparse layers)."""
    unread = unread_columns(m.out.layers)
    if unread is None:
        return None
    valid = valid_steps(unread.shape[0], unread.shape[1], m.batch.lengths, unread.device).double()
    return 100.0 * ((unread * valid).sum(1) / valid.sum(1))


def _depth(key: str, scale: float) -> Callable[[Measured], Tensor | None]:
    """A ``depth_stats`` measure of each sequence, averaged over the layers (depth models)."""

    def per_sequence(m: Measured) -> Tensor | None:
        layers = list(zip(m.out.layers, m.model.methods, strict=True))
        if all(o.depth is None for o, _ in layers):
            return None
        total = sum(
            depth_stats(o.depth, layer.cost().max_depth, m.batch.lengths)[key].double()
            for o, layer in layers
            if o.depth is not None
        )
        return scale * (total / len(layers))

    return per_sequence


def _geo_mean(metrics: dict[str, float], kind: str) -> float | None:
    """S-SA's √(Acc × Skip) of a classification run."""
    if kind != "classification" or "accuracy" not in metrics:
        return None
    return geometric_mean(metrics["accuracy"], metrics["skip_pct"])


_PCT = {"unit": "%", "percent": True, "range": (0.0, 100.0)}
_TRACE = {"group": "compute"}
_SKIPPED = {**_TRACE, **_PCT, "higher": True}  # a trace measure's share skipped
for _m in (
    # the trace measures of every run, in the order the leaderboard prints them
    Metric("skip_pct", "Skip %", per_sequence=_skip_pct, **_SKIPPED),
    Metric("read_skip_pct", "Activity sparsity %", per_sequence=_read_skip_pct, **_SKIPPED),
    Metric(
        "mean_depth",
        "Mean depth",
        "layers",
        range=(0.0, None),
        **_TRACE,
        per_sequence=_depth("mean_depth", 1.0),
    ),
    Metric("depth_skip_pct", "Depth-skip %", per_sequence=_depth("depth_skip", 100.0), **_SKIPPED),
    # the scores of the task kinds (harness.components.task.Task.batch_stats / finalize)
    Metric("accuracy", "Accuracy %", higher=True, **_PCT),
    Metric("mse", "MSE", higher=False, range=(0.0, None)),
    Metric("perplexity", "Perplexity", higher=False, range=(1.0, None)),
    Metric("nll", "NLL", "nats", higher=False, range=(0.0, None), group="detail"),
    # S-SA's headline measure of classification runs
    Metric("geo_mean", "√(Acc×Skip)", higher=True, of_metrics=_geo_mean, **_PCT),
    # the per-epoch training loss of the history (learning curves)
    Metric("train_loss", "training loss", higher=False, group="detail"),
    # the counts the reports print beside the metrics (a record's flops, params and config)
    Metric("flops", "Effective FLOPs", "FLOPs", higher=False, large=True, group="compute"),
    Metric("dense_flops", "Dense FLOPs", "FLOPs", large=True, group="compute"),
    Metric("params", "# params", range=(0.0, None), form="int", group="compute"),
    Metric("hidden_size", "D_h", range=(1.0, None), form="int", group="compute"),
):
    register_metric(_m)
del _m


def valid_steps(batch: int, steps: int, lengths: Tensor | None, device=None) -> Tensor:
    """``[B, T]`` float mask of the steps inside each sequence's true length."""
    import torch

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


def unread_columns(layers: Sequence[Any]) -> Tensor | None:
    """The share of column reads each step skips, ``[B, T]`` (float64), over the layers' reads.

    Each layer's V + D columns count (docs/methods.md 1.1); None when no layer has reads.
    """
    reads = [o.reads.detach() for o in layers if o.reads is not None]
    if not reads:
        return None
    return sum((r <= 0).double().sum(-1) for r in reads) / sum(r.shape[-1] for r in reads)


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
