"""SA-RNN (baselines/sa_rnn.py) against a literal, loop-by-loop reference of S-SA eqs. 5-9, and,
with ``gru_form="before"``, against a transcription of the authors' code (Thartvigsen/SA-RNN @
f2dcb139909a9f3a4c56acfa9548d28087c148b7, ``model.py``)."""

from __future__ import annotations

import pytest
import torch
from reference import REF_GRU, assert_grads_match, ste

from baselines.sa_rnn import SARNN, SARNNConfig
from harness.components.config import resolve
from harness.components.flops import sequence_macs
from harness.components.method import SeqOut
from harness.components.metrics import skip_fraction
from harness.errors import ConfigError
from harness.training import train


def ref_sa_rnn(m: SARNN, x: torch.Tensor, slope: float, lam: float):
    """Outputs [B, T, D], mask [B, T, D] and budget of S-SA eqs. 5-9 (code normalisation)."""
    B, T, _ = x.shape
    D = m.hidden_size
    outs, masks, budget = [], [], 0.0
    ref_gru = REF_GRU[m.cfg.gru_form]  # the literal candidate of the configured GRU form
    for b in range(B):
        h = torch.zeros(D, dtype=x.dtype)
        hs, us = [], []
        for t in range(T):
            cand = ref_gru(m.cell, x[b, t], h)
            new, u_row = [], []
            for i in range(D):
                v = m.w_u[i] * h[i] + m.w_i[i] @ x[b, t] + m.b_u[i]  # eq. 5
                soft = torch.clamp((slope * v + 1) / 2, 0.0, 1.0)
                u = ste((soft > 0.5).to(x.dtype), soft)  # eqs. 6, 8
                new.append(u * cand[i] + (1 - u) * h[i])  # eq. 7
                u_row.append(u)
            h = torch.stack(new)
            hs.append(h)
            us.append(torch.stack(u_row))
            budget = budget + lam / D * sum(u_row)  # eq. 9, mean over units
        outs.append(torch.stack(hs))
        masks.append(torch.stack(us))
    return torch.stack(outs), torch.stack(masks), budget / B


def make(V=3, D=4, seed=0, **cfg) -> SARNN:
    torch.manual_seed(seed)
    return SARNN(V, D, SARNNConfig(**cfg)).double()


@pytest.mark.parametrize("form", ["after", "before"])
def test_matches_reference_outputs_and_gradients(form):
    m = make(lam=0.3, gru_form=form)
    m.on_epoch_start(10, 20)  # slope 1.4
    assert m.slope == pytest.approx(1.4)
    x = torch.randn(2, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w = torch.randn(2, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    out = m(x)
    ref_out, ref_mask, ref_aux = ref_sa_rnn(m, x, 1.4, 0.3)
    assert 0 < out.mask.mean() < 1  # a mix of updates and skips
    assert torch.equal(out.mask, ref_mask)
    torch.testing.assert_close(out.outputs, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.aux_loss, ref_aux, rtol=1e-12, atol=1e-12)
    named = assert_grads_match(
        m, (out.outputs * w).sum() + out.aux_loss, (ref_out * w).sum() + ref_aux
    )
    # the straight-through path reaches every coordinator parameter, from the task and the budget
    for name in ("w_u", "w_i", "b_u"):
        assert named[name].abs().sum() > 0, name
    (g_b,) = torch.autograd.grad(out.aux_loss, [m.b_u])
    assert g_b.abs().sum() > 0


# --- the authors' code ---------------------------------------------------------------------------


class AuthorsSARNN(torch.nn.Module):
    """Thartvigsen/SA-RNN @ f2dcb13 ``model.py``, restated line by line in float64: ``SARNN``'s
    layers, ``hardSigma``, ``Binarize`` (round, straight-through), ``GRUCell`` (reset before the
    matmul, on ``[x; h]``), ``coordinate`` (``fc1`` on ``[h; x]``), ``forward`` (input
    ``[T, B, V]``, read-out on the last state), ``computeLoss`` and ``modifyGradients``.
    Neutralised: the dtype (the code builds its state and layers in the default float32) and the
    weights (copied from ours by ``load_from``). Added: ``self.hiddens``, the state at every step,
    which the code computes but does not return."""

    def __init__(self, ninp: int, nhid: int, nout: int, nepoch: int, lam: float, anneal: bool):
        super().__init__()
        f64 = {"dtype": torch.float64}
        self.ninp, self.nhid, self.LAMBDA, self.anneal = ninp, nhid, lam, anneal
        combined_dim = ninp + nhid
        self.r = torch.nn.Linear(combined_dim, nhid, **f64)
        self.z = torch.nn.Linear(combined_dim, nhid, **f64)
        self.h = torch.nn.Linear(combined_dim, nhid, **f64)
        self.fc1 = torch.nn.Linear(combined_dim, nhid, **f64)
        keep_diagonal = self.fc1.weight[:, :nhid] * torch.eye(nhid, **f64)
        self.fc1.weight = torch.nn.Parameter(
            torch.cat((keep_diagonal, self.fc1.weight[:, -ninp:]), 1)
        )
        self.out = torch.nn.Linear(nhid, nout, **f64)
        if anneal:  # a float32 tensor in the code, as here
            self._slopes = torch.tensor([min(5, 1 + 0.04 * i) for i in range(nepoch)])

    @staticmethod
    def hard_sigma(a, x):
        return torch.clamp(torch.div(torch.add(torch.mul(x, a), 1), 2.0), min=0, max=1)

    @staticmethod
    def binarize(x):
        return ste(x.round(), x)  # round forward, identity backward

    def gru_cell(self, x, hidden):
        combined = torch.cat((x, hidden), dim=1)
        z = torch.sigmoid(self.z(combined))
        r = torch.sigmoid(self.r(combined))
        h = torch.tanh(self.h(torch.cat((x, torch.mul(hidden, r)), dim=1)))
        return torch.mul((1 - z), h) + torch.mul(z, hidden)

    def coordinate(self, state_prev, state_new, x_t, epoch):
        x = torch.cat((state_prev, x_t), dim=1)
        alpha = self._slopes[epoch] if self.anneal else 0.1
        update_probability = self.hard_sigma(alpha, self.fc1(x))
        update_decision = self.binarize(update_probability)
        h_new = update_decision * state_new
        h = (1 - update_decision) * state_prev + h_new
        return h, update_probability, update_decision

    def forward(self, x, epoch):
        T, B, V = x.shape
        hidden = torch.zeros((B, self.nhid), dtype=x.dtype)
        update_decisions, self.hiddens = [], []
        for i in range(T):
            x_t = x[i]
            h_tilde = self.gru_cell(x_t, hidden)
            hidden, _, update_decision = self.coordinate(hidden, h_tilde, x_t, epoch)
            update_decisions.append(update_decision)
            self.hiddens.append(hidden)
        self.update_decisions = torch.stack(update_decisions).transpose(0, 1)  # B x T x nhid
        return self.out(hidden), self.update_decisions.detach()

    def compute_loss(self, loss_fn, logits, labels):
        task_loss = loss_fn(logits, labels)
        budget_loss = self.update_decisions.sum(1).mean()
        return task_loss + self.LAMBDA * budget_loss

    def modify_gradients(self):
        g = self.fc1.weight.grad
        self.fc1.weight.grad = torch.cat(
            (g[:, : self.nhid] * torch.eye(self.nhid, dtype=g.dtype), g[:, -self.ninp :]), 1
        )

    @torch.no_grad()
    def load_from(self, m: SARNN) -> None:
        """Our parameters in the code's layout: gate g's ``Linear`` on ``[x; h]`` is
        ``[W_i[g] | W_h[g]]``; ``fc1`` on ``[h; x]`` is ``[diag(w_u) | W_i]``."""
        D = self.nhid
        for g, lin in enumerate((self.r, self.z, self.h)):
            rows = slice(g * D, (g + 1) * D)
            lin.weight.copy_(torch.cat((m.cell.weight_ih[rows], m.cell.weight_hh[rows]), 1))
            lin.bias.copy_(m.cell.bias[rows])
        self.fc1.weight.copy_(torch.cat((torch.diag(m.w_u), m.w_i), 1))
        self.fc1.bias.copy_(m.b_u)


def ours_in_authors_layout(m: SARNN, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our gradients by name, arranged as the code's parameters (``load_from``'s mapping)."""
    D = m.hidden_size
    out = {}
    for g, name in enumerate(("r", "z", "h")):
        rows = slice(g * D, (g + 1) * D)
        out[f"{name}.weight"] = torch.cat(
            (grads["cell.weight_ih"][rows], grads["cell.weight_hh"][rows]), 1
        )
        out[f"{name}.bias"] = grads["cell.bias"][rows]
    out["fc1.weight"] = torch.cat((torch.diag(grads["w_u"]), grads["w_i"]), 1)
    out["fc1.bias"] = grads["b_u"]
    return out


def against_authors(anneal: bool, epoch: int, lam: float = 0.05, B: int = 3, T: int = 7):
    """Ours (``gru_form="before"``) and the transcription on the same weights and inputs: a dict
    of (ours, theirs) pairs for the outputs, masks, loss and every gradient (after the code's
    ``modifyGradients``), and the input gradient."""
    V, D, nout, nepoch = 3, 5, 2, 200
    m = make(V, D, seed=4, lam=lam, anneal=anneal, gru_form="before")
    m.on_epoch_start(epoch, nepoch)
    torch.manual_seed(5)
    a = AuthorsSARNN(V, D, nout, nepoch, lam, anneal)
    a.load_from(m)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(T, B, V, dtype=torch.float64, generator=gen).requires_grad_()
    labels = torch.randint(0, nout, (B,), generator=gen)
    loss_fn = torch.nn.functional.cross_entropy
    logits_a, decisions = a(x, epoch)
    loss_a = a.compute_loss(loss_fn, logits_a, labels)
    out = m(x.transpose(0, 1))
    loss = loss_fn(a.out(out.outputs[:, -1]), labels) + out.aux_loss
    names, params = zip(*m.named_parameters(), strict=True)
    g = torch.autograd.grad(loss, [x, *params, *a.out.parameters()])
    loss_a.backward()
    a.modify_gradients()
    ours = ours_in_authors_layout(m, dict(zip(names, g[1 : len(params) + 1], strict=True)))
    pairs = {
        "outputs": (out.outputs, torch.stack(a.hiddens, 1)),
        "masks": (out.mask, decisions),
        "loss": (loss, loss_a),
        "x.grad": (g[0], x.grad),
        "out.weight": (g[-2], a.out.weight.grad),
        "out.bias": (g[-1], a.out.bias.grad),
    }
    pairs |= {name: (ours[name], p.grad) for name, p in a.named_parameters() if name in ours}
    assert len(pairs) == 6 + 8  # r, z, h and fc1: weight and bias each
    return pairs


@pytest.mark.parametrize(
    "anneal,epoch", [(True, 0), (True, 25), (True, 150), (False, 3)]
)  # slopes 1, 2, 5 (held exactly by the code's float32 table) and the constant 0.1
def test_reset_before_equals_the_authors_code(anneal, epoch):
    pairs = against_authors(anneal, epoch)
    mask = pairs["masks"][0]
    assert 0.2 < mask.mean() < 0.8  # a mix of updates and skips
    assert torch.equal(*pairs["masks"])
    for name, (ours, theirs) in pairs.items():
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-14, msg=name)
    for name in ("fc1.weight", "fc1.bias", "r.weight", "h.weight"):
        assert pairs[name][0].abs().sum() > 0, name  # the comparison is not of zeros


def test_the_codes_float32_slope_is_the_only_other_difference():
    """At an epoch whose slope float32 does not hold (1 + 0.04 * 10 = 1.4), the forward is the
    same (the decisions do not depend on the slope) and the gradients through the coordinator
    differ by the float32 rounding of the slope, a relative 1e-8 or so."""
    pairs = against_authors(True, 10)
    for name in ("outputs", "masks", "loss"):
        torch.testing.assert_close(*pairs[name], rtol=1e-12, atol=1e-14, msg=name)
    rel = max(
        ((a - b).abs().max() / b.abs().max()).item()
        for name, (a, b) in pairs.items()
        if name not in ("outputs", "masks", "loss")
    )
    assert 1e-12 < rel < 1e-7


def test_reset_after_differs_from_the_authors_code():
    """The guard of the comparison above: the default form is another function."""
    m = make(3, 5, seed=4)
    a = AuthorsSARNN(3, 5, 2, 10, 1e-3, True)
    a.load_from(m)
    x = torch.randn(7, 3, 3, dtype=torch.float64)
    a(x, 0)
    diff = (m(x.transpose(0, 1)).outputs - torch.stack(a.hiddens, 1)).abs().max()
    assert diff > 1e-4


def test_forward_equals_step_loop_and_carries_state():
    m = make()
    x = torch.randn(3, 7, 3, dtype=torch.float64)
    full = m(x)
    loop = m.step_loop(x)
    # forward projects the input of every step in one matmul, step_loop one step at a time: the
    # same values to the matmul's rounding, the same decisions
    torch.testing.assert_close(full.outputs, loop.outputs, rtol=0, atol=1e-14)
    assert torch.equal(full.mask, loop.mask)
    first = m(x[:, :3])
    second = m(x[:, 3:], state=first.state)
    both = torch.cat([first.outputs, second.outputs], 1)
    torch.testing.assert_close(both, full.outputs, rtol=0, atol=1e-14)


def test_skipped_units_are_bit_identical_copies():
    m = SARNN(3, 6)
    x = torch.randn(4, 9, 3)
    out = m(x)
    prev = torch.cat([torch.zeros(4, 1, 6), out.outputs[:, :-1]], 1)
    skipped = out.mask == 0
    assert skipped.any() and (~skipped).any()
    assert torch.equal(out.outputs[skipped], prev[skipped])


def test_skip_pct_on_hand_made_coordinators():
    m = SARNN(1, 5)
    with torch.no_grad():  # fixed decisions: units 0 and 2 always update, the others never
        m.w_u.zero_()
        m.w_i.zero_()
        m.b_u.copy_(torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0]))
    out = m(torch.rand(2, 4, 1))
    assert torch.equal(out.mask[0, 0], torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(skip_fraction(out.mask), torch.tensor([0.6, 0.6]))
    assert torch.equal(out.outputs[..., [1, 3, 4]], torch.zeros(2, 4, 3))  # h_0 = 0 kept
    with torch.no_grad():  # every unit updates exactly when the input exceeds 0.5
        m.w_i.fill_(1.0)
        m.b_u.fill_(-0.5)
    out = m(torch.tensor([[[0.0], [1.0], [0.2], [0.9]]]))
    assert torch.equal(out.mask[0, :, 0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    torch.testing.assert_close(skip_fraction(out.mask), torch.tensor([0.5]))
    # with lengths, padded steps are excluded: 2 true steps, 1 of them updated
    torch.testing.assert_close(skip_fraction(out.mask, torch.tensor([2])), torch.tensor([0.5]))


def test_slope_annealing_changes_gradients_not_decisions():
    m = make()
    m.on_epoch_start(0, 10)
    assert m.slope == 1.0
    m.on_epoch_start(200, 300)
    assert m.slope == 5.0
    assert make(anneal=False).slope == 0.1
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    a = m(x)
    m.slope = 0.1
    b = m(x)
    assert torch.equal(a.mask, b.mask) and torch.equal(a.outputs, b.outputs)


def test_macs_on_hand_computed_masks():
    m = SARNN(3, 4)  # always D + DV = 16; per unit 3(D+V) = 21
    c = m.cost()
    assert (c.always, c.per_unit, c.fvcore_uncounted, c.dense_step()) == (16, 21, 4, 100)
    mask = torch.zeros(1, 3, 4)
    mask[0, 0] = 1  # k = 4, 1, 0
    mask[0, 1, 2] = 1
    macs = sequence_macs(m, SeqOut(torch.zeros(1, 3, 4), mask))
    assert macs["effective"].item() == (16 + 84) + (16 + 21) + 16
    assert macs["exact"].item() == macs["effective"].item()
    assert macs["dense"].item() == 300
    full = sequence_macs(m, SeqOut(torch.zeros(2, 3, 4), torch.ones(2, 3, 4)))
    assert torch.equal(full["effective"], full["dense"])


def test_reset_before_exact_macs_on_hand_computed_masks():
    """Reset-before (docs/methods.md 2.9): ``D + DV + 1[k > 0] D(D+V) + 2 k (D+V)``; the effective
    and dense counts are those of the default form."""
    m = SARNN(3, 4, SARNNConfig(gru_form="before"))  # coordinator 16, r rows 28, z + n 14/unit
    assert m.cost() == SARNN(3, 4).cost()
    mask = torch.zeros(1, 3, 4)
    mask[0, 0] = 1  # k = 4, 1, 0
    mask[0, 1, 2] = 1
    macs = sequence_macs(m, SeqOut(torch.zeros(1, 3, 4), mask))
    assert macs["effective"].item() == (16 + 84) + (16 + 21) + 16
    assert macs["exact"].item() == (16 + 28 + 4 * 14) + (16 + 28 + 14) + 16
    assert macs["dense"].item() == 300
    full = sequence_macs(m, SeqOut(torch.zeros(2, 3, 4), torch.ones(2, 3, 4)))
    assert torch.equal(full["exact"], full["dense"])


def test_config_from_overrides():
    cfg = resolve("sa-rnn", "adding", 0, "smoke", {"lam": "0.5", "anneal": "false"})
    assert cfg.method_cfg == SARNNConfig(lam=0.5, anneal=False)
    cfg = resolve("sa-rnn", "adding", 0, "smoke", {"gru_form": "before"})
    assert cfg.method_cfg == SARNNConfig(gru_form="before")
    with pytest.raises(ConfigError, match="gru_form"):
        resolve("sa-rnn", "adding", 0, "smoke", {"gru_form": "reset-before"})
    with pytest.raises(ConfigError):
        resolve("sa-rnn", "adding", 0, "smoke", {"lam": "-1"})


def test_budget_lowers_update_rate_on_adding():
    """Issue 3: a larger lambda gives fewer updates (smoke adding, fixed seed, ~2 s)."""
    skips = []
    for lam in ("0", "1e-2", "1"):
        rec = train.run(resolve("sa-rnn", "adding", 0, "smoke", {"lam": lam}))
        assert rec["status"] == "ok", rec["error"]
        skips.append(rec["metrics"]["skip_pct"])
    assert skips[0] + 5 < skips[1] and skips[1] + 5 < skips[2], skips


# --- fast inference path -------------------------------------


def fast_model(regime: str, V: int = 3, D: int = 12, gru_form: str = "after") -> SARNN:
    """Decisions that vary across units, steps and sequences; ``b_u`` sets how many update."""
    m = make(V, D, gru_form=gru_form)
    with torch.no_grad():
        m.b_u.fill_({"none": 10.0, "mixed": 0.0, "all": -10.0}[regime])
        m.w_i.mul_(4.0)
        m.w_u.mul_(4.0)
    return m


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("regime", ["none", "mixed", "all"])
def test_fast_forward_equals_dense_in_hand_made_regimes(regime, batch, form):
    from reference import check_fast_path_in_regime

    m = fast_model(regime, gru_form=form)
    check_fast_path_in_regime(m, regime, batch)


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("batch", [1, 5])
def test_fast_path_gathers_rows_or_multiplies_all_of_them(batch, form, monkeypatch):
    """Steps whose union of updated units is small gather those rows; past ``D B / (B + 2)``
    units they multiply all rows in place: both branches agree with the dense forward (the
    PyTorch path; at batch 1 the fused kernel would run instead)."""
    from reference import check_fast_equals_dense

    import baselines.sa_rnn as sa

    monkeypatch.setattr(sa, "sarnn_kernel", lambda: None)
    m = fast_model("mixed", gru_form=form)
    fracs = []
    for bias in (-2.0, 2.0):
        with torch.no_grad():
            m.b_u.fill_(bias)
        ref = check_fast_equals_dense(m, torch.randn(batch, 16, 3, dtype=torch.float64))
        fracs.append(ref.mask.amax(0).mean(-1))  # [T] union fraction per step
    frac, threshold = torch.cat(fracs), batch / (batch + 2)
    assert (frac <= threshold).any() and (frac > threshold).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("slope", [0.1, 1.0, 5.0])
def test_update_decision_is_the_hard_sigmoid_threshold(dtype, slope):
    from baselines._cells import hard_sigmoid
    from baselines.sa_rnn import update_decision

    eps = torch.finfo(dtype).eps
    edges = torch.tensor([0.0, eps / 4, eps / 2, eps, 2 * eps, -eps, 1e-3], dtype=torch.float64)
    v = torch.cat([edges / slope, edges * 0.999 / slope, edges * 1.001 / slope]).to(dtype)
    v = torch.cat([v, torch.randn(1000, dtype=dtype), torch.randn(1000, dtype=dtype) * 1e-7])
    assert torch.equal(update_decision(v, slope), hard_sigmoid(v, slope) > 0.5)


@pytest.mark.parametrize("form", ["after", "before"])
def test_pytorch_fallback_agrees_with_dense_at_batch_1(monkeypatch, form):
    """Where the fused C++ kernel is unavailable, batch 1 runs the PyTorch path, equal to the
    dense eval forward (masks exactly, outputs to rounding) in either GRU form. The kernel itself
    is tested in tests/test_kernels.py (``pytest -m kernel``)."""
    import baselines.sa_rnn as sa

    torch.manual_seed(0)
    hooked, _ = SARNN.at_skip(3, 64, 0.8, 30)
    model = SARNN(3, 64, SARNNConfig(gru_form=form)).eval()
    model.load_state_dict(hooked.state_dict())
    model = model.double()
    x = torch.randn(1, 30, 3, dtype=torch.float64)
    dense = model(x)
    monkeypatch.setattr(sa, "sarnn_kernel", lambda: None)
    fallback = model.fast_forward(x)
    assert torch.equal(fallback.mask, dense.mask)
    torch.testing.assert_close(fallback.outputs, dense.outputs, rtol=0, atol=1e-10)
    assert 0.6 < 1 - dense.mask.mean().item() < 0.95  # a real mix of skips


def test_at_skip_sets_independent_decisions_at_the_target():
    from statistics import NormalDist

    m, setting = SARNN.at_skip(8, 32, 0.75, 50)
    assert not m.training and "independent" in setting
    assert torch.equal(m.w_u, torch.zeros(32))
    assert torch.allclose(m.b_u, torch.full((32,), NormalDist().inv_cdf(0.25)), atol=1e-6)
    assert abs(m.w_i.std().item() - 8**-0.5) < 0.05


@pytest.mark.parametrize("form", ["after", "before"])
def test_fast_path_counts_exactly_the_exact_macs(form, monkeypatch):
    """The PyTorch fast path at batch 1 with few updates (every step gathers), counted by
    FlopCounterMode, multiplies exactly ``exact_step_macs`` (for the reset-after form, the
    effective count), less the elementwise ``w_u * h`` that no counter sees, plus one MAC per
    computed gate row for the bias column of the packed input rows. In the reset-before form
    that is every unit's r row in each step with an update, and only the z and n rows of the
    updated units."""
    from torch.utils.flop_counter import FlopCounterMode

    import baselines.sa_rnn as sa
    from harness.components.flops import effective_step_macs

    monkeypatch.setattr(sa, "sarnn_kernel", lambda: None)
    D = 24
    m = fast_model("mixed", D=D, gru_form=form).eval()
    with torch.no_grad():
        m.b_u.fill_(-1.5)  # a few updates per step at most
    x = torch.randn(1, 40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with FlopCounterMode(display=False) as fc:
        out = m.fast_forward(x)
    k = out.mask.sum(-1)  # [1, T]
    assert (k == 0).any() and (k > 0).sum() > 5 and k.max() * 3 <= D  # idle steps; gathers
    cost = m.cost()
    exact = m.exact_step_macs(out)
    if form == "after":
        assert exact is None
        exact, rows = effective_step_macs(cost, out), 3 * k
    else:
        rows = (k > 0) * D + 2 * k
    expect = (exact - cost.fvcore_uncounted + rows).sum().item()
    assert fc.get_total_flops() == 2 * expect
