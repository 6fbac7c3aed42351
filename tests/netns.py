"""Tests marked ``netns`` start servers (a local Ray instance): they run only in a private network
namespace, so that nothing they start can listen on, or send to, a real network.

Outside one, ``conftest.py`` runs such a test again in a pytest of its own under ``unshare``: new
network, PID and mount namespaces (everything started in them dies with them, even when the test
does not stop it), holding loopback and a veth pair whose both ends are inside, with a default
route through it. Traffic on the pair goes nowhere, but the namespace looks like a networked
machine: its non-loopback address (``ADDRESS``) is what a server that picks "the node's address"
or listens on all interfaces would show. Where that cannot be done (not root, no ``unshare`` or
``ip``, a kernel that refuses), the test skips, saying why.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

ADDRESS = "10.255.255.1"
PAIR = ("hxnet0", "hxnet1")
SETUP = (
    f"ip link set lo up && ip link add {PAIR[0]} type veth peer name {PAIR[1]} && "
    f"ip addr add {ADDRESS}/24 dev {PAIR[0]} && ip link set {PAIR[0]} up && "
    f"ip link set {PAIR[1]} up && ip route add default via 10.255.255.2 dev {PAIR[0]}"
)


def inside() -> bool:
    """Whether this process is in such a namespace: loopback and the pair, nothing else."""
    return {name for _, name in socket.if_nameindex()} == {"lo", *PAIR}


def command(argv: list[str]) -> list[str]:
    """``argv`` run in a fresh namespace, killed with everything in it if ``unshare`` dies."""
    unshare = ["unshare", "--net", "--pid", "--mount-proc", "--kill-child"]
    return [*unshare, "sh", "-c", f'{SETUP} && "$@"', "sh", *argv]


@functools.cache
def unavailable() -> str | None:
    """Why no such namespace can be made here, or None."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")):
        return "needs root, unshare and ip"
    done = subprocess.run(command(["true"]), capture_output=True, text=True, timeout=60)
    return f"unshare failed: {done.stderr.strip()[-300:]}" if done.returncode else None


def run_inside(item: pytest.Item) -> None:
    """Run test ``item`` in a pytest of its own in a fresh namespace: pass, skip or fail as it."""
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", item.nodeid]
    done = subprocess.run(
        command(argv), cwd=item.config.rootpath, capture_output=True, text=True, timeout=900
    )
    out = done.stdout + done.stderr
    if done.returncode:
        pytest.fail(f"in a private network namespace:\n{out[-6000:]}", pytrace=False)
    if not re.search(r"\b1 passed\b", out):
        skipped = re.findall(r"SKIPPED \[\d+\] [^:]+:\d+: (.*)", out)
        pytest.skip(skipped[0] if skipped else f"did not run in the namespace:\n{out[-2000:]}")
