"""Executors give the same records as a serial run (only timings and order may differ)."""

import pytest

from harness import config
from harness.executors import LocalExecutor
from harness.reporting.compare import compare

CONFIGS = [config.resolve(m, "adding", s, "smoke") for m in ("gru", "sa-rnn") for s in (0, 1)]


@pytest.fixture(scope="module")
def serial():
    return [rec for _, rec in LocalExecutor(workers=1).map(CONFIGS)]


def _same(a, b):
    res = compare(a, b)
    assert res.matched == len(CONFIGS) and res.ok, res.drifted


def test_process_pool_matches_serial(serial):
    pooled = [rec for _, rec in LocalExecutor(workers=2).map(CONFIGS)]
    _same(serial, pooled)
    assert {r["env"]["threads"] for r in pooled} == {1}
    # every run flushes subnormals (x86: set_flush_denormal works), in the pool's fresh processes
    assert {r["env"]["flush_denormal"] for r in [*serial, *pooled]} == {True}


def test_flush_denormals_zeroes_subnormals():
    import torch

    from harness.env import flush_denormals

    assert flush_denormals()
    tiny = torch.tensor([1e-39, 1e-30], dtype=torch.float32)  # 1e-39 is subnormal in float32
    assert (tiny * 1.0).tolist()[0] == 0.0 and (tiny * 1.0).tolist()[1] > 0


def test_ray_matches_serial(serial):
    pytest.importorskip("ray", reason="the ray extra is not installed")
    from harness.executors import RayExecutor

    ex = RayExecutor()  # starts a real local Ray instance
    try:
        recs = [rec for _, rec in ex.map(CONFIGS)]
    finally:
        ex.shutdown()
    _same(serial, recs)


def test_bad_workers_is_an_error():
    from harness.errors import HarnessError

    with pytest.raises(HarnessError):
        LocalExecutor(workers=0)
