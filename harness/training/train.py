"""The one training and evaluation loop, shared by every method and task, and the one run.

Adam with global-norm gradient clipping, validation after every epoch, test metrics of the best
validation epoch's parameters (the rule is named in every record); a non-finite loss or gradient
fails the run. ``run`` runs every component through one interface (``Fitting``: a method's
``ModelFit``, a reference's ``ReferenceFit``) and builds every record.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from harness import env
from harness.components.code import method_code
from harness.components.config import RunConfig
from harness.components.flops import sequence_macs
from harness.components.metrics import FLOPS_PER_MAC, METRICS, Measured, unread_columns, valid_steps
from harness.components.model import SeqModel
from harness.components.plugins import source_of
from harness.components.registry import METHODS, TASKS
from harness.components.task import Split, Splits, Task
from harness.errors import (
    ConfigError,
    DivergedError,
    HarnessError,
    NonFiniteLoss,
    failure_reason,
    out_of_memory,
)
from harness.persistence import records
from harness.persistence.trace import pack_depth, pack_mask
from harness.references import add_stats, component
from harness.training import events as events_mod
from harness.training.checkpoint import Checkpointer, TrainState, restore_training, training_state
from harness.training.timing import CompileClock


def build(cfg: RunConfig, data_dir: str | None = None) -> tuple[Task, SeqModel]:
    """Instantiate the task and a freshly initialised model (seeded by ``cfg.seed``)."""
    task = TASKS.get(cfg.task)(cfg.task_cfg, data_dir)
    env.set_seed(cfg.seed)
    model = SeqModel(METHODS.get(cfg.method), cfg.method_cfg, task, cfg.model)
    if cfg.train.compile:
        for layer in model.methods:
            layer.compile_step()
    return task, model


@dataclass
class EvalResult:
    """Metrics of one pass over a split: task metrics, MACs, diagnostics and the trace."""

    metrics: dict[str, float]
    macs: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, float] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)


@torch.no_grad()
def evaluate(
    model: SeqModel, task: Task, split: Split, batch_size: int, device, trace: bool = False
) -> EvalResult:
    """Evaluate in eval mode: task metrics, the registered measures, MACs, diagnostics.

    Averaged over the split's sequences (Skip % per sequence over its true length,
    docs/methods.md 1.1). With ``trace``, also the first sequence's pattern and the R_t histogram.
    """
    model.eval()
    stats: dict[str, tuple[float, float]] = {}
    sums: dict[str, float] = {}  # the MACs and the methods' diagnostics, summed over sequences
    means: dict[str, float] = {}  # the registered measures of every run (``per_sequence``)
    per_sequence = [m for m in METRICS.values() if m.per_sequence is not None]
    n_seq = 0
    traced: dict[str, Any] = {}
    for batch in split.batches(batch_size):
        batch = batch.to(device)
        out = model(batch.x, batch.lengths, batch.times)
        if trace:
            _trace(out, batch, traced, task, model)
        add_stats(stats, task.batch_stats(out.pred, batch))
        n_seq += batch.x.shape[0]
        measured = Measured(batch, out, model)
        for metric in per_sequence:
            value = metric.per_sequence(measured)
            if value is not None:
                means[metric.name] = means.get(metric.name, 0.0) + float(value.double().sum())
        per_seq: dict[str, torch.Tensor] = {}
        for o, layer in zip(out.layers, model.methods, strict=True):
            for k, v in sequence_macs(layer, o, batch.lengths).items():
                per_seq[f"macs_{k}"] = per_seq.get(f"macs_{k}", 0) + v
            for k, v in o.extras.items():
                per_seq[f"diag_{k}"] = per_seq.get(f"diag_{k}", 0) + v.float() / len(model.methods)
        for k, v in per_seq.items():
            sums[k] = sums.get(k, 0.0) + float(v.double().sum())
    metrics = task.finalize(stats)
    metrics.update({k: v / max(n_seq, 1) for k, v in means.items()})
    for metric in METRICS.values():
        value = None if metric.of_metrics is None else metric.of_metrics(metrics, task.kind)
        if value is not None:
            metrics[metric.name] = value
    if acc := traced.pop("_per_step", None):  # per-step sums of ``_trace``: means (%, 2 places)
        n = acc.pop("n").clamp(min=1.0)
        traced |= {k: [round(float(v), 2) for v in 100.0 * t / n] for k, t in acc.items()}
    mean = {k: v / max(n_seq, 1) for k, v in sums.items()}
    macs = {k[5:]: v for k, v in mean.items() if k.startswith("macs_")}
    diags = {k[5:]: v for k, v in mean.items() if k.startswith("diag_")}
    return EvalResult(metrics, macs, diags, traced)


def _trace(out, batch, traced: dict[str, Any], task: Task, model: SeqModel) -> None:
    """Add a batch to ``traced``: the first sequence's pattern, per-step shares, R_t histogram."""
    if "first_mask" not in traced:
        T = int(batch.lengths[0]) if batch.lengths is not None else batch.x.shape[1]
        traced["first_mask"] = [pack_mask(o.mask[0, :T]) for o in out.layers]
        traced["units"] = [o.mask.shape[-1] for o in out.layers]
        if any(o.reads is not None for o in out.layers):
            traced["first_reads"] = [
                None if o.reads is None else pack_mask(o.reads[0, :T]) for o in out.layers
            ]
        if all(o.depth is not None for o in out.layers):
            traced["first_depth"] = [pack_depth(o.depth[0, :T]) for o in out.layers]
            traced["max_depth"] = [layer.cost().max_depth for layer in model.methods]
        marks = task.marked_steps(batch.x[0, :T])
        if marks:
            traced["first_marks"] = [int(t) for t in marks]
    # per step, over the test set: the share of rows (unit updates) and of columns (reads)
    # skipped, each layer weighted by its units / columns; summed here, divided in evaluate
    B, T = out.layers[0].mask.shape[:2]
    valid = valid_steps(B, T, batch.lengths, out.layers[0].mask.device).double()
    rows = sum((o.mask.detach() <= 0).double().sum(-1) for o in out.layers)
    shares = {"skip_pct_per_step": rows / sum(o.mask.shape[-1] for o in out.layers)}
    unread = unread_columns(out.layers)
    if unread is not None:
        shares["read_skip_pct_per_step"] = unread
    acc = traced.setdefault("_per_step", {})
    for name, share in {"n": 1.0, **shares}.items():  # n: the sequences that reach each step
        acc[name] = _pad_add(acc.get(name, torch.zeros(0)), (share * valid).sum(0).cpu())
    hist = traced.setdefault("depth_hist", {})
    for o in out.layers:
        if o.depth is None:
            continue
        R = o.depth.amax(-1)  # [B, T]
        if batch.lengths is not None:
            valid = torch.arange(R.shape[1], device=R.device)[None] < batch.lengths[:, None]
            R = R[valid]
        for r, c in zip(*torch.unique(R.long(), return_counts=True), strict=True):
            hist[str(int(r))] = hist.get(str(int(r)), 0) + int(c)
    if not hist:
        traced.pop("depth_hist")


def _pad_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` for 1-d tensors of possibly different lengths (the shorter one zero-padded)."""
    out = torch.zeros(max(len(a), len(b)), dtype=torch.float64)
    out[: len(a)] += a
    out[: len(b)] += b
    return out


def _better(new: float, best: float | None, higher: bool) -> bool:
    if new is None or math.isnan(new):
        return False
    return best is None or (new > best if higher else new < best)


def descend(
    total: torch.Tensor, opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], clip: float
) -> float | None:
    """One optimiser step on ``total``: backward, global-norm clipping to ``clip`` (0: none), step.

    A norm that overflows float32 (``clip_grad_norm_`` would scale by ``clip / inf = 0``) is taken
    again in float64 and returned (an event); DivergedError: a non-finite gradient, before the step.
    """
    opt.zero_grad(set_to_none=True)
    total.backward()
    wide = None
    if clip > 0:
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)
        if torch.isfinite(norm):
            torch.nn.utils.clip_grads_with_norm_(params, clip, norm)
        else:
            wide = _clip_wide(grads, clip)
    opt.step()
    return wide


def _clip_wide(grads: list[torch.Tensor], clip: float) -> float:
    """Clip ``grads`` in float64 (norm and scale: a float32 ``clip / norm`` can flush to 0).

    Returns the float64 norm; DivergedError where some gradient element is inf or NaN.
    """
    wide = [g.to(torch.float64) for g in grads]
    norm = torch.nn.utils.get_total_norm(wide)
    if not torch.isfinite(norm):
        raise DivergedError(f"non-finite gradient norm ({norm.item()})")
    scale = clip / (norm.item() + 1e-6)
    if scale < 1.0:
        for g, w in zip(grads, wide, strict=True):
            g.copy_(w * scale)
    return norm.item()


def train_model(
    cfg: RunConfig,
    task: Task,
    model: SeqModel,
    splits,
    device,
    callbacks: Sequence[Callable[[int, dict[str, Any]], None]] = (),
    events: list[dict[str, Any]] | None = None,
    checkpoint: Checkpointer | None = None,
) -> TrainState:
    """Train with Adam, leaving the best-validation parameters loaded; the loop's final state.

    ``callbacks`` get ``(epoch, history row)`` after every epoch; ``events`` what happened. A
    ``checkpoint``'s saved state is loaded first. DivergedError: a non-finite loss or gradient.
    """
    tc = cfg.train
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=tc.lr, weight_decay=tc.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    saved = checkpoint.load(device) if checkpoint is not None else None
    loop = restore_training(saved, model, opt, gen) if saved is not None else TrainState()
    if events is not None:  # the caller's list: what happened stays there, whatever ends the run
        events[:] = loop.events
        loop.events = events
    for epoch in range(loop.epoch + 1, tc.epochs):
        model.on_epoch_start(epoch, tc.epochs)  # untimed: it may build a kernel
        model.train()
        t0 = time.perf_counter()
        losses, overflowed = [], []
        for i, batch in enumerate(splits.train.batches(tc.batch_size, True, gen)):
            if tc.max_train_batches and i >= tc.max_train_batches:
                break
            batch = batch.to(device)
            out = model(batch.x, batch.lengths, batch.times)
            loss = task.loss(out.pred, batch)
            total = loss if out.aux_loss is None else loss + out.aux_loss
            try:
                if not torch.isfinite(total):
                    raise NonFiniteLoss(f"non-finite loss ({total.item()})")
                wide = descend(total, opt, params, tc.clip)
            except DivergedError as e:  # its type names the event
                loop.events.append(events_mod.event(epoch, e.event, f"batch {i}: {e}"))
                spent = loop.train_s + time.perf_counter() - t0
                raise type(e)(f"{e} at epoch {epoch}, batch {i}", loop.history, spent) from None
            if wide is not None:
                overflowed.append(wide)
            losses.append(loss.item())
        loop.train_s += time.perf_counter() - t0
        epoch_loss = _epoch_done(loop, epoch, losses, overflowed, tc.clip)
        val = evaluate(model, task, splits.val, tc.eval_batch_size, device).metrics
        v = val.get(task.primary, float("nan"))
        loop.history.append({"epoch": epoch, "train_loss": epoch_loss, f"val_{task.primary}": v})
        loop.epoch = epoch
        for callback in callbacks:
            callback(epoch, loop.history[-1])
        if _better(v, loop.best_val, task.higher_is_better):
            loop.best_val, loop.best_epoch, loop.best_metrics, loop.stale = v, epoch, val, 0
            loop.best_state = copy.deepcopy(model.state_dict())
        else:
            loop.stale += 1
            if tc.patience and loop.stale >= tc.patience:
                break
        if checkpoint is not None and epoch + 1 < tc.epochs and checkpoint.due():
            checkpoint.save(training_state(loop, model, opt, gen, device))
    if loop.best_state is not None:
        model.load_state_dict(loop.best_state)
    return loop


def _epoch_done(
    loop: TrainState, epoch: int, losses: list[float], overflowed: list[Any], clip: float
) -> float:
    """An epoch's mean training loss; its overflows, loss spike and new best noted in ``loop``."""
    if overflowed:
        loop.events.append(events_mod.overflow_event(epoch, overflowed, clip))
    epoch_loss = float(np.mean(losses))
    spike = events_mod.loss_spike(epoch, epoch_loss, loop.best_loss)
    if spike is not None:
        loop.events.append(spike)
    if loop.best_loss is None or epoch_loss < loop.best_loss[0]:
        loop.best_loss = (epoch_loss, epoch)
    return epoch_loss


class Fitting(Protocol):
    """A run's component as ``run`` runs it; ``params``, its record's, are None until known."""

    params: dict[str, int] | None

    def check(self) -> None:
        """Build what ``setup`` will, before a sweep starts: a bad size fails at once."""

    def device(self) -> torch.device:
        """Where it runs (the record's ``env``)."""

    def setup(self, device: torch.device) -> tuple[Task, Splits, str]:
        """The task, its splits for the run's seed, the rule that chooses the test metrics."""

    def fit(self, callbacks: Sequence, events: list, checkpoint: Any) -> dict[str, Any]:
        """The record's ``best_epoch``, ``history``, ``train_s`` (and ``compiled``)."""

    def evaluate(self) -> dict[str, Any]:
        """The record's ``metrics`` (test), ``val_metrics``, ``macs``, ``diagnostics``, trace."""


def fitting(cfg: Any, data_dir: str | None = None, device: str = "cpu") -> Fitting:
    """How ``run`` runs ``cfg``: as its component says (``fitting``), else ``ModelFit``."""
    own = component(cfg.method).fitting
    return ModelFit(cfg, data_dir, device) if own is None else own(cfg, data_dir)


def out_of_memory_as_error(cfg: RunConfig) -> contextlib.AbstractContextManager[None]:
    """``out_of_memory`` for a run's model: a ConfigError naming its size."""
    size = f"hidden_size={cfg.model.hidden_size}, num_layers={cfg.model.num_layers}"
    return out_of_memory(f"does not fit in memory ({size})", ConfigError)


class ModelFit:
    """A method's run (``Fitting``): its model, trained (``train_model``), then tested."""

    def __init__(self, cfg: RunConfig, data_dir: str | None = None, device: str = "cpu") -> None:
        self.cfg, self.data_dir, self.asked = cfg, data_dir, device
        self.params: dict[str, int] | None = None

    def check(self) -> None:
        """Build the task and the model once (``harness.planning.sweep.validate``)."""
        with out_of_memory_as_error(self.cfg):
            build(self.cfg, self.data_dir)

    def device(self) -> torch.device:
        """The device asked for, with the run conditions set (``env.run_conditions``)."""
        self.dev = env.resolve_device(self.asked)
        env.run_conditions()  # subnormals flushed, freed memory reused: several-fold, faster
        return self.dev

    def setup(self, device: torch.device) -> tuple[Task, Splits, str]:
        """The task, its splits and the model (on ``device``); the selection rule."""
        self.task, self.model = build(self.cfg, self.data_dir)
        self.splits = self.task.splits(self.cfg.seed)
        self.model.to(device)
        total = sum(p.numel() for p in self.model.parameters())
        self.params = {"total": total, "method": self.model.method_param_count()}
        best = "highest" if self.task.higher_is_better else "lowest"
        rule = f"test metrics at the epoch with the {best} validation {self.task.primary}"
        return self.task, self.splits, rule

    def fit(self, callbacks, events, checkpoint) -> dict[str, Any]:
        """Train over epochs (``train_model``), timing the compilation of a compiled step."""
        clock = CompileClock(self.cfg.train.compile)
        self.loop = loop = train_model(
            self.cfg, self.task, self.model, self.splits, self.dev, callbacks, events, checkpoint
        )
        best, history = loop.best_epoch, loop.history
        return dict(best_epoch=best, history=history, train_s=loop.train_s, compiled=clock.stop())

    def evaluate(self) -> dict[str, Any]:
        """The test pass (traced) and the best epoch's validation metrics."""
        size = self.cfg.train.eval_batch_size
        test = evaluate(self.model, self.task, self.splits.test, size, self.dev, trace=True)
        if (val := self.loop.best_metrics) is None:  # none finite: the final parameters'
            val = evaluate(self.model, self.task, self.splits.val, size, self.dev).metrics
        tested = dict(metrics=test.metrics, val_metrics=val, macs=test.macs, trace=test.trace)
        return tested | {"diagnostics": {**test.diagnostics, **self.model.train_diagnostics()}}


def run(
    cfg: Any,
    data_dir: str | None = None,
    device: str = "cpu",
    callbacks: Sequence[Callable[[int, dict[str, Any]], None]] = (),
    checkpoint_dir: str | None = None,
    checkpoint_every_s: float = 600.0,
) -> records.RunRecord:
    """Run one configuration (a method's, a reference's) through ``fitting``; its record.

    The one place that builds a run's record. With ``checkpoint_dir``, the run keeps a checkpoint
    there and goes on from one it finds. Whatever goes wrong inside the run gives a failed record
    naming the reason; only an interrupt propagates (the checkpoint stays for the next start).
    """
    code = method_code(cfg.method)
    rec = records.start_record(cfg, code, source_of(component(cfg.method)))
    checkpoint = None
    if checkpoint_dir is not None:  # one of this checkout: same method code, commit, dirty flag
        sha, dirty = env.git_state()
        identity = {"method_code": code, "git_sha": sha, "git_dirty": dirty}
        every, start = checkpoint_every_s, rec["time"]["start"]
        checkpoint = Checkpointer(checkpoint_dir, cfg.run_id, identity, every, start)
    try:
        done = _fit_and_test(fitting(cfg, data_dir, device), cfg, callbacks, rec, checkpoint)
    except DivergedError as e:  # the epochs it finished stay on record
        done = records.finish_failed(rec, f"diverged: {e}", e.history, e.train_s)
    except HarnessError as e:  # bad input met inside the run: its message is the reason
        done = records.finish_failed(rec, f"{type(e).__name__}: {e}")
    except Exception as e:  # recorded as a failed run; the sweep goes on
        done = records.finish_failed(rec, failure_reason(e))
    if checkpoint is not None:
        checkpoint.finish(done)
    return done


def _fit_and_test(
    fit: Fitting,
    cfg: Any,
    callbacks: Sequence[Callable[[int, dict[str, Any]], None]],
    rec: records.RunRecord,
    checkpoint: Checkpointer | None = None,
) -> records.RunRecord:
    """The body of ``run``: set up, fit and test, and complete ``rec`` as a finished run."""
    dev = fit.device()
    rec["env"] = env.environment(dev)
    task, splits, selection = fit.setup(dev)
    records.describe_task(rec, task, selection)
    if fit.params is not None:  # a model's, known before it trains: a failed run keeps them
        rec["params"] = fit.params
    records.describe_data(rec, splits.info, cfg.data)
    fitted = fit.fit(callbacks, rec["events"], checkpoint)
    t0 = time.perf_counter()
    tested = fit.evaluate()
    eval_s = time.perf_counter() - t0
    rec["params"] = fit.params
    return records.finish_ok(rec, **fitted, **tested, flops_per_mac=FLOPS_PER_MAC, eval_s=eval_s)
