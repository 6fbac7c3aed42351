"""Frequency discrimination: is a sine wave's period inside a target band? (Phased LSTM, 4.1)

Paper: Neil, Pfeiffer, Liu, "Phased LSTM: Accelerating Recurrent Network Training for Long or
Event-based Sequences", NeurIPS 2016, https://arxiv.org/abs/1610.09513, section 4.1 and Figure 3.
Also Skip RNN (Campos et al., ICLR 2018, https://arxiv.org/abs/1708.06834), appendix A.1 and
Table 4, which reuses the task at regular sampling. The data generator follows the Phased LSTM
authors' code, ``dannyneil/public_plstm @ 3abf8de978154eb71caf080f70448cce08883ffb : freq_task.py``
(``SinWaveIterator.flow``; its runs: ``a_freq_task.sh``); ``tests/test_freq_discrimination.py``
checks ``generate`` against a transcription of it.

What the paper and that code set (times in ms):

- Each sequence samples ``sin(2 pi t / P - phi)`` over a window of ``duration ~ U(15, 125)``
  starting at ``start ~ U(0, 125 - duration)``; ``phi ~ U(0, duration)`` (the code's phase
  shift, in radians).
- Periods: sequences are drawn in blocks of 32 (the code's batch size); in each block the first
  half has ``P ~ U(5, 6)``, the target band, and the second half ``P ~ exp(U(ln 1, ln 100))``.
  The label is 1 when ``5 <= P <= 6``, so about 52% of the sequences are positive (2% of the
  second half falls in the band); the paper calls the classes "approximately balanced".
- Sampling regimes (section 4.1; ``sampling``): ``regular``, a sample every 1 ms (the paper's
  standard condition: 15 to 125 samples); ``high-res``, every 0.1 ms (150 to 1250 samples);
  ``async``, ``n ~ U(15, 125)`` sample times drawn uniformly in the window and sorted (about the
  number of samples of the regular regime).
- Models (section 4.1): one layer of 110 units and a 2-way read-out of the last step. The LSTM
  and BN-LSTM baselines got the timestamp as a second input (2-110-2, in every regime); Phased
  LSTM got only the sample value (1-110-2) and used the times in its time gate, periods
  ``exp(U(1, 3))`` ms, r_on 0.05, shift ``U(0, 100)``. Adam at 1e-3, batch 32, 70 epochs, five
  seeds; 5,000 training and 500 test sequences per epoch.

The task: a sequence is ``x [T, V]``: the sample value, then (``time_input``) the sample time in
ms (``time``, what the paper's LSTMs received, the default), the gap since the previous sample
(``gap``, 0 at the first) or nothing (``none``). Every split also carries the sample times
(``Split.times``); the model passes them only to methods that set ``uses_times`` (Phased LSTM,
whose time gate then runs on them). The others see the samples one step apart and know the time
only through that input. Sequences have different lengths: they are padded at the end and read
out at their last true sample (``lengths``). Two logits, cross-entropy, accuracy in percent.

Differences from the paper:
- The data are a fixed function of ``data_seed`` (generated once, split 5000/500/500 by default);
  the authors drew fresh sequences every epoch. Run seeds vary the model and shuffling.
- The paper's text (and Skip RNN's A.1, citing it) gives the classes as ``U(5, 6)`` and
  ``U(1, 5) U U(6, 100)``; we follow the authors' code above (log-uniform periods over 1-100 ms
  for the second half of a block, about 52% positives). Skip RNN's own generator (not used here)
  draws the negatives uniformly outside the band and balances its batches exactly.
- Right-padding with true lengths replaces the code's left-padding with a mask; the outputs at
  the last sample are the same.
- The code's read-out is a 2-unit leaky-ReLU layer before the softmax; ours is linear. The code
  clips gradients inside the LSTM layer (Lasagne ``grad_clipping=10``); the paper preset keeps
  the harness's global-norm clipping at 1 [INFERRED: the paper states no clipping].
- Every preset gives every method the timestamp input except Phased LSTM (as in the paper);
  BN-LSTM is not a method here.
- Phased LSTM's periods and shifts are in ms when the task passes times; in the paper preset its
  periods start at ``exp(U(1, 3))`` and r_on at 0.05 (the code's), its shifts at ``U(0, P)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from harness.components.config import (
    MAX_SEED,
    MAX_SEQ_LEN,
    MAX_SPLIT,
    ModelConfig,
    Preset,
    TrainConfig,
    check_data_steps,
    check_knobs,
    knob,
)
from harness.components.registry import register_task
from harness.components.task import Split, Splits, Task, TaskKind
from harness.errors import ConfigError

SAMPLINGS = ("regular", "high-res", "async")
TIME_INPUTS = ("time", "gap", "none")
MAX_MS = 1e6  # times in ms: 1,000 s, 8,000 times the paper's longest window
BLOCK = 32  # sequences drawn together; the first half of each block has its period in the band


@dataclass(frozen=True)
class FreqDiscriminationConfig:
    """Knobs of the frequency-discrimination task (times in ms).

    Attributes:
        n_train: training sequences.
        n_val: validation sequences.
        n_test: test sequences.
        sampling: ``regular`` (every ``regular_ms``), ``high-res`` (every ``high_res_ms``) or
            ``async`` (``U(min_points, max_points)`` random sorted times).
        time_input: the second input feature: ``time`` (the sample time), ``gap`` (time since
            the previous sample) or ``none`` (the value only).
        regular_ms: the sampling interval of the regular regime.
        high_res_ms: the sampling interval of the high-resolution regime.
        min_duration: windows last ``U(min_duration, max_duration)``.
        max_duration: also the end of the time span every window lies in.
        min_points: the asynchronous regime draws ``int(U(min_points, max_points))`` samples.
        max_points: see ``min_points``.
        min_period: periods outside the band's half are ``exp(U(ln min_period, ln max_period))``.
        max_period: see ``min_period``.
        band_low: the target band ``[band_low, band_high]`` of the positive class.
        band_high: see ``band_low``.
        data_seed: the data are a fixed function of it.
    """

    n_train: int = knob(5000, ge=1, le=MAX_SPLIT)
    n_val: int = knob(500, ge=1, le=MAX_SPLIT)
    n_test: int = knob(500, ge=1, le=MAX_SPLIT)
    sampling: str = knob("regular", choices=SAMPLINGS)
    time_input: str = knob("time", choices=TIME_INPUTS)
    regular_ms: float = knob(1.0, gt=0, le=MAX_MS)
    high_res_ms: float = knob(0.1, gt=0, le=MAX_MS)
    min_duration: float = knob(15.0, gt=0, le=MAX_MS)
    max_duration: float = knob(125.0, gt=0, le=MAX_MS)
    min_points: int = knob(15, ge=1, le=MAX_SEQ_LEN)
    max_points: int = knob(125, ge=1, le=MAX_SEQ_LEN)
    min_period: float = knob(1.0, gt=0, le=MAX_MS)
    max_period: float = knob(100.0, gt=0, le=MAX_MS)
    band_low: float = knob(5.0, gt=0, le=MAX_MS)
    band_high: float = knob(6.0, gt=0, le=MAX_MS)
    data_seed: int = knob(0, ge=0, le=MAX_SEED)

    def __post_init__(self) -> None:
        name = "freq-discrimination"
        check_knobs(self, "task", name)
        if not self.min_duration <= self.max_duration:
            raise ConfigError(
                f"{name}: need min_duration <= max_duration (got min_duration="
                f"{self.min_duration:g}, max_duration={self.max_duration:g})"
            )
        if not self.min_points <= self.max_points:
            raise ConfigError(
                f"{name}: need min_points <= max_points (got min_points={self.min_points}, "
                f"max_points={self.max_points})"
            )
        if not self.min_period <= self.band_low < self.band_high <= self.max_period:
            raise ConfigError(
                f"{name}: need min_period <= band_low < band_high <= max_period (got "
                f"min_period={self.min_period:g}, band_low={self.band_low:g}, "
                f"band_high={self.band_high:g}, max_period={self.max_period:g})"
            )
        longest, formula = self.longest()
        if longest > MAX_SEQ_LEN:  # async: max_points is bounded by it already
            key = formula.split(" / ")[1]
            raise ConfigError(
                f"{name}: sampling={self.sampling} gives sequences of up to {formula} = "
                f"{self.max_duration:g} / {getattr(self, key):g} = {longest:,} steps, more than "
                f"{MAX_SEQ_LEN:,}; raise {key} or lower max_duration"
            )
        n = self.n_train + self.n_val + self.n_test
        check_data_steps(name, f"(n_train + n_val + n_test) * {formula}", n * longest)

    def longest(self) -> tuple[float, str]:
        """The most samples one sequence can have in this regime, and the fields that give it."""
        if self.sampling == "async":
            return self.max_points, "max_points"
        key = "regular_ms" if self.sampling == "regular" else "high_res_ms"
        ratio = self.max_duration / getattr(self, key)  # inf for a subnormal interval
        return (math.ceil(ratio) if math.isfinite(ratio) else ratio), f"max_duration / {key}"


@dataclass
class Waves:
    """Generated sequences: per-sequence sample times and values, periods and labels."""

    times: list[np.ndarray]
    values: list[np.ndarray]
    periods: np.ndarray
    labels: np.ndarray


def sample_times(
    cfg: FreqDiscriminationConfig, start: float, duration: float, points: float, rng
) -> np.ndarray:
    """The sample times of one window ``[start, start + duration)`` in the configured regime."""
    if cfg.sampling == "async":
        return np.sort(rng.random(int(points))) * duration + start
    step = cfg.regular_ms if cfg.sampling == "regular" else cfg.high_res_ms
    return np.arange(start, start + duration, step=step)


def generate(n: int, cfg: FreqDiscriminationConfig, rng) -> Waves:
    """``n`` sequences, drawn in blocks of ``BLOCK`` as the authors' generator draws a batch.

    Args:
        n: how many sequences (the last block is cut).
        cfg: the task's knobs.
        rng: a ``numpy.random.Generator`` (or ``RandomState``: the same calls, the same stream
            as the authors' global ``np.random``).

    Returns:
        The sample times and values (float64) of each sequence, their periods and labels.
    """
    times: list[np.ndarray] = []
    values: list[np.ndarray] = []
    periods, labels = [], []
    half = BLOCK // 2
    log_lo, log_hi = math.log(cfg.min_period), math.log(cfg.max_period)
    for _ in range(-(-n // BLOCK)):
        points = rng.uniform(cfg.min_points, cfg.max_points, size=BLOCK)
        duration = rng.uniform(cfg.min_duration, cfg.max_duration, size=BLOCK)
        start = rng.uniform(0.0, cfg.max_duration - duration, size=BLOCK)
        period = np.exp(rng.uniform(log_lo, log_hi, size=BLOCK))
        shift = rng.uniform(0.0, duration, size=BLOCK)
        period[:half] = rng.uniform(cfg.band_low, cfg.band_high, size=half)
        for i in range(BLOCK):
            t = sample_times(cfg, start[i], duration[i], points[i], rng)
            times.append(t)
            values.append(np.sin(2 * np.pi / period[i] * t - shift[i]))
        periods.append(period)
        labels.append((period >= cfg.band_low) & (period <= cfg.band_high))
    return Waves(
        times[:n],
        values[:n],
        np.concatenate(periods)[:n],
        np.concatenate(labels)[:n].astype(np.int64),
    )


def pack(waves: Waves, time_input: str, lo: int, hi: int) -> Split:
    """Sequences ``lo..hi-1``, padded at the end, as one ``Split`` with lengths and times.

    Padded steps hold zeros and repeat the last sample time (times stay non-decreasing).
    """
    seqs = list(zip(waves.times[lo:hi], waves.values[lo:hi], strict=True))
    lengths = np.array([len(t) for t, _ in seqs], dtype=np.int64)
    T = int(lengths.max())
    V = 1 if time_input == "none" else 2
    x = np.zeros((len(seqs), T, V), dtype=np.float32)
    times = np.zeros((len(seqs), T), dtype=np.float64)
    for i, (t, v) in enumerate(seqs):
        L = len(t)
        x[i, :L, 0] = v
        times[i, :L] = t
        times[i, L:] = t[-1]
        if time_input == "time":
            x[i, :L, 1] = t
        elif time_input == "gap":
            x[i, 1:L, 1] = np.diff(t)
    return Split(
        torch.from_numpy(x),
        torch.from_numpy(waves.labels[lo:hi].copy()),
        torch.from_numpy(lengths),
        torch.from_numpy(times.astype(np.float32)),
    )


# As in the paper, Phased LSTM reads the value only: the times drive its gate instead.
_VALUE_ONLY = {"time_input": "none"}


def _presets() -> dict[str, Preset]:
    return {
        "smoke": Preset(
            train=TrainConfig(epochs=2, batch_size=32, lr=1e-2, eval_batch_size=500),
            model=ModelConfig(hidden_size=10),
            task={
                "n_train": 128,
                "n_val": 32,
                "n_test": 32,
                "min_duration": 10.0,
                "max_duration": 20.0,
                "min_points": 10,
                "max_points": 20,
            },
            methods={"phased-lstm": _VALUE_ONLY},
        ),
        # Windows of at most 60 ms (60 regular steps) keep the slowest method to minutes. 40
        # epochs: most methods sit at chance (loss ln 2) for 3 to 35 epochs before they find
        # the task; after 10 epochs (the first quick preset) half of them were still at chance
        # (EGRU 53 %, Clockwork 52 % at seed 0; 83 % and 87 % after 40).
        "quick": Preset(
            train=TrainConfig(epochs=40, batch_size=64, lr=3e-3, eval_batch_size=500),
            model=ModelConfig(hidden_size=32),
            task={"n_train": 2048, "n_val": 256, "n_test": 256, "max_duration": 60.0},
            # 10 clockwork modules do not divide D = 32
            methods={"phased-lstm": _VALUE_ONLY, "clockwork-rnn": {"num_modules": 8}},
        ),
        # Phased LSTM 4.1 and its code: D = 110, Adam 1e-3, batch 32, 70 epochs, 5000 sequences.
        "paper": Preset(
            train=TrainConfig(epochs=70, batch_size=32, lr=1e-3, eval_batch_size=500),
            model=ModelConfig(hidden_size=110),
            methods={
                "phased-lstm": {
                    **_VALUE_ONLY,
                    "r_on": 0.05,
                    "period_low": math.e,
                    "period_high": math.e**3,
                }
            },
        ),
    }


@register_task("freq-discrimination")
class FreqDiscrimination(Task):
    """Is a sampled sine wave's period in the 5-6 ms band? (accuracy, higher is better)."""

    kind = TaskKind.CLASSIFICATION
    readout = "last"
    primary = "accuracy"
    higher_is_better = True
    config_cls = FreqDiscriminationConfig
    presets = _presets()
    description = "Phased LSTM 4.1 sine-period discrimination, regular/high-res/async sampling"

    @property
    def input_size(self) -> int:
        return 1 if self.cfg.time_input == "none" else 2

    @property
    def output_size(self) -> int:
        return 2

    def splits(self, seed: int) -> Splits:
        cfg = self.cfg
        n = cfg.n_train + cfg.n_val + cfg.n_test
        waves = generate(n, cfg, np.random.default_rng(cfg.data_seed))
        a, b = cfg.n_train, cfg.n_train + cfg.n_val
        parts = [pack(waves, cfg.time_input, i, j) for i, j in ((0, a), (a, b), (b, n))]
        lengths = np.array([len(t) for t in waves.times])
        info = {
            "sampling": cfg.sampling,
            "mean_length": float(lengths.mean()),
            "max_length": int(lengths.max()),
            "positive_pct": float(100.0 * waves.labels.mean()),
        }
        return Splits(*parts, info=info)
