"""The generic checks every registered method passes: ``harness check NAME`` and the test suite.

Each ``check_*(name)`` builds fresh models of the method at tiny sizes; a property that does not
hold raises ``ConformanceError`` with the numbers, ``NotApplicable`` says it does not concern the
method. The tests call them parametrized over the registry, so a failure reads the same there and
in ``harness check``. torch, fvcore and the trainer are imported inside the functions.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from harness.components import config
from harness.components.plugins import source_of
from harness.components.registry import METHODS, TASKS, check_method
from harness.errors import ConfigError, failure_reason

V, D, B, T = 3, 10, 2, 6  # the sizes of the model checks
FAST_D, FAST_T = 20, 20  # the sizes of the fast-path checks
TARGETS = (0.0, 0.5, 0.9)  # the Skip % / 100 a fast path is checked at


class ConformanceError(AssertionError):
    """A property (a check's title) a method does not have, with the numbers that show it."""

    def __init__(self, prop: str, numbers: str) -> None:
        super().__init__(f"{prop}: {numbers}")
        self.prop, self.numbers = prop, numbers


class NotApplicable(Exception):
    """The property does not concern this method (the message says why)."""


@dataclass
class Result:
    """What one check gave: ``status`` pass, fail or skip; ``detail`` the numbers, why, a note."""

    id: str
    title: str
    status: str
    detail: str = ""

    def line(self) -> str:
        """``PASS  title``, ``FAIL  title: numbers`` or ``SKIP  title: why`` (one line)."""
        tail = f": {self.detail}" if self.detail else ""
        return f"{self.status.upper():4s}  {self.title}{tail}"


CHECKS: dict[str, tuple[str, Callable[..., str | None]]] = {}


def _check(id: str, title: str) -> Callable[[Callable[..., str | None]], Callable[..., str | None]]:
    def deco(fn: Callable[..., str | None]) -> Callable[..., str | None]:
        def run(name: str, **kwargs: Any) -> str | None:
            try:
                return fn(name, **kwargs)
            except _Fail as e:
                raise ConformanceError(title, str(e)) from None

        CHECKS[id] = (title, functools.wraps(fn)(run))
        return CHECKS[id][1]

    return deco


class _Fail(Exception):
    """Raised inside a check with the numbers; the check's wrapper adds its title."""


def _make(name: str, input_size: int = V, hidden_size: int = D) -> Any:
    import torch

    torch.manual_seed(0)
    return METHODS.get(name)(input_size, hidden_size)


def _close(what: str, got: Any, want: Any, rtol: float = 0.0, atol: float = 0.0) -> None:
    """``|got - want| <= atol + rtol |want|`` (exact at 0, 0), else ``_Fail`` with the numbers."""
    import torch

    if got is None or want is None:
        if (got is None) != (want is None):
            raise _Fail(f"{what}: {'got None' if got is None else 'expected None'}")
        return
    if got.shape != want.shape:
        raise _Fail(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    got, want = got.detach().double(), want.detach().double()
    bad = ~torch.isclose(got, want, rtol=rtol, atol=atol)
    if bad.any():
        diff = torch.where(bad, (got - want).abs().nan_to_num(float("inf")), 0)
        at = torch.unravel_index(diff.argmax(), diff.shape)
        tol = f" (rtol {rtol:g}, atol {atol:g})" if rtol or atol else ""
        raise _Fail(
            f"{what} differ at {int(bad.sum())} of {bad.numel()} places{tol}; largest at "
            f"({', '.join(str(int(i)) for i in at)}): {float(got[at]):.6g}, expected "
            f"{float(want[at]):.6g}"
        )


@_check("config", "config: declared knobs, serialised and read back")
def check_config(name: str) -> str | None:
    """Static parts (``registry.check_method``); knobs (not booleans) in bounds; JSON."""
    import typing

    if lacks := check_method(METHODS.get(name)):  # registration refuses these: a class edited since
        raise _Fail("; ".join(lacks))
    cls = METHODS.get(name).config_cls
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        b = config.bounds_of(cls, f.name)
        if hints[f.name] is bool:
            continue
        if b is None:
            raise _Fail(
                f"{cls.__name__}.{f.name} declares no bounds: use harness.components.config.knob"
            )
        if not b.admits(f.default):
            raise _Fail(f"{cls.__name__}.{f.name}: the default {f.default!r} is out of its bounds")
    cfg = config.resolve(name, training_task(), 0, "smoke")
    text = json.dumps(cfg.to_dict(), allow_nan=False)
    back = config.from_dict(json.loads(text))
    if back != cfg or back.run_id != cfg.run_id:
        raise _Fail(f"read back from {text} it is {back.to_dict()}")


@_check("shapes", "shapes and masks (train and eval)")
def check_shapes(name: str) -> str | None:
    """Outputs ``[B, T, D]``, masks in {0, 1}, depth in ``[0, max_depth]``, a scalar aux loss."""
    import torch

    from harness.components.method import SeqOut

    for mode in ("train", "eval"):
        m = _make(name).train(mode == "train")
        out = m(torch.randn(B, T, V))
        if not isinstance(out, SeqOut):
            raise _Fail(f"{mode}: forward returned {type(out).__name__}, not SeqOut")
        for what, value in (("outputs", out.outputs), ("mask", out.mask)):
            if tuple(value.shape) != (B, T, D):
                raise _Fail(f"{mode}: {what} of shape {tuple(value.shape)}, expected {(B, T, D)}")
        if values := sorted(set(out.mask.detach().unique().tolist()) - {0.0, 1.0}):
            raise _Fail(f"{mode}: mask values {values[:5]} outside {{0, 1}}")
        if m.has_depth:
            if out.depth is None or tuple(out.depth.shape) != (B, T, D):
                shape = None if out.depth is None else tuple(out.depth.shape)
                raise _Fail(f"{mode}: has_depth, but depth is {shape}, expected {(B, T, D)}")
            lo, hi, top = out.depth.min().item(), out.depth.max().item(), m.cost().max_depth
            if lo < 0 or hi > top:
                raise _Fail(f"{mode}: depth in [{lo:g}, {hi:g}], outside [0, max_depth {top}]")
        if out.aux_loss is not None and out.aux_loss.dim() != 0:
            raise _Fail(f"{mode}: aux_loss of shape {tuple(out.aux_loss.shape)}, not a scalar")


@_check("forward", "forward == step loop (train and eval, masks exact)")
def check_forward(name: str) -> str | None:
    """Its own ``forward`` equals ``step_loop`` (same seed before each); masks exactly."""
    import torch

    from harness.components.method import Method

    if METHODS.get(name).forward is Method.forward:
        raise NotApplicable("forward is the step loop")
    for mode in ("train", "eval"):
        m = _make(name).train(mode == "train")
        x = torch.randn(B, T, V)
        torch.manual_seed(1)
        fast = m(x)
        torch.manual_seed(1)
        ref = m.step_loop(x)
        _close(f"{mode}: outputs", fast.outputs, ref.outputs, rtol=1e-5, atol=1e-6)
        for what, label in (("mask", "masks"), ("depth", "depths"), ("reads", "reads")):
            _close(f"{mode}: {label}", getattr(fast, what), getattr(ref, what))


@_check("cost", "cost() == fvcore == FlopCounterMode (dense MACs)")
def check_cost(name: str) -> str | None:
    """The dense MACs ``cost()`` states are what fvcore and torch's FlopCounterMode count."""
    import torch

    from harness.components.flops import fvcore_macs, torch_flops

    m = _make(name).eval()
    x = torch.randn(B, T, V)
    cost = m.cost()
    analytic = (cost.dense_step() - cost.fvcore_uncounted) * T * B
    formula = (
        f"(dense_step() {cost.dense_step()} - fvcore_uncounted {cost.fvcore_uncounted}) x T {T} "
        f"x B {B} = {analytic}"
    )
    counted, unsupported = fvcore_macs(m, x)
    if counted != analytic:
        skipped = f"; ops fvcore skipped: {sorted(unsupported)}" if unsupported else ""
        raise _Fail(f"fvcore counts {counted} MACs, cost() gives {formula}{skipped}")
    flops = torch_flops(m, x)
    if flops != 2 * analytic:
        raise _Fail(f"FlopCounterMode counts {flops} FLOPs = {flops / 2:g} MACs, cost() {formula}")
    return f"{cost.dense_step()} MACs per step at V={V}, D={D}"


@_check("effective", "effective MACs == dense when nothing is skipped")
def check_effective(name: str) -> str | None:
    """With every unit updated at full depth, the effective MACs are the dense ones."""
    import torch

    from harness.components.flops import sequence_macs
    from harness.components.method import SeqOut

    m = _make(name)
    cost = m.cost()
    depth = torch.full((B, T, D), float(cost.max_depth)) if m.has_depth else None
    full = SeqOut(outputs=torch.zeros(B, T, D), mask=torch.ones(B, T, D), depth=depth)
    macs = sequence_macs(m, full)
    eff, dense = macs["effective"].tolist(), macs["dense"].tolist()
    if eff != dense or dense[0] != cost.dense_step() * T:
        raise _Fail(
            f"effective {eff}, dense {dense} per sequence; dense_step() {cost.dense_step()} x "
            f"T {T} = {cost.dense_step() * T}"
        )


@_check("determinism", "seeded determinism")
def check_determinism(name: str) -> str | None:
    """Two models built after the same seed give bit-identical eval outputs."""
    import torch

    x = torch.randn(B, T, V)
    a, b = _make(name).eval(), _make(name).eval()
    _close("outputs of two models built after the same seed", a(x).outputs, b(x).outputs, 0, 0)


@_check("gradients", "finite gradients reach every parameter")
def check_gradients(name: str) -> str | None:
    """Every parameter gets a finite, non-zero gradient from outputs and aux loss."""
    import torch

    m = _make(name).train()
    out = m(torch.randn(4, 8, V))
    loss = (out.outputs**2).sum() + (0 if out.aux_loss is None else out.aux_loss)
    loss.backward()
    for pname, p in m.named_parameters():
        shape = list(p.shape)
        if p.grad is None:
            raise _Fail(f"no gradient reaches {pname} {shape}")
        bad = ~torch.isfinite(p.grad)
        if bad.any():
            raise _Fail(f"{pname} {shape}: {int(bad.sum())} of {p.numel()} entries not finite")
        if p.grad.abs().sum() == 0:
            raise _Fail(f"zero gradient in {pname} {shape}")


def _fast_vs_dense(m: Any, x: Any, atol: float = 1e-10, where: str = "") -> Any:
    """``fast_forward`` vs the eval forward: masks, reads, depth exactly; outputs to atol."""
    ref = m.eval()(x)
    out = m.fast_forward(x)
    for what, label in (("mask", "masks"), ("reads", "reads"), ("depth", "depths")):
        _close(f"{where}{label}", getattr(out, what), getattr(ref, what))
    _close(f"{where}outputs", out.outputs, ref.outputs, rtol=atol, atol=atol)
    if out.extras.keys() != ref.extras.keys():
        raise _Fail(f"{where}extras {sorted(out.extras)}, expected {sorted(ref.extras)}")
    for k, v in ref.extras.items():
        _close(f"{where}extras[{k!r}]", out.extras[k], v, rtol=atol, atol=atol)
    return ref


@_check("fast-path", "fast path == dense path")
def check_fast_path(name: str) -> str | None:
    """``fast_forward`` equals the dense eval forward, keeps the mode, builds no graph.

    With ``at_skip``: in float64 at each target, batch 1 and 4; float32 at batch 1; after an
    optimizer step (cached packed weights renewed).
    """
    import torch

    from harness.bench.speedup import build_at_skip, has_fast_path
    from harness.components.method import Method

    cls = METHODS.get(name)
    overrides, hooked = cls.fast_forward is not Method.fast_forward, has_fast_path(cls)
    if overrides and not hooked:
        raise _Fail("fast_forward is overridden but at_skip is not: nothing would run it")
    m = _make(name).train()
    x = torch.randn(2, 5, V)
    out = m.fast_forward(x)
    if not m.training:
        raise _Fail("fast_forward left the model in eval mode")
    if out.outputs.requires_grad:
        raise _Fail("fast_forward built an autograd graph (run it under torch.no_grad)")
    if not hooked:
        _close("the default fast_forward", out.outputs, m.eval()(x).outputs, 1.3e-6, 1e-5)
        return "no fast path: fast_forward is the dense eval forward"
    for target in TARGETS:
        for batch in (1, 4):
            m, setting = build_at_skip(name, V, FAST_D, target, FAST_T, seed=1)
            where = f"at_skip({target:g}), batch {batch}, float64: "
            if m.training or not isinstance(setting, str) or "\n" in setting:
                raise _Fail(f"{where}at_skip must give an eval-mode model and one line")
            x = torch.randn(batch, FAST_T, V, dtype=torch.float64)
            _fast_vs_dense(m.double(), x, where=where)
    m, _ = build_at_skip(name, V, FAST_D, 0.5, FAST_T)
    _fast_vs_dense(m, torch.randn(1, FAST_T, V), atol=1e-5, where="float32, batch 1: ")
    m = build_at_skip(name, V, FAST_D, 0.5, FAST_T)[0].double()
    x = torch.randn(2, FAST_T, V, dtype=torch.float64)
    m.fast_forward(x)  # weights a fast path repacks are cached: an optimizer step must renew them
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m.train()(x).outputs.sum().backward()
    opt.step()
    _fast_vs_dense(m, x, where="after an optimizer step: ")


@_check("at-skip", "at_skip reaches its target")
def check_at_skip(name: str) -> str | None:
    """``at_skip`` hits its target (0.12 at T 40, 0.15 at T 20) and is seeded."""
    import torch

    from harness.bench.speedup import achieved_skip, build_at_skip, has_fast_path

    if not has_fast_path(METHODS.get(name)):
        raise NotApplicable("no at_skip (no fast path to measure)")
    # (V, D, T, batch, seed, tolerance): the speedup report's sizes, then the fast-path checks'
    sizes = [(4, 40, 40, 3, 0, 0.12)] + [(V, FAST_D, FAST_T, b, 1, 0.15) for b in (1, 4)]
    got = []
    for v, d, steps, batch, seed, tol in sizes:
        for target in TARGETS:
            m, note = build_at_skip(name, v, d, target, steps, seed=seed)
            x = torch.randn(batch, steps, v, dtype=torch.float64)
            with torch.no_grad():
                skip = achieved_skip(m.double()(x), m)
            if abs(skip - target) >= tol:
                raise _Fail(
                    f"target {target:g} (V {v}, D {d}, T {steps}, batch {batch}): skipped "
                    f"{skip:.3f} ({note}), {tol:g} or more off"
                )
            got += [f"{target:g} -> {skip:.3f}"] if steps == 40 else []
    a, _ = build_at_skip(name, V, FAST_D, 0.5, FAST_T, seed=5)
    torch.randn(7)  # whatever the global generator did before, the seed decides
    b, _ = build_at_skip(name, V, FAST_D, 0.5, FAST_T, seed=5)
    c, _ = build_at_skip(name, V, FAST_D, 0.5, FAST_T, seed=6)
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    if differ := [k for k in pa if not torch.equal(pa[k], pb[k])]:
        raise _Fail(f"seed 5 twice gave different {differ}: draw from torch's global generator")
    if all(torch.equal(pa[k], pc[k]) for k in pa):
        raise _Fail("seeds 5 and 6 gave the same parameters: draw them from the global generator")
    return ", ".join(got)


def can_skip(cls: type) -> bool:
    """Whether a method has ``at_skip`` or leaves an update, layer or column undone by default."""
    import torch

    from harness.bench.speedup import has_fast_path

    if has_fast_path(cls):
        return True
    torch.manual_seed(0)
    m = cls(3, 10).eval()
    with torch.no_grad():
        out = m(torch.randn(4, 40, 3))
    max_depth = m.cost().max_depth
    return bool(
        (out.mask <= 0).any()
        or (out.depth is not None and (out.depth < max_depth).any())
        or (out.reads is not None and (out.reads <= 0).any())
    )


@_check("budget-knobs", "budget knobs declared")
def check_budget_knobs(name: str) -> str | None:
    """``budget_knobs``: config fields, no repeats; some where it can skip, none where not."""
    cls = METHODS.get(name)
    knobs = cls.budget_knobs
    fields = {f.name for f in dataclasses.fields(cls.config_cls)}
    if not isinstance(knobs, tuple):
        raise _Fail(f"budget_knobs is a {type(knobs).__name__}, not a tuple")
    if unknown := [k for k in knobs if k not in fields]:
        raise _Fail(f"{unknown} are not fields of {cls.config_cls.__name__} ({sorted(fields)})")
    if len(set(knobs)) != len(knobs):
        raise _Fail(f"budget_knobs {knobs} repeats a field")
    skips = can_skip(cls)
    if skips and not knobs:
        raise _Fail("it can skip (at_skip, or masks, depth or reads below full) but declares none")
    if not skips and knobs:
        raise _Fail(f"it never skips on random inputs but declares {knobs}")
    return f"{', '.join(knobs)}" if knobs else "never skips: none"


def training_task() -> str:
    """The first built-in regression task, by name, that generates its data."""
    from harness.components.task import TaskKind

    for task, cls in TASKS.items():
        if source_of(cls)["kind"] == "builtin" and cls.kind is TaskKind.REGRESSION:
            if cls().data_status() is None:
                return task
    raise RuntimeError("no built-in regression task generates its data")


@_check("training", "trains: the loss decreases, the same seed gives the same metrics")
def check_training(name: str, task: str | None = None) -> str | None:
    """Four smoke epochs (D 10) on ``task`` (``training_task()``): the loss falls; repeatable."""
    from harness.training import train

    task = task or training_task()
    cfg = config.resolve(name, task, 0, "smoke", {"epochs": "4", "hidden_size": "10"})
    rec = train.run(cfg)
    if rec["status"] != "ok":
        raise _Fail(f"the run on {task} failed: {rec.get('error')}")
    losses = [h["train_loss"] for h in rec["history"]]
    shown = ", ".join(f"{x:.4g}" for x in losses)
    if not losses[-1] < losses[0]:
        raise _Fail(f"training loss on {task} per epoch {shown}: the last is not below the first")
    again = train.run(cfg)
    got, want = again["metrics"], rec["metrics"]
    if got != want:
        diff = {k: (v, got.get(k)) for k, v in want.items() if got.get(k) != v}
        raise _Fail(f"the same config and seed gave other metrics on {task}: {diff}")
    return f"{task}, training loss {shown}"


def iter_checks(
    name: str, only: list[str] | None = None, task: str | None = None
) -> Iterator[Result]:
    """Run the checks (``only`` these; ``task`` to train on) on ``name``, yielding each Result."""
    METHODS.get(name)
    if unknown := sorted(set(only or []) - set(CHECKS)):
        raise ConfigError(f"unknown check '{unknown[0]}'; checks: {', '.join(CHECKS)}")
    for id, (title, fn) in CHECKS.items():
        if only and id not in only:
            continue
        kwargs = {"task": task} if id == "training" else {}
        try:
            note = fn(name, **kwargs)
            result = Result(id, title, "pass", note or "")
        except ConformanceError as e:
            result = Result(id, title, "fail", e.numbers)
        except NotApplicable as e:
            result = Result(id, title, "skip", str(e))
        except Exception as e:  # the method itself raised: the property fails, with where
            result = Result(id, title, "fail", f"raised {failure_reason(e)}")
        yield result


def run_checks(name: str, only: list[str] | None = None, task: str | None = None) -> list[Result]:
    """Every result of ``iter_checks`` (see there)."""
    return list(iter_checks(name, only, task))
