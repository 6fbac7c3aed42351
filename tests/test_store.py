"""The records store under bad records, torn lines, full disks, concurrent sweeps and code changes.

In-process (``harness.cli.main``); the faults that need real processes (kill -9, SIGTERM, two
sweeps at once) are in ``test_faults.py``.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.components import code
from harness.errors import RecordError
from harness.persistence import claims as claims_mod
from harness.persistence import records
from harness.persistence import store as store_mod
from harness.persistence.claims import Claims
from harness.persistence.files import write_atomically
from harness.persistence.records import validate as validate_record
from harness.persistence.store import Store
from harness.planning import resume

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference" / "smoke.jsonl"
GRU = ["run", "--tasks", "adding", "--methods", "gru", "--no-report"]


def real_record(i: int = 0) -> dict:
    """A record as ``harness run`` wrote it (the committed drift-gate reference)."""
    return json.loads(REFERENCE.read_text().splitlines()[i])


def write_lines(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


# --- 1. the record schema ------------------------------------------------------------------------


def test_a_real_record_and_a_timing_record_are_valid():
    assert validate_record(real_record()) == []
    failed = {k: v for k, v in real_record().items() if k not in ("metrics", "primary")}
    assert validate_record({**failed, "status": "failed", "error": "diverged"}) == []
    timing = {k: real_record()[k] for k in records.REQUIRED} | {"kind": "timing", "schema": 2}
    assert validate_record(timing) == []


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"seed": "0"}, "seed: expected a non-negative integer, got a string"),
        ({"seed": -1}, "seed: expected a non-negative integer"),
        ({"seed": True}, "seed: expected a non-negative integer, got a boolean"),
        ({"status": 3}, "status: expected one of ok, failed"),
        ({"config": []}, "config: expected an object, got an array"),
        ({"metrics": [1, 2]}, "metrics: expected an object of numbers"),
        ({"metrics": {"mse": "0.1"}}, "metrics: expected an object of numbers"),
        ({"params": {"total": "many"}}, "params: expected an object of numbers"),
        ({"higher_is_better": "no"}, "higher_is_better: expected a boolean"),
        ({"schema": 7}, "schema version 7 is unknown (this harness reads run records of schema 1"),
        ({"schema": "1"}, "schema: expected an integer"),
        ({"kind": "mystery"}, "unknown record kind 'mystery'"),
        ({"metrics": None}, "metrics: expected an object"),
    ],
)
def test_wrong_types_and_unknown_schemas_are_problems(change, needle):
    problems = validate_record({**real_record(), **change})
    assert any(needle in p for p in problems), problems


def test_missing_keys_are_problems():
    rec = real_record()
    del rec["metrics"]
    assert validate_record(rec) == ["a finished (ok) run lacks ['metrics']"]
    del rec["seed"]
    assert "missing ['seed']" in validate_record(rec)
    assert validate_record([1]) == ["not a record: an array"]


def test_read_skips_invalid_records_with_their_line_numbers(tmp_path):
    bad = {**real_record(1), "seed": "1"}
    store = write_lines(tmp_path / "r.jsonl", [real_record(0), bad, "", real_record(2)])
    recs, problems = Store(store).read()
    assert [r["run_id"] for r in recs] == [real_record(i)["run_id"] for i in (0, 2)]
    assert problems == [f"{store}:2: malformed record skipped (seed: expected a non-negative "
                        'integer, got a string ("1"))']  # fmt: skip


@pytest.mark.parametrize("paper", [False, True])
def test_report_on_ill_typed_records_never_tracebacks(tmp_path, harness, paper):
    no_metrics = {k: v for k, v in real_record(1).items() if k != "metrics"}
    lines = [real_record(0), no_metrics, {**real_record(2), "metrics": {"mse": "x"}}]
    lines += [{**real_record(3), "seed": "3", "config": "gru"}, {**real_record(4), "schema": 9}]
    write_lines(tmp_path / "r.jsonl", lines)
    extra = ["--paper", "--out-dir", "p", "--no-figures"] if paper else ["--out", "b.md"]
    code, _, err = harness("report", "r.jsonl", *extra)
    assert code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and "r.jsonl:2: malformed record skipped" in err, err
    assert "3 more" in err
    # nothing usable at all: still one line, exit 2
    write_lines(tmp_path / "r.jsonl", lines[1:])
    code, _, err = harness("report", "r.jsonl", *extra)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err


# --- 2. check and repair -------------------------------------------------------------------------


def torn_store(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "runs.jsonl"
    data = "".join(json.dumps(real_record(i)) + "\n" for i in range(3))
    data += "not json\n" + json.dumps({**real_record(3), "seed": -3}) + "\n"
    data += json.dumps(real_record(4)) + "\n" + json.dumps(real_record(5))[:57]  # torn
    path.write_bytes(data.encode())
    return path, data.encode()


def test_store_check_lists_unusable_lines_and_repair_moves_them_keeping_every_byte(
    tmp_path, harness
):
    path, original = torn_store(tmp_path)
    code, out, _ = harness("store", "check", str(path))
    assert code == 1
    assert f"{path}:4: Expecting value" in out and f"{path}:5: seed: expected" in out
    assert f"{path}:7: " in out and "no newline" in out
    assert "4 record(s), 3 unusable line(s): run 'harness store repair" in out
    code, out, _ = harness("store", "repair", str(tmp_path))  # an --out directory works too
    assert code == 0 and "4 record(s) kept; 3 line(s) moved to" in out
    (side,) = tmp_path.glob("runs.jsonl.rejected-*")
    kept, moved = path.read_bytes(), side.read_bytes()
    assert sorted(original.splitlines()) == sorted(kept.splitlines() + moved.splitlines())
    assert len(kept) + len(moved) == len(original) + 1  # + the torn line's newline
    assert [json.loads(x)["run_id"] for x in kept.splitlines()] == [
        real_record(i)["run_id"] for i in (0, 1, 2, 4)
    ]
    assert harness("store", "check", str(path))[0] == 0
    code, out, _ = harness("store", "repair", str(path))
    assert code == 0 and "nothing to repair" in out
    code, _, err = harness("store", "check", str(tmp_path / "nope.jsonl"))
    assert code == 2 and err.count("\n") == 1 and "no records file" in err


def test_an_append_waiting_on_a_repair_goes_to_the_repaired_store(tmp_path):
    path, _ = torn_store(tmp_path)
    store = Store(path)
    ready, repaired = threading.Event(), threading.Event()

    def append_while_locked():
        ready.wait()
        store.append(real_record(6))  # blocks on the lock held below
        repaired.set()

    t = threading.Thread(target=append_while_locked)
    t.start()
    with store.locked():  # repair's own steps, while the append waits for the lock
        ready.set()
        time.sleep(0.3)
        assert not repaired.is_set()
        lines = store.lines()
        write_atomically(path, b"".join(x.raw for x in lines if not x.problem), None, True)
    t.join(10)
    assert repaired.is_set()
    recs, problems = store.read()
    assert problems == [] and recs[-1]["run_id"] == real_record(6)["run_id"]


# --- 3. --out that is not a store ----------------------------------------------------------------


@pytest.mark.parametrize(
    "content,needle",
    [
        (bytes(range(255, -1, -1)) * 4, "line 1: not UTF-8 text"),
        (b"my notes\nabout the runs\n", "line 1: Expecting value"),
        (b'{"a": 1}\n', "line 1: missing"),
    ],
    ids=["random-bytes", "text", "json"],
)
def test_out_that_is_not_a_store_is_refused_before_anything_runs(
    tmp_path, harness, content, needle
):
    (tmp_path / "x.jsonl").write_bytes(content)
    code, _, err = harness(*GRU, "--out", "x.jsonl")
    assert code == 2 and err.count("\n") == 1 and "x.jsonl is not a records store" in err, err
    assert needle in err
    assert (tmp_path / "x.jsonl").read_bytes() == content


def test_an_empty_file_or_a_store_with_a_torn_line_is_a_fine_out(tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    Store(tmp_path / "empty.jsonl").check_target()
    path, _ = torn_store(tmp_path)
    Store(path).check_target()
    Store(tmp_path / "new.jsonl").check_target()


# --- 4. claims -----------------------------------------------------------------------------------


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def write_claim(store: Store, run_id: str, **kw) -> None:
    claim = {"run_id": run_id, "pid": os.getppid(), "host": claims_mod.HOST}
    claim.update({"time": time.time(), "started": None, **kw})
    store.claims_path.write_text(json.dumps(claim) + "\n")


def test_a_run_claimed_by_a_live_sweep_is_left_to_it_and_a_stale_claim_is_taken(tmp_path):
    store = Store(tmp_path / "runs.jsonl")
    store.check_writable()
    write_claim(store, "a")  # our parent process: alive
    claims = Claims(store)
    holder = claims.take("a")
    assert holder is not None and holder["pid"] == os.getppid()
    write_claim(store, "a", host="elsewhere")  # another host, recent: held
    assert claims.take("a") is not None
    write_claim(store, "a", pid=dead_pid())  # this host, process gone: stale
    assert claims.take("a") is None
    write_claim(store, "a", host="elsewhere", time=time.time() - claims_mod.CLAIM_TIMEOUT_S - 1)
    assert claims.take("a") is None  # too old
    assert claims.take("b") is None
    held = {json.loads(x)["run_id"] for x in store.claims_path.read_text().splitlines()}
    assert held == {"a", "b"}
    store.append({**real_record(0), "run_id": "a"})  # a finished record drops its claim
    held = {json.loads(x)["run_id"] for x in store.claims_path.read_text().splitlines()}
    assert held == {"b"}
    claims.release()
    assert not store.claims_path.exists()


def test_a_run_recorded_by_another_sweep_since_this_one_started_is_not_run_again(tmp_path):
    store = Store(tmp_path / "runs.jsonl")
    store.append({**real_record(0), "run_id": "old"})
    claims = Claims(store)
    store.append({**real_record(0), "run_id": "x"})  # another sweep finished "x"
    assert claims.take("x") == {"run_id": "x", "recorded": True}
    assert claims.take("old") is None  # recorded before: the sweep's own plan decided
    claims.release()


def test_a_claim_from_another_host_expires_with_its_lease_and_is_taken_over_in_one_line(
    tmp_path,
):
    store = Store(tmp_path / "runs.jsonl")
    store.check_writable()
    said: list[str] = []
    claims = Claims(store, lease=300.0, say=said.append)
    now = time.time()
    write_claim(store, "a", host="login2", pid=4242, time=now - 301, lease_s=300.0)  # driver dead
    assert claims.take("a") is None
    assert said == [
        "run a: took over the claim of pid 4242 on login2, whose lease ran out "
        "(last renewed 5 min ago)"
    ]
    write_claim(store, "b", host="login2", pid=4242, time=now - 200, lease_s=300.0)  # renewed
    assert claims.take("b")["host"] == "login2"
    write_claim(store, "c", host="login2", pid=4242, time=now - 3600)  # an older harness: 48 h
    assert claims.take("c")["host"] == "login2"
    assert len(said) == 1
    gone = dead_pid()
    write_claim(store, "d", pid=gone, time=now - 120)  # this host, its driver killed
    assert claims.take("d") is None
    assert said[1:] == [
        f"run d: took over the claim of pid {gone} on {store_mod.HOST}, whose process is gone "
        "(last renewed 2 min ago)"
    ]
    claims.release()


def test_the_heartbeat_renews_a_live_sweeps_claims_and_stops_with_it(tmp_path):
    store = Store(tmp_path / "runs.jsonl")
    store.check_writable()
    claims = Claims(store, lease=1.0)
    assert claims.take("a") is None
    (claim,) = store_mod.read_claims(store.claims_path).values()
    store_mod.write_claims(store.claims_path, {"a": {**claim, "time": claim["time"] - 100}})
    elsewhere = lambda: {**store_mod.read_claims(store.claims_path)["a"], "host": "login2"}  # noqa: E731
    assert claims_mod.claim_is_stale(elsewhere())  # as another host sees a lapsed lease
    deadline = time.monotonic() + 30  # a wait for the thread, not a timing assertion
    while claims_mod.claim_is_stale(elsewhere()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not claims_mod.claim_is_stale(elsewhere())  # renewed: held again
    beat = claims._beat
    claims.release()
    assert beat is not None and not beat.is_alive() and not store.claims_path.exists()


@pytest.mark.parametrize("lease", ["soon", "0.5", "nan", "inf", "1e308", "172801"])
def test_a_bad_claim_lease_is_refused_before_anything_is_written(
    lease, tmp_path, harness, monkeypatch
):
    monkeypatch.setenv(claims_mod.LEASE_ENV, lease)
    code, _, err = harness(*GRU, "--out", "s.jsonl")
    assert code == 2 and err == (
        "error: HARNESS_CLAIM_LEASE_S must be a number of seconds from 1 to 172800 (48 h) "
        f"(got {lease!r})\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_longest_claim_lease_runs_its_heartbeat(tmp_path, monkeypatch):
    monkeypatch.setenv(claims_mod.LEASE_ENV, str(claims_mod.CLAIM_TIMEOUT_S))
    store = Store(tmp_path / "runs.jsonl")
    store.check_writable()
    claims = Claims(store)
    assert claims.take("a") is None
    time.sleep(0.1)  # the heartbeat's first wait has begun (Event.wait overflows past ~1e9 s)
    assert claims._beat.is_alive()
    claims.release()


# --- 5. a full disk ------------------------------------------------------------------------------


def enospc_on(monkeypatch, path: Path, partial: int = 0) -> list:
    """Make os.write fail with ENOSPC on ``path`` (after writing ``partial`` bytes once)."""
    real_write, calls = os.write, []

    def write(fd, data):
        if os.path.realpath(f"/proc/self/fd/{fd}") == str(path.resolve()):
            calls.append(len(data))
            if partial and len(calls) == 1:
                return real_write(fd, bytes(data[:partial]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(store_mod, "APPEND_RETRY_DELAYS_S", (0.0, 0.0))
    return calls


def test_append_retries_then_raises_and_leaves_no_torn_line(tmp_path, monkeypatch):
    store = Store(tmp_path / "runs.jsonl")
    store.append(real_record(0))
    before = store.path.read_bytes()
    calls = enospc_on(monkeypatch, store.path, partial=10)
    with pytest.raises(store_mod.AppendError, match="No space left on device"):
        store.append(real_record(1))
    assert len(calls) == 4  # the first try wrote 10 bytes, then failed; 2 retries
    assert store.path.read_bytes() == before  # the partial line was cut off again


def test_a_full_disk_keeps_the_finished_runs_and_names_them(tmp_path, harness, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "s.jsonl").touch()
    enospc_on(monkeypatch, tmp_path / "s.jsonl")
    code, _, err = harness(*GRU, "--methods", "gru,rnn", "--out", "s.jsonl")
    assert code == 2 and "Traceback" not in err
    (kept,) = (tmp_path / "cache" / "condrnn-harness" / "unwritten").glob("s-*.jsonl")
    recs = [json.loads(x) for x in kept.read_text().splitlines()]
    assert [r["method"] for r in recs] == ["gru"]  # then the sweep stopped: rnn never started
    (line,) = [x for x in err.splitlines() if "error" in x]
    assert line.startswith("error: the sweep stopped: no space on the filesystem at ")
    assert (
        "(ENOSPC: No space left on device) writing s.jsonl; 1 finished run(s) kept in "
        f"{kept} (once there is room: cat {kept} >> s.jsonl); 1 run(s) not started" in line
    )
    assert (tmp_path / "s.jsonl").read_bytes() == b""
    assert not (tmp_path / "s.jsonl.claims").exists()  # the claims went with the sweep


# --- 7. resume against changed method code; --retry-failed --------------------------------------


def rewrite(path: Path, **changes) -> None:
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    write_lines(path, [{**r, **changes} for r in recs])


def test_records_of_other_method_code_are_rerun_unless_kept(tmp_path, harness):
    assert harness(*GRU, "--out", "s.jsonl")[0] == 0
    (rec,) = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert rec["method_code"] == resume.method_code("gru")
    rewrite(tmp_path / "s.jsonl", method_code="0123456789abcdef")
    code, _, err = harness(*GRU, "--out", "s.jsonl", "--keep-stale")
    assert code == 0 and "1 already recorded" in err and "kept (--keep-stale)" in err
    code, _, err = harness(*GRU, "--out", "s.jsonl")
    assert code == 0 and "0 already recorded" in err, err
    assert "1 record(s) were made by other code of their method (gru now" in err
    assert "rerun" in err and "gru/adding/smoke/seed0" in err
    recs = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [r["method_code"] for r in recs] == ["0123456789abcdef", resume.method_code("gru")]
    assert "1 already recorded" in harness(*GRU, "--out", "s.jsonl")[2]
    rewrite(tmp_path / "s.jsonl", method_code=None)  # records older than code versions: kept
    assert "1 already recorded" in harness(*GRU, "--out", "s.jsonl")[2]


def test_retry_failed_reruns_failed_runs_and_the_latest_record_wins(tmp_path, harness):
    assert harness(*GRU, "--out", "s.jsonl")[0] == 0
    rewrite(tmp_path / "s.jsonl", status="failed", error="diverged: test")
    code, _, err = harness(*GRU, "--out", "s.jsonl")  # resume keeps the failure, and says so
    assert code == 1 and "failed earlier: gru/adding/smoke/seed0\n" in err  # still incomplete
    assert "1 runs: 0 already recorded in " in err
    assert "s.jsonl, 1 failed earlier (kept; --retry-failed reruns them), 0 to run" in err
    code, _, err = harness(*GRU, "--out", "s.jsonl", "--retry-failed")
    assert code == 0 and "retrying 1 failed run(s): gru/adding/smoke/seed0" in err
    recs, _ = Store(tmp_path / "s.jsonl").read()
    assert [r["status"] for r in recs] == ["failed", "ok"]
    assert [r["status"] for r in records.latest(recs)] == ["ok"]


def test_compare_ignores_the_code_version_and_the_command_line(tmp_path, harness):
    a = real_record(0)
    b = {**a, "method_code": "0123456789abcdef", "argv": ["harness", "run"]}
    write_lines(tmp_path / "a.jsonl", [a])
    write_lines(tmp_path / "b.jsonl", [b])
    code, _, err = harness("compare", "a.jsonl", "b.jsonl")
    assert code == 0 and "PASS" in err


def test_the_code_version_covers_the_shared_modules_a_method_uses():
    files = {Path(f).name for f in code.source_files(sys.modules["baselines.gru"])}
    assert files == {"gru.py", "_cells.py"}
    assert resume.method_code("gru") != resume.method_code("rnn")


# --- 6. signals ----------------------------------------------------------------------------------


def test_sigterm_ends_a_command_like_ctrl_c_with_143(harness, monkeypatch):
    import harness.cli.store as store_cli

    def killed(args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("SIGTERM did not interrupt")

    monkeypatch.setattr(store_cli, "cmd_store", killed)
    before = signal.getsignal(signal.SIGTERM)
    code, _, err = harness("store", "check", "x.jsonl")
    assert code == 143 and err == "interrupted (SIGTERM); finished runs are recorded\n"
    assert signal.getsignal(signal.SIGTERM) == before  # restored


def test_records_are_validated_on_append_only_for_required_keys(tmp_path):
    with pytest.raises(RecordError, match="lacks required keys"):
        Store(tmp_path / "r.jsonl").append({"run_id": "x"})


def test_the_one_atomic_write_keeps_modes_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    """``harness.persistence.files.write_atomically``, under the store's rewrites and every
    generated file: the mode asked for (a generated file keeps its own, a new one gets what open()
    gives), and a
    write that fails leaves the old file and no temporary file beside it."""
    from harness.persistence.outputs import write_text

    board = tmp_path / "LEADERBOARD.md"
    board.write_text("old\n")
    board.chmod(0o640)
    write_text(board, "new\n")
    assert board.read_text() == "new\n" and board.stat().st_mode & 0o777 == 0o640
    fresh = tmp_path / "fresh.md"
    write_text(fresh, "x\n")
    mask = os.umask(0o022)
    os.umask(mask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~mask
    claims = tmp_path / "s.jsonl.claims"
    write_atomically(claims, b"{}\n", None, durable=True)
    assert claims.read_bytes() == b"{}\n" and claims.stat().st_mode & 0o777 == 0o600

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError):
        write_atomically(board, b"lost\n", 0o640)
    assert board.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "LEADERBOARD.md",
        "fresh.md",
        "s.jsonl.claims",
    ]


# --- 8. shared filesystems: --store-mode files --------------------------------------------------


def without_time(path: Path) -> list[dict]:
    """The records of a store, less their times and their --out and --store-mode flags."""
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    for r in recs:
        del r["time"]
        argv = r["argv"]
        r["argv"] = argv[: argv.index("--out")]
    return recs


def test_files_mode_gives_the_store_lock_mode_gives(tmp_path, harness, monkeypatch):
    sweep = [*GRU, "--methods", "gru,rnn", "--seeds", "0-1"]
    assert harness(*sweep, "--out", "lock.jsonl")[0] == 0
    driver_appends = []
    real_append = Store.append
    monkeypatch.setattr(Store, "append", lambda self, r: driver_appends.append(r))
    code, _, err = harness(*sweep, "--out", "files.jsonl", "--store-mode", "files")
    assert code == 0, err
    assert driver_appends == []  # each run wrote its own record file; the driver merged them
    monkeypatch.setattr(Store, "append", real_append)
    assert len(without_time(tmp_path / "lock.jsonl")) == 4
    assert without_time(tmp_path / "files.jsonl") == without_time(tmp_path / "lock.jsonl")
    assert list((tmp_path / "files.jsonl.parts").iterdir()) == []
    assert not (tmp_path / "files.jsonl.lock").exists()
    # the store keeps its mode: a later run needs no flag, and refuses lock mode in one line
    code, _, err = harness(*sweep, "--out", "files.jsonl", "--store-mode", "lock")
    assert code == 2 and err.count("\n") == 1 and "is in files mode" in err
    code, _, err = harness(*sweep, "--out", "files.jsonl")
    assert code == 0 and "4 already recorded" in err


def test_a_record_file_left_by_a_crash_is_merged_once_never_twice(tmp_path, harness):
    path = tmp_path / "s.jsonl"
    store = Store(path, mode="files")
    store.append({**real_record(0), "run_id": "old"})
    assert path.read_text().count("\n") == 1 and store.parts() == []
    left = {**real_record(1), "run_id": "left"}  # a driver died before merging it
    store_mod.write_part(store.parts_path, left)
    both = {**real_record(2), "run_id": "both"}  # a merge died between its append and unlink
    store_mod.write_part(store.parts_path, both)
    with open(path, "a") as f:
        f.write(records.to_json(both) + "\n")
    later = {**real_record(3), "run_id": "later"}
    store_mod.write_part(store.parts_path, later)
    ids = lambda recs: [r["run_id"] for r in recs]  # noqa: E731
    assert ids(Store(path).read()[0]) == ["old", "both", "left", "later"]  # reading writes nothing
    assert len(store.parts()) == 3
    code, out, _ = harness("store", "check", "s.jsonl")
    assert code == 0 and "2 record(s) not merged yet in " in out
    bad = store.parts_path / "0-bad.json"
    bad.write_bytes(b"{not json")  # not written by the harness: left, named, moved aside whole
    code, out, _ = harness("store", "check", "s.jsonl")
    assert code == 1 and "s.jsonl.parts/0-bad.json: Expecting property name enclosed" in out
    code, out, _ = harness("store", "repair", "s.jsonl")
    assert code == 0 and out.startswith("merged 2 record(s) from ")
    assert "moved s.jsonl.parts/0-bad.json to s.jsonl.rejected-0-bad.json: Expecting" in out
    assert Path(f"{path}.rejected-0-bad.json").read_bytes() == b"{not json"
    assert ids(Store(path).read()[0]) == ["old", "both", "left", "later"]
    assert store.parts() == [] and store.merge() == 0
    assert ids(Store(path).read()[0]) == ["old", "both", "left", "later"]
    store_mod.write_part(store.parts_path, {**real_record(4), "run_id": "next"})
    harness(*GRU, "--out", "s.jsonl")  # the next run merges what is left first
    assert ids(Store(path).read()[0])[:5] == ["old", "both", "left", "later", "next"]


def test_files_mode_needs_no_flock_and_lock_mode_says_so_where_there_is_none(
    tmp_path, harness, monkeypatch
):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(store_mod.fcntl, "flock", no_flock)
    code, _, err = harness(*GRU, "--out", "s.jsonl")
    assert code == 2 and err == (
        "error: cannot lock s.jsonl: its filesystem has no flock (No locks available); "
        "give --store-mode files (see docs/clusters.md)\n"
    )
    code, _, err = harness(*GRU, "--out", "s.jsonl", "--store-mode", "files")
    assert code == 0, err
    assert [r["method"] for r in Store(tmp_path / "s.jsonl").read()[0]] == ["gru"]


def test_a_lock_file_left_by_a_crash_is_broken_and_a_live_one_is_waited_for(tmp_path):
    lock = tmp_path / "s.jsonl.lock"
    got: list[str] = []

    def take(name: str) -> threading.Thread:
        def hold() -> None:
            with store_mod.lock_file(lock):
                got.append(name)

        t = threading.Thread(target=hold, daemon=True)
        t.start()
        return t

    lock.write_text(json.dumps({"host": store_mod.HOST, "pid": dead_pid()}))  # this host, gone
    take("after a dead holder").join(30)
    lock.write_text(json.dumps({"host": "login2", "pid": 1}))  # another host, long ago
    old = time.time() - store_mod.LOCK_STALE_S - 10
    os.utime(lock, (old, old))
    take("after an old holder").join(30)
    reused = {"host": store_mod.HOST, "pid": os.getpid(), "started": "0"}  # a pid used again
    lock.write_text(json.dumps(reused))
    take("after a reused pid").join(30)
    done = ["after a dead holder", "after an old holder", "after a reused pid"]
    assert got == done and not lock.exists()
    lock.write_text(json.dumps({"host": "login2", "pid": 1}))  # another host, just now
    waiting = take("after a live holder")
    waiting.join(0.5)
    assert got == done and waiting.is_alive()
    lock.unlink()  # its holder is done
    waiting.join(30)
    assert got[-1] == "after a live holder" and not lock.exists()
