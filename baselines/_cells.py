"""Pieces shared by several methods, written once: the GRU step (two forms), straight-through
binarisation, the hard sigmoid.

GRU convention (docs/methods.md 2.3 [DECISION]: reset-after, one bias per gate), gate order r, z, n
as in PyTorch/cuDNN so the fused kernel computes the same function::

    r = sigmoid(W_ir x + b_r + W_hr h)
    z = sigmoid(W_iz x + b_z + W_hz h)
    n = tanh(W_in x + b_n + r * (W_hn h))
    h' = (1 - z) * n + z * h

``z`` here is S-SA's ``1 - z`` (an equivalent reparametrisation, as in the SA-RNN code). Every gate
of unit i reads only row i of each matrix, so per-unit skipping is exactly realisable.

The other form, ``form="before"`` (``GRU_FORMS``), is the one of S-SA eq. 3 and of the SA-RNN and
Skip RNN authors' code: the reset gate scales the state before the matmul,
``n = tanh(W_in x + b_n + W_hn (r * h))``. Same parameters, shapes and initialisation, so one set
of weights runs in either form. Unit i's candidate then reads ``r_j h_j`` of every unit j: a
sparse step that updates any unit must compute the r rows of all D units, ``D(D+V)`` MACs, and
only the z and n rows of the updated ones, ``2(D+V)`` each (docs/methods.md 2.3, 2.9).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from harness.components.method import StepCost
from harness.errors import ConfigError

GRU_FORMS = ("after", "before")
"""Where the GRU's reset gate acts: ``after`` the recurrent matmul (default, docs/methods.md 2.3
[DECISION]) or ``before`` it (S-SA eq. 3, the SA-RNN and Skip RNN authors' code)."""


def check_gru_form(form: str, owner: str = "GRUWeights") -> str:
    """``form`` if it is one of ``GRU_FORMS``, else ConfigError (one line naming ``owner``)."""
    if form not in GRU_FORMS:
        choices = ", ".join(repr(f) for f in GRU_FORMS)
        raise ConfigError(f"{owner}: gru_form must be one of {choices} (got {form!r})")
    return form


class OneChunk(nn.Module):
    """A module whose fused-kernel tensors (``_chunk``: names of parameters and buffers, in the
    order the kernel takes them) are views of one contiguous buffer, in that order, on any device
    but the CPU: cuDNN's RNN reads its weights from one chunk, and given separate tensors it
    copies them into one at every call (with a warning, "not part of single contiguous chunk of
    memory"). ``nn.GRU`` does this by ``flatten_parameters`` after every move; here it happens
    when a module is made off the CPU and after every ``_apply`` (``to``, ``cuda``, ``double``)
    that leaves the tensors apart. On the CPU the tensors stay as they are allocated (the CPU's
    products may round by alignment, and the CPU kernels need no chunk), so no CPU number moves.
    """

    _chunk: tuple[str, ...] = ()

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self.pack_chunk()
        return out

    def chunk_tensors(self) -> list[Tensor]:
        """The tensors of ``_chunk``, in order."""
        return [getattr(self, name) for name in self._chunk]

    def pack_chunk(self, force: bool = False) -> None:
        """Make the ``_chunk`` tensors views of one new buffer, in order (their values copied),
        unless they are on the CPU (``force`` packs there too) or already one chunk."""
        tensors = self.chunk_tensors()
        if not tensors or (tensors[0].device.type == "cpu" and not force):
            return
        if is_one_chunk(tensors):
            return
        flat = tensors[0].new_empty(sum(t.numel() for t in tensors))
        offset = 0
        with torch.no_grad():
            for t in tensors:
                n = t.numel()
                flat[offset : offset + n].copy_(t.reshape(-1))
                t.set_(flat.untyped_storage(), offset, t.shape, contiguous_strides(t.shape))
                offset += n


def contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def is_one_chunk(tensors: list[Tensor]) -> bool:
    """Whether ``tensors`` are contiguous views of one storage, the first at its start and each
    next one right after the one before (cuDNN's test for its flat weights,
    ``try_get_weight_buf``: the buffer starts at the storage's start and every weight at the
    offset cuDNN's layout gives it, which for one layer is this order, packed)."""
    storage = tensors[0].untyped_storage()
    offset = 0
    for t in tensors:
        same = t.untyped_storage()._cdata == storage._cdata
        if not (same and t.is_contiguous() and t.storage_offset() == offset):
            return False
        offset += t.numel()
    return storage.nbytes() >= offset * tensors[0].element_size()


class GRUWeights(OneChunk):
    """Parameters of one GRU cell: ``weight_ih [3D, V]``, ``weight_hh [3D, D]``, ``bias [3D]``
    (3D(D+V+1) parameters, docs/methods.md 2.3), run in the reset-after or the reset-before form.

    Args:
        input_size: V.
        hidden_size: D.
        bound: weights ~ U(-bound, bound); default 1/sqrt(D) (PyTorch's nn.GRU).
        gate_bias: if given, the initial bias of the r and z gates (Skip RNN's TF code uses 1.0).
        form: one of ``GRU_FORMS``; it changes only ``step`` (and ``fused``, after only), not
            the parameters or their initialisation.

    Off the CPU the four tensors of the fused kernel are one chunk (``OneChunk``).
    """

    _chunk = ("weight_ih", "weight_hh", "bias", "zero_bias")

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bound: float | None = None,
        gate_bias: float | None = None,
        form: str = "after",
    ) -> None:
        super().__init__()
        D, V = hidden_size, input_size
        self.form = check_gru_form(form)
        self.hidden_size = D
        self.weight_ih = nn.Parameter(torch.empty(3 * D, V))
        self.weight_hh = nn.Parameter(torch.empty(3 * D, D))
        self.bias = nn.Parameter(torch.zeros(3 * D))
        # A zero recurrent bias so the fused kernel (which takes two) computes the one-bias cell.
        self.register_buffer("zero_bias", torch.zeros(3 * D), persistent=False)
        b = 1.0 / math.sqrt(D) if bound is None else bound
        with torch.no_grad():
            self.weight_ih.uniform_(-b, b)
            self.weight_hh.uniform_(-b, b)
            self.bias.uniform_(-b, b)
            if gate_bias is not None:
                self.bias[: 2 * D] = gate_bias
        self.pack_chunk()

    def input_proj(self, x: Tensor) -> Tensor:
        """``W_i x + b`` for every step at once: ``[B, T, V] -> [B, T, 3D]``."""
        return torch.nn.functional.linear(x, self.weight_ih, self.bias)

    def step(self, xp_t: Tensor, h: Tensor) -> Tensor:
        """Candidate state ``h~_t [B, D]`` from the projected input ``xp_t [B, 3D]`` and ``h``,
        in this cell's form."""
        if self.form == "before":
            return gru_step_before(xp_t, h, self.weight_hh)
        return gru_step(xp_t, h, self.weight_hh)

    def train_step(self, xp_t: Tensor, h: Tensor, weight_hh_t: Tensor) -> Tensor:
        """``step`` in fewer ops, for the training loops of the skipping methods: the reset-after
        form through ``gru_step_lean`` with ``weight_hh_t = weight_hh.t()`` taken once per
        sequence; the reset-before form is ``step`` itself (``weight_hh_t`` unused)."""
        if self.form == "before":
            return gru_step_before(xp_t, h, self.weight_hh)
        return gru_step_lean(xp_t, h, weight_hh_t)

    def fused(self, x: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
        """Whole-sequence dense GRU through torch's fused kernel (same function as ``step``).

        Raises:
            ConfigError: for the reset-before form, which the fused kernel does not compute
                (run ``step`` over time instead).
        """
        if self.form != "after":
            raise ConfigError(
                f"the fused GRU kernel computes only gru_form='after' (got {self.form!r}); "
                "run the step loop for the reset-before form"
            )
        params = [self.weight_ih, self.weight_hh, self.bias, self.zero_bias]
        out, hn = torch.gru(x, h0.unsqueeze(0), params, True, 1, 0.0, self.training, False, True)
        return out, hn[0]


def gru_step(xp_t: Tensor, h: Tensor, weight_hh: Tensor) -> Tensor:
    """Reset-after GRU candidate: ``xp_t [B, 3D]`` (input projection incl. bias), ``h [B, D]``."""
    hp = h @ weight_hh.t()  # [B, 3D]
    xr, xz, xn = xp_t.chunk(3, -1)
    hr, hz, hn = hp.chunk(3, -1)
    r = torch.sigmoid(xr + hr)  # S-SA eq. 1
    z = torch.sigmoid(xz + hz)  # S-SA eq. 2
    n = torch.tanh(xn + r * hn)  # S-SA eq. 3, reset applied after the matmul
    return (1 - z) * n + z * h  # S-SA eq. 4 with z -> 1 - z


def gru_step_lean(xp_t: Tensor, h: Tensor, weight_hh_t: Tensor) -> Tensor:
    """``gru_step`` in 9 autograd ops instead of 15 (``weight_hh_t = weight_hh.t()``, transposed
    once per sequence; one sigmoid for r and z; ``addcmul``; ``lerp``). A training step is bound
    by per-op dispatch at the paper sizes, so fewer ops is faster; the values and gradients are
    the same equations, equal to ``gru_step``'s to rounding."""
    D = h.shape[-1]
    hp = torch.mm(h, weight_hh_t)  # [B, 3D]
    x_rz, xn = xp_t.split((2 * D, D), -1)
    h_rz, hn = hp.split((2 * D, D), -1)
    r, z = torch.sigmoid(x_rz + h_rz).chunk(2, -1)  # S-SA eqs. 1, 2
    n = torch.tanh(torch.addcmul(xn, r, hn))  # S-SA eq. 3, reset applied after the matmul
    return torch.lerp(n, h, z)  # S-SA eq. 4 with z -> 1 - z: (1 - z) n + z h


def gru_step_before(xp_t: Tensor, h: Tensor, weight_hh: Tensor) -> Tensor:
    """Reset-before GRU candidate (S-SA eq. 3, the SA-RNN code's ``GRUCell``): as ``gru_step``
    but ``n = tanh(W_in x + b_n + W_hn (r * h))``. Same 3D(D+V) MACs: ``W_hr, W_hz`` multiply
    ``h`` and ``W_hn`` multiplies ``r * h``."""
    D = h.shape[-1]
    xr, xz, xn = xp_t.chunk(3, -1)
    hr, hz = (h @ weight_hh[: 2 * D].t()).chunk(2, -1)  # [B, D] each
    r = torch.sigmoid(xr + hr)  # S-SA eq. 1
    z = torch.sigmoid(xz + hz)  # S-SA eq. 2
    n = torch.tanh(xn + (r * h) @ weight_hh[2 * D :].t())  # S-SA eq. 3, reset before the matmul
    return (1 - z) * n + z * h  # S-SA eq. 4 with z -> 1 - z


def gru_macs_per_unit(input_size: int, hidden_size: int) -> int:
    """MACs per updated unit of the GRU cell: one row of each of the three gate matrices."""
    return 3 * (hidden_size + input_size)


def gru_exact_cost(input_size: int, hidden_size: int, form: str, always: int = 0) -> StepCost:
    """What a sparse step of the GRU realises in ``form``, as a ``StepCost`` (plus ``always``,
    a decision network run at every step). Reset-after: ``3(D+V)`` per updated unit, the
    paper-effective count itself. Reset-before: the r rows of all units once any unit updates,
    ``1[k_t > 0] D(D+V)``, and the z and n rows of the updated ones, ``2 k_t (D+V)``
    (docs/methods.md 2.3, 2.9). Both give ``3D(D+V)`` when every unit updates."""
    D, row = hidden_size, hidden_size + input_size
    if check_gru_form(form) == "after":
        return StepCost(D, always=always, per_unit=3 * row)
    return StepCost(D, always=always, per_unit=2 * row, per_active_step=D * row)


class _BinarizeSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p: Tensor, threshold: float) -> Tensor:
        return (p > threshold).to(p.dtype)

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor, None]:
        return g, None


def binarize_ste(p: Tensor, threshold: float = 0.5) -> Tensor:
    """``1[p > threshold]`` forward, identity gradient backward (straight-through estimator)."""
    return _BinarizeSTE.apply(p, threshold)


class _RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p: Tensor) -> Tensor:
        return torch.round(p)  # half to even, like TF's round (Skip RNN pitfall)

    @staticmethod
    def backward(ctx, g: Tensor) -> Tensor:
        return g


def round_ste(p: Tensor) -> Tensor:
    """``round(p)`` forward (0.5 -> 0), identity gradient backward."""
    return _RoundSTE.apply(p)


def hard_sigmoid(v: Tensor, slope: float) -> Tensor:
    """``clip((slope * v + 1) / 2, 0, 1)`` as in the SA-RNN code (``hardSigma``)."""
    return torch.clamp((slope * v + 1.0) / 2.0, 0.0, 1.0)


def masked_update(u: Tensor, new: Tensor, old: Tensor) -> Tensor:
    """``u * new + (1 - u) * old`` where u is {0,1}; units with u = 0 are exact copies of ``old``.

    For finite values ``0 * new + 1 * old == old`` exactly in floating point, so the copy is
    bit-exact, and the product keeps the straight-through gradient ``dL/du = dL/dh * (new - old)``.
    """
    return u * new + (1 - u) * old


def masked_lerp(u: Tensor, new: Tensor, old: Tensor) -> Tensor:
    """``masked_update`` in one op, ``lerp(old, new, u)``: the same value (bit for bit where u is
    0 or 1: torch's lerp computes ``old + u (new - old)`` for u < 0.5 and ``new - (new - old)
    (1 - u)`` otherwise, so u = 0 gives ``old`` and u = 1 gives ``new`` exactly) and the same
    gradients, ``dL/du = dL/dh * (new - old)`` included (to rounding). ``u`` broadcasts."""
    return torch.lerp(old, new, u)


class LSTMWeights(OneChunk):
    """Parameters of one LSTM cell without peepholes (docs/methods.md 2.2): ``weight_ih [4D, V]``,
    ``weight_hh [4D, D]``, one ``bias [4D]`` (4D(D+V+1) parameters), gate order i, f, g, o as in
    PyTorch. Weights ~ U(+-1/sqrt(D)); forget-gate bias initialised to ``forget_bias``. Off the
    CPU the four tensors of the fused kernel are one chunk (``OneChunk``).
    """

    _chunk = ("weight_ih", "weight_hh", "bias", "zero_bias")

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float = 1.0) -> None:
        super().__init__()
        D, V = hidden_size, input_size
        self.hidden_size = D
        self.weight_ih = nn.Parameter(torch.empty(4 * D, V))
        self.weight_hh = nn.Parameter(torch.empty(4 * D, D))
        self.bias = nn.Parameter(torch.empty(4 * D))
        self.register_buffer("zero_bias", torch.zeros(4 * D), persistent=False)
        b = 1.0 / math.sqrt(D)
        with torch.no_grad():
            for p in (self.weight_ih, self.weight_hh, self.bias):
                p.uniform_(-b, b)
            self.bias[D : 2 * D] = forget_bias  # [DECISION] docs/methods.md 2.2: forget bias 1
        self.pack_chunk()

    def input_proj(self, x: Tensor) -> Tensor:
        """``W_i x + b`` for every step: ``[B, T, V] -> [B, T, 4D]``."""
        return torch.nn.functional.linear(x, self.weight_ih, self.bias)

    def step(self, xp_t: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        """One LSTM step (S-EI eqs. 3-5) from the projected input: returns ``(h~, c~)``."""
        gates = xp_t + h @ self.weight_hh.t()  # [B, 4D]
        i, f, g, o = gates.chunk(4, -1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c_new), c_new

    def fused(self, x: Tensor, h0: Tensor, c0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Whole-sequence dense LSTM through torch's fused kernel (same function as ``step``)."""
        params = [self.weight_ih, self.weight_hh, self.bias, self.zero_bias]
        hx = (h0.unsqueeze(0), c0.unsqueeze(0))
        out, hn, cn = torch.lstm(x, hx, params, True, 1, 0.0, self.training, False, True)
        return out, hn[0], cn[0]


# --- inference fast paths (``Method.fast_forward``) ---------------------------------------------


def cached_pack(
    owner: nn.Module, name: str, params: tuple[Tensor, ...], build: Callable[[], Any]
) -> Any:
    """``build()`` (under no_grad), cached on ``owner`` as attribute ``name`` until one of
    ``params`` changes storage, dtype or version (in-place updates by optimizers,
    ``load_state_dict`` and ``no_grad`` edits bump it; edits through ``.data`` do not), so a fast
    path repacks its weights once, not at every call."""
    key = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in params)
    hit = owner.__dict__.get(name)
    if hit is None or hit[0] != key:
        with torch.no_grad():
            hit = (key, build())
        owner.__dict__[name] = hit
    return hit[1]


def pack_gru_rows(cell: GRUWeights) -> tuple[Tensor, Tensor]:
    """Unit-major copies of a GRU cell: ``hh [D, 3, D]`` (row ``[i, g]`` is gate g's recurrent row
    of unit i) and ``ih [D, 3, V + 1]`` (input row, bias last). One unit's three gate rows are
    adjacent in memory, so a set of units is gathered with one ``index_select`` (a prefix is a
    slice) and multiplied with ``h`` and ``[x_t, 1]`` as contiguous ``[3k, .]`` matrices."""
    D = cell.hidden_size
    hh = cell.weight_hh.detach().view(3, D, D).transpose(0, 1).contiguous()
    ih = torch.cat([cell.weight_ih, cell.bias[:, None]], 1).detach()  # [3D, V + 1]
    return hh, ih.view(3, D, -1).transpose(0, 1).contiguous()


def gru_rows(hp: Tensor, xp: Tensor, h_rows: Tensor) -> Tensor:
    """Reset-after GRU candidate of k units from their unit-major projections ``hp = W_h h`` and
    ``xp = W_i x + b``, each ``[k, 3, B]`` (gates r, z, n), and previous values ``h_rows [k, B]``
    (the state as columns, so that units are rows). The equations of ``gru_step`` in fewer ops
    (``addcmul``, ``lerp``), for per-step overhead; they agree with it to rounding."""
    hr, hz, hn = hp.unbind(1)  # [k, B] each
    xr, xz, xn = xp.unbind(1)
    r = torch.sigmoid(xr + hr)  # S-SA eq. 1
    z = torch.sigmoid(xz + hz)  # S-SA eq. 2
    n = torch.tanh(torch.addcmul(xn, r, hn))  # S-SA eq. 3
    return torch.lerp(n, h_rows, z)  # S-SA eq. 4 with z -> 1 - z: (1 - z) n + z h
