import os
from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if "HARNESS_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["HARNESS_DATA_DIR"] = str(SHARED_DATA)

torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Derived-data caches (e.g. rebuilt HAR windows) go to a per-session dir, not ~/.cache."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
