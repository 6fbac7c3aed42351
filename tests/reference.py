"""Literal reference computations shared by the method tests: written independently of the
harness (no ``baselines._cells``), unit by unit, so they share no code with what they check."""

import torch


def ste(hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Value of ``hard``, gradient of ``soft`` (written independently of baselines._cells)."""
    return soft + (hard - soft).detach()


def ref_gru(cell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Reset-after GRU candidate of one sequence at one step, computed unit by unit."""
    D = h.shape[0]
    Wi, Wh, b = cell.weight_ih, cell.weight_hh, cell.bias
    out = []
    for i in range(D):
        r = torch.sigmoid(Wi[i] @ x + b[i] + Wh[i] @ h)
        z = torch.sigmoid(Wi[D + i] @ x + b[D + i] + Wh[D + i] @ h)
        n = torch.tanh(Wi[2 * D + i] @ x + b[2 * D + i] + r * (Wh[2 * D + i] @ h))
        out.append((1 - z) * n + z * h[i])
    return torch.stack(out)


def ref_gru_before(cell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Reset-before GRU candidate (S-SA eq. 3: ``W_hn (r * h)``) of one sequence at one step,
    unit by unit: first every unit's reset gate, then each candidate reads all of them."""
    D = h.shape[0]
    Wi, Wh, b = cell.weight_ih, cell.weight_hh, cell.bias
    r = [torch.sigmoid(Wi[j] @ x + b[j] + Wh[j] @ h) for j in range(D)]
    out = []
    for i in range(D):
        z = torch.sigmoid(Wi[D + i] @ x + b[D + i] + Wh[D + i] @ h)
        rh = sum(Wh[2 * D + i, j] * (r[j] * h[j]) for j in range(D))
        n = torch.tanh(Wi[2 * D + i] @ x + b[2 * D + i] + rh)
        out.append((1 - z) * n + z * h[i])
    return torch.stack(out)


REF_GRU = {"after": ref_gru, "before": ref_gru_before}
"""The literal GRU candidate of each ``gru_form``."""


def assert_grads_match(
    model: torch.nn.Module,
    got: torch.Tensor,
    want: torch.Tensor,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    allow_unused: bool = False,
) -> dict[str, torch.Tensor]:
    """Assert that two scalar losses have the same gradient for every parameter of ``model``
    (``got`` from the method, ``want`` from its reference); return ``got``'s gradients by name.
    ``got``'s graph is kept for further gradients. With ``allow_unused`` a parameter that a loss
    does not reach counts as a zero gradient; otherwise it is an error."""
    names, params = zip(*model.named_parameters(), strict=True)
    g = torch.autograd.grad(got, params, retain_graph=True, allow_unused=allow_unused)
    g_ref = torch.autograd.grad(want, params, allow_unused=allow_unused)
    out = {}
    for name, p, a, b in zip(names, params, g, g_ref, strict=True):
        a = torch.zeros_like(p) if a is None else a
        b = torch.zeros_like(p) if b is None else b
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=name)
        out[name] = a
    return out


def check_fast_equals_dense(m, x: torch.Tensor):
    """``m.fast_forward(x)`` equals ``m.eval()(x)``: masks, reads and depth exactly, outputs and
    extras to 1e-10 (use float64); returns the dense output."""
    ref = m.eval()(x)
    out = m.fast_forward(x)
    assert torch.equal(out.mask, ref.mask)
    assert (out.reads is None) == (ref.reads is None)
    if ref.reads is not None:
        assert torch.equal(out.reads, ref.reads)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=1e-10, atol=1e-10)
    assert (out.depth is None) == (ref.depth is None)
    if ref.depth is not None:
        assert torch.equal(out.depth, ref.depth)
    assert out.extras.keys() == ref.extras.keys()
    for k, v in ref.extras.items():
        torch.testing.assert_close(out.extras[k], v, rtol=1e-10, atol=1e-10)
    return ref


def assert_dense_counts(m, x) -> None:
    """fvcore and torch's FlopCounterMode count exactly the analytic dense MACs on ``x``."""
    from harness.components.flops import fvcore_macs, torch_flops

    cost = m.cost()
    B, T = x.shape[:2]
    analytic = (cost.dense_step() - cost.fvcore_uncounted) * T * B
    counted, _ = fvcore_macs(m, x)
    assert counted == analytic, f"fvcore {counted} != analytic {analytic}"
    assert torch_flops(m, x) == 2 * analytic


# What each hand-made decision regime of the fast-path tests must achieve (Skip % / 100, or the
# depth-skip fraction for depth-adaptive methods).
REGIMES = {"none": lambda s: s == 0.0, "mixed": lambda s: 0.1 < s < 0.9, "all": lambda s: s >= 0.9}


def check_fast_path_in_regime(m, regime: str, batch: int, steps: int = 16, input_size: int = 3):
    """``check_fast_equals_dense`` on random float64 inputs; the regime skips as named."""
    from harness.bench.speedup import achieved_skip

    x = torch.randn(batch, steps, input_size, dtype=torch.float64)
    ref = check_fast_equals_dense(m, x)
    skip = achieved_skip(ref, m)
    assert REGIMES[regime](skip), (regime, skip)
    return ref
