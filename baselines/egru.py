"""EGRU, the event-based GRU: each unit keeps an internal GRU state c and communicates only when c
crosses its learned threshold; the recurrence reads the events, not c.

Paper: Subramoney, Khan Nazeer, Schöne, Mayr & Kappel, "Efficient recurrent architectures through
activity sparsity and sparse back-propagation through time", ICLR 2023,
https://openreview.net/forum?id=lJdOlWg8td (arXiv 2206.06178). Spec: docs/methods.md 2.16.

Reference code: the authors' EvNN library,
``Efficient-Scalable-Machine-Learning/EvNN @ b1d23e726390aa566448a3874002fbe3c22ecd37 :
frameworks/pytorch/egru.py`` (``EGRUScript``, the PyTorch reference of the layer, ``SpikeFunction``,
``EGRU.__init__`` / ``reset_parameters`` / ``forward``); its C++ kernels
``lib/egru_forward_cpu.cc``, ``lib/egru_backward_cpu.cc`` and ``lib/inline_ops.h`` compute the same
forward and the same pseudo-derivative; the readout and activity regulariser are from
``benchmarks/smnist/smnist.py`` (``train_batch``). Per step, with gate order z, r, g as in the
code, ``W [V, 3D]``, ``R [D, 3D]`` and two biases::

    z_t = sigmoid(x_t W_z + b_z + y_{t-1} R_z + b'_z)
    r_t = sigmoid(x_t W_r + b_r + y_{t-1} R_r + b'_r)
    g_t = tanh(x_t W_g + b_g + r_t * (y_{t-1} R_g + b'_g))        reset after the matmul
    c~_t = z_t * c_{t-1} + (1 - z_t) * g_t                         the internal state
    o_t = H(c~_t - theta)                                          H(0) = 0: strictly above
    y_t = o_t * c~_t                                               the event output
    c_t = c~_t - o_t * theta                                       subtractive reset

``theta [D]`` is learned. H's derivative is replaced by the pseudo-derivative
``dampening_factor * max(0, 1 - pseudo_derivative_support * |c~_t - theta|)``; every other
derivative is exact, so gradients reach theta through both ``o_t`` and ``- o_t * theta``.

What the harness counts (docs/methods.md 1.1):
- ``outputs`` = ``y_t``, the events: what the code's layer returns and its classifiers read out.
- ``mask`` (update mask, rows) = 1 everywhere: every unit's internal state ``c`` is recomputed at
  every step (its gates read ``x_t``, which is dense), so Skip % is 0. The sparsity is in the reads.
- ``reads`` (columns) = 1 for the V input features (the code does not sparsify inputs) and, for
  unit j, ``1[y_{t-1,j} != 0]``: column j of ``R`` is needed at step t only if unit j fired at
  t - 1 (an event carries ``c~ > theta >= 0``, so a unit that fired has a non-zero output).
- ``extras["event_rate"]``: the fraction of units that fired, per sequence (mean over steps).

Inference fast path (``fast_forward``, for ``harness bench --speedup``): the same function whose
recurrent product multiplies only the rows of ``R`` of the units that fired at the previous step:
on CPU (float32/64), where the kernel library builds, the steps after the input matmul run in one
C++ call (``baselines.ops.egru_infer``, the op ``condrnn::egru_infer_sequence``), each sequence of
a batch reading the rows of its own events; elsewhere a PyTorch loop reading the rows of the
units that fired in some sequence of the batch (the union; at batch 1 exactly the events).
``at_skip`` sets one threshold for every unit (or, for event rates above what ``theta = 0``
gives, ``theta = 0`` and a positive candidate bias), calibrated by bisection on a batch drawn
inside it, so that the activity sparsity (the share of the V + D columns not read; inputs are
always read) hits the target.

Training kernel: in training on CPU (float32/64), where the optional C++ kernel builds
(``baselines.ops.egru``, ``csrc/egru.cpp``; built or loaded in ``on_epoch_start``, before the
epoch's timer starts), ``forward`` runs a layer's T steps, forward and backward, as one autograd
node (the op ``condrnn::egru_forward``; on the meta device its fake implementation): the input terms
of every step in one matmul first (``input_terms``: the same values, W's gradient summed in another
order), then the equations above, dense, with H's pseudo-derivative in the backward; it returns the
events with their gradient, so the event rate and the regulariser learn as on the step loop. It
equals ``forward``'s step loop (the path training took before: thresholds clamped, unlike ``step``)
to float rounding, not bit for bit: outputs, final state, event rate, regulariser and the gradients
of every parameter, the input and the initial state (tests/test_kernel_egru.py); mask and reads
follow from the events (a ``c~`` within rounding of its threshold could fire differently). The step
loop, unchanged, is the reference and runs instead in eval, on CUDA (one warning line),
for other dtypes, where the kernel does not build and with ``HARNESS_NO_KERNELS=1``. No random
numbers are drawn on either path.

Differences from the paper/code:
- [UNVERIFIED] The harness follows the code; the paper's discrete-time equations were not
  compared here (no readable copy of them was at hand).
- Zoneout and DropConnect on ``R`` (the code's ``zoneout`` and ``dropout``, both 0 by default) are
  not implemented; nor is the code's kernel-side gradient rescaling (``grad_clip``, off by
  default): the harness's own gradient clipping applies.
- The code's smoothed output trace (``tr_vals``, read out only with ``--use-output-trace``, off by
  default) is not computed.
- State: the code's layer takes only ``y_0`` as its initial state and restarts ``c`` at 0 on every
  call; here the step state is ``(c, y)``, zeros at the start, and ``SeqOut.state`` is
  ``(c_T, y_T)``. The harness never carries state across calls, so the two agree on it.
- As in the code: ``theta`` is clamped to [0, 1] in place at the start of every forward (on its
  ``.data``, so no gradient passes the clamp); it starts ~ Beta(3 m / (1 - m), 3) with mean
  ``m = thr_mean``; ``W`` and ``R`` start Xavier-normal (gain 1, on the ``[V, 3D]`` and ``[D, 3D]``
  tensors) and both biases at 0. This is not the shared GRU cell of docs/methods.md 1.3: EGRU's
  recurrence reads the events, a different cell, and its parameters are the code's
  (3D(V + D + 2) + D).
- The optional activity regulariser is the sMNIST script's,
  ``activity_reg * (mean(o) - activity_target)^2`` with the mean over batch, steps and units
  (off by default, as there); the language-model script's regulariser is not implemented.
- The regulariser is each layer's, and the model sums the layers' auxiliary losses; the sMNIST
  script regularises the last layer's events only (its ``RNNMultiLayerWrapper`` returns the last
  layer's states). The same at one layer, both defaults.
- The code keeps ``dampening_factor`` and ``pseudo_derivative_support`` as float32 tensors
  (``torch.Tensor([x])``), this module as Python floats: the same pseudo-derivative in float32,
  bit for bit (torch rounds the scalar to float32); in float64 the code's is float32's 0.7,
  0.699999988..., this module's 0.7.
- ``step`` (the per-step reference, ``Method.step_loop``) does not clamp theta; ``forward`` and
  ``fast_forward`` do, in place, so they differ only for a theta outside [0, 1] that no forward
  has clamped yet.
- Sample times are not used (``uses_times`` False): one step per sample, as in the code.
- Cost: dense ``3D(D + V)`` MACs per step (``cost``); what skipping the unread columns saves is
  the harness's read-based accounting, not this module's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from baselines._sparse import addmm_read_columns, bisect_level
from baselines.ops.egru import egru_sequence, sequence_kernel
from baselines.ops.egru_infer import egru_infer_kernel_for, egru_infer_kernel_status
from baselines.ops.library import input_terms
from harness.components.config import MAX_PENALTY, check_knobs, knob
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method

# (c_{t-1} [B, D], y_{t-1} [B, D]): the internal state after its reset, and the events.
EGRUState = tuple[Tensor, Tensor]
# Sequences ``at_skip`` calibrates its event rate on, and the largest candidate bias it sets.
CALIBRATION_BATCH = 8
GATE_SHIFT = 4.0


class _Spike(torch.autograd.Function):
    """``H(v)`` (1 where ``v > 0``, else 0) with the pseudo-derivative
    ``dampening * max(0, 1 - support * |v|)`` as its gradient."""

    @staticmethod
    def forward(ctx, v: Tensor, dampening: float, support: float) -> Tensor:
        ctx.save_for_backward(v)
        ctx.dampening, ctx.support = dampening, support
        return (v > 0).to(v.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (v,) = ctx.saved_tensors
        pseudo = (1 - ctx.support * v.abs()).clamp_min(0) * ctx.dampening
        return grad * pseudo, None, None


@dataclass(frozen=True)
class EGRUConfig:
    """Knobs of EGRU, named and defaulted as in the EvNN code.

    Attributes:
        dampening_factor: height of the pseudo-derivative of the event function (code: 0.7).
        pseudo_derivative_support: the pseudo-derivative is non-zero where
            ``|c~ - theta| < 1 / pseudo_derivative_support`` (code: 1.0).
        thr_mean: mean of the Beta distribution the thresholds start from, in (0, 1) (code: 0.3).
        activity_reg: weight of the activity regulariser ``(mean event rate - activity_target)^2``
            (0: off, the code's default).
        activity_target: the event rate the regulariser pulls towards (code: 0.05).
    """

    # the pseudo-derivative's height and inverse width, far past the code's 0.7 and 1
    dampening_factor: float = knob(0.7, gt=0, le=100)
    pseudo_derivative_support: float = knob(1.0, gt=0, le=1e4)
    thr_mean: float = knob(0.3, gt=0, lt=1)
    activity_reg: float = knob(0.0, ge=0, le=MAX_PENALTY)
    activity_target: float = knob(0.05, ge=0, le=1)

    def __post_init__(self) -> None:
        check_knobs(self, "method", "egru")


@register_method("egru")
class EGRU(Method):
    """Event-based GRU: dense internal updates, sparse (event) communication between units."""

    config_cls = EGRUConfig
    budget_knobs = ("thr_mean", "activity_reg", "activity_target")  # thresholds, regulariser

    def __init__(self, input_size: int, hidden_size: int, cfg: EGRUConfig | None = None) -> None:
        super().__init__(input_size, hidden_size, cfg)
        D, V = self.hidden_size, self.input_size
        self.kernel = nn.Parameter(torch.empty(V, 3 * D))  # W, gates z | r | g
        self.recurrent_kernel = nn.Parameter(torch.empty(D, 3 * D))  # R
        self.bias = nn.Parameter(torch.zeros(3 * D))
        self.recurrent_bias = nn.Parameter(torch.zeros(3 * D))
        nn.init.xavier_normal_(self.kernel)
        nn.init.xavier_normal_(self.recurrent_kernel)
        m = self.cfg.thr_mean
        # Drawn with the CPU generator whatever device the module is built on, then moved there
        # (torch's Beta sampler has no meta kernel, and its argument check reads values).
        cpu = torch.device("cpu")
        beta = torch.distributions.Beta(
            torch.tensor(3.0 * m / (1.0 - m), device=cpu), torch.tensor(3.0, device=cpu)
        )
        theta = beta.sample(torch.Size([D])).to(self.kernel.device)
        self.thr = nn.Parameter(theta)  # theta, one per unit

    def cost(self) -> StepCost:
        """Dense GRU-sized step, ``3D(D + V)`` MACs: input and recurrent matmuls, all rows."""
        D, V = self.hidden_size, self.input_size
        return StepCost(D, per_unit=3 * (D + V))

    def init_state(self, batch_size: int, ref: Tensor) -> EGRUState:
        zero = ref.new_zeros(batch_size, self.hidden_size)
        return zero, zero

    def _clamp_thresholds(self) -> None:
        # In place on ``.data`` as the code does: no gradient passes the clamp, and the
        # parameter's version counter is not bumped, so graphs built before stay valid.
        self.thr.data.clamp_(min=0.0, max=1.0)

    def _candidate(self, wx_t: Tensor, rh: Tensor, c: Tensor) -> Tensor:
        """``c~_t`` from ``wx_t = x_t W + b`` and ``rh = y_{t-1} R + b'`` (``[B, 3D]`` each)."""
        D = self.hidden_size
        x_zr, x_g = wx_t.split((2 * D, D), -1)
        h_zr, h_g = rh.split((2 * D, D), -1)
        z, r = torch.sigmoid(x_zr + h_zr).chunk(2, -1)
        g = torch.tanh(torch.addcmul(x_g, r, h_g))  # reset after the matmul, b'_g inside
        return torch.lerp(g, c, z)  # z * c + (1 - z) * g

    def _cell(self, wx_t: Tensor, state: EGRUState) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One step from ``wx_t = x_t W + b [B, 3D]``: ``(c_t, y_t, o_t, y_{t-1})``."""
        c, y = state
        rh = torch.addmm(self.recurrent_bias, y, self.recurrent_kernel)  # [B, 3D]
        c_tilde = self._candidate(wx_t, rh, c)
        o = _Spike.apply(
            c_tilde - self.thr, self.cfg.dampening_factor, self.cfg.pseudo_derivative_support
        )
        y_new = o * c_tilde
        c_new = c_tilde - o * self.thr
        return c_new, y_new, o, y

    def _col_reads(self, y_prev: Tensor) -> Tensor:
        """``[..., V + D]``: every input column; the recurrent column of each unit that fired."""
        ones = y_prev.new_ones(*y_prev.shape[:-1], self.input_size)
        return torch.cat([ones, (y_prev != 0).to(y_prev.dtype)], -1).detach()

    def step(self, x_t: Tensor, state: EGRUState, t: int) -> StepOut:
        wx_t = torch.addmm(self.bias, x_t, self.kernel)
        c, y, o, y_prev = self._cell(wx_t, state)
        return StepOut(
            y,
            (c, y),
            torch.ones_like(y),
            extras={"event_rate": o.mean(-1)},
            reads=self._col_reads(y_prev),
        )

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Also builds (or loads) the EGRU training kernel where training will run it, before
        the epoch's timer starts: ``time.train_s`` holds no compile."""
        super().on_epoch_start(epoch, num_epochs)
        sequence_kernel(*self.parameters())  # cached: a build at most once per process

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        """The step loop with the input projection of every step in one matmul, thresholds
        clamped to [0, 1] first (as the code's layer does); in training on CPU, where the
        kernel builds, the same steps as one C++ node (``baselines.ops.egru``)."""
        self._clamp_thresholds()
        state = self.init_state(x.shape[0], x) if state is None else state
        y0 = state[1]
        kernel = sequence_kernel(x, *state, self.kernel) if self.training else None
        if kernel is not None:
            wx = input_terms(x, self.kernel.t(), self.bias)  # [T, B, 3D]
            out_y, o, c = egru_sequence(
                kernel,
                wx,
                state,
                self.recurrent_kernel,
                self.recurrent_bias,
                self.thr,
                self.cfg.dampening_factor,
                self.cfg.pseudo_derivative_support,
            )
            state, rate = (c, out_y[:, -1]), o.mean(-1).mean(1)
        else:
            wx = torch.matmul(x, self.kernel) + self.bias  # [B, T, 3D]
            ys, rates = [], []
            for wx_t in wx.unbind(1):  # one unbind, linear backward (see Method.step_loop)
                c, y, o, _ = self._cell(wx_t, state)
                state = (c, y)
                ys.append(y)
                rates.append(o.mean(-1))
            out_y, rate = torch.stack(ys, 1), torch.stack(rates, 1).mean(1)  # [B, T, D], [B]
        return self._sequence_out(out_y, y0, rate, state)

    def _sequence_out(self, out_y: Tensor, y0: Tensor, rate: Tensor, state: EGRUState) -> SeqOut:
        """The SeqOut of the events ``out_y [B, T, D]`` from ``y_0``: mask, reads (from
        ``y_{t-1}`` of every step), the event rate ``[B]``, the final state, the regulariser."""
        y_prev = torch.cat([y0.unsqueeze(1), out_y[:, :-1]], 1).detach()  # y_{t-1} for every t
        out = SeqOut(
            outputs=out_y,
            mask=torch.ones_like(out_y).detach(),
            extras={"event_rate": rate},
            state=state,
            reads=self._col_reads(y_prev),
        )
        out.aux_loss = self.aux_loss(out)
        return out

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        """The sMNIST script's activity regulariser, ``activity_reg * (mean(o) -
        activity_target)^2`` (mean over batch, steps and units); None when off."""
        if self.cfg.activity_reg == 0:
            return None
        rate = out.extras["event_rate"].mean()
        return self.cfg.activity_reg * (rate - self.cfg.activity_target) ** 2

    @torch.no_grad()
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference that reads only the recurrent columns of the units that fired.

        As ``forward`` (thresholds clamped, the input projection of every step in one matmul: the
        code reads every input column), but the recurrent product of a step multiplies only the
        rows of ``R`` whose unit fired at the previous step in some sequence of the batch (the
        union; at batch 1 exactly the events): ``addmm_read_columns``, a weighted
        ``embedding_bag`` at batch 1, a gathered ``addmm`` at batch > 1, nothing (the bias alone)
        when no unit fired. The event and reset are selects, ``y = c~`` and ``c = c~ - theta``
        where ``c~ > theta``, the values ``forward``'s products give. Outputs, reads, event rate
        and final state equal ``eval()(x)``'s, outputs to rounding (the recurrent sums run in
        another order; a ``c~`` within rounding of its threshold could then fire differently),
        reads and mask exactly otherwise. Eval semantics, no autograd.

        On CPU (float32/64), where the library builds, the loop after the input matmul runs in
        the fused kernel ``condrnn::egru_infer_sequence`` (``baselines.ops.egru_infer``): the
        same steps in one call, each sequence of a batch reading only the rows of its own events
        (not the union's); elsewhere (one warning line off the CPU) the loop below.
        """
        self._clamp_thresholds()
        B = x.shape[0]
        c, y = self.init_state(B, x)
        y0 = y
        wx = torch.matmul(x, self.kernel) + self.bias  # [B, T, 3D]
        params = (self.recurrent_kernel, self.recurrent_bias, self.thr)
        kernel = egru_infer_kernel_for(x, *params)
        if kernel is not None:  # the whole sequence in one C++ call
            ys, c = kernel(wx, *params, c, y)
            rate = ys.ne(0).to(x.dtype).mean(-1).mean(1)  # an event is a non-zero y (theta >= 0)
            return self._sequence_out(ys, y0, rate, (c, ys[:, -1]))
        bias = self.recurrent_bias.expand(B, -1)
        ys, fired = [], []
        for wx_t in wx.unbind(1):
            rh = addmm_read_columns(bias, y, self.recurrent_kernel)  # [B, 3D]
            c_tilde = self._candidate(wx_t, rh, c)
            v = c_tilde - self.thr
            o = v > 0
            y = torch.where(o, c_tilde, 0.0)
            c = torch.where(o, v, c_tilde)
            ys.append(y)
            fired.append(o)
        rate = torch.stack(fired, 1).to(x.dtype).mean(-1).mean(1)
        return self._sequence_out(torch.stack(ys, 1), y0, rate, (c, y))

    @classmethod
    def fast_path_note(cls) -> str | None:
        """Whether the CPU fast path ran the fused C++ kernel here or the PyTorch fallback; reads
        the kernel's status and never builds it."""
        return egru_infer_kernel_status().fast_path_note(cls.name, "on CPU")

    def _set_level(self, level: float) -> None:
        """``at_skip``'s one knob: ``theta = level`` for every unit where ``level >= 0``; below 0,
        ``theta = 0`` and the candidate's input bias ``b_g = -GATE_SHIFT * level``."""
        D = self.hidden_size
        with torch.no_grad():
            self.thr.fill_(max(level, 0.0))
            self.bias[2 * D :].fill_(max(-level, 0.0) * GATE_SHIFT)

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[EGRU, str]:
        """An untrained EGRU (the code's initialisation) aiming at activity sparsity ``skip``:
        the share of the V + D columns its steps do not read.

        Every input column is read, so the share is ``(D / (V + D)) * (1 - event rate)`` (no
        state column is read at the first step, ``y_0 = 0``); the target's event rate is set by
        one knob (``_set_level``), calibrated by bisection on ``CALIBRATION_BATCH`` sequences
        ``x ~ N(0, I)`` of length ``seq_len`` drawn after the model (from the seeded global
        generator, in a fixed order): the threshold ``theta``, the same for every unit, in
        [0, 1]; or, for event rates above what ``theta = 0`` gives (``c~ > 0``, about half the
        time untrained), ``theta = 0`` and a positive candidate input bias ``b_g`` (every unit
        fires at every step once ``b_g`` is about 4; ``skip = 0`` asks for that). A target above
        ``D / (V + D)`` is out of reach: ``theta = 1``, no event.
        """
        model = cls(input_size, hidden_size).eval()
        x = torch.randn(CALIBRATION_BATCH, seq_len, input_size)

        def share(level: float) -> float:
            model._set_level(level)
            return 1.0 - model.fast_forward(x).reads.double().mean().item()

        level, _ = bisect_level(share, skip, -1.0, 1.0, 16)
        if level >= 0:
            return model, f"theta = {level:.3g} (every unit)"
        return model, f"theta = 0, b_g = {-GATE_SHIFT * level:.3g} (every unit)"
