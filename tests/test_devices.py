"""``--device`` resolution (``harness.env``): the one device to run on, and every device
the
timing suite times on."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from harness import env
from harness.errors import HarnessError


@pytest.fixture(params=[False, True], ids=["no-cuda", "cuda"])
def cuda(request, monkeypatch):
    """Whether torch says a CUDA device is available (both answers, on any machine)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: request.param)
    return request.param


def test_resolve_device_gives_the_one_device_to_run_on(cuda):
    assert env.resolve_device("cpu") == torch.device("cpu")
    assert env.resolve_device("auto") == torch.device("cuda" if cuda else "cpu")
    if cuda:
        assert env.resolve_device("cuda") == torch.device("cuda")


def test_bench_devices_are_every_device_to_time_on(cuda):
    assert env.bench_devices("cpu") == [torch.device("cpu")]
    want = ["cpu", "cuda"] if cuda else ["cpu"]
    assert env.bench_devices("auto") == [torch.device(d) for d in want]
    if cuda:
        assert env.bench_devices("cuda") == [torch.device("cuda")]


@pytest.mark.parametrize("resolve", [env.resolve_device, env.bench_devices])
def test_cuda_without_cuda_and_unknown_names_are_one_line_errors(resolve, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(HarnessError) as e:
        resolve("cuda")
    assert str(e.value) == "--device cuda requested but no CUDA device is available"
    for bad in ("tpu", "cuda:0", "CPU", ""):
        with pytest.raises(HarnessError) as e:
            resolve(bad)
        assert str(e.value) == f"Unknown device '{bad}'. Use cpu, cuda or auto"


def test_importing_env_does_not_import_torch():
    probe = "import sys, harness.env; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
