"""GRU, LSTM and vanilla RNN against plain computations of their paper equations (outputs and
gradients), in float64, with explicit per-unit loops so the reference shares no code with the
methods."""

import math

import pytest
import torch

from harness.components.registry import METHODS

V, D, B, T = 3, 4, 2, 5


def sig(v):
    return 1 / (1 + math.exp(-v))


def ref_gru(m, x, form="after"):
    """S-SA eqs. 1-4, z in PyTorch's sign; the reset gate after the matmul (docs/methods.md 2.3
    [DECISION]) or, with ``form="before"``, before it as S-SA eq. 3 writes it:
    ``n_i = tanh(W_in x + b_n + sum_j W_hn[i, j] r_j h_j)``."""
    Wi, Wh, b = m.cell.weight_ih, m.cell.weight_hh, m.cell.bias
    outs = []
    for s in range(x.shape[0]):
        h = [torch.zeros((), dtype=x.dtype) for _ in range(D)]
        seq = []
        for t in range(x.shape[1]):

            def pre(g, i, t=t, s=s):
                """Input part (with bias) of gate g of unit i."""
                k = g * D + i
                return (Wi[k] * x[s, t]).sum() + b[k]

            def rec(g, i, v):
                """Recurrent part of gate g of unit i, read from the vector v."""
                return sum(Wh[g * D + i, j] * v[j] for j in range(D))

            r = [torch.sigmoid(pre(0, j) + rec(0, j, h)) for j in range(D)]
            new = []
            for i in range(D):
                z = torch.sigmoid(pre(1, i) + rec(1, i, h))
                if form == "before":
                    n = torch.tanh(pre(2, i) + rec(2, i, [r[j] * h[j] for j in range(D)]))
                else:
                    n = torch.tanh(pre(2, i) + r[i] * rec(2, i, h))
                new.append((1 - z) * n + z * h[i])
            h = new
            seq.append(torch.stack(h))
        outs.append(torch.stack(seq))
    return torch.stack(outs)


def ref_gru_before(m, x):
    return ref_gru(m, x, "before")


def ref_lstm(m, x):
    """S-EI eqs. 3-5, no peepholes, gate order i, f, g, o."""
    Wi, Wh, b = m.cell.weight_ih, m.cell.weight_hh, m.cell.bias
    outs = []
    for s in range(x.shape[0]):
        h = [torch.zeros((), dtype=x.dtype) for _ in range(D)]
        c = [torch.zeros((), dtype=x.dtype) for _ in range(D)]
        seq = []
        for t in range(x.shape[1]):
            nh, nc = [], []
            for i in range(D):
                pre = [
                    (Wi[g * D + i] * x[s, t]).sum()
                    + b[g * D + i]
                    + sum(Wh[g * D + i, j] * h[j] for j in range(D))
                    for g in range(4)
                ]
                ig, fg, gg, og = (
                    torch.sigmoid(pre[0]),
                    torch.sigmoid(pre[1]),
                    torch.tanh(pre[2]),
                    torch.sigmoid(pre[3]),
                )
                nc.append(fg * c[i] + ig * gg)
                nh.append(og * torch.tanh(nc[-1]))
            h, c = nh, nc
            seq.append(torch.stack(h))
        outs.append(torch.stack(seq))
    return torch.stack(outs)


def ref_rnn(m, x):
    """S-EI eq. 2: h_t = tanh(W_R [h_{t-1}; x_t; 1])."""
    outs = []
    for s in range(x.shape[0]):
        h = [torch.zeros((), dtype=x.dtype) for _ in range(D)]
        seq = []
        for t in range(x.shape[1]):
            h = [
                torch.tanh(
                    (m.weight_ih[i] * x[s, t]).sum()
                    + m.bias[i]
                    + sum(m.weight_hh[i, j] * h[j] for j in range(D))
                )
                for i in range(D)
            ]
            seq.append(torch.stack(h))
        outs.append(torch.stack(seq))
    return torch.stack(outs)


@pytest.mark.parametrize(
    "name,over,ref",
    [
        ("gru", {}, ref_gru),
        ("gru", {"gru_form": "before"}, ref_gru_before),
        ("lstm", {}, ref_lstm),
        ("rnn", {}, ref_rnn),
    ],
)
def test_cell_matches_paper_equations(name, over, ref):
    torch.manual_seed(0)
    cls = METHODS.get(name)
    m = cls(V, D, cls.config_cls(**over)).double()
    x = torch.randn(B, T, V, dtype=torch.float64, requires_grad=True)
    params = [x] + list(m.parameters())
    w = torch.randn(B, T, D, dtype=torch.float64)
    for path in (m.forward, m.step_loop):
        got = path(x).outputs
        want = ref(m, x)
        torch.testing.assert_close(got, want)
        g_got = torch.autograd.grad((got * w).sum(), params)
        g_want = torch.autograd.grad((want * w).sum(), params)
        for a, b in zip(g_got, g_want, strict=True):
            torch.testing.assert_close(a, b)


def test_parameter_counts_and_inits():
    # S-EI parameter counts: one bias per gate (docs/methods.md P2.6)
    assert sum(p.numel() for p in METHODS.get("rnn")(2, 20).parameters()) == 20 * 23
    assert sum(p.numel() for p in METHODS.get("lstm")(2, 10).parameters()) == 4 * 10 * 13
    assert sum(p.numel() for p in METHODS.get("gru")(2, 10).parameters()) == 3 * 10 * 13
    lstm = METHODS.get("lstm")(2, 10)
    assert torch.equal(lstm.cell.bias[10:20], torch.ones(10))  # forget bias 1 (docs/methods.md 2.2)


@pytest.mark.parametrize(
    "name,hidden,count",
    [
        ("rnn", 20, 502),
        ("rnn", 30, 1052),
        ("rnn", 40, 1802),
        ("lstm", 10, 542),
        ("lstm", 15, 1112),
        ("lstm", 20, 1882),
    ],
)
def test_whole_model_matches_s_ei_table_1_counts(name, hidden, count):
    from harness.components import config
    from harness.training import train

    cfg = config.resolve(name, "synthetic", 0, "paper", {"hidden_size": str(hidden)})
    _, model = train.build(cfg)
    assert sum(p.numel() for p in model.parameters()) == count


# --- the two GRU forms (docs/methods.md 2.3)
# ----------------------------------------------------------


def gru_form_methods():
    """Registered methods whose config selects the GRU form."""
    import dataclasses

    return [
        n
        for n, cls in METHODS.items()
        if "gru_form" in {f.name for f in dataclasses.fields(cls.config_cls)}
    ]


def test_gru_weights_run_either_form_on_the_same_parameters():
    from baselines._cells import GRU_FORMS, GRUWeights
    from harness.errors import ConfigError

    assert GRU_FORMS == ("after", "before")
    cells = {}
    for form in GRU_FORMS:
        torch.manual_seed(3)
        cells[form] = GRUWeights(V, D, gate_bias=1.0, form=form).double()
    after, before = cells["after"], cells["before"]
    assert (after.form, before.form) == ("after", "before")
    for a, b in zip(after.parameters(), before.parameters(), strict=True):
        assert a.shape == b.shape and torch.equal(a, b)  # same shapes, same initialisation
    x = torch.randn(B, T, V, dtype=torch.float64)
    h = torch.randn(B, D, dtype=torch.float64)
    xp = after.input_proj(x[:, 0])
    step_a, step_b = after.step(xp, h), before.step(xp, h)
    assert (step_a - step_b).abs().max() > 1e-3  # the forms are different functions
    out, hn = after.fused(x, h)
    torch.testing.assert_close(out[:, 0], step_a, rtol=1e-12, atol=1e-12)
    with pytest.raises(ConfigError, match="gru_form='after'") as err:
        before.fused(x, h)
    assert "\n" not in str(err.value)
    for bad in ("middle", "After", ""):
        with pytest.raises(ConfigError, match="gru_form must be one of 'after', 'before'") as err:
            GRUWeights(V, D, form=bad)
        assert "\n" not in str(err.value)


def test_gru_form_is_a_validated_config_field_of_the_gru_methods():
    from harness.components.config import resolve
    from harness.errors import ConfigError

    names = gru_form_methods()
    assert {"gru", "random-updates", "vc-rnn", "sa-rnn"} <= set(names)
    for name in names:
        cls = METHODS.get(name)
        assert cls.config_cls().gru_form == "after"  # default: today's reset-after cell
        cfg = resolve(name, "adding", 0, "smoke", {"gru_form": "before"})
        assert cfg.method_cfg.gru_form == "before"
        with pytest.raises(ConfigError, match="gru_form='sideways' is out of range") as err:
            resolve(name, "adding", 0, "smoke", {"gru_form": "sideways"})
        assert name in str(err.value) and "\n" not in str(err.value)
        # one set of weights, two functions: same parameters, different outputs
        x = torch.randn(B, T, V, dtype=torch.float64)
        models = {}
        for form in ("after", "before"):
            torch.manual_seed(0)
            models[form] = cls(V, D, cls.config_cls(gru_form=form)).double().eval()
        sa, sb = models["after"].state_dict(), models["before"].state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa), name
        with torch.no_grad():
            ya, yb = models["after"](x).outputs, models["before"](x).outputs
        assert (ya - yb).abs().max() > 1e-4, name


def test_bad_gru_form_on_the_command_line_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["run", "--methods", "sa-rnn", "--tasks", "adding", "--set", "gru_form=sideways"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "gru_form='sideways' is out of range" in err[0], err
