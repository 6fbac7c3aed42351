"""Skip-GRU (baselines/skip_rnn.py) against a float64 transcription of the authors' SkipGRUCell
and budget loss (imatge-upc/skiprnn-2017-telecombcn @ 63f93a539a3f2c7a713089fdd2c38bb7b0c581ca:
src/rnn_cells/skip_rnn_cells.py, src/rnn_cells/rnn_ops.py, src/util/graph_definition.py), and
against the values of Skip RNN eqs. 2-5."""

from __future__ import annotations

import math

import pytest
import torch
from reference import ref_gru, ste

from baselines.skip_rnn import SkipRNN, SkipRNNConfig
from harness.components.config import resolve
from harness.components.flops import fvcore_macs, sequence_macs, torch_flops
from harness.components.method import SeqOut
from harness.components.metrics import skip_fraction
from harness.errors import ConfigError
from harness.training import train

# --- the authors' cell, transcribed -----------------------------------------------------------


def tf_binary_round(x: torch.Tensor) -> torch.Tensor:
    """``_binary_round``: tf.round (half to even) with the Round gradient overridden by Identity."""
    return ste(torch.round(x), x)


def tf_minimum(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """tf.minimum; TF's Minimum gradient gives ``x`` the gradient where ``x <= y`` (ties too)."""
    return torch.where(x <= y, x, y)


def authors_skip_gru(w: dict, x: torch.Tensor, cost_per_sample: float, form: str = "before"):
    """SkipGRUCell over ``x [B, T, V]`` from its trainable initial state, and
    ``compute_budget_loss``. ``w`` holds the TF variables in the TF layout: ``gates`` kernel
    ``[V + D, 2D]`` (r, u) and bias, ``candidate`` kernel ``[V + D, D]`` and bias,
    ``state_update_prob`` kernel ``[D, 1]`` and bias, ``initial_h [1, D]``. ``form="after"`` swaps
    only the candidate line for the project's reset-after GRU (same variables).
    Returns outputs h ``[B, T, D]``, state_gate ``[B, T, 1]`` and the budget loss."""
    B, T, V = x.shape
    D = w["initial_h"].shape[1]
    h_prev = w["initial_h"].repeat(B, 1)  # create_initial_state: tf.tile of a [1, D] variable
    update_prob_prev = torch.ones(B, 1, dtype=x.dtype)  # not trainable, ones
    cum_update_prob_prev = torch.zeros(B, 1, dtype=x.dtype)  # not trainable, zeros
    outputs, state_gates = [], []
    for t in range(T):
        inputs = x[:, t]
        concat = torch.cat([inputs, h_prev], 1) @ w["gates/Weights"] + w["gates/Biases"]
        r, u = concat[:, :D], concat[:, D:]
        r = torch.sigmoid(r)
        u = torch.sigmoid(u)
        if form == "before":
            cand = torch.cat([inputs, r * h_prev], 1) @ w["candidate/Weights"]
            new_c_tilde = torch.tanh(cand + w["candidate/Biases"])
        else:
            wc = w["candidate/Weights"]
            new_c_tilde = torch.tanh(
                inputs @ wc[:V] + w["candidate/Biases"] + r * (h_prev @ wc[V:])
            )
        new_h_tilde = u * h_prev + (1 - u) * new_c_tilde
        new_update_prob_tilde = new_h_tilde @ w["state_update_prob/Weights"]
        new_update_prob_tilde = new_update_prob_tilde + w["state_update_prob/Biases"]
        new_update_prob_tilde = torch.sigmoid(new_update_prob_tilde)
        cum_update_prob = cum_update_prob_prev + tf_minimum(
            update_prob_prev, 1.0 - cum_update_prob_prev
        )
        update_gate = tf_binary_round(cum_update_prob)
        new_h = update_gate * new_h_tilde + (1.0 - update_gate) * h_prev
        new_update_prob = update_gate * new_update_prob_tilde + (1.0 - update_gate) * (
            update_prob_prev
        )
        new_cum_update_prob = update_gate * 0.0 + (1.0 - update_gate) * cum_update_prob
        h_prev, update_prob_prev = new_h, new_update_prob
        cum_update_prob_prev = new_cum_update_prob
        outputs.append(new_h)
        state_gates.append(update_gate)
    updated_states = torch.stack(state_gates, 1)  # [B, T, 1], dynamic_rnn's output
    budget = torch.mean(torch.sum(cost_per_sample * updated_states, 1), 0)  # [1]
    return torch.stack(outputs, 1), updated_states, budget[0]


def glorot_uniform(rows: int, cols: int, g: torch.Generator) -> torch.Tensor:
    """tf.get_variable's default initializer for a ``[rows, cols]`` kernel."""
    lim = math.sqrt(6.0 / (rows + cols))
    return (torch.rand(rows, cols, generator=g, dtype=torch.float64) * 2 - 1) * lim


def authors_variables(V: int, D: int, seed: int, update_bias: float = 1.0) -> dict:
    """The cell's variables as TF initialises them (Glorot kernels, bias_start biases, N(0, 1)
    initial state), float64 leaves."""
    g = torch.Generator().manual_seed(seed)
    w = {
        "gates/Weights": glorot_uniform(V + D, 2 * D, g),
        "gates/Biases": torch.full((2 * D,), 1.0, dtype=torch.float64),
        "candidate/Weights": glorot_uniform(V + D, D, g),
        "candidate/Biases": torch.zeros(D, dtype=torch.float64),
        "state_update_prob/Weights": glorot_uniform(D, 1, g),
        "state_update_prob/Biases": torch.full((1,), update_bias, dtype=torch.float64),
        "initial_h": torch.randn(1, D, generator=g, dtype=torch.float64),
    }
    return {k: v.requires_grad_() for k, v in w.items()}


def in_our_layout(w: dict, V: int, D: int) -> dict:
    """The TF variables (or their gradients) as our parameters: a pure rearrangement."""
    wg, wc = w["gates/Weights"], w["candidate/Weights"]
    return {
        "cell.weight_ih": torch.cat([wg[:V, :D].t(), wg[:V, D:].t(), wc[:V].t()]),
        "cell.weight_hh": torch.cat([wg[V:, :D].t(), wg[V:, D:].t(), wc[V:].t()]),
        "cell.bias": torch.cat([w["gates/Biases"], w["candidate/Biases"]]),
        "w_p": w["state_update_prob/Weights"].t(),
        "b_p": w["state_update_prob/Biases"],
        "h0": w["initial_h"][0],
    }


def ours_with(w: dict, V: int, D: int, **cfg) -> SkipRNN:
    m = SkipRNN(V, D, SkipRNNConfig(**cfg)).double()
    ours = in_our_layout(w, V, D)
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_(ours[name])
    return m


def assert_matches_authors(m: SkipRNN, w: dict, x: torch.Tensor, lam: float, form: str) -> dict:
    """Outputs, masks, budget and every parameter's gradient (float64); returns the largest
    differences."""
    V, D = m.input_size, m.hidden_size
    out = m(x)
    ref_h, ref_gate, ref_budget = authors_skip_gru(w, x, lam, form)
    assert torch.equal(out.mask, ref_gate.expand(-1, -1, D))
    torch.testing.assert_close(out.outputs, ref_h, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.aux_loss, ref_budget, rtol=1e-12, atol=1e-15)
    lw = torch.randn(ref_h.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(7))
    loss, ref_loss = (out.outputs * lw).sum() + out.aux_loss, (ref_h * lw).sum() + ref_budget
    names, params = zip(*m.named_parameters(), strict=True)
    grads = dict(zip(names, torch.autograd.grad(loss, params), strict=True))
    ref_g = torch.autograd.grad(ref_loss, list(w.values()))
    ref_grads = in_our_layout(dict(zip(w, ref_g, strict=True)), V, D)
    assert grads.keys() == ref_grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-10, atol=1e-12, msg=name)
    return {
        "outputs": (out.outputs - ref_h).abs().max().item(),
        "budget": (out.aux_loss - ref_budget).abs().item(),
        "grads": max((g - ref_grads[n]).abs().max().item() for n, g in grads.items()),
        "grads_rel": max(
            ((g - ref_grads[n]).abs().max() / ref_grads[n].abs().max()).item()
            for n, g in grads.items()
        ),
    }


@pytest.mark.parametrize("form", ["after", "before"])
def test_matches_authors_cell(form):
    """Same variables in both (TF's initialisation, the project's layout): outputs, state gates,
    budget and the gradient of every parameter, through a mix of updates and runs of skips."""
    V, D, lam = 2, 4, 0.1
    w = authors_variables(V, D, seed=3, update_bias=-0.5)
    with torch.no_grad():
        w["state_update_prob/Weights"].mul_(4)  # p varies from step to step
    m = ours_with(w, V, D, lam=lam, gru_form=form)
    x = torch.randn(3, 14, V, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    diffs = assert_matches_authors(m, w, x, lam, form)
    u = m(x).mask[..., 0]
    assert 0.2 < u.mean() < 0.8 and (u[:, 0] == 1).all()
    runs = (u[:, 1:-1] == 0) & (u[:, 2:] == 0)
    assert runs.any()  # C accumulates over more than one skipped step
    assert max(diffs.values()) < 1e-12, diffs
    # the two forms are different functions of the same weights
    other = ours_with(w, V, D, lam=lam, gru_form={"after": "before", "before": "after"}[form])
    assert not torch.allclose(other(x).outputs, m(x).outputs)


@pytest.mark.parametrize("form", ["after", "before"])
def test_matches_authors_cell_where_the_min_ties(form):
    """``p = sigmoid(0) = 0.5`` exactly: ``C = 0.5`` meets ``P = 0.5`` at the third step, where
    TF's Minimum gives the gradient to ``P`` (from ``b_p``) alone."""
    V, D = 2, 3
    w = authors_variables(V, D, seed=4)
    with torch.no_grad():
        w["state_update_prob/Weights"].zero_()
        w["state_update_prob/Biases"].zero_()
    m = ours_with(w, V, D, lam=0.01, gru_form=form)
    x = torch.randn(2, 7, V, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    assert m(x).mask[0, :, 0].tolist() == [1, 0, 1, 0, 1, 0, 1]  # u~: 1, .5, 1, .5, ...
    assert_matches_authors(m, w, x, 0.01, form)


def ref_skip_rnn(m: SkipRNN, x: torch.Tensor, lam: float):
    """Outputs [B, T, D], per-step u [B, T] and budget, eqs. 2-5 read literally."""
    B, T, _ = x.shape
    outs, us, budget = [], [], 0.0
    for b in range(B):
        h = m.h0
        u_tilde = torch.tensor(1.0, dtype=x.dtype)  # u~_1 = 1
        du = torch.tensor(1.0, dtype=x.dtype)  # unused before the first update
        hs, u_seq = [], []
        for t in range(T):
            u = ste(torch.round(u_tilde), u_tilde)  # eq. 2
            h = u * ref_gru(m.cell, x[b, t], h) + (1 - u) * h  # eq. 3
            du = u * torch.sigmoid(m.w_p[0] @ h + m.b_p[0]) + (1 - u) * du  # eq. 4, held
            u_tilde = u * du + (1 - u) * (u_tilde + torch.minimum(du, 1 - u_tilde))  # eq. 5
            hs.append(h)
            u_seq.append(u)
            budget = budget + lam * u
        outs.append(torch.stack(hs))
        us.append(torch.stack(u_seq))
    return torch.stack(outs), torch.stack(us), budget / B


def make(V=2, D=3, seed=0, **cfg) -> SkipRNN:
    torch.manual_seed(seed)
    return SkipRNN(V, D, SkipRNNConfig(**cfg)).double()


def set_update_prob(m: SkipRNN, p: float) -> None:
    """Make ``du`` a constant ``p`` (``w_p = 0``)."""
    with torch.no_grad():
        m.w_p.zero_()
        m.b_p.fill_(math.log(p / (1 - p)))


def test_values_follow_the_paper_gradients_the_code():
    """Eqs. 2-5 read literally give the same outputs, masks and budget; their straight-through
    gradients differ (where du is formed, how u~ accumulates), and the code's are the ones taken
    (``test_matches_authors_cell``)."""
    m = make(lam=0.1)
    with torch.no_grad():
        m.b_p.zero_()  # du near 0.5: a mix of updates and skips
        m.w_p.mul_(4)
    x = torch.randn(3, 8, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w = torch.randn(3, 8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    out = m(x)
    ref_out, ref_u, ref_aux = ref_skip_rnn(m, x, 0.1)
    assert 0 < ref_u.mean() < 1 and (ref_u[:, 0] == 1).all()
    assert torch.equal(out.mask, ref_u.unsqueeze(-1).expand(-1, -1, 3))
    torch.testing.assert_close(out.outputs, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.aux_loss, ref_aux, rtol=1e-12, atol=1e-12)
    names, params = zip(*m.named_parameters(), strict=True)
    got = torch.autograd.grad((out.outputs * w).sum() + out.aux_loss, params)
    paper = torch.autograd.grad((ref_out * w).sum() + ref_aux, params)
    rel = {n: ((a - b).norm() / b.norm()).item() for n, a, b in zip(names, got, paper, strict=True)}
    assert rel["w_p"] > 0.3 and rel["b_p"] > 0.3 and rel["cell.weight_hh"] > 0.005, rel
    for name, g in zip(names, got, strict=True):  # the STE path reaches the gate; h_0 is learned
        assert g.abs().sum() > 0, name
    g_budget = torch.autograd.grad(m(x).aux_loss, [m.b_p])[0]
    assert g_budget.abs().sum() > 0  # the budget alone reaches b_p through the STE


def test_update_probability_one_updates_every_step():
    m = make()
    set_update_prob(m, 1 - 1e-12)
    x = torch.randn(2, 6, 2, dtype=torch.float64)
    out = m(x)
    assert torch.equal(out.mask, torch.ones(2, 6, 3, dtype=torch.float64))
    h = m.h0.expand(2, -1)  # a plain GRU from the learned h_0
    for t in range(6):
        h = m.cell.step(m.cell.input_proj(x[:, t]), h)
        torch.testing.assert_close(out.outputs[:, t], h, rtol=1e-12, atol=1e-12)


def test_skip_pct_on_hand_made_update_probabilities():
    m = make()
    set_update_prob(m, 0.2)  # u~: 1, .2, .4, .6 | .2, .4, .6 | .2
    out = m(torch.randn(2, 8, 2, dtype=torch.float64))
    expected = torch.tensor([1, 0, 0, 1, 0, 0, 1, 0], dtype=torch.float64)
    assert torch.equal(out.mask[0, :, 0], expected) and torch.equal(out.mask[1, :, 0], expected)
    torch.testing.assert_close(skip_fraction(out.mask), torch.full((2,), 5 / 8))
    torch.testing.assert_close(
        skip_fraction(out.mask, torch.tensor([3, 4])), torch.tensor([2 / 3, 0.5])
    )
    set_update_prob(m, 1e-9)  # only the forced first step updates
    out = m(torch.randn(1, 10, 2, dtype=torch.float64))
    assert out.mask[0, :, 0].tolist() == [1.0] + [0.0] * 9
    torch.testing.assert_close(skip_fraction(out.mask), torch.tensor([0.9]))


def test_skipped_steps_copy_the_whole_state_bit_identically():
    torch.manual_seed(3)
    m = SkipRNN(2, 5)
    set_update_prob(m, 0.3)
    out = m(torch.randn(3, 9, 2))
    prev = torch.cat([m.h0.expand(3, 1, 5), out.outputs[:, :-1]], 1)
    skipped = out.mask == 0
    assert skipped.any() and (~skipped).any()
    assert torch.equal(out.outputs[skipped], prev[skipped])


@pytest.mark.parametrize("form", ["after", "before"])
def test_forward_equals_step_loop_and_carries_state(form):
    m = make(gru_form=form)
    with torch.no_grad():
        m.b_p.fill_(-0.5)
        m.w_p.mul_(3)
    x = torch.randn(3, 9, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    full = m(x)
    loop = m.step_loop(x)
    # forward projects the input of every step in one matmul, step_loop one step at a time: the
    # same values to the matmul's rounding, the same decisions
    torch.testing.assert_close(full.outputs, loop.outputs, rtol=0, atol=1e-14)
    assert torch.equal(full.mask, loop.mask)
    for split in (1, 5):  # some sequence updates just before the split and skips just after
        u = full.mask[..., 0]
        assert ((u[:, split - 1] == 1) & (u[:, split] == 0)).any()
        first = m(x[:, :split])
        second = m(x[:, split:], state=first.state)
        both = torch.cat([first.outputs, second.outputs], 1)
        torch.testing.assert_close(both, full.outputs, rtol=0, atol=1e-14)
        assert torch.equal(torch.cat([first.mask, second.mask], 1), full.mask)
        # the fast path's final state continues the dense forward as well
        second = m(x[:, split:], state=m.fast_forward(x[:, :split]).state)
        torch.testing.assert_close(second.outputs, full.outputs[:, split:], rtol=0, atol=1e-14)
        assert torch.equal(second.mask, full.mask[:, split:])


def test_macs_on_hand_computed_masks():
    m = SkipRNN(3, 4)  # per unit 3(D+V) = 21; D = 4 for the du projection of an update
    c = m.cost()
    assert (c.always, c.per_unit, c.per_active_step, c.dense_step()) == (0, 21, 4, 88)
    mask = torch.tensor([1.0, 0.0, 1.0]).view(1, 3, 1).expand(1, 3, 4)
    macs = sequence_macs(m, SeqOut(torch.zeros(1, 3, 4), mask))
    assert macs["effective"].item() == 2 * (84 + 4)
    assert macs["exact"].item() == macs["effective"].item()
    assert macs["dense"].item() == 3 * 88
    full = sequence_macs(m, SeqOut(torch.zeros(2, 3, 4), torch.ones(2, 3, 4)))
    assert torch.equal(full["effective"], full["dense"])


@pytest.mark.parametrize("form", ["after", "before"])
def test_dense_count_is_the_full_gru_and_the_projection_in_both_forms(form):
    """fvcore and FlopCounterMode count ``3D(D+V) + D`` MACs per step, T steps (the projection of
    the last candidate is not computed, the one of ``h_0`` at step 1 is): the cost model's dense
    step, whichever GRU form."""
    torch.manual_seed(0)
    V, D, B, T = 3, 10, 2, 6
    m = SkipRNN(V, D, SkipRNNConfig(gru_form=form))
    x = torch.randn(B, T, V)
    assert m.cost().dense_step() == 3 * D * (D + V) + D
    assert fvcore_macs(m, x)[0] == m.cost().dense_step() * T * B
    assert torch_flops(m, x) == 2 * m.cost().dense_step() * T * B


def test_initialisation_and_config():
    m = SkipRNN(2, 4)
    assert m.b_p.item() == 1.0
    assert torch.equal(m.cell.bias, torch.tensor([1.0] * 8 + [0.0] * 4))  # r, z gates 1; n 0
    assert m.cfg.gru_form == "after" and m.cell.form == "after"
    cfg = resolve("skip-rnn", "adding", 0, "smoke", {"lam": "1e-3"})
    assert cfg.method_cfg == SkipRNNConfig(lam=1e-3)
    with pytest.raises(ConfigError):
        resolve("skip-rnn", "adding", 0, "smoke", {"lam": "-1"})
    cfg = resolve("skip-rnn", "adding", 0, "smoke", {"gru_form": "before"})
    assert cfg.method_cfg == SkipRNNConfig(gru_form="before")
    assert SkipRNN(2, 4, cfg.method_cfg).cell.form == "before"
    expected = r"^gru_form='middle' is out of range for skip-rnn: expected one of after, before$"
    with pytest.raises(ConfigError, match=expected):
        resolve("skip-rnn", "adding", 0, "smoke", {"gru_form": "middle"})


def test_budget_lowers_update_rate_on_adding():
    """Issue 3: a larger lambda gives fewer updates (smoke adding, fixed seed, ~3 s). The smoke
    preset's 2 epochs at lr 1e-2 barely move b_p from 1, so this uses lr 0.05 and 3 epochs."""
    skips = []
    for lam in ("0", "3e-3", "1e-2"):
        over = {"lam": lam, "train.lr": "0.05", "train.epochs": "3"}
        rec = train.run(resolve("skip-rnn", "adding", 2, "smoke", over))
        assert rec["status"] == "ok", rec["error"]
        skips.append(rec["metrics"]["skip_pct"])
    assert skips[0] + 5 < skips[1] and skips[1] + 5 < skips[2], skips


# --- fast inference path -------------------------------------


@pytest.mark.parametrize("form", ["after", "before"])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("regime", ["none", "mixed", "all"])
def test_fast_forward_equals_dense_in_hand_made_regimes(regime, batch, form):
    """``du ~ sigmoid(b_p)`` accumulates (the first step always updates); a random ``w_p`` gives
    update periods that vary across steps and sequences."""
    from reference import check_fast_path_in_regime

    m = make(3, 12, gru_form=form)
    with torch.no_grad():
        m.b_p.fill_({"none": 10.0, "mixed": -1.0, "all": -10.0}[regime])
        m.w_p.normal_(0.0, 0.5)
    check_fast_path_in_regime(m, regime, batch)


@pytest.mark.parametrize("skip, period", [(0.0, 1), (0.5, 2), (0.75, 4), (0.9, 10)])
def test_at_skip_updates_every_m_steps(skip, period):
    m, setting = SkipRNN.at_skip(2, 5, skip, 40)
    assert not m.training and setting == f"update every {period} steps"
    with torch.no_grad():
        u = m(torch.randn(3, 40, 2)).mask[..., 0]  # [B, T]
    expected = (torch.arange(40) % period == 0).float()
    assert torch.equal(u, expected.expand(3, -1))
