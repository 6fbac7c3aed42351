import os
from pathlib import Path
from typing import NamedTuple

import netns
import pytest
import torch
import torch.utils.cpp_extension
from kernel_support import fresh_cache

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if "HARNESS_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["HARNESS_DATA_DIR"] = str(SHARED_DATA)

torch.set_num_threads(1)

# The default run tests the PyTorch fast paths and never compiles a kernel: each session has a
# private cache dir, so a build would cost about a minute every time (the kernel library, every
# kernel in one build, once a session). Tests marked ``kernel`` (run with
# ``-m kernel``) opt back in, unless kernels were switched off for the whole run.
KERNELS_OFF_BY_USER = bool(os.environ.get("HARNESS_NO_KERNELS"))
os.environ["HARNESS_NO_KERNELS"] = "1"


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Derived-data caches (e.g. rebuilt HAR windows, the kernel library) go to a per-session
    dir, not ~/.cache; or to the dir ``HARNESS_TEST_CACHE`` names, kept between sessions (a
    developer's repeated kernel runs then build the library once, not once a session)."""
    old = os.environ.get("XDG_CACHE_HOME")
    kept = os.environ.get("HARNESS_TEST_CACHE")
    os.environ["XDG_CACHE_HOME"] = kept or str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(autouse=True)
def _kernels_only_where_marked(request, monkeypatch):
    if request.node.get_closest_marker("kernel") and not KERNELS_OFF_BY_USER:
        monkeypatch.delenv("HARNESS_NO_KERNELS")


@pytest.fixture
def fresh_kernel(tmp_path, monkeypatch):
    """An empty build cache and kernels that nothing in this process has asked for yet (its
    kernels dir; ``kernel_support.fresh_cache``)."""
    yield from fresh_cache(tmp_path, monkeypatch)


@pytest.fixture
def no_build(monkeypatch):
    """Fail the test if anything starts building a kernel."""

    def load(*args, **kwargs):
        pytest.fail("the C++ kernel was built")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


class CliResult(NamedTuple):
    """What one in-process ``harness`` call gave: exit code, stdout, stderr."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def harness(tmp_path, monkeypatch, capsys):
    """``harness(*args)``: the CLI (``harness.cli.main``) called in-process in ``tmp_path``."""
    from harness.cli import main

    monkeypatch.chdir(tmp_path)

    def call(*args: str, check: bool = False) -> CliResult:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse: --help, usage errors
            code = e.code
        out, err = capsys.readouterr()
        if check:
            assert code == 0, err
        return CliResult(code, out, err)

    return call


def pytest_runtest_setup(item):
    if item.get_closest_marker("netns") and not netns.inside() and (why := netns.unavailable()):
        pytest.skip(f"starts servers, so runs only in a private network namespace: {why}")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A ``netns`` test outside such a namespace runs in one (see ``netns.py``), not here."""
    if pyfuncitem.get_closest_marker("netns") and not netns.inside():
        netns.run_inside(pyfuncitem)
        return True
    return None
