"""``--executor ray --ray-address`` against a real Ray cluster with token authentication.

``.ci/ray-cluster`` starts the cluster (``ray start --head``, ``RAY_AUTH_MODE=token`` and a fresh
``RAY_AUTH_TOKEN``) in a network namespace that holds loopback alone and runs these tests there,
with ``HARNESS_TEST_RAY_CLUSTER`` set to its address and the token in the environment. Anywhere
else they skip. The token reaches the harness as Ray documents it (the two variables); a missing
or wrong one, or an address nothing answers at, is one line and exit code 2.
"""

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from harness.components import config
from harness.executors import ExecutorOptions, RunOptions, make_executor
from harness.reporting.compare import compare

ADDRESS = os.environ.get("HARNESS_TEST_RAY_CLUSTER")
LOOPBACK_ALONE = {name for _, name in socket.if_nameindex()} == {"lo"}
pytestmark = [
    pytest.mark.ray_cluster,
    pytest.mark.skipif(
        not (ADDRESS and LOOPBACK_ALONE),
        reason="needs the Ray cluster with token authentication that .ci/ray-cluster starts, "
        "in a network namespace holding loopback alone",
    ),
]
SWEEP = ("run", "--tasks", "adding", "--methods", "gru,sa-rnn", "--seeds", "0-1")
SWEEP += ("--preset", "smoke", "--no-report")
AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
RAY_LOG = re.compile(r"\b(INFO|WARNING) \S+\.py:\d+ -- ")  # a line of Ray's Python logging


def harness(tmp_path, *args, **env):
    """``harness`` in a process of its own, in ``tmp_path``; ``env`` over this one's (None: unset).

    HOME is ``tmp_path``: no ``~/.ray/auth_token`` of this machine's stands in for a token.
    The timeout only keeps a hang from stalling CI (Ray used to retry for minutes).
    """
    env = {**os.environ, "HOME": str(tmp_path), "OMP_NUM_THREADS": "1", **env}
    env = {k: v for k, v in env.items() if v is not None}
    cmd = [sys.executable, "-m", "harness", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def one_line_error(p, *needles):
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stderr[-3000:])
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_sweep_on_the_cluster_with_the_token_gives_the_serial_records(tmp_path):
    assert os.environ["RAY_AUTH_MODE"] == "token" and os.environ["RAY_AUTH_TOKEN"]
    ray = harness(tmp_path, *SWEEP, "--executor", "ray", "--ray-address", ADDRESS, "--out", "r")
    assert ray.returncode == 0, ray.stderr[-3000:]
    assert not RAY_LOG.search(ray.stderr), ray.stderr[-3000:]  # shown with -v only
    serial = harness(tmp_path, *SWEEP, "--out", "s")
    assert serial.returncode == 0, serial.stderr[-3000:]
    got, want = records(tmp_path / "r" / "runs.jsonl"), records(tmp_path / "s" / "runs.jsonl")
    res = compare(want, got)
    assert len(got) == 4 and res.matched == 4 and res.ok, res.drifted
    assert {r["status"] for r in got} == {"ok"}


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"RAY_AUTH_TOKEN": "0" * 64}, ["refused this client's authentication", "RAY_AUTH_TOKEN"]),
        (  # token authentication not switched on here: the token alone is not sent
            {"RAY_AUTH_MODE": None},
            ["refused this client's authentication", "RAY_AUTH_MODE is unset", "MODE=token"],
        ),
        (
            {"RAY_AUTH_TOKEN": None, "RAY_AUTH_TOKEN_PATH": None},
            ["token authentication is on but no token was found", "RAY_AUTH_TOKEN"],
        ),
    ],
    ids=["wrong-token", "no-auth-mode", "no-token"],
)
def test_a_wrong_or_missing_token_is_one_line_naming_authentication(tmp_path, env, needles):
    args = ("--executor", "ray", "--ray-address", ADDRESS, "--out", "r")
    p = harness(tmp_path, *SWEEP, *args, **env)
    one_line_error(p, f"cannot connect to Ray at {ADDRESS}", *needles)
    assert not (tmp_path / "r").exists()


def test_an_address_that_never_answers_is_one_line_after_the_connect_timeout(tmp_path):
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        args = ("--executor", "ray", "--ray-address", address, "--ray-connect-timeout", "5")
        p = harness(tmp_path, *SWEEP, *args, "--out", "r")
    one_line_error(p, f"cannot connect to Ray at {address}: no answer within 5 s")


def test_the_workers_read_the_data_root_of_the_driver(tmp_path, monkeypatch):
    # The cluster was started with the real data root (or none); the driver's, empty, must win:
    # the run fails on a worker, naming the file it missed there.
    empty = tmp_path / "no-data"
    empty.mkdir()
    monkeypatch.setenv("HARNESS_DATA_DIR", str(empty))
    cfg = config.resolve("gru", "har", 0, "smoke")  # planned without the data check
    ex = make_executor("ray", RunOptions(), ExecutorOptions(ray_address=ADDRESS))
    try:
        ex.submit(cfg)
        ((_, rec),) = ex.wait_any()
    finally:
        ex.shutdown()
    assert rec["status"] == "failed" and rec["run_id"] == cfg.run_id
    assert f"missing data file {empty}" in rec["error"], rec["error"]
