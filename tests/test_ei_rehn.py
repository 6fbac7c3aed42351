"""EI-REHN and SREHN (docs/methods.md 2.13, 2.14): the batched cells against a literal per-sequence
Algorithm 1 (same h_t and R_t, including R_t = 0 and R_t = R_max; same gradients), the elastic
gate (eq. 11) against exact arithmetic for any alpha, the one halting case where Algorithm 1 and
the project differ, the initialisation trap, parameter counts against S-EI Tables 1-2, MACs on
hand-built depths, and EI-REHN's training path (the batch's depth only, its layers as one autograd
node with a hand-written backward) against the fixed-depth equations."""

from __future__ import annotations

import copy
import functools
import math
from decimal import Decimal, localcontext

import pytest
import torch
import torch.nn.functional as F
from reference import assert_grads_match
from torch import nn

from baselines._elastic import ElasticConfig, ElasticHighway, elastic_gate
from baselines.ei_rehn import EIREHN, EIREHNConfig
from baselines.ops.ei_rehn_stack import stack_layers
from baselines.srehn import SREHN
from harness.components.flops import fvcore_macs, sequence_macs
from harness.components.method import SeqOut
from harness.errors import ConfigError

R_MAX = 6


def reference_ei_rehn(
    m: EIREHN, xs: torch.Tensor, halt: str = "g"
) -> tuple[torch.Tensor, list[int]]:
    """Algorithm 1 for one sequence ``xs [T, V]``, written literally: W^r kept as D x D matrices
    (eq. 17 with diag), the loop runs while ||g^r||_1 > 0 and r <= R_max, checked before layer r
    updates h (``halt="g"``); ``halt="d"`` stops instead when every d^r_i is 0 (the project's
    rule). Returns h_t ``[T, D]`` and R_t per step."""
    D = m.hidden_size
    el = m.elastic
    alpha, beta = F.softplus(el.alpha_hat), torch.sigmoid(el.beta_hat)  # eqs. 13, 12
    Wx = {"s": m.weight_x[:D], "g": m.weight_x[D:]}
    b = {"s": m.bias[:D], "g": m.bias[D:]}
    P = {"s": m.proj[:D], "g": m.proj[D : 2 * D]}
    Pbar = {"s": m.proj[2 * D : 3 * D], "g": m.proj[3 * D :]}
    bbar = {"s": m.mix_bias[:D], "g": m.mix_bias[D:]}
    Wzh, Wzg = m.hyper.weight[:, :D], m.hyper.weight[:, D : 2 * D]
    Wzz, bz = m.hyper.weight[:, 2 * D :], m.hyper.bias
    h, hs, Rs = torch.zeros(D, dtype=xs.dtype), [], []
    for x in xs:
        alpha_t = torch.sigmoid(el.rate.weight @ torch.cat([h, x]) + el.rate.bias)  # eq. 14
        W = {"s": m.weight0[:D], "g": m.weight0[D:]}  # W^0_B
        s_prev, g_prev, z = m.s0, m.g0, m.z0
        r, R = 1, 0
        while r <= m.cfg.r_max:
            expo = (alpha + alpha_t) * r
            d = torch.clamp(beta + torch.exp(alpha) - torch.exp(expo), min=0)  # eq. 11
            z_r = torch.tanh(Wzh @ s_prev + Wzg @ g_prev + Wzz @ z + bz)  # eq. 18
            a, w = {}, {}
            for B in ("s", "g"):
                w[B] = P[B] @ z_r  # eqs. 19-21
                gbar = torch.sigmoid(Pbar[B] @ z_r + bbar[B])  # eqs. 19-21
                xin = Wx[B] @ x if r == 1 else 0.0
                a[B] = gbar * (W[B] @ h) + (1 - gbar) * (torch.diag(w[B]) @ h) + xin + b[B]
            g_hat = torch.sigmoid(a["g"])  # eq. 22
            g = d * g_hat  # eq. 10
            if (g if halt == "g" else d).abs().sum() == 0:  # halting, before layer r changes h
                break
            s = torch.tanh(a["s"])  # eq. 22
            h = g * s + (1 - g) * h  # eq. 9
            for B in ("s", "g"):
                W[B] = W[B] + torch.diag(w[B])  # eq. 17
            s_prev, g_prev, z = s, g_hat, z_r
            R, r = r, r + 1
        hs.append(h)
        Rs.append(R)
    return torch.stack(hs), Rs


def reference_srehn(m: SREHN, xs: torch.Tensor, halt: str = "g") -> tuple[torch.Tensor, list[int]]:
    """SREHN, Algorithm 1 literally: shared R_H, R_T, b; g^r = d^r * tau^r; ``halt`` as in
    ``reference_ei_rehn``."""
    D = m.hidden_size
    el, c = m.elastic, m.cell
    alpha, beta = F.softplus(el.alpha_hat), torch.sigmoid(el.beta_hat)
    W_H, W_T = c.weight_x[:D], c.weight_x[D:]
    R_H, R_T, b_H, b_T = c.weight_h[0, :D], c.weight_h[0, D:], c.bias[0, :D], c.bias[0, D:]
    h, hs, Rs = torch.zeros(D, dtype=xs.dtype), [], []
    for x in xs:
        alpha_t = torch.sigmoid(el.rate.weight @ torch.cat([h, x]) + el.rate.bias)
        r, R = 1, 0
        while r <= m.cfg.r_max:
            d = torch.clamp(beta + torch.exp(alpha) - torch.exp((alpha + alpha_t) * r), min=0)
            tau = torch.sigmoid((W_T @ x if r == 1 else 0.0) + R_T @ h + b_T)
            g = d * tau
            if (g if halt == "g" else d).abs().sum() == 0:
                break
            s = torch.tanh((W_H @ x if r == 1 else 0.0) + R_H @ h + b_H)
            h = g * s + (1 - g) * h
            R, r = r, r + 1
        hs.append(h)
        Rs.append(R)
    return torch.stack(hs), Rs


def active_limit(alpha: torch.Tensor, beta: torch.Tensor, alpha_t: torch.Tensor) -> torch.Tensor:
    """``L_{t,i} = ln(beta + e^alpha) / (alpha + alpha_t)``: unit i is active at layer r iff
    ``r < L_{t,i}`` (docs/methods.md 2.14(b)); ``R_t = min(R_max, max_i(ceil(L_ti) - 1))``. The log
    is taken as ``logaddexp``, finite for any alpha."""
    return torch.logaddexp(alpha, beta.log()) / (alpha + alpha_t)


def _crafted_input(V: int) -> torch.Tensor:
    """Input feature 0 drives alpha_t (W_a column set to +8 below): +2 -> alpha_t ~ 1, nothing
    active (R_t = 0); -2 -> alpha_t ~ 0, R_t = R_max; values near 0.2 give depths in between."""
    torch.manual_seed(3)
    x = 0.5 * torch.randn(3, 6, V, dtype=torch.float64)
    x[:, :, 0] = torch.tensor(
        [[2.0, 2.0, -2.0, 0.2, 2.0, 0.3], [-2.0, 0.25, 2.0, -2.0, 0.15, 0.1], [0.2] * 6]
    )
    return x


def _craft(m: nn.Module) -> None:
    with torch.no_grad():
        m.elastic.rate.weight[:, m.hidden_size] = 8.0  # the column of input feature 0


@pytest.mark.parametrize("cls, reference", [(EIREHN, reference_ei_rehn), (SREHN, reference_srehn)])
def test_batched_matches_algorithm_1(cls, reference) -> None:
    torch.manual_seed(4)
    V, D = 3, 4
    cfg = EIREHNConfig(r_max=R_MAX) if cls is EIREHN else ElasticConfig(r_max=R_MAX)
    m = cls(V, D, cfg).double()
    _craft(m)
    x = _crafted_input(V)
    refs = [reference(m, x[b]) for b in range(x.shape[0])]
    ref_h = torch.stack([h for h, _ in refs])
    ref_R = torch.tensor([R for _, R in refs])
    assert (ref_R == 0).any() and (ref_R == R_MAX).any()
    assert ((ref_R > 0) & (ref_R < R_MAX)).any()
    # R_t = 0 skips the whole step: h_t is an exact copy of h_{t-1}
    b, t = [int(i) for i in (ref_R[:, 1:] == 0).nonzero()[0]]
    assert torch.equal(ref_h[b, t + 1], ref_h[b, t])

    out, loop = m(x), m.step_loop(x)  # fixed R_max layers; batched early exit at max_b R_t
    for o in (out, loop):
        torch.testing.assert_close(o.outputs, ref_h, rtol=0, atol=1e-12)
        assert torch.equal(o.depth.amax(-1).long(), ref_R)
        assert torch.equal(o.mask, (o.depth > 0).double())
    # the closed form R_t = min(R_max, max_i(ceil(L_ti) - 1)) with L_ti from eq. 11
    h_prev = torch.cat([torch.zeros_like(ref_h[:, :1]), ref_h[:, :-1]], 1)
    alpha, beta, alpha_t = m.elastic.rates(h_prev.reshape(-1, D), x.reshape(-1, V))
    L = active_limit(alpha, beta, alpha_t).reshape(3, 6, D)
    closed = torch.clamp((torch.ceil(L) - 1).amax(-1), max=R_MAX).long()
    assert torch.equal(closed, ref_R)
    # gradients of the batched forward equal those of Algorithm 1
    w = torch.randn_like(ref_h)
    ref_again = torch.stack([reference(m, x[b])[0] for b in range(x.shape[0])])
    assert_grads_match(
        m, (out.outputs * w).sum(), (ref_again * w).sum(), rtol=1e-9, allow_unused=True
    )


# --- eq. 11 for every alpha, and the halting rule -------------------------------------------


def _paper_gate(alpha, beta, alpha_t, r):
    """Eq. 11 as printed, in plain float arithmetic (inf - inf once e^alpha overflows)."""
    return torch.clamp(beta + torch.exp(alpha) - torch.exp((alpha + alpha_t) * r), min=0)


@functools.cache
def _exact_gate(alpha: float, beta: float, alpha_t: float, r: int) -> tuple[Decimal, ...]:
    """Eq. 11 and its derivatives in alpha, alpha_t, beta (0 where d = 0), in 800-digit decimal
    arithmetic (e^1000 and e^{1000 + 1e-300} differ in the 734th digit) from the exact values of
    the float inputs."""
    with localcontext() as ctx:
        ctx.prec = 800
        a, b, at = Decimal(alpha), Decimal(beta), Decimal(alpha_t)
        e_r = ((a + at) * r).exp()
        d = b + a.exp() - e_r
        if d <= 0:
            return Decimal(0), Decimal(0), Decimal(0), Decimal(0)
        return d, a.exp() - r * e_r, -r * e_r, Decimal(1)


def test_gate_equals_paper_formula_for_ordinary_alphas() -> None:
    """The overflow-free form gives today's numbers: values to float64 rounding of the terms
    (|diff| <= 4 eps (beta + e^alpha)), the same zero pattern, and the same gradients."""
    torch.manual_seed(7)
    alpha_hat = (2 * torch.randn(64, dtype=torch.float64) - 3).requires_grad_()
    beta_hat = (2 * torch.randn(64, dtype=torch.float64) + 3).requires_grad_()
    pre = (2 * torch.randn(32, 64, dtype=torch.float64) - 3).requires_grad_()
    r = torch.arange(1, 11, dtype=torch.float64)[:, None]
    leaves = [alpha_hat, beta_hat, pre]
    alpha, beta = F.softplus(alpha_hat), torch.sigmoid(beta_hat)
    alpha_t = torch.sigmoid(pre)[:, None, :]  # [32, 1, 64] against r [10, 1]
    got, want = elastic_gate(alpha, beta, alpha_t, r), _paper_gate(alpha, beta, alpha_t, r)
    assert 0.2 < (want > 0).double().mean() < 0.8  # both sides of the zero crossing
    assert torch.equal(got > 0, want > 0)
    eps = torch.finfo(torch.float64).eps
    assert torch.all((got - want).abs() <= 4 * eps * (beta + alpha.exp()))
    w = torch.rand_like(want)
    g_got = torch.autograd.grad((got * w).sum(), leaves, retain_graph=True)
    g_want = torch.autograd.grad((want * w).sum(), leaves)
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("alpha_hat", [55.0, 100.0, 1000.0])
def test_gate_exact_for_large_alpha(alpha_hat: float) -> None:
    """Eq. 11 against 800-digit arithmetic where the printed form overflows or cancels: values,
    the zero pattern, and the gradients in alpha, alpha_t and beta (finite everywhere)."""
    alpha = F.softplus(torch.tensor([alpha_hat], dtype=torch.float64)).requires_grad_()
    beta = torch.tensor([0.95], dtype=torch.float64, requires_grad=True)
    ats = [0.0, 1e-300, 1e-50, 1e-26, 1e-5, 0.05, 0.9]
    alpha_t = torch.tensor(ats, dtype=torch.float64)[:, None, None].requires_grad_()  # [7, 1, 1]
    r = torch.arange(1, 7, dtype=torch.float64)[:, None]  # [6, 1]
    d = elastic_gate(alpha, beta, alpha_t, r)[..., 0]  # [7, 6]
    assert torch.isfinite(d).all()
    exact = [[_exact_gate(alpha.item(), 0.95, at, k) for k in range(1, 7)] for at in ats]
    want = torch.tensor([[float(e[0]) for e in row] for row in exact], dtype=torch.float64)
    assert torch.equal(d > 0, want > 0)
    assert (want[:, 0] > 0).any() and torch.all(want[:, 1:] == 0)  # depth 1 or 0 at such alpha
    torch.testing.assert_close(d, want, rtol=0, atol=1e-12)  # q rounds to |q| eps <= 1e3 eps
    for i in range(len(ats)):
        for k in range(6):
            grads = torch.autograd.grad(d[i, k], (alpha, alpha_t, beta), retain_graph=True)
            g_alpha, g_at, g_beta = grads[0].item(), grads[1][i].item(), grads[2].item()
            assert all(math.isfinite(g) for g in (g_alpha, g_at, g_beta)), (ats[i], k)
            e = [float(v) for v in exact[i][k][1:]]
            if ats[i] == 0.0:  # d = beta exactly; no gradient through the rounded-off alpha_t
                assert (g_alpha, g_beta) == (e[0], e[2])
                continue
            for got, ref in zip((g_alpha, g_at, g_beta), e, strict=True):
                assert got == pytest.approx(ref, rel=1e-9, abs=1e-300), (ats[i], k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("alpha_hat", [55.0, 100.0, 1000.0])
@pytest.mark.parametrize("cls", [EIREHN, SREHN])
def test_large_alpha_runs_the_depth_the_equation_gives(cls, alpha_hat, dtype) -> None:
    """alpha_hat = 55 used to leave d > 0 at every layer (an exponent cap of 50), so every unit
    ran R_max layers into NaN. Now: finite outputs and gradients, and per unit the depth eq. 11
    gives, counted in 800-digit arithmetic from the float values of alpha, beta and alpha_t."""
    torch.manual_seed(8)
    V, D = 3, 8
    cfg = EIREHNConfig(r_max=R_MAX) if cls is EIREHN else ElasticConfig(r_max=R_MAX)
    m = cls(V, D, cfg).to(dtype)
    pre = [-800.0, -120.0, -80.0, -60.0, -50.0, -3.0, 0.0, 3.0]  # alpha_t from 0 to 0.95
    with torch.no_grad():
        m.elastic.alpha_hat.fill_(alpha_hat)
        m.elastic.rate.weight.zero_()  # alpha_t = sigmoid(bias): the same at every step
        m.elastic.rate.bias.copy_(torch.tensor(pre))
    x = torch.randn(2, 5, V, dtype=dtype)
    rates = m.elastic.rates(x.new_zeros(1, D), x[0, :1])  # W_a weights 0: any h, x
    alpha, beta, alpha_t = (v.reshape(-1).tolist() for v in rates)
    gate = [
        [_exact_gate(alpha[i], beta[i], alpha_t[i], k)[0] for k in range(1, R_MAX + 1)]
        for i in range(D)
    ]
    n = [sum(d > 0 for d in row) for row in gate]
    assert 0 < max(n) < R_MAX  # some units run a layer, none runs them all
    out, loop = m(x), m.step_loop(x)
    for o in (out, loop):
        assert torch.isfinite(o.outputs).all()
        assert o.depth.tolist() == [[n] * 5] * 2
    (out.outputs.sum() + loop.outputs.sum()).backward()
    for name, p in m.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("cls, reference", [(EIREHN, reference_ei_rehn), (SREHN, reference_srehn)])
def test_halting_on_d_when_the_content_gate_underflows(cls, reference) -> None:
    """The one case where the project's halting (all d^r = 0) differs from Algorithm 1's
    (||g^r||_1 = 0): g-hat = sigmoid(a) rounds to exactly 0 for every unit (here a^1 ~ -2000 at
    step 2). Algorithm 1 stops at layer 1 (R_t = 0, h_t = h_{t-1}); the project, with d > 0,
    runs on to R_t = R_max, where g-hat > 0 again (the input term only enters layer 1)."""
    torch.manual_seed(9)
    V, D = 3, 4
    cfg = EIREHNConfig(r_max=R_MAX) if cls is EIREHN else ElasticConfig(r_max=R_MAX)
    m = cls(V, D, cfg).double()
    weight_x = m.weight_x if cls is EIREHN else m.cell.weight_x
    with torch.no_grad():
        m.elastic.rate.weight.zero_()  # alpha_t = sigmoid(-3): d^r > 0 up to r = 7 > R_max
        weight_x[D:, 0] = -2000.0  # the content-gate rows, input feature 0
    x = torch.randn(2, 4, V, dtype=torch.float64)
    x[:, :, 0] = 0.0
    x[:, 2, 0] = 1.0
    out = m(x)
    assert torch.all(out.depth == R_MAX)
    algo1 = [reference(m, x[b], halt="g") for b in range(2)]
    on_d = [reference(m, x[b], halt="d") for b in range(2)]
    assert all(R == [R_MAX, R_MAX, 0, R_MAX] for _, R in algo1)
    assert all(R == [R_MAX] * 4 for _, R in on_d)
    for b in range(2):
        torch.testing.assert_close(out.outputs[b], on_d[b][0], rtol=0, atol=1e-12)
        h_algo1 = algo1[b][0]
        assert torch.equal(h_algo1[2], h_algo1[1])  # Algorithm 1 skipped the step
        assert (out.outputs[b, 2] - h_algo1[2]).abs().max() > 1e-3


def test_alive_at_default_init_and_dead_trap() -> None:
    torch.manual_seed(5)
    x = 0.1 * torch.randn(4, 6, 2)
    y = torch.randn(4, 6, 8)
    m = EIREHN(2, 8)
    assert torch.allclose(F.softplus(m.elastic.alpha_hat), torch.tensor(0.0486), atol=1e-4)
    out = m(x)
    d1 = out.mask.mean().item()
    assert d1 > 0.9, f"d^1 > 0 for only {d1:.0%} of units at the default init"
    assert 5 <= out.depth.amax(-1).float().mean() <= 8  # about 7 active layers (2.14(g) table)
    F.mse_loss(out.outputs, y).backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    # docs/methods.md 2.14(g): alpha_hat = beta_hat = 0 and a zero W_a bias give d^1 = -0.80 < 0
    dead = EIREHN(2, 8)
    with torch.no_grad():
        dead.elastic.alpha_hat.zero_()
        dead.elastic.beta_hat.zero_()
        dead.elastic.rate.bias.zero_()
    out = dead(x)
    assert torch.all(out.mask == 0) and torch.all(out.depth == 0)
    assert torch.all(out.outputs == 0)  # h never leaves h_0 = 0
    F.mse_loss(out.outputs, y).backward()
    for name, p in dead.named_parameters():
        # max(., 0) blocks every gradient; training still runs one (copy) layer so that every
        # parameter gets a zero gradient, not None, as on the fixed path (Adam steps the former)
        assert p.grad is not None and torch.all(p.grad == 0), name


def _count(*modules: nn.Module) -> int:
    return sum(p.numel() for mod in modules for p in mod.parameters())


@pytest.mark.parametrize("D, expected", [(10, 807), (15, 1732), (20, 2862)])
def test_param_count_synthetic(D: int, expected: int) -> None:
    m = EIREHN(2, D)  # S-EI Table 1: V = 2, 2-d read-out, D_z = ceil(D/2) = 5 / 8 / 10
    assert m.dz == math.ceil(D / 2)
    assert _count(m, nn.Linear(D, 2)) == expected


@pytest.mark.parametrize("D, expected", [(32, 8102), (40, 12126), (48, 16950)])
def test_param_count_har(D: int, expected: int) -> None:
    # S-EI Table 2: ONE EI-REHN layer, V = 9, 6-way read-out, plus the unexplained +10*D term
    # every HAR count carries (docs/methods.md P2.6), added as a constant and not modelled.
    assert _count(EIREHN(9, D), nn.Linear(D, 6)) + 10 * D == expected


def test_srehn_params_and_config() -> None:
    D, V = 20, 2
    srhn = 2 * D * V + 2 * D * D + 2 * D
    assert _count(SREHN(V, D)) == srhn + D * (D + V + 1) + 2 * D  # docs/methods.md 2.13
    assert EIREHN(V, 7, EIREHNConfig(dz=3)).dz == 3
    with pytest.raises(ConfigError):
        EIREHNConfig(dz=-1)
    with pytest.raises(ConfigError):
        ElasticConfig(r_max=0)


@pytest.mark.parametrize("cls", [EIREHN, SREHN])
def test_effective_macs_on_hand_built_depths(cls) -> None:
    D, V, T = 4, 3, 3
    m = cls(V, D, EIREHNConfig(r_max=5) if cls is EIREHN else ElasticConfig(r_max=5))
    if cls is EIREHN:
        Dz = m.dz
        layer = 2 * D * D + 6 * D * Dz + Dz * Dz + 2 * D  # docs/methods.md 2.14(i)
    else:
        layer = 2 * D * D
    always, active = D * (D + V), 2 * D * V
    c = m.cost()
    assert (c.always, c.per_active_step, c.per_layer, c.max_depth) == (always, active, layer, 5)
    depth = torch.tensor(
        [[[0, 0, 0, 0], [1, 3, 0, 2], [5, 5, 5, 5]], [[2, 2, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]]
    ).float()
    out = SeqOut(torch.zeros(2, T, D), (depth > 0).float(), depth)
    step = [
        [always, always + active + 3 * layer, always + active + 5 * layer],
        [always + active + 2 * layer, always, always],
    ]
    macs = sequence_macs(m, out, lengths=torch.tensor([3, 2]))
    assert macs["effective"].tolist() == [sum(step[0]), sum(step[1][:2])]
    assert torch.equal(macs["exact"], macs["effective"])
    assert macs["dense"].tolist() == [3 * c.dense_step(), 2 * c.dense_step()]
    assert c.dense_step() == always + active + 5 * layer


@pytest.mark.parametrize("cls", [EIREHN, SREHN])
def test_fvcore_counts_dense_minus_diagonal_products(cls) -> None:
    m, x = cls(3, 5), torch.randn(2, 4, 3)
    c = m.cost()
    assert c.fvcore_uncounted == (2 * 5 * c.max_depth if cls is EIREHN else 0)
    assert fvcore_macs(m, x)[0] == (c.dense_step() - c.fvcore_uncounted) * 4 * 2


@pytest.mark.parametrize("cls", [EIREHN, SREHN])
def test_compute_penalty(cls) -> None:
    torch.manual_seed(6)
    x = torch.randn(2, 5, 3)
    assert cls(3, 4)(x).aux_loss is None  # off by default (S-EI has no compute term)
    cfg = EIREHNConfig(lam_d=0.01) if cls is EIREHN else ElasticConfig(lam_d=0.01)
    m = cls(3, 4, cfg)
    out = m(x)
    h_prev = torch.cat([torch.zeros(2, 1, 4), out.outputs[:, :-1]], 1).detach()
    alpha, beta, alpha_t = m.elastic.rates(h_prev, x)
    d1 = torch.relu(beta + alpha.exp() - (alpha + alpha_t).exp())  # [B, T, D]
    torch.testing.assert_close(out.aux_loss, 0.01 * d1.sum((1, 2)).mean())
    torch.testing.assert_close(m.step_loop(x).aux_loss, out.aux_loss)
    out.aux_loss.backward()
    assert m.elastic.beta_hat.grad.abs().sum() > 0


# --- fast inference path -------------------------------------


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("regime", ["none", "mixed", "all"])
def test_fast_forward_equals_dense_in_hand_made_regimes(regime, batch) -> None:
    """``alpha_t -> 0``: full depth; ``-> 1``: no layer at all; a large random ``W_a`` in between
    gives depths that vary across units, steps and sequences."""
    from reference import check_fast_path_in_regime

    torch.manual_seed(0)
    m = EIREHN(3, 12).double()
    with torch.no_grad():
        m.elastic.rate.bias.fill_({"none": -10.0, "mixed": 0.0, "all": 10.0}[regime])
        m.elastic.rate.weight.mul_(8.0 if regime == "mixed" else 0.0)
    check_fast_path_in_regime(m, regime, batch)


@pytest.mark.parametrize("skip, depth", [(0.0, 10), (0.5, 5), (0.9, 1)])
def test_at_skip_halts_every_unit_at_one_depth(skip, depth) -> None:
    m, setting = EIREHN.at_skip(3, 8, skip, 20)
    assert not m.training and setting == f"depth {depth} of {m.cfg.r_max}"
    with torch.no_grad():
        out = m(torch.randn(2, 20, 3))
    assert torch.equal(out.depth, torch.full_like(out.depth, depth))


@pytest.mark.kernel  # torch.compile builds C++ with inductor (tens of seconds, a compiler needed)
def test_compiled_training_keeps_a_tiny_local_rate_finite_in_float32() -> None:
    """A unit whose local rate alpha_t is ~2e-8 (u = alpha_t at layer 1): eq. 11's
    ``ln(1 - e^{-u})`` needs an exact ``expm1``; inductor's vectorised CPU code computes it as
    ``exp(u) - 1`` (0 in float32 here), which made the compiled step's gradient non-finite. The
    compiled model's loss and gradients must be finite and match eager's (float32)."""
    torch.manual_seed(0)
    eager = EIREHN(3, 16, EIREHNConfig(r_max=3))
    with torch.no_grad():
        eager.elastic.rate.weight.zero_()
        eager.elastic.rate.bias.fill_(math.log(2e-8))  # alpha_t = sigmoid(bias) ~ 2e-8
    compiled = copy.deepcopy(eager)
    compiled.compile_step()
    torch._dynamo.reset()
    x = torch.randn(8, 4, 3)
    grads = []
    for model in (eager, compiled):
        loss = model(x).outputs.pow(2).sum()
        grads.append(torch.autograd.grad(loss, list(model.parameters())))
    for (name, _), want, got in zip(eager.named_parameters(), *grads, strict=True):
        assert torch.isfinite(got).all(), name
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.kernel  # torch.compile builds C++ with inductor (tens of seconds, a compiler needed)
def test_compiled_step_trains_like_eager() -> None:
    """``train.compile``: the compiled fixed-depth step gives eager training's outputs, trace and
    gradients (float64, to fused-rounding tolerance); passes without grad, and ``step``, stay
    eager."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    eager = EIREHN(3, 6, EIREHNConfig(r_max=3)).double()
    compiled = copy.deepcopy(eager)
    compiled.compile_step()
    x = torch.randn(4, 5, 3, dtype=torch.float64)
    torch._dynamo.reset()
    counters.clear()
    want, got = eager(x), compiled(x)
    assert counters["stats"]["unique_graphs"] >= 1  # the training forward ran compiled code
    torch.testing.assert_close(got.outputs, want.outputs, rtol=1e-12, atol=1e-12)
    assert torch.equal(got.mask, want.mask) and torch.equal(got.depth, want.depth)
    loss_want, loss_got = want.outputs.pow(2).sum(), got.outputs.pow(2).sum()
    g_want = torch.autograd.grad(loss_want, list(eager.parameters()))
    g_got = torch.autograd.grad(loss_got, list(compiled.parameters()))
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    graphs = counters["stats"]["unique_graphs"]
    with torch.no_grad():  # eager, bit for bit
        torch.testing.assert_close(compiled(x).outputs, eager(x).outputs, rtol=0, atol=0)
    out = compiled.step(x[:, 0], compiled.init_state(4, x), 0)
    assert counters["stats"]["unique_graphs"] == graphs  # no-grad and step passes: eager
    assert out.h.shape == (4, 6)


@pytest.mark.kernel  # torch.compile builds C++ with inductor (tens of seconds, a compiler needed)
def test_compiled_runs_record_their_compile_time_and_reuse_the_cache(tmp_path, monkeypatch) -> None:
    """A run with ``train.compile`` records the seconds it spent compiling (``time.compile_s``,
    part of ``train_s``) and inductor's cache hits and misses. The next run of the same process
    (another seed, same graphs) reuses the compiled code; a new process loads it from inductor's
    on-disk cache (hits, no miss) and compiles for less. An eager run records neither."""
    import json
    import os
    import subprocess
    import sys

    from harness.components import config
    from harness.training.train import run

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # a cold cache
    torch._dynamo.reset()
    on = {"train.compile": "true", "train.epochs": "1", "train.max_train_batches": "2"}
    first, second = (run(config.resolve("ei-rehn", "synthetic", s, "smoke", on)) for s in (0, 1))
    assert first["status"] == second["status"] == "ok", (first["error"], second["error"])
    assert 0 < first["time"]["compile_s"] <= first["time"]["train_s"]
    assert first["diagnostics"]["compile_cache_misses"] > 0
    assert second["diagnostics"]["compile_cache_misses"] == 0
    assert second["time"]["compile_s"] < first["time"]["compile_s"]
    eager = run(config.resolve("ei-rehn", "synthetic", 0, "smoke", {"train.epochs": "1"}))
    assert "compile_s" not in eager["time"] and "compile_cache_hits" not in eager["diagnostics"]

    out = tmp_path / "runs.jsonl"
    sets = [a for k, v in on.items() for a in ("--set", f"{k}={v}")]
    argv = ["run", "--tasks", "synthetic", "--methods", "ei-rehn", "--seeds", "2"]
    cmd = [sys.executable, "-m", "harness", *argv, *sets, "--out", str(out), "--no-report"]
    subprocess.run(cmd, check=True, capture_output=True, env=dict(os.environ))
    (third,) = (json.loads(line) for line in out.read_text().splitlines())
    assert third["diagnostics"]["compile_cache_hits"] > 0, third["diagnostics"]
    assert third["diagnostics"]["compile_cache_misses"] == 0
    assert third["time"]["compile_s"] < first["time"]["compile_s"]


# --- the training path: max_b R_t layers, hand-written backward ---------------------------------


def _randomised(m: EIREHN) -> EIREHN:
    """Every parameter drawn at random (the learned vectors and biases start at 0 otherwise)."""
    torch.manual_seed(11)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.7)
        m.elastic.alpha_hat.fill_(-3.0)  # alive: d^1 > 0, depths below R_max
        m.elastic.rate.bias.fill_(-2.0)
    return m


@pytest.mark.parametrize("layers", [1, 3, R_MAX])
def test_stack_layers_equals_the_layer_equations(layers: int) -> None:
    """``stack_layers`` (the training forward's layers, derivatives written by hand) against
    ``EIREHN._layers`` (the equations in torch ops, autograd): h_t, and the gradients of every
    input, the gate d included (zeros among its values), in float64."""
    V, D = 3, 6
    m = _randomised(EIREHN(V, D, EIREHNConfig(r_max=R_MAX)).double())
    B = 5
    x = torch.randn(B, V, dtype=torch.float64)
    h = torch.randn(B, D, dtype=torch.float64, requires_grad=True)
    d = torch.rand(B, R_MAX, D, dtype=torch.float64).sub(0.3).clamp(min=0).requires_grad_()
    bx = F.linear(x, m.weight_x) + m.bias  # layer 1's input term and bias
    init = torch.cat([m.s0, m.g0, m.z0])
    weights = (m.weight0, m.bias, m.proj, m.mix_bias, m.hyper.weight, m.hyper.bias, init)
    got = stack_layers(h, d[:, :layers], bx, *weights)
    want = m._layers(x, h, d, layers)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)
    w = torch.randn_like(want)
    leaves = [h, d, *m.parameters()]
    g_got = torch.autograd.grad((got * w).sum(), leaves, allow_unused=True)
    g_want = torch.autograd.grad((want * w).sum(), leaves, allow_unused=True)
    for i, (a, b) in enumerate(zip(g_got, g_want, strict=True)):
        a = torch.zeros_like(leaves[i]) if a is None else a
        b = torch.zeros_like(leaves[i]) if b is None else b
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-13, msg=f"input {i}")
    assert torch.all(g_got[1][:, layers:] == 0)  # the layers not run get no gradient


def test_training_runs_the_batch_depth_and_equals_the_fixed_depth() -> None:
    """Training runs ``max_b R_t`` layers per step (at least one in the first step) and gives
    the fixed ``r_max``-layer path's outputs, trace and gradients (float64); the layers it ran
    are what the run records (``train_layers_per_step``)."""
    V, D = 3, 4
    m = EIREHN(V, D, EIREHNConfig(r_max=R_MAX)).double()
    _craft(m)
    x = _crafted_input(V)
    out = m(x)  # train mode, grad enabled: the adaptive path
    fixed = ElasticHighway.forward(m, x)  # r_max layers at every step
    torch.testing.assert_close(out.outputs, fixed.outputs, rtol=0, atol=1e-13)
    assert torch.equal(out.mask, fixed.mask) and torch.equal(out.depth, fixed.depth)
    torch.testing.assert_close(out.extras["elastic_d1_mean"], fixed.extras["elastic_d1_mean"])
    w = torch.randn_like(out.outputs)
    assert_grads_match(m, (out.outputs * w).sum(), (fixed.outputs * w).sum(), rtol=1e-10)
    batch_depth = out.depth.amax(-1).amax(0)  # [T], max_b R_t
    assert 0 < batch_depth.sum() < R_MAX * x.shape[1]  # some layers skipped
    ran = batch_depth.sum().item() + (batch_depth[0] == 0)  # one copy layer if step 1 has none
    fresh = EIREHN(V, D, EIREHNConfig(r_max=R_MAX)).double()
    fresh.load_state_dict(m.state_dict())
    assert fresh.train_diagnostics() == {}
    fresh(x)
    with torch.no_grad():
        fresh(x)  # not a training pass: not counted
    fresh.eval()(x)
    # the Python step (kernels are off in the default run; tests/test_kernels.py: 1.0 with them)
    want = {"train_layers_per_step": ran / x.shape[1], "train_fused_kernel": 0.0}
    assert fresh.train_diagnostics() == want


def test_the_fused_step_tally_is_kept_with_the_training_state() -> None:
    """``train_fused_kernel`` is the fraction of the training forwards' steps the fused C++ step
    ran; its tally (``fused_steps``) goes with ``train_state`` into a checkpoint and back, and a
    state saved before the tally existed loads as no fused steps."""
    m = EIREHN(3, 4, EIREHNConfig(r_max=R_MAX))
    m(torch.randn(2, 5, 3))  # the Python path: kernels are off in the default run
    m._fused_steps += 15  # as if three more sequences of 5 steps had run fused
    m._layers_run, m._steps_run = m._layers_run + 15, m._steps_run + 15
    state = m.train_state()
    assert state["fused_steps"] == 15 and state["steps_run"] == 20
    fresh = EIREHN(3, 4, EIREHNConfig(r_max=R_MAX))
    fresh.load_train_state(state)
    assert fresh.train_diagnostics() == m.train_diagnostics()
    assert fresh.train_diagnostics()["train_fused_kernel"] == 0.75
    old = {k: v for k, v in state.items() if k != "fused_steps"}
    fresh.load_train_state(old)
    assert fresh.train_diagnostics()["train_fused_kernel"] == 0.0


@pytest.mark.parametrize("shape", ["broadcast", "per_unit"])
def test_gate_backward_against_autograd_of_the_literal_ops(shape: str) -> None:
    """``elastic_gate``'s hand-written backward against autograd through the same ops, with
    units at u = 0 (alpha_t rounded to 0: d = beta, no gradient through u), units cut off at
    d = 0 and large alpha."""
    torch.manual_seed(12)
    B, R, D = 4, 6, 5
    alpha = F.softplus(torch.randn(D, dtype=torch.float64) * 3 - 2)
    alpha[0] = 60.0  # large alpha: depth 1 or 0
    alpha.requires_grad_()
    beta = torch.sigmoid(torch.randn(D, dtype=torch.float64) + 2).requires_grad_()
    alpha_t = torch.sigmoid(torch.randn(B, 1, D, dtype=torch.float64) * 3 - 3)
    alpha_t[0, 0, 1] = 0.0  # u = 0 at r = 1 (and alpha > 0 from r = 2 on)
    if shape == "per_unit":
        alpha_t = alpha_t.expand(B, R, D).clone()
    alpha_t.requires_grad_()
    r = torch.arange(1, R + 1, dtype=torch.float64)[:, None]

    def literal(alpha, beta, alpha_t):
        u = alpha * (r - 1) + alpha_t * r
        pos = u > 0
        log1m = torch.log(-torch.expm1(-torch.where(pos, u, 1.0)))
        q = (alpha + alpha_t) * r + torch.where(pos, log1m, -math.inf)
        return torch.relu(beta - q.clamp(max=0.0).exp())

    got, want = elastic_gate(alpha, beta, alpha_t, r), literal(alpha, beta, alpha_t)
    assert got.grad_fn is not None and type(got.grad_fn).__name__ == "_ElasticGateBackward"
    assert torch.equal(got, want)  # the same ops: the same values
    assert (want == 0).any() and (want > 0).any()
    weights = torch.rand_like(want)
    inf = torch.where(want == 0, math.inf, weights)  # no gradient where d = 0, however large
    for w in (weights, inf):
        for a, b in zip(
            torch.autograd.grad((got * w).sum(), (alpha, beta, alpha_t), retain_graph=True),
            torch.autograd.grad((want * w).sum(), (alpha, beta, alpha_t), retain_graph=True),
            strict=True,
        ):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)


def test_a_run_records_the_layers_training_ran() -> None:
    """The record of a run carries ``train_layers_per_step`` in its diagnostics: between 1 and
    R_max for EI-REHN, R_max for SREHN (its training runs the fixed depth); none for RHN."""
    from harness.components import config
    from harness.training import train

    over = {"train.epochs": "1", "train.max_train_batches": "2"}
    got = {}
    for method in ("ei-rehn", "srehn", "rhn"):
        rec = train.run(config.resolve(method, "synthetic", 0, "smoke", over))
        assert rec["status"] == "ok", rec.get("error")
        got[method] = rec["diagnostics"].get("train_layers_per_step")
    assert 1 <= got["ei-rehn"] <= 10 and got["srehn"] == 10 and got["rhn"] is None
