"""The committed speed reports (reports/TIMING.md, reports/SPEEDUP.md): current and honest.

A change to a method's code changes its ``method_code``; the timing reports name the code they
timed, so a report timed with other code is stale. Either the report is regenerated (the command
is in its header) or reports/timing-waivers.md says, per method and code version, why the old
timing still holds. The speedup report calls nothing a bound that a measurement can pass.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.bench.roofline import BOUND_KEYS
from harness.components.code import current_code

REPORTS = Path(__file__).resolve().parent.parent / "reports"
TIMED = ("TIMING.md", "SPEEDUP.md")
WAIVERS = REPORTS / "timing-waivers.md"


def timed_codes(text: str) -> dict[str, str]:
    """``{method: code}`` from a report's "Code timed (`method_code`): m c, m c." line."""
    line = re.search(r"Code timed \(`method_code`\): (.*)\.$", text, re.M)
    assert line, "the report names no code it timed"
    return dict(pair.split() for pair in line.group(1).split(", "))


def waivers(text: str) -> set[tuple[str, str]]:
    """``{(method, code)}`` from lines ``- METHOD CODE: why the timing still holds``."""
    return {(m, c) for m, c, why in re.findall(r"^- (\S+) ([0-9a-f]{16}): (\S.*)$", text, re.M)}


def stale(report: str, waived: set[tuple[str, str]]) -> list[str]:
    """The methods a report timed with code other than today's and no waiver names."""
    out = []
    for method, code in sorted(timed_codes(report).items()):
        now = current_code(method)
        if now is not None and now != code and (method, now) not in waived:
            out.append(f"{method}: timed {code}, now {now}")
    return out


@pytest.mark.parametrize("name", TIMED)
def test_a_committed_timing_report_timed_todays_code(name):
    text = (REPORTS / name).read_text()
    waived = waivers(WAIVERS.read_text()) if WAIVERS.exists() else set()
    assert not stale(text, waived), (
        f"reports/{name} timed other code than today's; regenerate it (the command is in its "
        "header) or say in reports/timing-waivers.md why its timing still holds"
    )


def test_a_waiver_names_todays_code_only():
    """A waiver for code that is no longer today's would waive nothing: remove it."""
    if not WAIVERS.exists():
        return
    for method, code in waivers(WAIVERS.read_text()):
        assert current_code(method) == code, f"timing-waivers.md: {method} {code} is not today's"


def test_stale_and_waived_codes_are_told_apart():
    line = "Code timed (`method_code`): gru 0000000000000000, lstm {}.".format(current_code("lstm"))
    assert stale(line, set()) == [f"gru: timed 0000000000000000, now {current_code('gru')}"]
    assert stale(line, {("gru", current_code("gru"))}) == []
    assert stale(line, {("gru", "0000000000000000")}) != []


@pytest.mark.parametrize("name", TIMED)
def test_a_committed_timing_report_names_the_cpu_model(name):
    text = (REPORTS / name).read_text()
    assert re.search(r"\bcpu \([^)]+\)", text), f"reports/{name} names no CPU model"


def test_the_committed_speedup_report_calls_no_mac_ratio_a_bound():
    """Time does not follow MACs alone (per-step dispatch, cache): a measured speedup passed its
    MAC ratio in 12 rows of the report of 83eb45a against the dense loop, and in 4 against the
    no-skip path or the fused cell on a loaded machine. So each comparison gives its MAC ratio
    and the realised fraction, and no MAC ratio is called a bound. The one bound of a row is a
    time, the physical bound from the roofline measured in its run (``bound_ms``: its fields
    ``harness.bench.roofline.BOUND_KEYS``), which rows measured before it do not have."""
    rows = [json.loads(line) for line in (REPORTS / "SPEEDUP.jsonl").read_text().splitlines()]
    assert rows
    for r in rows:
        assert [k for k in r if k.startswith("bound") and k not in BOUND_KEYS] == []
        if "bound_ms" in r:
            assert r["x_bound"] == pytest.approx(r["fast_ms"] / r["bound_ms"])
        for alt in ("dense", "noskip", "fused"):
            ratio = r[f"{alt}_macs"] / r["fast_macs"]
            assert r[f"mac_ratio_{alt}"] == pytest.approx(ratio)
            assert r[f"realised_frac_{alt}"] == pytest.approx(r[f"speedup_{alt}"] / ratio)
    text = (REPORTS / "SPEEDUP.md").read_text()
    intro = next(line for line in text.splitlines() if line.startswith("Untrained models"))
    assert "bound" not in intro.replace("no bound on the speedup", "")


def test_the_committed_timing_records_are_those_of_the_committed_report():
    """reports/TIMING.jsonl (what the docs' blocks print from) renders reports/TIMING.md's tables:
    the records beside the report are the ones it shows, row for row."""
    from harness.bench.suite import render_timing

    text, timings, problems = render_timing([REPORTS / "TIMING.jsonl"], "harness bench")
    assert problems == []
    committed = (REPORTS / "TIMING.md").read_text()
    assert f"({len(timings)} timings, in " in committed
    assert text.split("\n## ")[1:] == committed.split("\n## ")[1:]
