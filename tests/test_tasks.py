"""Generic task tests, parametrized over every registered task whose data is available."""

import pytest
import torch
from plugins import registration_problems

from harness import config
from harness.registry import TASKS
from harness.task import Batch

NAMES = TASKS.names()


def available(name):
    t = TASKS.get(name)()
    st = t.data_status()
    return st is None or st.get("status") == "found"


def test_every_file_registers_its_own_key():
    assert registration_problems("tasks", "TASKS") == []


@pytest.mark.parametrize("name", NAMES)
def test_presets_resolve(name):
    cls = TASKS.get(name)
    assert set(cls.presets) >= {"smoke", "quick", "paper"}
    assert cls.kind in ("classification", "regression", "lm")
    assert cls.readout in ("last", "every")
    for p in ("smoke", "quick", "paper"):
        config.resolve("gru", name, 0, p)


GENERATED = [n for n in NAMES if TASKS.get(n)().data_status() is None]


@pytest.mark.parametrize("name", GENERATED)
def test_generated_task_splits_are_deterministic_and_shaped(name):
    rc = config.resolve("gru", name, 0, "smoke")
    t = TASKS.get(name)(rc.task_cfg)
    a, b = t.splits(0), t.splits(0)
    for sa, sb in [(a.train, b.train), (a.val, b.val), (a.test, b.test)]:
        assert torch.equal(sa.x, sb.x) and torch.equal(sa.y, sb.y)
        assert sa.x.dtype == torch.float32 and sa.x.shape[-1] == t.input_size
    assert len(a.train) == rc.task_cfg.n_train and len(a.test) == rc.task_cfg.n_test
    if t.kind == "classification":  # labels; a perfect predictor puts its logit on the label
        assert a.test.y.shape == (len(a.test),) and a.test.y.dtype == torch.int64
        assert 0 <= int(a.test.y.min()) and int(a.test.y.max()) < t.output_size
        perfect = torch.nn.functional.one_hot(a.test.y, t.output_size).float()
    elif t.readout == "every":
        assert a.test.y.shape[:2] == a.test.x.shape[:2] and a.test.y.shape[-1] == t.output_size
        perfect = a.test.y.clone()
    else:
        assert a.test.y.shape == (len(a.test), t.output_size)
        perfect = a.test.y.clone()
    # A perfect predictor scores the best value of the primary metric.
    batch = Batch(a.test.x, a.test.y)
    m = t.finalize(t.batch_stats(perfect, batch))
    assert m[t.primary] == (100.0 if t.higher_is_better else 0.0)


def test_adding_targets_are_the_two_marked_values():
    import numpy as np

    from tasks.adding import generate

    x, y = generate(50, 30, np.random.default_rng(0))
    assert (x[:, :, 1].sum(1) == 2).all()
    np.testing.assert_allclose(y[:, 0], (x[:, :, 0] * x[:, :, 1]).sum(1))
    assert ((x[:, :, 0] >= 0) & (x[:, :, 0] < 1)).all()


def test_synthetic_follows_algorithm_2():
    import numpy as np

    from tasks.synthetic import SyntheticConfig, generate

    cfg = SyntheticConfig()
    x, R = generate(2000, cfg, np.random.default_rng(0))
    assert x.shape == (2000, 21, 2) and R.min() >= 1
    assert R.max() > cfg.r_max  # as printed, ||h||^2 up to 2 lets R_t exceed R_max (pitfall a)
    clipped = generate(200, SyntheticConfig(clip_depth=True), np.random.default_rng(0))[1]
    assert clipped.max() <= cfg.r_max
    # x_t scales with R_t / R_max and each component is a tanh
    assert (np.abs(x) <= R[..., None] / cfg.r_max + 1e-12).all()


def test_synthetic_noise_floor_bounds_every_model():
    from tasks.synthetic import SyntheticConfig, noise_floor

    assert noise_floor(SyntheticConfig(noise_std=0.0), n=50, replicas=4) == 0.0  # deterministic
    floor = noise_floor(SyntheticConfig(), n=300, replicas=64)
    # std 0.1 per rotation (the paper preset's reading): about 1.6e-3 per element, above every
    # MSE S-EI reports (0.47e-3 .. 1.02e-3); at std 0.05 about 0.24e-3
    assert 1.3e-3 < floor < 1.9e-3
    assert 0.15e-3 < noise_floor(SyntheticConfig(noise_std=0.05), n=300, replicas=64) < 0.35e-3


@pytest.mark.parametrize("task", NAMES)
@pytest.mark.parametrize("preset", ["smoke", "quick", "paper"])
def test_every_method_builds_at_every_task_preset(preset, task):
    # a preset whose sizes a method cannot take (e.g. Clockwork's modules not dividing D) must
    # set that method's knobs: `harness run --methods all --preset P` then never refuses
    from harness.errors import ConfigError
    from harness.registry import METHODS
    from harness.sweep import build_configs, validate

    try:
        validate(build_configs(METHODS.names(), [task], [0], preset, {}))
    except ConfigError:
        st = TASKS.get(task)().data_status()
        if st is not None and st.get("status") != "found":  # some models need the data's sizes
            pytest.skip(f"{task} data {st.get('status')}: {st.get('detail')}")
        raise
