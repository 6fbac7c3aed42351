"""scripts/gpu-check, the one prepared device run (issue 66), tried end to end without a GPU: its
``--dry-run`` runs every step (the CUDA tests, the smoke sweep and its comparison with the
reference records, the three timing runs and their report) on the CPU at tiny sizes, and writes
nothing outside ``--out``."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_check_dry_run_runs_every_step(tmp_path):
    report = ROOT / "reports" / "TIMING-cuda.md"
    before = report.stat().st_mtime_ns if report.exists() else None
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu-check"), "--dry-run", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = ["tests", "smoke", "compare", "bench", "bench-b1", "bench-b32", "report"]
    for step in steps:
        assert f"{step}: ok" in proc.stdout, (step, proc.stdout[-3000:])
    assert "PASS" in (out / "compare.log").read_text()
    versions = json.loads((out / "versions.json").read_text())
    assert versions["torch"] and versions["device"] == "cpu"
    text = (out / "TIMING-cuda.md").read_text()
    records = [json.loads(line) for line in (out / "TIMING-cuda.jsonl").read_text().splitlines()]
    assert {r["sizes"]["B"] for r in records if r["phase"] == "inference"} >= {1, 32}
    assert "random-updates" in text and "torch.nn.GRU (fused)" in text
    after = report.stat().st_mtime_ns if report.exists() else None
    assert after == before  # a dry run writes nothing outside --out


def test_a_cuda_timing_report_names_cuda_driver_cudnn_and_triton():
    from harness.bench import timing_report

    records = [
        json.loads(line)
        for line in (ROOT / "reports" / "TIMING.jsonl").read_text().splitlines()[:4]
    ]
    assert "- CUDA:" not in timing_report.timing_markdown(records, ["t.jsonl"], "c")
    cuda = {"cuda": "13.0", "driver": "580.1", "cudnn": 91000, "capability": "9.0"}
    for r in records:
        r["env"] = {**r["env"], **cuda, "triton": "3.6.0"}
    md = timing_report.timing_markdown(records, ["t.jsonl"], "c")
    line = "- CUDA: 13.0; driver: 580.1; cuDNN: 91000; compute capability: 9.0; triton: 3.6.0."
    assert line in md
    assert "(3× on CUDA, issue 66" not in md  # the bound is the device's: these are CPU tables


def test_on_cuda_a_train_step_is_flagged_above_3x_its_cell_per_mac():
    from harness.bench import phases, timing_report

    assert (phases.mac_bound("cpu"), phases.mac_bound("cuda"), phases.mac_bound(None)) == (
        1.5,
        3.0,
        1.5,
    )
    lines = (ROOT / "reports" / "TIMING.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r.get("phase") == "train"]
    flagged = [r for r in records if (timing_report.per_mac_ratio(r) or 0) > 1.5]
    middle = [r for r in flagged if timing_report.per_mac_ratio(r) <= 3.0]
    assert middle, "no committed row between the two bounds to test with"
    table = [r for r in records if (r["task"], r["device"]) == (middle[0]["task"], "cpu")]
    assert "⚑ Train step above 1.5×" in timing_report.timing_table(table)
    for r in table:
        r["device"] = "cuda"
    text = timing_report.timing_table(table)
    assert "⚑ Train step above 3×" in text or "⚑" not in text
    assert f"**{timing_report.format_ratio(timing_report.per_mac_ratio(middle[0]))}**" not in text
