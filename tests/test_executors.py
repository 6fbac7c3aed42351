"""Executors behind one protocol give the same records as a serial run; a dead worker is a
failed record, not a stopped sweep; the library drives a sweep without the command line."""

import contextlib
import importlib.util
import ipaddress
import json
import os
import platform
import signal
import socket

import netns
import pytest

from harness import api
from harness.components import config
from harness.executors import EXECUTORS, ExecutorOptions, RunOptions, make_executor
from harness.reporting.compare import compare

CONFIGS = [config.resolve(m, "adding", s, "smoke") for m in ("gru", "sa-rnn") for s in (0, 1)]


def drive(ex, cfgs=CONFIGS):
    """The records an executor gives for ``cfgs``, through the one pull loop."""
    try:
        return [rec for _, rec in api._pull(ex, cfgs, lambda event: None)]
    finally:
        ex.close()


@pytest.fixture(scope="module")
def serial():
    return drive(make_executor("local", RunOptions(), ExecutorOptions()))


def _same(a, b):
    res = compare(a, b)
    assert res.matched == len(CONFIGS) and res.ok, res.drifted


def test_the_registry_holds_the_executors_and_each_implements_the_protocol():
    assert {"local", "pool", "ray"} <= set(EXECUTORS.names())
    for name, cls in EXECUTORS.items():
        for attr in ("slots", "submit", "wait_any", "cancel", "close", "in_process"):
            assert hasattr(cls, attr), (name, attr)


@pytest.mark.parametrize("name", [n for n in EXECUTORS.names() if n not in ("local", "ray")])
def test_every_executor_gives_the_serial_records(name, serial, tmp_path):
    # a new executor is held to the serial one's records with no edit here (ray: below);
    # submitit runs as local processes even where Slurm is installed, its files in tmp_path
    if name == "submitit":
        pytest.importorskip("submitit", reason="the slurm extra is not installed")
    given = {"workers": 2, "submitit_cluster": "local", "slurm_folder": str(tmp_path)}
    own = {o.name for o in getattr(EXECUTORS.get(name), "options", ())}
    options = ExecutorOptions(**{k: v for k, v in given.items() if k in own})
    _same(serial, drive(make_executor(name, RunOptions(), options)))


def test_process_pool_runs_one_thread_per_run_and_flushes_subnormals(serial):
    pooled = drive(make_executor("pool", RunOptions(), ExecutorOptions(workers=2)))
    assert {r["env"]["threads"] for r in pooled} == {1}
    # every run flushes subnormals (x86: set_flush_denormal works), in the pool's fresh processes
    assert {r["env"]["flush_denormal"] for r in [*serial, *pooled]} == {True}
    held = platform.libc_ver()[0] == "glibc"  # and hold the memory they free for reuse
    assert {r["env"]["freed_memory_held"] for r in [*serial, *pooled]} == {held}


def test_a_worker_killed_mid_run_is_that_runs_failed_record_and_the_pool_goes_on(monkeypatch):
    from harness.executors import pool

    ex = make_executor("pool", RunOptions(), ExecutorOptions(workers=1))
    submitted = {}
    real_submit = ex.submit

    def submit(cfg, on_epoch=None):  # the first run's worker is killed as the OOM killer would
        handle = real_submit(cfg, on_epoch)
        submitted[handle] = cfg
        if len(submitted) == 1:
            (slot,) = ex._slots
            os.kill(slot.process.pid, signal.SIGKILL)
        return handle

    monkeypatch.setattr(ex, "submit", submit)
    recs = drive(ex, CONFIGS[:2])
    assert [r["status"] for r in recs] == ["failed", "ok"]
    assert recs[0]["run_id"] == CONFIGS[0].run_id
    assert "worker process running it died (killed by SIGKILL" in recs[0]["error"]
    assert pool.died(-9) in recs[0]["error"]


def _env_worker(*args):
    """A pool worker whose record is the driver's mark in its environment."""
    from harness.executors import pool

    pool._worker(*args, serve=lambda cfg_dict, run: {"mark": os.environ.get("HARNESS_TEST_MARK")})


def test_a_pool_worker_has_the_environment_of_its_driver_not_of_the_fork_server(monkeypatch):
    from harness.executors import pool

    pool.PoolExecutor.start_early(RunOptions(), ExecutorOptions(workers=1))  # without the mark
    monkeypatch.setenv("HARNESS_TEST_MARK", "the driver's")

    class Marked(pool.PoolExecutor):
        worker = staticmethod(_env_worker)

    assert drive(Marked(RunOptions(), ExecutorOptions(workers=1)), CONFIGS[:1]) == [
        {"mark": "the driver's"}
    ]


def _gc_worker(*args):
    """A pool worker whose record is its garbage collector's state as its first run starts."""
    import gc

    from harness.executors import pool

    def serve(cfg_dict, run):
        full = gc.get_stats()[2]["collections"]  # inherited from the fork server with the rest
        return {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count(), "full": full}

    pool._worker(*args, serve=serve)


def test_a_pool_worker_inherits_no_collection_and_freezes_what_the_server_imported():
    # the fork server imports torch with the collector paused (server_gc); a worker freezes
    # the server's objects, so that its own collections never traverse them, and collects
    from harness.executors import pool

    if pool.context().get_start_method() != "forkserver":
        pytest.skip("no fork server here: workers are spawned")

    class Gc(pool.PoolExecutor):
        worker = staticmethod(_gc_worker)

    (state,) = drive(Gc(RunOptions(), ExecutorOptions(workers=1)), CONFIGS[:1])
    assert state["enabled"] and state["full"] == 0, state
    assert state["frozen"] > 100_000, state  # torch's objects, among them


def test_a_local_sweep_freezes_what_its_runs_import_until_it_ends():
    # local.prepare imports torch._dynamo (the first Adam's) with the collector paused and
    # freezes; close unfreezes: nothing stays frozen in a process that goes on (a notebook)
    import gc
    import sys

    ex = make_executor("local", RunOptions(), ExecutorOptions())
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    ex.prepare(CONFIGS[:1])
    assert gc.get_freeze_count() > 100_000 and "torch._dynamo" in sys.modules
    assert gc.isenabled()
    drive(ex, CONFIGS[:1])  # its close
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_pool_worker_ends_once_its_driver_is_gone():
    # its parent is the fork server, which outlives the driver while a worker lives: the worker
    # watches the driver's end of its liveness pipe, which closes however the driver ends
    ex = make_executor("pool", RunOptions(), ExecutorOptions(workers=1))
    try:
        ex.prepare(CONFIGS[:1])
        (slot,) = ex._slots
        ex._alive[1].close()  # as the driver's death closes it
        slot.process.join(60)
        assert slot.process.exitcode == 1
    finally:
        ex.cancel()


def test_flush_denormals_zeroes_subnormals():
    import torch

    from harness.env import flush_denormals

    assert flush_denormals()
    tiny = torch.tensor([1e-39, 1e-30], dtype=torch.float32)  # 1e-39 is subnormal in float32
    assert (tiny * 1.0).tolist()[0] == 0.0 and (tiny * 1.0).tolist()[1] > 0


# a process that allocates and frees a 64 MiB tensor five times: its minor page faults before
# and after hold_freed_memory (each fresh page of a new mapping is one fault: 16384 for 64 MiB),
# the fewest of three rounds each: on this VM a held block now and then faults in again
FAULTS = """import json, resource, torch
from harness.env import hold_freed_memory
def faults():
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        torch.ones(16 * 2**20).sum()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start
before = min(faults() for _ in range(3))
held = hold_freed_memory()
after = min(faults() for _ in range(3))
print(json.dumps({"held": held, "before": before, "after": after}))
"""


def test_a_run_reuses_the_memory_it_freed_instead_of_faulting_it_in_again():
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's mallopt only")
    out = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["held"] and got["before"] > 4 * 16384 and got["after"] < 1000, got


def test_every_training_run_holds_its_freed_memory(monkeypatch):
    from harness import env
    from harness.executors.base import run_one

    calls = []
    monkeypatch.setattr(env, "hold_freed_memory", lambda: calls.append(True) or True)
    rec = run_one(CONFIGS[0].to_dict(), RunOptions())
    assert rec["status"] == "ok" and calls == [True]


def _needs_ray():
    # not importorskip: Ray must be imported by the executor, after it set RAY_ENABLE_...
    if importlib.util.find_spec("ray") is None:
        pytest.skip("the ray extra is not installed")


@pytest.mark.netns
def test_ray_matches_serial(serial):
    _needs_ray()
    ex = make_executor("ray", RunOptions(), ExecutorOptions())  # a real local Ray instance
    try:
        recs = drive(ex)
    finally:
        ex.shutdown()
    _same(serial, recs)


def _loopback(ip):
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


@pytest.mark.netns
def test_a_local_ray_instance_listens_on_loopback_only():
    _needs_ray()
    # the namespace routes off loopback (tests/netns.py), as a networked machine does: Ray's own
    # pick of a node address would be netns.ADDRESS (a UDP connect sends nothing)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        assert not _loopback(probe.getsockname()[0])
    ex = make_executor("ray", RunOptions(), ExecutorOptions())
    try:
        assert [r["status"] for r in drive(ex, CONFIGS[:1])] == ["ok"]  # a worker is up too
        psutil = pytest.importorskip("psutil")  # Ray's own copy, on the path once Ray is imported
        listening = {}  # every listening socket in the namespace: process name -> addresses
        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                with contextlib.suppress(psutil.Error):
                    name = psutil.Process(conn.pid).name()
                    listening.setdefault(name, set()).add(conn.laddr.ip)
    finally:
        ex.shutdown()
    assert {"gcs_server", "raylet"} <= set(listening), listening
    wide = {name: ips for name, ips in listening.items() if not all(map(_loopback, ips))}
    assert not wide, f"Ray listens beyond loopback: {wide}"


@pytest.mark.netns
def test_a_local_ray_instance_is_refused_once_ray_was_imported_without_the_setting(monkeypatch):
    _needs_ray()
    from harness.errors import HarnessError
    from harness.executors.ray import LOOPBACK_ONLY

    monkeypatch.setenv(LOOPBACK_ONLY, "1")  # Ray's default on Linux, read when it is imported
    import ray

    with pytest.raises(HarnessError, match=f"would listen beyond loopback, on {netns.ADDRESS}"):
        make_executor("ray", RunOptions(), ExecutorOptions())
    assert not ray.is_initialized()


@pytest.mark.netns
def test_a_local_ray_instance_is_quiet_and_leaves_no_credential(tmp_path, monkeypatch, capfd):
    _needs_ray()
    import subprocess
    import sys

    from harness.executors.ray import PROBE

    monkeypatch.setenv("HOME", str(tmp_path))  # Ray's ~/.ray/auth_token would be written here
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    for verbose in (False, True):
        ex = make_executor("ray", RunOptions(verbose=verbose), ExecutorOptions())
        try:
            assert not (tmp_path / ".ray").exists()  # its token is in this process's environment
            if not verbose:  # and token authentication is on: a client without it is refused
                env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
                gcs = ex.ray.get_runtime_context().gcs_address
                cmd = [sys.executable, "-c", PROBE, gcs]
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
                assert p.returncode and "AuthenticationError" in p.stderr, p.stderr[-2000:]
        finally:
            ex.shutdown()
        err = capfd.readouterr().err  # Ray's own log lines only with verbose
        assert "Started a local Ray instance" in err if verbose else not err.strip(), err
    assert not (tmp_path / ".ray").exists()


def test_bad_workers_is_an_error():
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match=r"--workers must be an integer in \[1, 1024\]"):
        make_executor("pool", RunOptions(), ExecutorOptions(workers=0))


def test_an_unknown_executor_is_one_line_with_suggestions():
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="Unknown executor 'pol'. Did you mean: pool"):
        api.executor("pol")


def test_the_library_runs_a_sweep_without_the_command_line(tmp_path, serial):
    spec = api.SweepSpec.of("gru,sa-rnn", "adding", seeds=[0, 1])
    sweep = api.plan_sweep(spec)
    assert [c.run_id for c in sweep.configs] == [c.run_id for c in CONFIGS]
    events = []
    result = api.run_sweep(sweep, tmp_path / "r.jsonl", api.executor("local"), events.append)
    assert result.exit_code == 0 and len(result.records) == 4
    kinds = [e.kind for e in events]
    assert kinds[0] == "planned" and kinds.count("finished") == 4 and "epoch" in kinds
    stored = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    _same(serial, stored)
    assert stored[0]["sweep"]["blocks"][0]["methods"] == ["gru", "sa-rnn"]
    again = api.run_sweep(sweep, tmp_path / "r.jsonl")  # resume: nothing left to run
    assert again.todo == [] and again.records == []
    paths, problems = api.report([tmp_path / "r.jsonl"], tmp_path / "LB.md", figures=False)
    assert paths == [tmp_path / "LB.md"] and not problems
    res, _ = api.compare(tmp_path / "r.jsonl", tmp_path / "r.jsonl")
    assert res.ok and res.matched == 4


@pytest.mark.parametrize("disabled", [False, True])
def test_a_sweep_builds_its_methods_kernels_once_before_its_first_run(
    tmp_path, monkeypatch, fresh_kernel, disabled
):
    # the library's build is a stand-in (nothing compiles): it records the builds and whether a
    # run was training then, and honours HARNESS_NO_KERNELS as the real one does; every ask of a
    # kernel is recorded. The training kernels are one part of the library: the first ask
    # builds it, once.
    import torch

    from baselines.ops import library
    from harness.executors.base import build_kernels
    from harness.training import train

    training, calls, builds = [], [], []

    def load(label, part):
        if os.environ.get("HARNESS_NO_KERNELS"):
            return library.KernelStatus("unavailable", library.DISABLED)
        builds.append((label, part, bool(training)))
        return library.KernelStatus("unavailable", "a stand-in")

    ask = library.Kernel.__call__

    def asked(kernel):
        calls.append((kernel.stem, bool(training)))
        return ask(kernel)

    monkeypatch.setattr(library, "_load", load)
    monkeypatch.setattr(library.Kernel, "__call__", asked)
    real_run = train.run

    def run(*args, **kwargs):
        training.append(True)
        try:
            return real_run(*args, **kwargs)
        finally:
            training.pop()

    monkeypatch.setattr(train, "run", run)
    if not disabled:  # conftest sets it for unmarked tests; the fakes compile nothing
        monkeypatch.delenv("HARNESS_NO_KERNELS")
    sweep = api.plan_sweep(api.SweepSpec.of("phased-lstm,gru", "adding", seeds=[0, 1]))
    # runs on CUDA would not use the CPU kernels: nothing is built for them
    monkeypatch.setattr("harness.executors.base.resolve_device", lambda d: torch.device(d))
    build_kernels(sweep.configs, RunOptions(device="cuda"))
    assert calls == []
    result = api.run_sweep(sweep, tmp_path / "r.jsonl", api.executor("local"))
    assert result.exit_code == 0 and len(result.records) == 4
    before = [name for name, in_run in calls if not in_run]
    assert [name for name, in_run in calls if in_run]  # the runs ask for the masked-cell kernel
    if disabled:
        assert before == [] and builds == []
    else:  # phased-lstm's modules hold the masked-cell, its inference and time-gate kernels:
        # the training ones are asked for before the runs, the inference one (no run uses a fast
        # path) never, so its part of the library is not built
        assert sorted(before) == ["masked_cell", "phased_gate"]
        assert len(builds) == 1 and builds[0][1:] == ("train", False)  # built before the runs
        assert builds[0][0] in ("masked-cell training", "Phased LSTM time-gate")
