"""Generic task tests, parametrized over every registered task whose data is available."""

import numpy as np
import pytest
import torch
from plugins import registration_problems

from harness.components import config
from harness.components.registry import TASKS
from harness.components.task import Batch, Task, TaskKind
from harness.errors import ConfigError

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
    assert isinstance(cls.kind, TaskKind)
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


@pytest.mark.parametrize("bogus", ["classifcation", "classification", 3, "none"])
def test_a_task_class_with_a_kind_that_is_not_a_task_kind_is_refused_where_it_is_defined(bogus):
    with pytest.raises(ConfigError, match="not a harness.components.task.TaskKind") as e:

        class Bogus(Task):
            kind = bogus

    assert "\n" not in str(e.value) and "classification, regression, lm" in str(e.value)
    if bogus == "classification":  # the right spelling of a plain string is named
        assert "TaskKind.CLASSIFICATION" in str(e.value)


def test_a_task_class_without_a_kind_is_refused_where_it_is_defined():
    with pytest.raises(ConfigError, match="Task .*Kindless declares no kind; kinds: classif"):

        class Kindless(Task):
            pass


def test_a_kind_changed_after_definition_is_refused_when_the_loss_is_computed():
    class Fine(Task):
        kind = TaskKind.CLASSIFICATION

    t = Fine()
    t.kind = "bogus"  # no silent fallback to cross-entropy
    batch = Batch(torch.zeros(2, 3, 1), torch.tensor([0, 1]))
    for score in (t.loss, t.batch_stats):
        with pytest.raises(
            ConfigError, match="'bogus', which is not a harness.components.task.TaskKind"
        ):
            score(torch.zeros(2, 2), batch)


def test_each_kind_selects_its_loss_and_metrics():
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)

    def task(k):
        class T(Task):
            kind = k

        return T()

    pred, y = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    t = task(TaskKind.REGRESSION)
    assert torch.equal(t.loss(pred, Batch(pred, y)), F.mse_loss(pred, y))
    assert set(t.finalize(t.batch_stats(pred, Batch(pred, y)))) == {"mse"}

    logits, labels = torch.randn(4, 5, generator=g), torch.tensor([0, 4, 2, 2])
    t = task(TaskKind.CLASSIFICATION)
    assert torch.equal(t.loss(logits, Batch(logits, labels)), F.cross_entropy(logits, labels))
    m = t.finalize(t.batch_stats(logits, Batch(logits, labels)))
    assert m["accuracy"] == 100.0 * (logits.argmax(-1) == labels).float().mean().item()
    assert set(m) == {"nll", "accuracy"}

    # lm: one token per step, [B, T, vocab] against [B, T]
    logits, tokens = torch.randn(2, 3, 7, generator=g), torch.randint(7, (2, 3), generator=g)
    t = task(TaskKind.LM)
    expect = F.cross_entropy(logits.reshape(6, 7), tokens.reshape(6))
    assert torch.allclose(t.loss(logits, Batch(tokens, tokens)), expect)
    m = t.finalize(t.batch_stats(logits, Batch(tokens, tokens)))
    assert set(m) == {"nll", "perplexity"} and abs(m["nll"] - expect.item()) < 1e-6
    assert t.token_input and not task(TaskKind.CLASSIFICATION).token_input


def test_a_task_kind_reads_and_prints_as_its_string():
    assert (
        TaskKind.CLASSIFICATION == "classification"
    )  # harness.training.train compares with strings assert f"{TaskKind.LM}" == str(TaskKind.LM) ==
    "lm"  # harness list, records
    import json

    assert json.dumps({"kind": TaskKind.REGRESSION}) == '{"kind": "regression"}'


# Golden run ids of the S-SA tasks (their presets come from tasks/_ssa.py): a change to a preset
# or to the shared code that resolves it changes the run ids of every record made with it.
SSA_RUN_IDS = {
    ("gru", "seizures"): ("e313ded88047ee00", "cf31ed9e013dccac", "ee2bf6b48c9e3627"),
    ("gru", "twitter-buzz"): ("530281e4b4984e72", "1ebbc64249db0273", "eadc68e1d63eb942"),
    ("gru", "yahoo"): ("d08830d765410abd", "54eaeeed7522f8af", "3013858853dcffb9"),
    ("sa-rnn", "seizures"): ("9845f10d2cd7e721", "5f05039a162bc496", "22a931aec653b662"),
    ("sa-rnn", "twitter-buzz"): ("e00e7cd167719fd1", "f028018f0f59c17c", "5bbe4fa0e2c321c5"),
    ("sa-rnn", "yahoo"): ("622fe5e08356bea9", "a1babb3506322b36", "2722035ed683a916"),
}


@pytest.mark.parametrize(("method", "task"), list(SSA_RUN_IDS))
def test_ssa_task_presets_keep_their_run_ids(method, task):
    got = tuple(config.resolve(method, task, 0, p).run_id for p in ("smoke", "quick", "paper"))
    assert got == SSA_RUN_IDS[method, task]


def _toy(n_pos=30, n_neg=90, seed=0):
    rng = np.random.default_rng(seed)
    y = np.array([1] * n_pos + [0] * n_neg)
    x = rng.normal(size=(len(y), 4, 1)) + y[:, None, None]
    return x, y


def test_ssa_balanced_splits_are_balanced_stratified_and_seeded():
    from tasks._ssa import balanced_splits

    x, y = _toy()
    s = balanced_splits(x, y, seed=3)
    assert [len(s.train), len(s.val), len(s.test)] == [48, 6, 6]
    for sp in (s.train, s.val, s.test):
        assert sp.x.dtype == torch.float32 and sp.y.dtype == torch.int64
        assert int(sp.y.sum()) * 2 == len(sp)
    again = balanced_splits(x, y, seed=3)
    assert torch.equal(s.train.x, again.train.x) and torch.equal(s.test.y, again.test.y)
    other = balanced_splits(x, y, seed=4)
    assert not (other.train.x.shape == s.train.x.shape and (other.train.x == s.train.x).all())
    assert s.info == {"n_positive": 30, "n_negative": 90, "per_class": 30}
    small = balanced_splits(x, y, seed=3, limit=20)
    assert len(small.train) + len(small.val) + len(small.test) == 20


def test_adding_targets_are_the_two_marked_values():
    from tasks.adding import generate

    x, y = generate(50, 30, np.random.default_rng(0))
    assert (x[:, :, 1].sum(1) == 2).all()
    np.testing.assert_allclose(y[:, 0], (x[:, :, 0] * x[:, :, 1]).sum(1))
    assert ((x[:, :, 0] >= 0) & (x[:, :, 0] < 1)).all()


def test_synthetic_follows_algorithm_2():
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
    from harness.components.registry import METHODS
    from harness.errors import ConfigError
    from harness.planning.sweep import build_configs, validate

    try:
        validate(build_configs(METHODS.names(), [task], [0], preset, {}))
    except ConfigError:
        st = TASKS.get(task)().data_status()
        if st is not None and st.get("status") != "found":  # some models need the data's sizes
            pytest.skip(f"{task} data {st.get('status')}: {st.get('detail')}")
        raise
