"""The inference kernel of Random Updates and Phased LSTM (``baselines.ops.masked_infer``,
``csrc/masked_infer.cpp``) against their dense masked loops, ``model.eval()(x)`` under no_grad
(the reference), and against the methods' per-step code run with any gate.

Every test is marked ``kernel`` (``pytest -m kernel``); those that need the compiled library
build it once into the session's cache and fail, rather than skip, wherever it is expected to
build (``HARNESS_EXPECT_KERNELS=1``, or ninja and a C++ compiler at hand). The others check the
paths without it (disabled, a failed build, off the CPU, another dtype), building nothing.
"""

from __future__ import annotations

import math

import pytest
import torch
from kernel_support import OnCuda, kernel_expected

import baselines.ops.library as library
import baselines.ops.masked_infer as masked_infer
from baselines.phased_lstm import PhasedLSTM
from baselines.random_updates import RandomUpdates, RandomUpdatesConfig
from harness.authoring import conformance
from harness.components.method import Method

pytestmark = pytest.mark.kernel

V, D, T = 3, 40, 25
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
FORMS = [("random-updates", "after"), ("random-updates", "before"), ("phased-lstm", "lstm")]


@pytest.fixture
def op():
    """The op, the library built (or found built) into the session's cache; nothing asked for
    it before the test, nor after."""
    expected = kernel_expected()
    if expected is None:
        pytest.skip("the C++ kernel is not expected to build here (no ninja, no compiler, or off)")
    library.forget_library()
    kernel = masked_infer.masked_infer_kernel()
    status = masked_infer.masked_infer_kernel_status()
    assert kernel is not None, f"the kernel did not build although {expected}: {status}"
    yield kernel
    library.forget_library()


@pytest.fixture
def counted(op, monkeypatch):
    """The op as the methods get it, counting its calls (their last two arguments)."""
    calls: list[tuple] = []
    monkeypatch.setattr(
        masked_infer, "masked_infer_kernel", lambda: lambda *a: calls.append(a[-2:]) or op(*a)
    )
    return calls


def model(form: str, skip: float, dtype: torch.dtype = torch.float64) -> Method:
    """The method's ``at_skip`` model (in the given GRU form) with trained-like weights: the
    cell's parameters N(0, 4 / D) (gates often saturated, far from the initialisation's)."""
    torch.manual_seed(0)
    cls = PhasedLSTM if form == "lstm" else RandomUpdates
    m, _ = cls.at_skip(V, D, skip, T)
    if form == "before":
        hooked = m
        m = RandomUpdates(V, D, RandomUpdatesConfig(p_skip=skip, gru_form="before"))
        m.load_state_dict(hooked.state_dict())
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in m.cell.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 2 / math.sqrt(D))
    return m.to(dtype).eval()


def inputs(B: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    return torch.randn(B, T, V, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def assert_fast_equals_dense(m: Method, x: torch.Tensor) -> None:
    """Masks bit for bit, outputs and the state to the dtype's tolerance."""
    with torch.no_grad():
        dense = m.eval()(x)
    fast = m.fast_forward(x)
    assert torch.equal(fast.mask, dense.mask)
    tol = TOL[x.dtype]
    torch.testing.assert_close(fast.outputs, dense.outputs, rtol=0, atol=tol)
    states = fast.state if isinstance(fast.state, tuple) else (fast.state,)
    ref = dense.state if isinstance(dense.state, tuple) else (dense.state,)
    for a, b in zip(states, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=tol)
    assert fast.aux_loss is None and dense.aux_loss is None


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name,form", FORMS, ids=[f for _, f in FORMS])
def test_fast_forward_runs_the_op_and_equals_the_dense_loop(counted, name, form, dtype):
    """At skips 0, 0.5 and 0.9 (``at_skip``), batches 1, 3 and 9 (per-sequence lists; for Phased
    LSTM's shared gate at 12, the GEMM): one op call per forward, the masks bit for bit, outputs
    and state to 1e-10 (float64) or 1e-5 (float32)."""
    for skip in (0.0, 0.5, 0.9):
        m = model(form, skip, dtype)
        for B in (1, 3, 12):
            x = inputs(B, dtype)
            n = len(counted)
            assert_fast_equals_dense(m, x)
            assert len(counted) == n + 1, f"the op did not run ({name}, {form}, B {B})"
            assert counted[-1] == (True, form == "before")  # per-sequence lists
            with torch.no_grad():
                mask = m(x).mask
            assert abs(1 - mask.mean().item() - skip) < 0.1, (skip, B)


def reference(m: Method, x, h0, c0, gate):
    """The methods' per-step code run with the gate ``[B or 1, T, D]``: Phased LSTM's ``_step``
    (the LSTM, both mixes by ``lerp``), or the GRU cell's ``step`` in its form and
    ``h_t = lerp(h_{t-1}, h~_t, w)`` (Random Updates' ``masked_update`` where w is 0 or 1)."""
    xp = m.cell.input_proj(x)
    h, c, hs = h0, c0, []
    for t in range(x.shape[1]):
        w = gate[:, t]
        if isinstance(m, PhasedLSTM):
            h, c = m._step(xp[:, t], h, c, w, m.cell.weight_hh.t())
        else:
            h = torch.lerp(h, m.cell.step(xp[:, t], h), w)
        hs.append(h)
    return torch.stack(hs, 1), c


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("form", [f for _, f in FORMS])
def test_the_op_equals_the_per_step_code_for_any_gate(op, form, dtype):
    """Gates of zeros, ones and values in between, per sequence and shared by the batch, from
    random states h_0 (and c_0); a unit's rows for the sequences that update it or for the
    union of the batch's: the outputs (and c_T) to tolerance, and where the gate is 0 an exact
    copy of the unit's previous value."""
    m = model(form, 0.5, dtype)
    lstm = form == "lstm"
    params = (m.cell.weight_ih, m.cell.weight_hh, m.cell.bias)
    w = masked_infer.pack_rows(*params)
    g = torch.Generator().manual_seed(3)
    for B in (1, 3, 12):
        x = inputs(B, dtype)
        h0 = torch.randn(B, D, dtype=dtype, generator=g)
        c0 = torch.randn(B, D, dtype=dtype, generator=g) if lstm else x.new_empty(0)
        for rows in {1, B}:
            u = torch.rand(rows, T, D, dtype=dtype, generator=g)
            gate = torch.where(u < 0.6, 0.0, torch.where(u < 0.8, 1.0, u)).to(dtype)
            with torch.no_grad():
                hs, c = reference(m, x, h0, c0 if lstm else None, gate)
            for per_sequence in (True, False):
                out, c_t = op(w, x, h0, c0, gate, per_sequence, form == "before")
                tol = TOL[dtype]
                torch.testing.assert_close(out, hs, rtol=0, atol=tol)
                if lstm:
                    torch.testing.assert_close(c_t, c, rtol=0, atol=tol)
                else:
                    assert c_t.shape == (0,)
                prev = torch.cat([h0[:, None], out[:, :-1]], 1)
                closed = (gate == 0).expand(B, -1, -1)
                assert torch.equal(out[closed], prev[closed])


@pytest.mark.parametrize("form", [f for _, f in FORMS])
def test_the_op_reads_nothing_for_what_it_skips(op, form):
    """A unit no sequence ever updates has its rows never read (NaN there changes nothing; in the
    reset-before form its r row is read, each candidate reads r * h of all units, so only its z
    and n rows are NaN), and a sequence that updates no unit at a step has its state and input
    never read there (an infinite input changes nothing), at batch 3 (per-sequence lists) and,
    with a gate the batch shares, at batch 12 (the GEMM). The union of the batch's decisions
    reads that input, and that sequence's outputs turn NaN."""
    m = model(form, 0.5)
    lstm = form == "lstm"
    w = masked_infer.pack_rows(m.cell.weight_ih, m.cell.weight_hh, m.cell.bias)
    never = [0, 7, 19]
    poisoned = w.clone()
    poisoned[never, 1 if form == "before" else 0 :] = float("nan")
    g = torch.Generator().manual_seed(5)
    for B, rows in ((3, 3), (12, 1)):
        x = inputs(B, torch.float64)
        h0 = torch.randn(B, D, dtype=torch.float64, generator=g)
        c0 = torch.randn(B, D, dtype=torch.float64, generator=g) if lstm else x.new_empty(0)
        gate = (torch.rand(rows, T, D, dtype=torch.float64, generator=g) < 0.4).double()
        gate[..., never] = 0.0
        gate[-1, 4] = 0.0  # the last sequence (all of them, shared) updates nothing at step 4
        blind = x.clone()
        blind[-1, 4] = float("inf")
        args = (h0, c0, gate, True, form == "before")
        clean = op(w, x, *args)
        for a, b in zip(op(poisoned, blind, *args), clean, strict=True):
            assert torch.equal(a, b)
        if rows > 1:
            union, _ = op(w, blind, h0, c0, gate, False, form == "before")
            assert union[-1, 4].isnan().any() and not union[:-1].isnan().any()


def test_the_union_of_the_batch_is_the_per_sequence_result_with_more_work(op):
    """``per_sequence=False`` computes every unit some sequence updates for the whole batch (at
    batch 12, one GEMM a step): the same outputs to rounding, the skipped pairs exact copies."""
    m = model("after", 0.9)
    w = masked_infer.pack_rows(m.cell.weight_ih, m.cell.weight_hh, m.cell.bias)
    x = inputs(12, torch.float64)
    u = m.eval_masks(12, T, x)
    h0 = x.new_zeros(12, D)
    own, _ = op(w, x, h0, x.new_empty(0), u, True, False)
    union, _ = op(w, x, h0, x.new_empty(0), u, False, False)
    torch.testing.assert_close(union, own, rtol=0, atol=1e-12)
    with torch.no_grad():
        torch.testing.assert_close(own, m(x).outputs, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", ["random-updates", "phased-lstm"])
def test_the_conformance_check_of_the_fast_path_passes_through_the_op(counted, name):
    """``harness check``'s fast-path property (every target, batch 1 and 4, float32, a model in
    train mode left so, renewed packed weights after an optimizer step) with the op running."""
    conformance.check_fast_path(name)
    assert len(counted) >= 8


def test_random_updates_masks_are_drawn_once_per_size_and_returned_as_copies(counted):
    """The eval masks depend on the call's sizes and dtype only: kept for one size at a time
    (``cached_schedule``), each forward equal to the dense loop's; a caller editing the returned
    mask does not change the next forward's."""
    m = model("after", 0.7)
    for B in (2, 3, 2):
        x = inputs(B, torch.float64, seed=B)
        assert_fast_equals_dense(m, x)
    out = m.fast_forward(x)
    out.mask.fill_(1.0)
    assert_fast_equals_dense(m, x)
    x32 = inputs(2, torch.float32)
    assert_fast_equals_dense(m.float(), x32)  # float32's draws are other numbers
    assert m.eval_masks(2, T, x32).dtype == torch.float32


def test_phased_lstm_gate_follows_its_parameters(counted):
    """The gate is kept while P, s and r_on stay; an in-place change of r_on (what an optimizer
    step does) gives the new gate, equal to the dense loop's."""
    m = model("lstm", 0.5)
    x = inputs(3, torch.float64)
    assert_fast_equals_dense(m, x)
    with torch.no_grad():
        m.r_on.mul_(0.4)
        mask = m(x).mask
    assert 1 - mask.mean().item() > 0.7
    assert_fast_equals_dense(m, x)


def test_phased_lstm_skips_exactly_the_units_its_eval_loop_copies():
    """In eval the leak is 0: a unit outside its open phase (k = 0) is an exact copy of its h
    and c in the dense loop (what the op skips), every unit with k > 0 changes; in training the
    leak makes every unit change, so nothing could be skipped there."""
    m = model("lstm", 0.7).eval()
    x = inputs(2, torch.float64)
    clock = torch.zeros(2, dtype=torch.long)
    with torch.no_grad():
        k = m.time_gate(clock, T)
        out = m(x)
    prev = torch.cat([x.new_zeros(2, 1, D), out.outputs[:, :-1]], 1)
    assert torch.equal(out.mask, (k > 0).double())
    assert torch.equal(out.outputs[k == 0], prev[k == 0])
    assert (out.outputs[k > 0] != prev[k > 0]).all()
    assert (m.train().time_gate(clock, T) > 0).all()


def test_other_dtypes_and_devices_take_the_dense_loop(op, counted, monkeypatch):
    """bfloat16 is not the op's: the dense eval loop runs. Off the CPU the first ask warns once."""
    m = model("lstm", 0.5, torch.bfloat16)
    x = inputs(2, torch.bfloat16)
    with torch.no_grad():
        dense = m(x)
    fast = m.fast_forward(x)
    assert counted == [] and torch.equal(fast.outputs, dense.outputs)
    monkeypatch.setattr(library, "_off_cpu", set())
    what = "Phased LSTM's fused kernel"
    with pytest.warns(UserWarning, match=f"{what} runs on CPU only: on cuda"):
        assert masked_infer.kernel_for(what, OnCuda()) is None
    assert masked_infer.kernel_for(what, OnCuda()) is None  # once: an error filter would raise


@pytest.mark.parametrize("cls", [RandomUpdates, PhasedLSTM])
def test_the_default_run_takes_the_dense_loop_and_builds_nothing(
    fresh_kernel, no_build, monkeypatch, cls
):
    """``HARNESS_NO_KERNELS=1``: the status says disabled, the fast path is the dense loop, its
    note says so; nothing is built."""
    monkeypatch.setenv("HARNESS_NO_KERNELS", "1")
    status = masked_infer.masked_infer_kernel_status()
    assert (status.state, status.reason) == ("unavailable", library.DISABLED)
    torch.manual_seed(0)
    m, _ = cls.at_skip(V, D, 0.5, T)
    x = torch.randn(2, T, V)
    with torch.no_grad():
        dense = m(x)
    fast = m.fast_forward(x)
    assert torch.equal(fast.mask, dense.mask) and torch.equal(fast.outputs, dense.outputs)
    assert cls.fast_path_note().endswith(f"(unavailable here, {library.DISABLED}: the dense loop)")
    assert not fresh_kernel.exists()


def test_the_note_builds_nothing(fresh_kernel, no_build, monkeypatch):
    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    note = RandomUpdates.fast_path_note()
    assert note == (
        f"{RandomUpdates.name}: on CPU the fast path runs a fused C++ kernel at any batch size "
        "(not tried: nothing ran on CPU)"
    )
    assert masked_infer.masked_infer_kernel_status().state == "not tried"
    assert not fresh_kernel.exists()


def test_a_failed_build_is_one_line_and_falls_back(fresh_kernel, monkeypatch):
    def load(*args, **kwargs):
        raise RuntimeError("Error building extension 'condrnn_ops'\n[1/2] c++ ... output")

    monkeypatch.delenv("HARNESS_NO_KERNELS", raising=False)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    m = model("after", 0.5)
    x = inputs(2, torch.float64)
    with pytest.warns(UserWarning, match="masked-cell inference kernel unavailable"):
        out = m.fast_forward(x)
    why = "RuntimeError: Error building extension 'condrnn_ops'"
    assert masked_infer.masked_infer_kernel_status() == library.KernelStatus("unavailable", why)
    assert RandomUpdates.fast_path_note().endswith(f"(unavailable here, {why}: the dense loop)")
    with torch.no_grad():
        ref = m(x)
    assert torch.equal(out.mask, ref.mask) and torch.equal(out.outputs, ref.outputs)


def test_the_op_runs_on_meta(op):
    """Its fake implementation: the shapes of the outputs, no values."""
    w = torch.empty(D, 4, 64, device="meta")
    out, c = op(
        w,
        torch.empty(2, T, V, device="meta"),
        torch.empty(2, D, device="meta"),
        torch.empty(2, D, device="meta"),
        torch.empty(1, T, D, device="meta"),
        True,
        False,
    )
    assert out.shape == (2, T, D) and c.shape == (2, D) and out.device.type == "meta"
