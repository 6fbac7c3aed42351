"""Delta GRU: a GRU that propagates only the changes of its input and state larger than a threshold.

Paper: Neil, Lee, Delbruck & Liu, "Delta Networks for Optimized Recurrent Network Computation",
ICML 2017, https://arxiv.org/abs/1612.05571 (section 3, the delta GRU). What is computed is the
public PyTorch code of the second line of authors (Chang Gao et al.), whose training code is
public and says so (its README trains DeltaGRU on Google Speech Commands):
``gaochangw/DeltaRNN @ c33c36cb7f085ed782e2491f1d6f13202c51362e : networks/layers/deltagru.py``
(``DeltaGRU``: ``process_inputs``, ``compute_deltas``, ``update_states``, ``compute_gates``,
``layer_forward``), with ``networks/models/cla-deltarnn.py``, ``project.py`` and
``modules/gscdv2/train_func.py`` for how it is trained. Per step t, with memorised reference
values ``x^`` (input) and ``h^`` (state), both zero at the start::

    dx_t = x_t - x^_{t-1},  dx_t[i] = 0 where |dx_t[i]| < theta_x;  x^_t = x_t where kept
    dh_t = h_{t-1} - h^_{t-1}, dh_t[j] = 0 where |dh_t[j]| < theta_h; h^_t = h_{t-1} where kept
    M_t   = M_{t-1} + W_i dx_t + [W_hr; W_hz; 0] dh_t     M_0 = b  (r, z and the input part of n)
    M_nh,t = M_nh,t-1 + W_hn dh_t                          M_nh,0 = 0
    r, z  = sigmoid(M_t[r]), sigmoid(M_t[z])
    n     = tanh(M_t[n] + r * M_nh,t)                      reset after the recurrent product
    h_t   = (1 - z) * n + z * h_{t-1}                      the true h_{t-1}, not h^

So ``M_t = b + W_i x^_t + W_h h^_t``: the gates see the memorised values, and a column of ``W_i``
(``W_h``) is read only at the steps where its input (unit) changed by ``theta_x`` (``theta_h``) or
more. The thresholds act in training as at test time (the code's ``qa = 0`` in training switches
off only its quantisation), and the gradient is plain autograd through the thresholded deltas:
zero through a delta that was cut, no straight-through estimator. Training may add the code's
regulariser ``beta * sum |dh|`` (``reg``, summed over steps, units and the batch;
``calculate_loss``). At ``theta_x = theta_h = 0`` the function is the reset-after GRU of
``baselines/gru.py`` on the same weights (tested against it, outputs and gradients, and against
``torch.nn.GRUCell``).

What the harness counts:

- Update mask (rows): all ones. Every unit's state is recomputed at every step
  (``h_t = (1 - z) n + z h_{t-1}`` with fresh gates), so Skip % is 0; the sparsity of this method
  is in the columns it does not read.
- ``reads [B, T, V + D]`` (columns): 1 where ``dx_t[v]`` (the first V) or ``dh_t[j]`` (the last D)
  is non-zero, i.e. where step t multiplies that column of ``W_i`` or ``W_h``. A delta of exactly
  zero is not read even when the threshold passed it (``theta = 0``): it contributes nothing, and
  the code's own temporal-sparsity statistics (``num_dx_zeros``, ``num_dh_zeros``) count it as
  skipped. So at ``theta = 0`` every column is read except those whose value did not change, and
  the D state columns of the first step of a fresh sequence (``h_0 = h^_0 = 0``).
- ``cost()``: the dense GRU, ``3D(D+V)`` MACs per step (every column read); what a delta
  implementation saves is the share of zero columns in ``reads``.

Inference fast path (``fast_forward``, for ``harness bench --speedup``; its code is in
``baselines/_delta_gru_fast.py``): the same function multiplying only the columns read. On CPU
(float32/64), where the kernel library builds, the whole sequence runs in one C++ call
(``baselines.ops.delta_gru_infer``, the op ``condrnn::delta_gru_infer_sequence``): per step and
sequence, only the rows of ``W_i^T`` and ``W_h^T`` (transposed once, cached) of that sequence's
non-zero deltas, at any batch size. Elsewhere the PyTorch path: one product per non-zero input
delta, projected before the loop, and per step only the rows of ``W_h^T`` whose unit's delta is
non-zero in some sequence of the batch (the union; at batch 1 exactly the non-zero deltas).
``at_skip`` calibrates ``theta_x`` and then ``theta_h`` by bisection on a batch drawn inside it,
so that the activity sparsity (the share of the V + D columns not read) hits the target.

Differences from the code:

- [DECISION] docs/methods.md 1.3: the GRU family's one cell (``baselines._cells.GRUWeights``):
  one bias per gate. The code is an ``nn.GRU`` with two biases: ``b_ih + b_hh`` for r and z (one
  bias in effect, the same function) and, for the candidate, ``b_in`` outside the reset gate and
  ``b_hn`` inside it (``M_nh,0 = b_hn``). Here ``b_hn = 0``: D fewer parameters, and Delta GRU at
  ``theta = 0`` is the harness's GRU, so the two differ by the thresholds alone.
- [DECISION] Initialisation: by default (``init="gru"``) the GRU family's U(+-1/sqrt(D)) for
  weights and biases, drawn in the same order as ``baselines/gru.py`` (same seed, same starting
  weights). ``init="authors"`` gives the code's ``reset_parameters``: Xavier-uniform for each gate
  block of ``W_i``, orthogonal for each gate block of ``W_h``, zero biases, in every layer (each
  harness layer is its own instance). The code's ``reset_parameters`` too makes every layer's
  ``W_h`` blocks orthogonal, but also the ``W_i`` blocks of the layers after the first (every
  ``weight`` outside ``l0``), which are Xavier-uniform here in every layer. The README's
  pretrain-a-GRU-then-retrain recipe is not reproduced: a run trains the delta network from its
  initialisation (the code allows that too).
- Quantisation (``qa``, ``qw``, the fixed-point formats ``aqi/aqf``, ``wqi/wqf``, ``nqi/nqf``) and
  the hard sigmoid / hard tanh options are left out: float arithmetic and the smooth
  nonlinearities, the code's defaults (``qa = qw = 0``, ``use_hardsigmoid = use_hardtanh = 0``).
- Defaults ``theta_x = theta_h = 0.1``: the thresholds of the README's training command (the
  argument parser's default is 0, which is the dense GRU). ``beta = 0`` as in the code.
- One layer per method instance; stacked harness layers are independent Delta GRU layers, as the
  code's ``num_layers`` loop (each layer has its own memories; the regulariser is summed).
- The sequence ``forward`` rearranges the same computation (tested equal to ``step``, the literal
  per-step form): the input side depends on the inputs only, so its memories are found in one
  pass, its deltas projected in one matmul and accumulated by a cumulative sum; the state side
  accumulates ``W_h dh`` per step as the code does. Values agree to rounding; gradients are the
  same functions.
- Training on CPU (float32/64) runs that forward's per-step parts in C++ where the optional
  kernel builds (``baselines.ops.delta_gru_seq``, built before the epoch's timer starts): the input
  scan (``_memorised_steps``: the same steps exactly) in one call, and the cumulative sum of the
  projected input deltas with the state side's T steps (``_state_step``), forward and backward,
  as one autograd node (the op ``condrnn::delta_gru_seq_forward``; on the meta device its fake
  implementation); the gather, the deltas and their projection stay torch ops. It equals the
  torch forward (the reference, and the path in eval, on CUDA, where the kernel
  does not build and with ``HARNESS_NO_KERNELS=1``) to float rounding, not bit for bit: reads
  and mask exactly, outputs, regulariser, final state and gradients to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import baselines._delta_gru_fast as _delta_gru_fast
from baselines._cells import GRUWeights, gru_macs_per_unit
from baselines.ops.delta_gru_infer import delta_gru_infer_kernel_status
from baselines.ops.delta_gru_seq import memorised_steps, sequence_kernel, state_sequence
from harness.components.config import MAX_PENALTY, check_knobs, knob
from harness.components.method import Method, SeqOut, StepCost, StepOut
from harness.components.registry import register_method

# (x^ [B, V], h [B, D], h^ [B, D], M [B, 3D] (r, z: input and state part; n: input part, bias
# included), M_nh [B, D] (the state part of n)), as the code's (x_p, h, h_p, dm, dm_nh).
DeltaState = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]

INITS = ("gru", "authors")
# Far above any delta of the tasks' inputs (a time input reaches 125 ms) or states (|dh| < 2).
MAX_THRESHOLD = 1e4
# Sequences ``at_skip`` calibrates its thresholds on.
CALIBRATION_BATCH = 8


@dataclass(frozen=True)
class DeltaGRUConfig:
    """Knobs of Delta GRU.

    Attributes:
        theta_x: input delta threshold Theta_x: a change of an input feature smaller than this
            (in absolute value) is not propagated (the code's ``thx``).
        theta_h: state delta threshold Theta_h (the code's ``thh``).
        beta: weight of the code's regulariser ``sum |dh|`` over steps, units and the batch.
        init: ``gru`` (the GRU family's U(+-1/sqrt(D))) or ``authors`` (the code's Xavier /
            orthogonal weights, zero biases).
    """

    theta_x: float = knob(0.1, ge=0, le=MAX_THRESHOLD)
    theta_h: float = knob(0.1, ge=0, le=MAX_THRESHOLD)
    beta: float = knob(0.0, ge=0, le=MAX_PENALTY)
    init: str = knob("gru", choices=INITS)

    def __post_init__(self) -> None:
        check_knobs(self, "method", "delta-gru")


@register_method("delta-gru")
class DeltaGRU(Method):
    """Delta GRU: thresholded input and state deltas against memorised references, accumulated
    pre-activations, then the reset-after GRU nonlinearities; every unit updates every step."""

    config_cls = DeltaGRUConfig
    budget_knobs = ("theta_x", "theta_h", "beta")  # the delta thresholds, the |dh| penalty

    def __init__(
        self, input_size: int, hidden_size: int, cfg: DeltaGRUConfig | None = None
    ) -> None:
        super().__init__(input_size, hidden_size, cfg)
        D = self.hidden_size
        self.cell = GRUWeights(self.input_size, D)
        if self.cfg.init == "authors":  # the code's DeltaGRU.reset_parameters
            with torch.no_grad():
                for g in range(3):
                    nn.init.xavier_uniform_(self.cell.weight_ih[g * D : (g + 1) * D])
                    nn.init.orthogonal_(self.cell.weight_hh[g * D : (g + 1) * D])
                self.cell.bias.zero_()

    def cost(self) -> StepCost:
        """The dense GRU, ``3D(D+V)`` MACs per step: every column of ``W_i`` and ``W_h`` read."""
        return StepCost(
            self.hidden_size, per_unit=gru_macs_per_unit(self.input_size, self.hidden_size)
        )

    def on_epoch_start(self, epoch: int, num_epochs: int) -> None:
        """Also builds (or loads) the training kernel where training will run it, before the
        epoch's timer starts: ``time.train_s`` holds no compile."""
        super().on_epoch_start(epoch, num_epochs)
        sequence_kernel(*self.parameters())  # cached: a build at most once per process

    def init_state(self, batch_size: int, ref: Tensor) -> DeltaState:
        """Zero references and state; ``M_0 = b`` and ``M_nh,0 = 0`` (the code's
        ``process_inputs``, with ``b_hn = 0``)."""
        B, V, D = batch_size, self.input_size, self.hidden_size
        x_hat = ref.new_zeros(B, V)
        h = ref.new_zeros(B, D)
        m = self.cell.bias.to(ref.dtype).unsqueeze(0).expand(B, -1)
        return x_hat, h, h.clone(), m, ref.new_zeros(B, D)

    def step(self, x_t: Tensor, state: DeltaState, t: int) -> StepOut:
        """One step in the code's order: deltas, references, accumulated memories, gates."""
        x_hat, h, h_hat, m, m_nh = state
        D = self.hidden_size
        dx = x_t - x_hat
        keep_x = dx.abs() >= self.cfg.theta_x
        dx = torch.where(keep_x, dx, 0.0)
        dh = h - h_hat
        keep_h = dh.abs() >= self.cfg.theta_h
        dh = torch.where(keep_h, dh, 0.0)
        x_hat = torch.where(keep_x, x_t, x_hat)
        h_hat = torch.where(keep_h, h, h_hat)
        mac_x = F.linear(dx, self.cell.weight_ih) + m  # [B, 3D]
        mac_h = F.linear(dh, self.cell.weight_hh)  # [B, 3D]
        m_rz = mac_x[:, : 2 * D] + mac_h[:, : 2 * D]
        m = torch.cat([m_rz, mac_x[:, 2 * D :]], 1)
        m_nh = mac_h[:, 2 * D :] + m_nh
        r, z = torch.sigmoid(m_rz).chunk(2, 1)
        n = torch.tanh(mac_x[:, 2 * D :] + r * m_nh)
        h_new = (1 - z) * n + z * h
        reads = torch.cat([dx != 0, dh != 0], 1).to(x_t.dtype)
        extras = {"_abs_dh": dh.abs().sum(1)}  # [B], for the regulariser (popped by aux_loss)
        state = (x_hat, h_new, h_hat, m, m_nh)
        return StepOut(h_new, state, torch.ones_like(h_new), extras=extras, reads=reads)

    def aux_loss(self, out: SeqOut) -> Tensor | None:
        """The regulariser after ``step_loop``, from the per-step ``sum |dh|`` the steps left in
        ``extras`` (which the loop averaged over the steps; removed from the diagnostics)."""
        abs_dh = out.extras.pop("_abs_dh", None)
        if abs_dh is None:
            return None
        return self._penalty(abs_dh * out.outputs.shape[1])

    def forward(self, x: Tensor, lengths: Tensor | None = None, state=None) -> SeqOut:
        """The same computation with the input side for the whole sequence at once.

        The input references depend on the inputs only: one pass without autograd finds, for
        every step and feature, the step whose value is memorised (or the initial reference),
        a gather makes ``x^_t`` differentiably, ``dx_t = x^_t - x^_{t-1}`` (exactly the code's
        thresholded delta, zero where not kept), one matmul projects every ``dx_t`` and a
        cumulative sum accumulates them onto ``M_0``. The state side runs per step. In
        training on CPU the scan, the cumulative sum and the state side run in the C++ kernel
        where it builds (``baselines.ops.delta_gru_seq``; equal to rounding).
        """
        B, T, _ = x.shape
        D = self.hidden_size
        x_hat0, h, h_hat, m0, m_nh0 = self.init_state(B, x) if state is None else state
        w_h = self.cell.weight_hh
        kernel = sequence_kernel(x, h, h_hat, m0, m_nh0, w_h) if self.training else None
        if kernel is not None:  # the scan in one C++ call (baselines.ops.delta_gru_seq)
            src = memorised_steps(kernel, x, x_hat0, self.cfg.theta_x)
        else:
            src = self._memorised_steps(x, x_hat0)  # [B, T, V], -1 for the initial reference
        xs = torch.cat([x_hat0.unsqueeze(1), x], 1)  # [B, T + 1, V]
        x_hats = xs.gather(1, src + 1)  # [B, T, V]  x^_t
        dx = x_hats - torch.cat([x_hat0.unsqueeze(1), x_hats[:, :-1]], 1)  # [B, T, V]
        # the state part of the memories: r, z start at 0 (their M_0 is in acc_x), n at M_nh,0
        acc_h = torch.cat([torch.zeros_like(m0[:, : 2 * D]), m_nh0], 1)
        if kernel is not None:  # the cumulative sum and the state side's T steps in one C++ node
            # W_i dx as one mm on a row-major W_i^T: its backward computes W_i's gradient as
            # dx^T grad, fast at few inputs (``baselines.ops.library.input_terms``)
            proj = dx.reshape(B * T, -1).mm(self.cell.weight_ih.t().contiguous()).view(B, T, -1)
            hs, dhs, acc_x, h_hat, acc_h = state_sequence(
                kernel, proj, m0, h, h_hat, acc_h, w_h, self.cfg.theta_h
            )
        else:
            # [B, T, 3D]: b + W_i x^_t
            acc_x = torch.cumsum(F.linear(dx, self.cell.weight_ih), 1) + m0.unsqueeze(1)
            w_t, steps, deltas = w_h.t(), [], []
            for a_t in acc_x.unbind(1):
                h, h_hat, acc_h, dh = self._state_step(a_t, h, h_hat, acc_h, w_t, torch.addmm)
                steps.append(h)
                deltas.append(dh)
            hs, dhs, acc_x = torch.stack(steps, 1), torch.stack(deltas, 1), acc_x[:, -1]
        return self._sequence_out(hs, dhs, dx.detach(), x_hats[:, -1], acc_x, h_hat, acc_h)

    def _state_step(
        self, acc_x: Tensor, h: Tensor, h_hat: Tensor, acc_h: Tensor, w_t: Tensor, addmm
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One step of the state side, shared by ``forward`` and ``fast_forward``.

        From the input side of the memories ``acc_x = b + W_i x^_t`` ``[B, 3D]``, the state
        ``h``, its reference ``h^`` and the state side of the memories ``acc_h = W_h h^``
        (``[B, 3D]``; the n part starts at ``M_nh,0``): thresholds ``dh = h - h^``, adds
        ``addmm(acc_h, dh, W_h^T)`` (``torch.addmm`` in training, ``addmm_read_columns`` in the
        fast path, ``baselines._delta_gru_fast``) and applies the reset-after GRU
        nonlinearities. Returns the new ``(h, h^, acc_h, dh)``.
        """
        D = self.hidden_size
        d = h - h_hat
        keep = d.detach().abs() >= self.cfg.theta_h
        dh = torch.where(keep, d, 0.0)
        h_hat = torch.where(keep, h, h_hat)
        acc_h = addmm(acc_h, dh, w_t)
        a_rz, a_n = acc_x.split((2 * D, D), -1)
        c_rz, c_n = acc_h.split((2 * D, D), -1)
        r, z = torch.sigmoid(a_rz + c_rz).chunk(2, -1)
        n = torch.tanh(torch.addcmul(a_n, r, c_n))
        h = torch.lerp(n, h, z)  # (1 - z) n + z h
        return h, h_hat, acc_h, dh

    def _sequence_out(
        self,
        out: Tensor,
        dh_all: Tensor,
        dx: Tensor,
        x_last: Tensor,
        acc_x: Tensor,
        h_hat: Tensor,
        acc_h: Tensor,
    ) -> SeqOut:
        """The ``SeqOut`` of ``forward`` and ``fast_forward`` from the states ``out [B, T, D]``,
        the state deltas ``dh_all [B, T, D]``, the input deltas ``dx [B, T, V]`` and the
        memories after the last step."""
        reads = torch.cat([dx != 0, dh_all.detach() != 0], -1).to(out.dtype)
        abs_dh = dh_all.abs().sum((1, 2)) if self.cfg.beta else None
        return self._reads_out(out, reads, abs_dh, x_last, acc_x, h_hat, acc_h)

    def _reads_out(
        self,
        out: Tensor,
        reads: Tensor,
        abs_dh: Tensor | None,
        x_last: Tensor,
        acc_x: Tensor,
        h_hat: Tensor,
        acc_h: Tensor,
    ) -> SeqOut:
        """``_sequence_out`` from the reads ``[B, T, V + D]`` and each sequence's sum of ``|dh|``
        over the steps and units ``[B]`` (None where ``beta = 0``), as the fast path's fused
        kernel returns them."""
        D = self.hidden_size
        m = torch.cat([acc_x[:, : 2 * D] + acc_h[:, : 2 * D], acc_x[:, 2 * D :]], 1)
        final = (x_last, out[:, -1], h_hat, m, acc_h[:, 2 * D :])
        aux = None if abs_dh is None else self._penalty(abs_dh)
        return SeqOut(out, torch.ones_like(out), state=final, reads=reads, aux_loss=aux)

    @torch.no_grad()
    def _memorised_steps(self, x: Tensor, x_hat0: Tensor) -> Tensor:
        """For every step t and feature v, the step whose input is ``x^_t[v]`` (-1: the initial
        reference ``x_hat0``), ``[B, T, V]`` long: the code's thresholding, without autograd."""
        ref = x_hat0.detach()
        src = torch.full_like(ref, -1, dtype=torch.long)
        out = []
        for t, x_t in enumerate(x.detach().unbind(1)):
            keep = (x_t - ref).abs() >= self.cfg.theta_x
            ref = torch.where(keep, x_t, ref)
            src = src.masked_fill(keep, t)
            out.append(src)
        return torch.stack(out, 1)

    def _penalty(self, abs_dh: Tensor) -> Tensor | None:
        """``beta * sum |dh|`` over steps, units and the batch (the code's ``reg * beta``), from
        the per-sequence sums ``[B]``; None when ``beta = 0``."""
        if self.cfg.beta == 0:
            return None
        return self.cfg.beta * abs_dh.sum()

    # --- inference fast path (baselines/_delta_gru_fast.py) ---------------------------------------
    def fast_forward(self, x: Tensor) -> SeqOut:
        """Inference that multiplies only the columns read (``_delta_gru_fast.fast_forward``: on
        CPU the fused kernel ``condrnn::delta_gru_infer_sequence`` where it builds): outputs
        equal ``eval()(x)``'s to rounding, reads, mask and final state exactly."""
        return _delta_gru_fast.fast_forward(self, x)

    @classmethod
    def fast_path_note(cls) -> str | None:
        """Whether the CPU fast path ran the fused C++ kernel here or the PyTorch fallback; reads
        the kernel's status and never builds it."""
        return delta_gru_infer_kernel_status().fast_path_note(cls.name, "on CPU")

    @classmethod
    def at_skip(
        cls, input_size: int, hidden_size: int, skip: float, seq_len: int
    ) -> tuple[DeltaGRU, str]:
        """An untrained Delta GRU (default initialisation) whose thresholds aim at activity
        sparsity ``skip``, the share of the V + D columns its steps do not read
        (``_delta_gru_fast.calibrate``, on ``CALIBRATION_BATCH`` sequences ``x ~ N(0, I)`` of
        length ``seq_len`` drawn after the model, from the seeded global generator)."""
        model = cls(input_size, hidden_size).eval()
        x = torch.randn(CALIBRATION_BATCH, seq_len, input_size)
        return model, _delta_gru_fast.calibrate(model, x, skip)
