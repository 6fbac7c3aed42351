"""``ray``: the runs of a sweep as Ray tasks, on a cluster or a local Ray instance.

Needs the ``ray`` extra; nothing of Ray is imported until this executor is made. Each run is one
task (``--threads`` CPUs, one GPU with ``--device cuda``); docs/clusters.md.

Without an address it starts a Ray instance of its own (``address="local"``) on loopback alone:
on Linux Ray listens on all interfaces and replaces a given ``127.0.0.1`` by its default route's
address unless ``LOOPBACK_ONLY=0`` (read once, when Ray is imported). Ray (2.60) also writes a new
instance's token to ``~/.ray/auth_token``, readable by everyone, unless one is given: the instance
gets a fresh one in this process's environment, which no file holds. ``WORKER_ENV`` goes with
each task, as a cluster's workers inherit ``ray start``'s environment, not the driver's.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Hashable
from typing import Any, ClassVar

from harness.data.files import data_root
from harness.errors import HarnessError
from harness.executors.base import (
    EpochCallback,
    ExecutorOptions,
    Option,
    RunOptions,
    lost_record,
    register_executor,
    require,
    run_one,
)

INSTALL = "--executor ray needs Ray: pip install 'condrnn-harness[ray]'"

# Ray's switch (ray._private.ray_constants) for a node of its own on loopback; "0" = loopback.
LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Ray's token (its token authentication): a local instance's, fresh, lives in the environment
TOKEN = "RAY_AUTH_TOKEN"
# What a run reads from the environment, passed from the driver to every task when set here
# (HARNESS_DATA_DIR always: the data root the sweep was planned and its data checked on).
WORKER_ENV = ("HARNESS_DATA_DIR", "XDG_CACHE_HOME", "HARNESS_INCLUDE", "HARNESS_NO_KERNELS")
# The probe: one ray.init (RAY_gcs_server_port_wait_time_s=1: one try, not Ray's twenty).
PROBE = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); ray.shutdown()"
TOKEN_HELP = (
    "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN to the cluster's token (or RAY_AUTH_TOKEN_PATH "
    "to a file holding it)"
)


@register_executor("ray")
class RayExecutor:
    """Ray tasks; joined at ``options.ray_address``, else a local instance on 127.0.0.1."""

    in_process: ClassVar[bool] = False
    options = (Option("ray_address", str, None, "ray executor: cluster address; auto: the one "
               "ray start left (default: a new Ray instance on this machine, listening on "
               "127.0.0.1 only); a cluster with token authentication needs RAY_AUTH_MODE=token "
               "and RAY_AUTH_TOKEN", "ADDRESS", None, "an address"),
               Option("ray_connect_timeout", int, 60, "ray executor: seconds to wait for the "
               "cluster at --ray-address to answer (default: %(default)s)", "SECONDS",
               (5, 3600), "seconds"))  # fmt: skip
    preflight = staticmethod(lambda run, options: require("ray", INSTALL))  # before planning

    def __init__(self, run: RunOptions, options: ExecutorOptions) -> None:
        address = options.ray_address if options.ray_address != "local" else None
        if not address:  # before Ray is imported: its node address is then 127.0.0.1
            os.environ[LOOPBACK_ONLY] = "0"
            os.environ.setdefault(TOKEN, secrets.token_hex(32))  # none in ~/.ray: module doc
        elif not (ray := sys.modules.get("ray")) or not ray.is_initialized():  # before import
            probe(address, options.ray_connect_timeout)
        try:
            import ray
        except ImportError:
            raise HarnessError(INSTALL) from None
        self.ray, self.run = ray, run
        if not ray.is_initialized():
            node_ip = None if address else ray.util.get_node_ip_address()  # a new node's
            if node_ip and not ipaddress.ip_address(node_ip).is_loopback:
                raise HarnessError(
                    f"a local Ray instance would listen beyond loopback, on {node_ip}: Ray was "
                    f"imported before {LOOPBACK_ONLY}=0 was set; set it before Ray is imported, "
                    "or give --ray-address"
                )
            try:
                level = logging.INFO if run.verbose else logging.ERROR  # Ray's own lines
                ray.init(
                    address=address or "local",
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=level,
                )
            except (ConnectionError, ValueError, RuntimeError) as e:
                raise HarnessError(f"cannot connect to Ray at {address or 'local'}: {e}") from None
        self._cpus = max(run.threads, 1)
        gpus = 1 if run.device == "cuda" else 0
        env = {k: os.environ[k] for k in WORKER_ENV if k in os.environ}
        env["HARNESS_DATA_DIR"] = str(data_root(run.data_dir).absolute())
        self._remote = ray.remote(
            num_cpus=self._cpus, num_gpus=gpus, runtime_env={"env_vars": env}
        )(run_one)
        self._pending: dict[Any, dict[str, Any]] = {}  # object ref -> config dict

    def slots(self) -> int:
        """As many runs as the cluster's CPUs hold at ``--threads`` CPUs each."""
        return max(int(self.ray.cluster_resources().get("CPU", 1) // self._cpus), 1)

    def submit(self, cfg: Any, on_epoch: EpochCallback | None = None) -> Hashable:
        """Start the run as a Ray task; its object ref."""
        cfg_dict = cfg.to_dict()
        ref = self._remote.remote(cfg_dict, self.run)
        self._pending[ref] = cfg_dict
        return ref

    def wait_any(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """Block until a task ends; its record (or, for a task Ray lost, a failed one)."""
        if not self._pending:
            return []
        done, _ = self.ray.wait(list(self._pending), num_returns=1)
        out: list[tuple[Hashable, dict[str, Any]]] = []
        for ref in done:
            cfg_dict = self._pending.pop(ref)
            try:
                rec = self.ray.get(ref)
            except Exception as e:  # the task or its worker failed outside the run
                why = " ".join(str(e).split())[:300]
                rec = lost_record(cfg_dict, f"the Ray task failed: {type(e).__name__}: {why}")
            out.append((ref, rec))
        return out

    def cancel(self) -> None:
        """Cancel every task in flight."""
        for ref in self._pending:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)
        self._pending.clear()

    def close(self) -> None:
        """Nothing is held once the tasks are done (a local Ray instance ends with the process)."""

    def shutdown(self) -> None:
        """Disconnect from Ray (``ray.shutdown()``), stopping the processes ``ray.init`` started."""
        self.ray.shutdown()


def probe(address: str, timeout_s: int) -> None:
    """Connect to the Ray cluster at ``address`` once, in a child process, within ``timeout_s``.

    A plain connection first (refused: at once). HarnessError, one line without Ray's output
    (its warnings while it retries for minutes): no answer, a token refused or missing, ...
    """

    def fail(why: str) -> HarnessError:
        return HarnessError(f"cannot connect to Ray at {address}: {why}")

    silent = f"no answer within {timeout_s} s (--ray-connect-timeout)"
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if port.isdigit():  # not "auto" (Ray finds that address)
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except TimeoutError:
            raise fail(silent) from None
        except OSError as e:
            raise fail(e.strerror or str(e)) from None
    env = os.environ | {"RAY_gcs_server_port_wait_time_s": "1"}
    cmd = [sys.executable, "-c", PROBE, address]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise fail(silent) from None
    if not done.returncode:
        return
    if "no authentication token was found" in done.stderr:
        raise fail(f"token authentication is on but no token was found; {TOKEN_HELP}")
    if "AuthenticationError" in done.stderr:
        mode = os.environ.get("RAY_AUTH_MODE") or "unset"
        raise fail(
            f"the cluster refused this client's authentication (RAY_AUTH_MODE is {mode} here); "
            f"{TOKEN_HELP}"
        )
    last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    raise fail(last[:300])
