"""Clockwork RNN: tanh RNN whose units are split into modules that update on fixed clocks.

Paper: Koutník, Greff, Gomez, Schmidhuber, "A Clockwork RNN", ICML 2014,
https://arxiv.org/abs/1402.3511; a baseline of S-SA (Hartvigsen et al., CIKM 2020). Spec:
docs/methods.md 2.5. The D units form g modules of k = D / g units, module j (1-based, sorted by
period) with period ``T_j = base^(j-1)``::

    module j active at step t  iff  (t + phase) mod T_j == 0
    h_{t,i} = tanh((W_H h_{t-1})_i + (W_I x_t)_i + b_i)   if module(i) active   (eq. 1)
    h_{t,i} = h_{t-1,i}                                    otherwise
    W_H block upper-triangular: module j reads modules j' >= j (same or slower)

Parameters: ``weight_ih [D, V]``, ``weight_hh [D, D]``, ``bias [D]``. ``weight_hh`` is stored as a
full D x D tensor multiplied by a fixed block-triangular 0/1 mask in every forward, so the
entries below the diagonal blocks get zero gradient and (initialised to 0) stay 0 under Adam and
weight decay. The harness's parameter count (``numel``) therefore INCLUDES those D^2 - k^2 g(g+1)/2
frozen zeros; ``free_parameter_count()`` gives the paper's count, D V + k^2 g(g+1)/2 + D.

Differences from the paper:
- [DECISION] docs/methods.md 2.5: 10 modules x 5 units, periods 3^(j-1), t counted from 0 (every
  module fires at t = 0) by default, as pranv/clockwork_rnn has done since its commit 2eed584 "start
  clocks from 0" (2015-12-04; ``t % T`` in ``layers/crnn.py`` at f4319d1; before that commit it
  used ``(t+1) % T``, which ``phase = 1`` gives). ``num_modules``, ``base`` and ``phase`` are
  config. [INFERRED] layout that reproduces S-SA's Skip % (81.2 / 80.7 / 82.4 for T = 17 / 15 /
  25).
- D must be divisible by ``num_modules`` (equal modules); otherwise a ConfigError lists the
  valid module counts.
- The clock is part of the state ``(h, clock [B])``: a state carried across windows (language
  modelling) keeps counting time instead of restarting the schedule at every window.
- Initialisation U(+-1/sqrt(D)) (PyTorch RNNCell default, as ToruOwO/clockwork-rnn-pytorch); the
  initial state is zero (pranv learns h_0); the read-out is the harness's generic one.
- The forward is a masked dense implementation; paper-effective MACs charge k |A_t| (D+V)
  (docs/methods.md 1.4); ``exact_step_macs`` gives the structural count sum_{j in A_t} k (V + k
  (g-j+1)). ``fast_forward`` (inference) computes only the active rows: the active modules are the
  fastest ones, a prefix of the units. On CPU its C++ kernel (``baselines.ops.clockwork_infer``)
  reads only their nonzero upper-triangular blocks (the structural count); its PyTorch path, where
  the kernel cannot run, reads their full rows (the paper-effective count), a slice of the
  weights.
- Training on CPU (float32/64) runs the sequence as one C++ autograd node where the optional
  kernel builds (``baselines.ops.masked_cell``, built before the epoch's timer starts), with the
  schedule computed first, the effective weight ``W_H * mask`` (so the masked entries still get
  zero gradient) and the input terms by ``baselines.ops.library.input_terms`` (the same values;
  W_I's gradient summed in another order). It equals the per-step ``_step`` loop (the
  reference, and the path in eval, on CUDA, where the kernel does not build and with
  ``HARNESS_NO_KERNELS=1``) to float rounding, not bit for bit; inactive modules stay exact
  copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines._cells import cached_pack, masked_lerp
from baselines.ops.clockwork_infer import (
    clockwork_infer_kernel,
    clockwork_infer_kernel_status,
    fused_dtype,
    pack_modules,
)
from baselines.ops.inference import fast_path_note, panel_width
from baselines.ops.library import input_terms, on_cpu
from baselines.ops.masked_cell import masked_sequence, sequence_kernel
from harness.components.config import MAX_WIDTH, check_knobs, knob
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method
from harness.errors import ConfigError

_MAX_PERIOD = 2**62  # periods are int64


@dataclass(frozen=True)
class ClockworkConfig:
    """Knobs of the Clockwork RNN.

    Attributes:
        num_modules: g; the hidden size must be a multiple of it (k = D / g units per module).
        base: periods are ``base^(j-1)`` for modules j = 1..g (integer >= 1; 1 gives a dense RNN).
        phase: module j is active at step t (from 0) iff ``(t + phase) mod T_j == 0``.
    """

    num_modules: int = knob(10, ge=1, le=MAX_WIDTH)
    # int64 clocks: every period and every ``t + phase`` of a run must stay below 2^63
    base: int = knob(3, ge=1, lt=_MAX_PERIOD)
    phase: int = knob(0, ge=0, lt=_MAX_PERIOD)

    def __post_init__(self) -> None:
        check_knobs(self, "method", "clockwork-rnn")
        if self.base ** (self.num_modules - 1) >= _MAX_PERIOD:
            raise ConfigError(
                f"clockwork-rnn: the slowest period base^(num_modules-1) = "
                f"{self.base}^{self.num_modules - 1} does not fit in int64; use fewer modules"
            )


@register_method("clockwork-rnn")
class ClockworkRNN(Method):
    """Clockwork RNN; state ``(h [B, D], clock [B] int64)``, mask u = 1[module active]."""

    fused_cell = "RNN"  # a tanh RNN: held against torch.nn.RNN, not the GRU

    config_cls = ClockworkConfig
    budget_knobs = ("num_modules", "base")  # module count and period base fix the schedule

    def __init__(self, input_size: int, hidden_size: int, cfg: ClockworkConfig | None = None):
        super().__init__(input_size, hidden_size, cfg)
        D, V, g = self.hidden_size, self.input_size, self.cfg.num_modules
        if D % g:
            divisors = [d for d in range(1, D + 1) if D % d == 0]
            raise ConfigError(
                f"clockwork-rnn: hidden_size {D} is not divisible by num_modules {g} (every "
                f"module has D / num_modules units); set num_modules to one of {divisors}, "
                f"e.g. --set num_modules={max(d for d in divisors if d <= g)}, "
                f"or a hidden_size that is a multiple of {g}"
            )
        self.num_modules, self.module_size = g, D // g
        module = torch.arange(D) // self.module_size  # [D] 0-based module of each unit
        self.register_buffer("periods", self.cfg.base**module, persistent=False)  # [D] int64
        tri = (module[None, :] >= module[:, None]).float()  # [D, D] row i reads column i'
        self.register_buffer("hh_mask", tri, persistent=False)
        self.weight_ih = nn.Parameter(torch.empty(D, V))
        self.weight_hh = nn.Parameter(torch.empty(D, D))
        self.bias = nn.Parameter(torch.empty(D))
        b = 1.0 / math.sqrt(D)
        with torch.no_grad():
            for p in (self.weight_ih, self.weight_hh, self.bias):
                p.uniform_(-b, b)
            self.weight_hh.mul_(self.hh_mask)  # frozen zeros below the diagonal blocks

    def free_parameter_count(self) -> int:
        """Trainable entries as the paper counts them: D V + k^2 g (g+1) / 2 + D."""
        D, V, g, k = self.hidden_size, self.input_size, self.num_modules, self.module_size
        return D * V + k * k * g * (g + 1) // 2 + D

    def cost(self) -> StepCost:
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=D + V)  # paper-effective: k |A_t| (D+V)

    def exact_step_macs(self, out: SeqOut) -> Tensor:
        """Structural MACs ``[B, T]``: an active module j reads V inputs and k (g - j + 1) units."""
        g, k, V = self.num_modules, self.module_size, self.input_size
        active = (out.mask.detach()[..., ::k] > 0).double()  # [B, T, g] first unit of each module
        j = torch.arange(1, g + 1, device=active.device, dtype=torch.float64)  # [g] 1-based
        return active @ (k * (V + k * (g - j + 1)))  # [B, T]

    def active_mask(self, clock: Tensor, steps: int, dtype: torch.dtype) -> Tensor:
        """``u [B, steps, D]``: 1 where the unit's module fires at times ``clock + 0..steps-1``."""
        t = clock[:, None] + torch.arange(steps, device=clock.device)  # [B, steps]
        return ((t[..., None] + self.cfg.phase) % self.periods == 0).to(dtype)  # [B, steps, D]

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Also builds (or loads) the masked-cell training kernel where training will run it,
        before the epoch's timer starts: ``time.train_s`` holds no compile."""
        super().on_epoch_start(epoch, num_epochs)
        sequence_kernel(*self.parameters())  # cached: a build at most once per process

    def init_state(self, batch_size: int, ref: Tensor) -> tuple[Tensor, Tensor]:
        h = ref.new_zeros(batch_size, self.hidden_size)
        return h, torch.zeros(batch_size, dtype=torch.long, device=ref.device)

    def _step(self, xp_t: Tensor, h: Tensor, u: Tensor, w_hh_t: Tensor) -> Tensor:
        """Eq. 1 for every unit (masked dense), then the inactive modules copied exactly:
        ``addmm``, ``tanh`` and ``lerp`` (``masked_lerp``), three ops a step where the literal
        ``tanh(xp + h W^T)`` and ``masked_update`` take seven; ``w_hh_t`` is the masked recurrent
        weight transposed once a sequence. The same values, to matmul rounding."""
        h_new = torch.tanh(torch.addmm(xp_t, h, w_hh_t))  # [B, D] eq. 1
        return masked_lerp(u, h_new, h)  # inactive modules are exact copies

    def step(self, x_t: Tensor, state: tuple[Tensor, Tensor], t: int) -> StepOut:
        h, clock = state
        u = self.active_mask(clock, 1, h.dtype)[:, 0]  # [B, D]
        xp_t = F.linear(x_t, self.weight_ih, self.bias)  # [B, D]
        h = self._step(xp_t, h, u, (self.weight_hh * self.hh_mask).t())
        return StepOut(h, (h, clock + 1), u)

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        B, T = x.shape[:2]
        h, clock = self.init_state(B, x) if state is None else state
        u = self.active_mask(clock, T, x.dtype)  # [B, T, D], input-independent
        w_hh = self.weight_hh * self.hh_mask  # [D, D] block upper-triangular
        kernel = sequence_kernel(x, h, w_hh) if self.training else None
        if kernel is not None:  # the same steps in one C++ node (baselines.ops.masked_cell)
            xp = input_terms(x, self.weight_ih, self.bias)
            hs, _ = masked_sequence(kernel, "tanh", xp, h, w_hh, u)
        else:
            xp = F.linear(x, self.weight_ih, self.bias)  # [B, T, D]
            w_hh_t, steps = w_hh.t(), []
            # one unbind, linear backward (see Method.step_loop)
            for xp_t, u_t in zip(xp.unbind(1), u.unbind(1), strict=True):
                h = self._step(xp_t, h, u_t, w_hh_t)
                steps.append(h)
            hs = torch.stack(steps, 1)
        out = SeqOut(hs, u, state=(hs[:, -1], clock + T))
        out.aux_loss = self.aux_loss(out)
        return out

    def _pack(self) -> Tensor:
        """``W_H * mask``, ``[D, D]`` contiguous: row i is what unit i reads of the state."""
        return (self.weight_hh * self.hh_mask).contiguous()

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference computing only the active modules' rows, ``tanh(W_H[:n] h + W_I[:n] x_t + b)``.

        A module is active when its period divides t + phase, so every faster module (whose
        period divides this one's) is active too: the active units are a prefix ``[:n_t]`` and
        their rows are a slice of the cached recurrent matrix. The clock starts at 0.

        On the CPU, where the kernel library builds, the whole sequence runs in one call of the
        op ``condrnn::clockwork_infer_sequence``, which reads only the nonzero blocks of the active
        modules' recurrent rows (``exact_step_macs``), packed once a model (cached). Elsewhere
        (one warning off the CPU) the PyTorch loop (``_loop``), its reference: the input terms of
        every step are one matmul before the loop; the states are kept as columns of one
        preallocated buffer ``[T + 1, D, B]`` (units are rows, so a prefix of units is a
        contiguous block), and a step is three ops: copy the inactive rows, ``addmm`` the active
        ones into place (the full rows, the masked zeros included), ``tanh_`` them.
        """
        B, T, _ = x.shape
        k = self.module_size
        h, clock = self.init_state(B, x)
        t = torch.arange(T, device=x.device)
        active = (t[:, None] + self.cfg.phase) % self.periods[::k] == 0  # [T, g] per module
        fused = on_cpu("Clockwork RNN's fused kernel", x) and fused_dtype(x, self.weight_hh)
        kernel = clockwork_infer_kernel() if fused else None
        if kernel is not None:  # the whole sequence in one call (baselines.ops.clockwork_infer)
            params = (self.weight_hh, self.weight_ih, self.bias)
            packed = cached_pack(self, "_fast_modules", params, self._pack_modules)
            outputs = kernel(packed, x, h, active.sum(1), k, panel_width(packed.dtype, k))
        else:
            outputs = self._loop(x, h, active)
        u = active.repeat_interleave(k, 1).to(x.dtype)  # [T, D]
        out = SeqOut(outputs, u.expand(B, -1, -1).contiguous(), state=(outputs[:, -1], clock + T))
        out.aux_loss = self.aux_loss(out)
        return out

    def _pack_modules(self) -> Tensor:
        """Each module's operand of the kernel (``pack_modules``): the nonzero blocks of its
        recurrent rows, its input rows and biases, contiguous."""
        k = self.module_size
        panel = panel_width(self.weight_hh.dtype, k)
        return pack_modules(self.weight_hh, self.weight_ih, self.bias, k, panel)

    def _loop(self, x: Tensor, h: Tensor, active: Tensor) -> Tensor:
        """``fast_forward``'s PyTorch loop, the outputs ``[B, T, D]`` from the state ``h [B, D]``
        and the active modules ``[T, g]`` of every step."""
        B, T, _ = x.shape
        D, k = self.hidden_size, self.module_size
        counts = (active.sum(1) * k).tolist()  # [T] n_t, active units (a prefix)
        params = (self.weight_hh, self.weight_ih)
        w = cached_pack(self, "_fast_hh", params, self._pack)  # [D, D]
        rows = {n: w[:n] for n in set(counts)}  # one view per distinct prefix
        xp = F.linear(x, self.weight_ih, self.bias).permute(1, 2, 0).unbind(0)  # T x [D, B]
        buf = x.new_empty(T + 1, D, B)
        buf[0] = h.t()
        states = buf.unbind(0)  # T + 1 x [D, B]
        for t, n in enumerate(counts):
            prev, cur = states[t], states[t + 1]
            if n < D:  # inactive modules: exact copies
                cur[n:].copy_(prev[n:])
            if n:  # eq. 1 for the active rows
                torch.addmm(xp[t][:n], rows[n], prev, out=cur[:n]).tanh_()
        return buf[1:].permute(2, 0, 1).contiguous()  # [B, T, D]

    @classmethod
    def fast_path_note(cls) -> str | None:
        """Whether the fast path ran the fused C++ kernel here (on CPU) or the PyTorch fallback;
        reads the kernel's status and never builds it."""
        return fast_path_note(clockwork_infer_kernel_status(), cls.name)

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[ClockworkRNN, str]:
        """The (num_modules, base) whose schedule over ``seq_len`` steps is nearest the target
        (``clockwork_layout``); the schedule does not depend on the input."""
        g, base, _ = clockwork_layout(hidden_size, skip, seq_len)
        model = cls(input_size, hidden_size, cls.config_cls(num_modules=g, base=base))
        return model.eval(), f"num_modules={g}, base={base}"


def clockwork_layout(D: int, skip: float, T: int) -> tuple[int, int, float]:
    """``(num_modules, base, skip)`` of the Clockwork schedule over ``T`` steps (clock from 0)
    nearest to ``skip``, among module counts dividing D and bases 2..8 (fewest modules on ties)."""
    best = None
    for g in (d for d in range(1, min(D, 256) + 1) if D % d == 0):
        for base in range(2, 9):
            if base ** (g - 1) >= _MAX_PERIOD:
                break
            active = sum(sum(1 for j in range(g) if t % base**j == 0) for t in range(T))
            s = 1 - active / (T * g)
            key = (abs(s - skip), g, base)
            if best is None or key < best[0]:
                best = (key, g, base, s)
    assert best is not None
    return best[1], best[2], best[3]
