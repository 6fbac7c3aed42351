"""GRU, LSTM and vanilla RNN against plain computations of their paper equations (outputs and
gradients), in float64, with explicit per-unit loops so the reference shares no code with the
methods."""

import math

import pytest
import torch

from harness.registry import METHODS

V, D, B, T = 3, 4, 2, 5


def sig(v):
    return 1 / (1 + math.exp(-v))


def ref_gru(m, x):
    """S-SA eqs. 1-4, reset after the matmul (METHODS.md 2.3 [DECISION]), z in PyTorch's sign."""
    Wi, Wh, b = m.cell.weight_ih, m.cell.weight_hh, m.cell.bias
    outs = []
    for s in range(x.shape[0]):
        h = [torch.zeros((), dtype=x.dtype) for _ in range(D)]
        seq = []
        for t in range(x.shape[1]):
            new = []
            for i in range(D):

                def row(g, i=i, t=t, s=s, h=h):
                    k = g * D + i
                    return (Wi[k] * x[s, t]).sum() + b[k], sum(Wh[k, j] * h[j] for j in range(D))

                (xr, hr), (xz, hz), (xn, hn) = row(0), row(1), row(2)
                r = torch.sigmoid(xr + hr)
                z = torch.sigmoid(xz + hz)
                n = torch.tanh(xn + r * hn)
                new.append((1 - z) * n + z * h[i])
            h = new
            seq.append(torch.stack(h))
        outs.append(torch.stack(seq))
    return torch.stack(outs)


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


@pytest.mark.parametrize("name,ref", [("gru", ref_gru), ("lstm", ref_lstm), ("rnn", ref_rnn)])
def test_cell_matches_paper_equations(name, ref):
    torch.manual_seed(0)
    m = METHODS.get(name)(V, D).double()
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
    # S-EI parameter counts: one bias per gate (PAPER_RESULTS.md 2.6)
    assert sum(p.numel() for p in METHODS.get("rnn")(2, 20).parameters()) == 20 * 23
    assert sum(p.numel() for p in METHODS.get("lstm")(2, 10).parameters()) == 4 * 10 * 13
    assert sum(p.numel() for p in METHODS.get("gru")(2, 10).parameters()) == 3 * 10 * 13
    lstm = METHODS.get("lstm")(2, 10)
    assert torch.equal(lstm.cell.bias[10:20], torch.ones(10))  # forget bias 1 (METHODS.md 2.2)


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
    from harness import config, train

    cfg = config.resolve(name, "synthetic", 0, "paper", {"hidden_size": str(hidden)})
    _, model = train.build(cfg)
    assert sum(p.numel() for p in model.parameters()) == count
