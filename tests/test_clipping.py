"""Global-norm gradient clipping in the training loop (``harness.training.train.descend``).

A float32 gradient norm overflows above about 1.8e19 while every gradient element is finite (an
exploding-gradient episode: EI-REHN at D = 20 on the synthetic task reached 1.2e22). Clipping
then has to give the step it defines, ``clip * g / ||g||``, not the 0 that ``clip / inf`` gives,
and a run must not be recorded as diverged for it; a gradient with an inf or NaN element still
ends the run before the step.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness.errors import DivergedError
from harness.training.train import descend


def _step(coef: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One ``descend`` with SGD (lr 1) on ``(p * coef).sum()`` from p = 0: returns p after it and
    the gradient, ``coef``, in float64."""
    p = torch.nn.Parameter(torch.zeros_like(coef))
    opt = torch.optim.SGD([p], lr=1.0)
    descend((p * coef).sum(), opt, [p], clip)
    return p.detach(), coef.to(torch.float64)


def test_a_finite_gradient_whose_float32_norm_overflows_is_clipped_to_the_bound():
    coef = torch.tensor([1e20, -2e20, 0.0, 3e20, 5.0])
    assert not torch.isfinite(torch.linalg.vector_norm(coef)), "the float32 norm overflows"
    p, g = _step(coef, clip=1.0)
    expected = -(g / torch.linalg.vector_norm(g)).to(torch.float32)
    torch.testing.assert_close(p, expected, rtol=1e-6, atol=0)
    assert math.isclose(torch.linalg.vector_norm(p.double()).item(), 1.0, rel_tol=1e-6)


def test_a_scale_below_float32_normals_is_applied_in_float64():
    # norm about 3e39, clip 1e-3: clip / norm is about 3e-43, a float32 subnormal (8 bits)
    coef = torch.full((100,), 3e38)
    coef[0] = 1e38
    p, g = _step(coef, clip=1e-3)
    expected = (-1e-3 * g / torch.linalg.vector_norm(g)).to(torch.float32)
    torch.testing.assert_close(p, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_gradient_with_a_non_finite_element_ends_the_run_before_the_step(bad):
    coef = torch.tensor([1.0, 2.0, bad])
    p = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([p], lr=1.0)
    with pytest.raises(DivergedError, match=r"^non-finite gradient norm \((inf|nan)\)$"):
        descend((p * coef).sum(), opt, [p], clip=1.0)
    assert torch.equal(p.detach(), torch.zeros(3)), "no step was taken"


@pytest.mark.parametrize("scale", [1e-3, 1e3])
def test_a_finite_norm_is_clipped_exactly_as_torch_clips_it(scale):
    g = torch.Generator().manual_seed(0)
    model = torch.nn.GRU(3, 8, batch_first=True)
    x = torch.randn(4, 6, 3, generator=g)
    ref = torch.nn.GRU(3, 8, batch_first=True)
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    descend(model(x)[0].sum() * scale, opt, list(model.parameters()), clip=1.0)
    ref_opt.zero_grad()
    (ref(x)[0].sum() * scale).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
    ref_opt.step()
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b), "bit for bit what clip_grad_norm_ gives"


def test_clipping_off_steps_on_the_raw_gradient():
    coef = torch.tensor([1e20, -2e20])
    p, g = _step(coef, clip=0.0)
    assert torch.equal(p, -coef)
