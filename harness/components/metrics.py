"""Every measure a record holds, described once; with its computation where every run takes it.

The registry (``METRICS``, ``register_metric``, ``get_metric``) says of each measure its title,
unit, direction, whether it is a percentage, the values it can take, how a table prints it and
the drift gate's tolerance for it. The leaderboard, the paper tables, the figures and the drift
gate (``harness.reporting``) read it; none keeps a table of its own.

A measure of every run carries its computation: ``per_sequence`` (its value for each sequence of
a test batch, from the batch's step outputs, ``Measured``; the record holds the mean over the
split's sequences) or ``of_metrics`` (from the split's other measures, once they are known). The
evaluation (``harness.training.train.evaluate``) computes whatever is registered so, in
registration order, and nothing else by hand: Skip %, activity sparsity, depth-skip %, mean depth
and the geometric mean are such entries here, and a plugin adds a measure to every run of every
task the same way. The scores ``harness.components.task.Task`` computes for each task kind, and
the counts the reports print (FLOPs, parameters, D), are registered descriptions only. A task
whose own scoring records another measure registers it in its module (``register_metric``, e.g. a
0/1 ``solved``); ``tests/test_metrics_registry.py`` fails for a recorded measure without an
entry.

Skip % follows docs/methods.md 1.1 (S-SA eq. 10 with its off-by-one fixed): per sequence,
``1 - sum_{t,i} u_{t,i} / (T_true * D)``, then averaged over sequences. Depth-adaptive methods also
get depth-skip % ``1 - sum n / (T D R_max)`` and mean depth ``mean_t max_i n_{t,i}``.

This module imports torch only inside the functions that need it: importing it stays light.
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
        name: its key: in a record's ``metrics`` and ``val_metrics`` (``val_<name>`` in the
            per-epoch history), or a report column's key (``flops``, ``params``).
        title: what tables and axes print for it (``Skip %``, ``MSE``).
        unit: its unit (``%`` for a percentage, ``FLOPs``, ``nats``); empty for a plain number.
        higher: its direction: True when higher is better, False when lower is better, None when
            neither (no arrow, never bold, not a sort key).
        percent: a percentage (unit ``%``, range 0-100): printed without a power of ten, its
            confidence intervals, bands and error bars clipped to [0, 100].
        range: ``(low, high)``, the values it can take (None: unbounded on that side); a
            confidence interval is clipped to it.
        large: a count (FLOPs): a table prints it in a power of ten ``x10^k`` from 10^5 up, as
            S-SA does (``harness.reporting.text.column_scale``).
        form: how a table cell shows it over seeds: ``num`` (mean ± std), ``int`` (a whole
            number), ``yes-no`` (a 0/1 outcome: Yes, No, or how many seeds of how many).
        group: ``score`` (how well the task is done: a table column), ``compute`` (how much work
            was done or skipped: the leaderboard's trace columns, in registration order), or
            ``detail`` (recorded, never a table column).
        tolerance: the drift gate's default ``(absolute, relative)`` tolerance for it as a test
            metric (``harness.reporting.compare``; ``--tol`` overrides it).
        per_sequence: where every run measures it: its value for each sequence of a test batch,
            a ``[B]`` tensor in its unit, from ``Measured`` (the batch, the model's outputs, the
            model), or None where the run has no such value (no depth, no column reads); the
            record holds the mean over the split's sequences.
        of_metrics: where every run derives it from the split's other measures: ``(metrics,
            task kind) -> value``, or None where it does not apply. Run after every
            ``per_sequence`` measure and the task's scores, in registration order.
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
    """What a ``per_sequence`` measure reads of one test batch.

    Attributes:
        batch: the batch (``x [B, T, V]``, ``lengths`` or None, ``times``).
        out: the model's outputs: ``pred`` and ``layers``, one ``SeqOut`` per layer (``mask``,
            ``depth``, ``reads``, ``outputs``).
        model: the ``SeqModel`` (its layers, ``methods``: ``hidden_size``, ``cost()``).
    """

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
    """Register ``metric`` in ``METRICS``; registering the same description again changes nothing.

    Its ``__module__`` becomes the caller's (as ``collections.namedtuple`` does), so that
    ``harness.components.plugins.source_of`` says where it came from: a built-in, a plugin, an
    included file.

    Returns:
        The metric, so that a module can keep it: ``SOLVED = register_metric(Metric(...))``.

    Raises:
        PluginError: another description is registered under the same name.
    """
    if "__module__" not in vars(metric):
        object.__setattr__(metric, "__module__", sys._getframe(1).f_globals.get("__name__", "?"))
    return METRICS.register(metric.name)(metric)


def get_metric(name: str) -> Metric:
    """The registered description of measure ``name``.

    A name not registered yet is looked up again after the plugins are loaded (a task registers
    its own measures in its module); one still unknown gets a neutral description: the name as
    its title, no direction, printed as a plain number.
    """
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
for _m in (
    # the trace measures of every run, in the order the leaderboard prints them
    Metric("skip_pct", "Skip %", higher=True, per_sequence=_skip_pct, **_TRACE, **_PCT),
    Metric(
        "read_skip_pct",
        "Activity sparsity %",
        higher=True,
        per_sequence=_read_skip_pct,
        **_TRACE,
        **_PCT,
    ),  # fmt: skip
    Metric(
        "mean_depth",
        "Mean depth",
        "layers",
        range=(0.0, None),
        per_sequence=_depth("mean_depth", 1.0),
        **_TRACE,
    ),  # fmt: skip
    Metric(
        "depth_skip_pct",
        "Depth-skip %",
        higher=True,
        per_sequence=_depth("depth_skip", 100.0),
        **_TRACE,
        **_PCT,
    ),  # fmt: skip
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

    Each layer with ``SeqOut.reads`` counts its V + D columns (docs/methods.md 1.1); None when
    no layer has reads (the row-skipping methods). A model's layers are all of one method, so
    either every layer has reads or none has.
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
