"""The column-skipping fast paths of the activity-sparse methods (Delta GRU, EGRU): equal to the
eval forward (outputs, reads, mask, state), multiplying only the columns read, and their
``at_skip`` models landing on their activity-sparsity targets."""

from __future__ import annotations

import pytest
import torch
from reference import check_fast_equals_dense

from baselines._delta_gru_fast import project_deltas
from baselines._sparse import addmm_read_columns, bisect_level
from baselines.delta_gru import DeltaGRU, DeltaGRUConfig
from baselines.egru import EGRU
from harness.bench.speedup import achieved_skip, build_at_skip

V, D, T = 3, 12, 16


def delta_gru(theta_x: float, theta_h: float, seed: int = 0) -> DeltaGRU:
    torch.manual_seed(seed)
    cfg = DeltaGRUConfig(theta_x=theta_x, theta_h=theta_h)
    return DeltaGRU(V, D, cfg).double().eval()


def egru(theta: float, seed: int = 0) -> EGRU:
    torch.manual_seed(seed)
    m = EGRU(V, D).double().eval()
    with torch.no_grad():
        m.thr.fill_(theta)
    return m


# (model, rough activity sparsity): 0 (every column but the first step's state), mixed, ~0.9
MODELS = {
    "delta-gru-dense": lambda: delta_gru(0.0, 0.0),
    "delta-gru-mixed": lambda: delta_gru(0.8, 0.1),
    "delta-gru-sparse": lambda: delta_gru(2.5, 0.3),
    "egru-low": lambda: egru(0.0),
    "egru-mixed": lambda: egru(0.05),
    "egru-silent": lambda: egru(1.0),
}


def assert_same_state(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("name", MODELS)
def test_fast_path_equals_the_eval_forward(name, batch):
    m = MODELS[name]()
    x = torch.randn(batch, T, V, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ref = check_fast_equals_dense(m, x)  # outputs, mask, reads, extras
    out = m.fast_forward(x)
    assert_same_state(out.state, ref.state)
    assert (out.aux_loss is None) == (ref.aux_loss is None)
    assert torch.all(ref.mask == 1)
    skip = achieved_skip(ref, m)
    if name.endswith(("dense", "low")):
        assert skip < 0.6  # EGRU at theta = 0 fires only where c~ > 0
    if name.endswith(("sparse", "silent")):
        assert skip > 0.7


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("name", ["delta-gru", "egru"])
@pytest.mark.parametrize("target", [0.0, 0.5, 0.9])
def test_float32_fast_path_at_target_sparsities(name, target, batch):
    m, _ = build_at_skip(name, 8, 32, target, 30, seed=3)
    x = torch.randn(batch, 30, 8)
    with torch.no_grad():
        ref = m.eval()(x)
    out = m.fast_forward(x)
    assert torch.equal(out.reads, ref.reads) and torch.equal(out.mask, ref.mask)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=1e-5, atol=1e-5)


def test_delta_gru_fast_path_reads_no_column_it_skips():
    """NaN in every column that is never read: the dense forward is NaN (0 * NaN), the fast path
    never touches them and equals the dense forward with those columns zeroed."""
    m = delta_gru(1.5, 10.0)  # no state delta reaches 10: no state column is ever read
    x = torch.randn(2, T, V, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x[:, :, 1] = 0.0  # input 1 never changes: its column is never read
    ref = m(x)
    assert ref.reads[..., V:].sum() == 0 and ref.reads[..., 1].sum() == 0
    with torch.no_grad():
        m.cell.weight_hh.fill_(float("nan"))
        m.cell.weight_ih[:, 1] = float("nan")
        assert m(x).outputs.isnan().all()
        out = m.fast_forward(x)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=1e-10, atol=1e-10)


def test_egru_fast_path_reads_only_the_units_that_fired():
    m = egru(0.05)
    silent = torch.arange(0, D, 3)
    with torch.no_grad():
        m.thr[silent] = 1.0  # c~ < 1: these units never fire
    x = torch.randn(2, T, V, dtype=torch.float64)
    ref = m(x)
    assert ref.reads[..., V + silent].sum() == 0 and ref.reads[..., V:].sum() > 0
    with torch.no_grad():
        m.recurrent_kernel[silent] = float("nan")
        assert m(x).outputs.isnan().all()
        out = m.fast_forward(x)
    torch.testing.assert_close(out.outputs, ref.outputs, rtol=1e-10, atol=1e-10)


def test_delta_gru_projects_the_input_deltas_sparsely_or_densely_alike():
    """One product per non-zero input delta while at most half are non-zero; a dense matmul
    beyond (the same sums to rounding)."""
    wi_t = torch.randn(V, 2 * D, dtype=torch.float64)
    dx = torch.randn(2, T, V, dtype=torch.float64)
    dense = torch.matmul(dx, wi_t)
    torch.testing.assert_close(project_deltas(dx, wi_t), dense)
    sparse = dx * (torch.rand(2, T, V) < 0.3)
    wi_nan = wi_t.clone()
    wi_nan[1] = float("nan")
    sparse[..., 1] = 0.0
    got = project_deltas(sparse, wi_nan)  # row 1 never multiplied
    torch.testing.assert_close(got, torch.matmul(sparse, wi_t.index_fill(0, torch.tensor([1]), 0)))


@pytest.mark.parametrize("batch", [1, 3])
def test_addmm_read_columns_multiplies_the_union_of_the_columns(batch):
    K, N = 7, 5
    w = torch.randn(K, N, dtype=torch.float64)
    acc = torch.randn(batch, N, dtype=torch.float64)
    v = torch.zeros(batch, K, dtype=torch.float64)
    assert addmm_read_columns(acc, v, w) is acc  # nothing read: no op
    v[0, 2], v[-1, 5] = 1.5, -0.5
    expected = torch.addmm(acc, v, w)
    w_nan = w.clone()
    w_nan[[0, 1, 3, 4, 6]] = float("nan")  # the rows no sequence reads
    torch.testing.assert_close(addmm_read_columns(acc, v, w_nan), expected)
    v_full = torch.randn(batch, K, dtype=torch.float64)
    torch.testing.assert_close(addmm_read_columns(acc, v_full, w), torch.addmm(acc, v_full, w))


def test_bisect_level_finds_the_level_and_leaves_it_set():
    calls = []

    def share(level):
        calls.append(level)
        return min(max(level, 0.0), 1.0) ** 2

    level, s = bisect_level(share, 0.25, -1.0, 2.0, 30)
    assert level == pytest.approx(0.5, abs=1e-6) and s == pytest.approx(0.25, abs=1e-6)
    assert calls[-1] == level
    assert bisect_level(share, -0.5, -1.0, 2.0)[0] == -1.0  # below the reachable: the low end
    assert bisect_level(share, 1.5, -1.0, 2.0)[0] == 2.0


@pytest.mark.parametrize("name", ["delta-gru", "egru"])
def test_at_skip_lands_on_its_activity_sparsity_target(name):
    Vb, Db, Tb = 8, 64, 50
    for target in (0.5, 0.75, 0.9):
        m, setting = build_at_skip(name, Vb, Db, target, Tb, seed=0)
        assert not m.training and "theta" in setting
        x = torch.randn(16, Tb, Vb, generator=torch.Generator().manual_seed(9))
        with torch.no_grad():
            out = m(x)
        assert out.mask.all()  # every unit updated: the target is in the columns
        assert abs(achieved_skip(out, m) - target) < 0.03, (name, target, setting)
    m, setting = build_at_skip(name, Vb, Db, 0.0, Tb, seed=0)
    with torch.no_grad():
        out = m(torch.randn(4, Tb, Vb))
    first_state = Db / (Vb + Db) / Tb  # no state column at the first step (h_0 = 0)
    assert achieved_skip(out, m) == pytest.approx(first_state, abs=1e-3), setting


def test_egru_target_beyond_reach_is_silence():
    """Every input column is read, so EGRU's activity sparsity is at most D / (V + D)."""
    m, setting = build_at_skip("egru", V, D, 0.95, T, seed=0)
    assert setting.startswith("theta = 1 ")
    with torch.no_grad():
        out = m(torch.randn(2, T, V))
    assert achieved_skip(out, m) == pytest.approx(D / (V + D))
