"""Inference and one training step of every registered method's model, on CPU and on CUDA when
available (advisory timing; never a pass/fail gate).

Each method's model is built as a run would build it (``harness.config.resolve`` +
``harness.train.build``) at the sizes of one task preset, and timed on one batch of the task's
test split:
- ``inference``: eval mode, ``no_grad``, one forward pass (batch of ``train.eval_batch_size``);
- ``train``: train mode, forward + task loss + aux loss, backward, gradient clipping, Adam step,
  as ``harness.train.train_model`` does it (batch of ``train.batch_size``).
Batches are cut from the test split, so they are smaller when the split is.

``harness bench`` runs this file and turns its pytest-benchmark JSON into timing records and
``reports/TIMING.md``; ``tox -e bench`` runs it with the defaults. Environment variables:

- ``HARNESS_BENCH_METHODS``: names or globs, comma-separated (default ``all``);
- ``HARNESS_BENCH_TASK`` / ``HARNESS_BENCH_PRESET``: sizes to time at (default adding / smoke);
- ``HARNESS_BENCH_SET``: JSON object of config overrides (``{"seq_len": 5}``);
- ``HARNESS_BENCH_DEVICE``: ``cpu``, ``cuda`` or ``auto`` (default: CPU, plus CUDA when present);
- ``HARNESS_BENCH_ROUNDS`` / ``HARNESS_BENCH_WARMUP``: timed and warm-up rounds (10 / 2);
- ``HARNESS_BENCH_THREADS``: torch CPU threads (default 0: torch's default).
"""

from __future__ import annotations

import functools
import json
import os

import pytest
import torch

from harness import env
from harness.config import resolve
from harness.registry import METHODS
from harness.timing import synced
from harness.train import build

TASK = os.environ.get("HARNESS_BENCH_TASK", "adding")
PRESET = os.environ.get("HARNESS_BENCH_PRESET", "smoke")
OVERRIDES = json.loads(os.environ.get("HARNESS_BENCH_SET") or "{}")
ROUNDS = int(os.environ.get("HARNESS_BENCH_ROUNDS", "10"))
WARMUP = int(os.environ.get("HARNESS_BENCH_WARMUP", "2"))
THREADS = int(os.environ.get("HARNESS_BENCH_THREADS", "0"))
DEVICE = os.environ.get("HARNESS_BENCH_DEVICE", "auto")
SEED = 0

if THREADS > 0:
    torch.set_num_threads(THREADS)

_NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
DEVICES = {
    "auto": [pytest.param("cpu"), pytest.param("cuda", marks=[_NO_CUDA, pytest.mark.cuda])],
    "cpu": [pytest.param("cpu")],
    "cuda": [pytest.param("cuda", marks=[_NO_CUDA, pytest.mark.cuda])],
}[DEVICE]


@functools.lru_cache(maxsize=4)
def held_out_split(task_name: str, task_cfg, seed: int):
    """The test split, built once per task config (methods may override task fields)."""
    from harness.registry import TASKS

    return TASKS.get(task_name)(task_cfg).splits(seed).test


def make_phase(method: str, phase: str, device: torch.device):
    """(function to time, extra_info) for one method and phase on one device."""
    cfg = resolve(method, TASK, SEED, PRESET, OVERRIDES)
    task, model = build(cfg)
    model.to(device)
    split = held_out_split(cfg.task, cfg.task_cfg, cfg.seed)
    B = cfg.train.eval_batch_size if phase == "inference" else cfg.train.batch_size
    batch = next(iter(split.batches(B))).to(device)
    info = {
        "method": method,
        "task": cfg.task,
        "preset": cfg.preset,
        "seed": cfg.seed,
        "phase": phase,
        "device": device.type,
        "device_name": env.device_name(device),
        "sizes": {
            "B": int(batch.x.shape[0]),
            "T": int(batch.x.shape[1]),
            "V": int(task.input_size),
            "D": cfg.model.hidden_size,
            "layers": cfg.model.num_layers,
        },
        "params": sum(p.numel() for p in model.parameters()),
        "rounds": ROUNDS,
        "warmup_rounds": WARMUP,
        "config": cfg.to_dict(),
        "env": env.environment(device),
    }
    if phase == "inference":
        model.eval()

        @torch.no_grad()
        def step():
            return model(batch.x, batch.lengths).pred

        return synced(step, device), info

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    model.on_epoch_start(0, cfg.train.epochs)
    model.train()

    def train_step():  # harness.train.train_model's inner loop, one batch
        out = model(batch.x, batch.lengths)
        loss = task.loss(out.pred, batch)
        total = loss if out.aux_loss is None else loss + out.aux_loss
        opt.zero_grad(set_to_none=True)
        total.backward()
        if cfg.train.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.train.clip)
        opt.step()

    return synced(train_step, device), info


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("phase", ["inference", "train"])
@pytest.mark.parametrize("method", METHODS.resolve(os.environ.get("HARNESS_BENCH_METHODS", "all")))
def test_method_timing(benchmark, method: str, phase: str, device: str):
    benchmark.group = f"{TASK}-{PRESET}-{phase}-{device}"
    fn, info = make_phase(method, phase, torch.device(device))
    benchmark.extra_info.update(info)
    benchmark.pedantic(fn, rounds=ROUNDS, warmup_rounds=WARMUP, iterations=1)
