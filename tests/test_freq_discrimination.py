"""The frequency-discrimination task (Phased LSTM 4.1) and the per-step times of the interface.

The generator is checked against a literal transcription of the Phased LSTM authors' data
iterator; the three sampling regimes, the labels and the time input on hand-checkable
properties; and the times on their way through ``Split``, ``Batch``, the model and the trainer
to the one method that uses them (Phased LSTM), and to no other.
"""

import json

import numpy as np
import pytest
import torch

from harness.components import config
from harness.components.model import SeqModel
from harness.components.registry import METHODS, TASKS
from harness.components.task import Batch, Split
from harness.errors import ConfigError
from harness.training.train import build, evaluate
from tasks.freq_discrimination import FreqDiscriminationConfig, generate, pack

TASK = "freq-discrimination"


# --- the authors' generator ---------------------------------------------------------------------


def authors_flow(
    R,
    sample_regularly,
    sample_res,
    min_period=1,
    max_period=100,
    min_spec_period=5,
    max_spec_period=6,
    batch_size=32,
    num_examples=10000,
    min_duration=15,
    max_duration=125,
    min_num_points=15,
    max_num_points=125,
):
    """``SinWaveIterator.flow`` of dannyneil/public_plstm @ 3abf8de978154eb71caf080f70448cce08883ffb
    : freq_task.py, transcribed line by line. ``np.random.X`` is written ``R.X`` for a seeded
    ``RandomState`` (the same stream), and ``len(periods)/2`` (Python 2) as ``// 2``."""
    num_batches = int(np.ceil(float(num_examples) / batch_size))
    min_log_period, max_log_period = np.log(min_period), np.log(max_period)
    b = 0
    while b < num_batches:
        num_points = R.uniform(low=min_num_points, high=max_num_points, size=(batch_size))
        duration = R.uniform(low=min_duration, high=max_duration, size=batch_size)
        start = R.uniform(low=0, high=max_duration - duration, size=batch_size)
        periods = np.exp(R.uniform(low=min_log_period, high=max_log_period, size=(batch_size)))
        shifts = R.uniform(low=0, high=duration, size=(batch_size))

        periods[: len(periods) // 2] = R.uniform(
            low=min_spec_period, high=max_spec_period, size=len(periods) // 2
        )

        all_t = []
        all_masks = []
        all_wavs = []
        for idx in range(batch_size):
            if sample_regularly:
                t = np.arange(start[idx], start[idx] + duration[idx], step=sample_res)
            else:
                t = np.sort(R.random(int(num_points[idx]))) * duration[idx] + start[idx]
            wavs = np.sin(2 * np.pi / periods[idx] * t - shifts[idx])
            mask = np.ones(wavs.shape)
            all_t.append(t)
            all_masks.append(mask)
            all_wavs.append(wavs)

        lengths = [len(item) for item in all_masks]
        max_length = np.max(lengths)
        bXt = np.zeros((batch_size, max_length))
        bXmask = np.zeros((batch_size, max_length))
        bX = np.zeros((batch_size, max_length, 1))
        for idx in range(batch_size):
            bX[idx, max_length - lengths[idx] :, 0] = all_wavs[idx]
            bXmask[idx, max_length - lengths[idx] :] = all_masks[idx]
            bXt[idx, max_length - lengths[idx] :] = all_t[idx]

        bY = np.zeros(batch_size)
        bY[(periods >= min_spec_period) * (periods <= max_spec_period)] = 1

        yield bX.astype("float32"), bXmask.astype("bool"), bXt.astype("float32"), bY.astype("int32")
        b += 1


@pytest.mark.parametrize(
    "sampling, regularly, res",
    [("regular", 1, 1.0), ("high-res", 1, 0.1), ("async", 0, 0.0)],
)
def test_generator_equals_the_authors_code_on_a_seed(sampling, regularly, res):
    n = 64  # two of the authors' batches
    cfg = FreqDiscriminationConfig(sampling=sampling, n_train=n, n_val=1, n_test=1)
    mine = pack(generate(n, cfg, np.random.RandomState(7)), "time", 0, n)
    theirs = list(authors_flow(np.random.RandomState(7), regularly, res, num_examples=n))
    assert len(theirs) == 2
    rows = [(x[i], m[i], t[i], y[i]) for x, m, t, y in theirs for i in range(len(y))]
    for i, (bx, bm, bt, by) in enumerate(rows):
        L = int(mine.lengths[i])
        assert L == int(bm.sum()) and bm[-L:].all()  # theirs: padded at the front
        assert torch.equal(mine.x[i, :L, 0], torch.from_numpy(bx[-L:, 0]))
        assert torch.equal(mine.times[i, :L], torch.from_numpy(bt[-L:]))
        assert torch.equal(mine.x[i, :L, 1], mine.times[i, :L])  # the time input
        assert int(mine.y[i]) == int(by)
    assert int(mine.y.sum()) >= n // 2


# --- data: determinism, classes, regimes, inputs ----------------------------------------------


def task(**knobs):
    rc = config.resolve("gru", TASK, 0, "smoke", {k: str(v) for k, v in knobs.items()})
    return TASKS.get(TASK)(rc.task_cfg)


def test_data_are_a_function_of_data_seed_only():
    t = task()
    a, b = t.splits(0), t.splits(5)  # run seeds do not change the data
    for sa, sb in ((a.train, b.train), (a.val, b.val), (a.test, b.test)):
        for f in ("x", "y", "lengths", "times"):
            assert torch.equal(getattr(sa, f), getattr(sb, f))
    c = task(data_seed=1).splits(0)
    assert not torch.equal(a.train.y, c.train.y) or not torch.equal(a.train.x, c.train.x)
    assert a.train.x.dtype == torch.float32 and a.train.y.dtype == torch.int64


def test_classes_are_balanced_and_labels_follow_the_band():
    cfg = FreqDiscriminationConfig()
    w = generate(3200, cfg, np.random.default_rng(0))
    pos = w.labels == 1
    assert ((w.periods[pos] >= 5) & (w.periods[pos] <= 6)).all()
    assert ((w.periods[~pos] < 5) | (w.periods[~pos] > 6)).all()
    blocks = w.labels.reshape(-1, 32)
    assert (blocks[:, :16] == 1).all()  # the first half of every block is in the band
    assert 0.5 <= pos.mean() <= 0.56  # plus the second half's ~2% that falls in it
    others = np.log(w.periods.reshape(-1, 32)[:, 16:])
    assert others.min() >= 0 and others.max() <= np.log(100)
    assert abs(others.mean() - np.log(100) / 2) < 0.1  # log-uniform over 1-100 ms


def test_the_three_regimes_sample_times():
    regular = task(sampling="regular").splits(0).train
    high = task(sampling="high-res").splits(0).train
    asyn = task(sampling="async").splits(0).train
    for i in range(len(regular)):
        Lr, Lh, La = (int(s.lengths[i]) for s in (regular, high, asyn))
        step_r = regular.times[i, 1:Lr] - regular.times[i, : Lr - 1]
        torch.testing.assert_close(step_r, torch.ones(Lr - 1), rtol=0, atol=1e-4)
        step_h = high.times[i, 1:Lh] - high.times[i, : Lh - 1]
        torch.testing.assert_close(step_h, torch.full((Lh - 1,), 0.1), rtol=0, atol=1e-4)
        # the same windows at ten times the rate (regular and high-res draw the same waves)
        assert abs(float(high.times[i, 0] - regular.times[i, 0])) < 1e-5
        assert 10 * Lr - 10 <= Lh <= 10 * Lr
        ta = asyn.times[i, :La]
        assert bool((ta[1:] >= ta[:-1]).all()) and 10 <= La < 20  # smoke: U(10, 20) points
        assert float(ta[0]) >= 0 and float(ta[-1]) <= 20  # inside the span of the windows
        # padding repeats the last time and holds zeros
        for s, L in ((regular, Lr), (high, Lh), (asyn, La)):
            assert bool((s.times[i, L:] == s.times[i, L - 1]).all())
            assert bool((s.x[i, L:] == 0).all())
    assert not torch.equal(asyn.lengths, regular.lengths)


def test_time_input_feature_and_input_size():
    base = task(time_input="time")
    s = base.splits(0).test
    assert base.input_size == 2 == s.x.shape[-1]
    for i in range(len(s)):
        L = int(s.lengths[i])
        assert torch.equal(s.x[i, :L, 1], s.times[i, :L])
        # the value is the wave at those times
        assert bool((s.x[i, :L, 0].abs() <= 1).all())
    gap = task(time_input="gap")
    g = gap.splits(0).test
    for i in range(len(g)):
        L = int(g.lengths[i])
        assert float(g.x[i, 0, 1]) == 0
        torch.testing.assert_close(g.x[i, 1:L, 1], s.times[i, 1:L] - s.times[i, : L - 1])
        assert torch.equal(g.x[i, :L, 0], s.x[i, :L, 0])
    none = task(time_input="none")
    assert none.input_size == 1 == none.splits(0).test.x.shape[-1]


@pytest.mark.parametrize(
    "knob, value",
    [
        ("sampling", "bogus"),
        ("time_input", "clock"),
        ("band_low", "7"),
        ("min_points", "0"),
        ("max_duration", "5"),
        ("regular_ms", "0"),
    ],
)
def test_bad_knobs_are_config_errors(knob, value):
    with pytest.raises(ConfigError):
        config.resolve("gru", TASK, 0, "smoke", {knob: value})


def test_bad_knob_on_the_command_line_is_one_line_and_exit_2(harness):
    r = harness("run", "--tasks", TASK, "--methods", "gru", "--set", "sampling=often")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (
        len(r.stderr.strip().splitlines()) == 1 and "sampling='often' is out of range" in r.stderr
    )


def test_paper_preset_gives_phased_lstm_no_time_input_and_the_codes_gate():
    for preset in ("smoke", "quick", "paper"):
        assert config.resolve("phased-lstm", TASK, 0, preset).task_cfg.time_input == "none"
        assert config.resolve("gru", TASK, 0, preset).task_cfg.time_input == "time"
    plstm = config.resolve("phased-lstm", TASK, 0, "paper")
    lstm = config.resolve("lstm", TASK, 0, "paper")
    assert plstm.task_cfg.time_input == "none" and lstm.task_cfg.time_input == "time"
    assert plstm.method_cfg.r_on == 0.05
    assert abs(np.log(plstm.method_cfg.period_low) - 1) < 1e-12
    assert abs(np.log(plstm.method_cfg.period_high) - 3) < 1e-12
    assert lstm.model.hidden_size == 110 and lstm.train.epochs == 70
    assert lstm.task_cfg.n_train == 5000


# --- times through Split, Batch, the model and the trainer ----------------------------------------


def test_split_and_batch_carry_times():
    x, y = torch.randn(5, 4, 1), torch.arange(5)
    times = torch.arange(20.0).reshape(5, 4)
    with pytest.raises(ValueError, match="times must be"):
        Split(x, y, times=times[:, :3])
    s = Split(x, y, torch.full((5,), 4), times)
    gen = torch.Generator().manual_seed(0)
    for b in s.batches(2, shuffle=True, generator=gen):
        idx = b.y
        assert torch.equal(b.times, times[idx]) and torch.equal(b.x, x[idx])
        assert torch.equal(b.to("cpu").times, b.times)
    assert Batch(x, y).to("cpu").times is None
    assert all(b.times is None for b in Split(x, y).batches(2))


def plstm(V=2, D=4):
    cls = METHODS.get("phased-lstm")
    torch.manual_seed(0)
    return cls(V, D, cls.config_cls(period_low=2.5, period_high=6.0)).double()


@pytest.mark.parametrize("mode", [True, False])
def test_phased_lstm_reads_the_times(mode):
    m = plstm().train(mode)
    x = torch.randn(3, 11, 2, dtype=torch.double)
    plain = m(x)
    steps = torch.arange(11, dtype=torch.double).expand(3, 11)
    same = m(x, times=steps)  # times 0, 1, 2, ...: exactly no times
    assert torch.equal(same.outputs, plain.outputs) and torch.equal(same.mask, plain.mask)
    assert torch.equal(m.step_loop(x, times=steps).outputs, m.step_loop(x).outputs)
    warped = torch.sort(torch.rand(3, 11, dtype=torch.double) * 30, dim=1).values
    moved = m(x, times=warped)
    assert not torch.allclose(moved.outputs, plain.outputs)
    # the gate is that of the given times, in the fast forward and in the step loop alike
    k = m.time_gate(torch.zeros(3, dtype=torch.long), 11, warped)
    assert torch.equal(moved.mask, (k > 0).double())
    loop = m.step_loop(x, times=warped)
    torch.testing.assert_close(loop.outputs, moved.outputs, rtol=1e-12, atol=1e-12)
    assert torch.equal(loop.mask, moved.mask)
    g = torch.autograd.grad(moved.outputs.sum(), [m.shift])[0]
    assert bool(torch.isfinite(g).all()) and bool((g != 0).any())


def smoke_model(method):
    rc = config.resolve(method, TASK, 0, "smoke")
    t, model = build(rc)
    return t, model, t.splits(0)


def test_the_model_passes_times_only_to_methods_that_use_them(monkeypatch):
    seen = []
    for method in ("phased-lstm", "gru"):
        t, model, splits = smoke_model(method)
        cls = type(model.layers[0])
        original = cls.forward

        def spy(self, *args, _original=original, **kwargs):
            seen.append((self.name, "times" in kwargs, kwargs.get("times")))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "forward", spy)
        evaluate(model, t, splits.val, 1000, "cpu")  # the trainer's call
        b = next(splits.val.batches(1000))
        model.eval()
        model(b.x, b.lengths, b.times)
        monkeypatch.setattr(cls, "forward", original)
    by_name = {}
    for name, passed, times in seen:
        by_name.setdefault(name, []).append((passed, times))
    assert all(
        passed and torch.equal(times, splits.val.times) for passed, times in by_name["phased-lstm"]
    )
    assert by_name["gru"] and all(not passed for passed, _ in by_name["gru"])


def test_the_trainer_feeds_phased_lstm_the_task_times():
    t, model, splits = smoke_model("phased-lstm")
    with_times = evaluate(model, t, splits.val, 1000, "cpu").metrics
    no_times = Split(splits.val.x, splits.val.y, splits.val.lengths)
    without = evaluate(model, t, no_times, 1000, "cpu").metrics
    assert with_times["skip_pct"] != without["skip_pct"]  # the gate ran on other clocks


def test_stacked_layers_all_get_the_times():
    rc = config.resolve("phased-lstm", TASK, 0, "smoke", {"num_layers": "2"})
    t = TASKS.get(TASK)(rc.task_cfg)
    model = SeqModel(METHODS.get("phased-lstm"), rc.method_cfg, t, rc.model).eval()
    b = next(t.splits(0).test.batches(8))
    out = model(b.x, b.lengths, b.times)
    for layer, trace in zip(model.layers, out.layers, strict=True):
        k = layer.time_gate(torch.zeros(8, dtype=torch.long), b.x.shape[1], b.times)
        assert torch.equal(trace.mask, (k > 0).float())


# --- every method trains on it --------------------------------------------------------------------


def test_every_method_runs_the_smoke_preset(harness):
    args = f"run --tasks {TASK} --methods all --preset smoke --out s.jsonl --no-report"
    harness(*args.split(), check=True)
    recs = [json.loads(line) for line in open("s.jsonl")]
    assert {r["method"] for r in recs} == set(METHODS.names())
    assert {r["method"]: r["error"] for r in recs if r["status"] != "ok"} == {}
    for r in recs:
        assert 0 <= r["metrics"]["accuracy"] <= 100 and r["data"]["sampling"] == "regular"
