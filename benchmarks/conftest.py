import torch

from harness.env import flush_denormals


def pytest_configure(config):
    torch.manual_seed(0)
    flush_denormals()  # as the harness's runs and timings do
