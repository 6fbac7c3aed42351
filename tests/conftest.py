import os
from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if "HARNESS_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["HARNESS_DATA_DIR"] = str(SHARED_DATA)

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
