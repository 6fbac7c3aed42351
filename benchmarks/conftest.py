import torch

from harness.env import run_conditions


def pytest_configure(config):
    torch.manual_seed(0)
    run_conditions()  # as the harness's runs and timings do
