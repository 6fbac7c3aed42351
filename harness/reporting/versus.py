"""Paper vs harness: each row of a seed paper's table beside the harness variant that fills it.

One table per published table of the task (``harness.reporting.published``): each paper row
beside the harness variant that has all of the row's knobs (``match_variant``), or ``not run`` and
the command that would run it; the paper's numbers as printed, ours minus the paper's, and where
the harness setting differs from the paper's (``setting_diff``), with the task's documented
differences (``task_differences``) under the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.metrics import get_metric
from harness.reporting.published import PaperRow, PaperTable
from harness.reporting.render import Cell
from harness.reporting.tables import Column, cell
from harness.reporting.text import scaled, seeds_cell
from harness.selection import Rule, choose

if TYPE_CHECKING:
    import pandas as pd


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-15)
    return a == b


def match_variant(row: PaperRow, agg: pd.DataFrame, rule: Rule) -> tuple[Any, str]:
    """The harness variant that fills a paper row, and how it was picked.

    A variant qualifies only if it is of the row's method and has every one of the row's knobs
    (``row.config``). One qualifying variant fills the row; among several, ``rule`` picks on
    validation metrics (``harness.selection.choose``). None qualifies: ``(None, "not run")``.
    """
    cand = [
        r
        for _, r in agg[agg["method"] == row.method].iterrows()
        if all(_same(r["config"].get(k), v) for k, v in row.config.items())
    ]
    if not cand:
        return None, "not run"
    if len(cand) == 1:
        return cand[0], "the one variant with the row's knobs"
    vid, why = choose({r["variant_id"]: r["records"] for r in cand}, rule)
    if vid is None:
        return None, f"not picked ({why})"
    return next(r for r in cand if r["variant_id"] == vid), why


# Short names of settings in the "setting vs paper" notes; other keys print as their last part.
SETTING_NAMES = {
    "task.seq_len": "T",
    "task.n_train": "training sequences",
    "task.chunk": "chunk",
    "hidden_size": "D",
    "train.batch_size": "batch",
    "train.epochs": "epochs",
    "train.lr": "lr",
}


def _value_text(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def setting_diff(setting: dict[str, Any], cfg: dict[str, Any], seeds: int, preset: str) -> str:
    """Where a harness variant's setting differs from a paper table's: ``T 50 (paper 500); ...``.

    Args:
        setting: the paper's (``PaperTable.setting``; a string value such as ``n.s.`` is shown
            as is and always counts as a difference).
        cfg: the variant's flat config.
        seeds: its seed count.
        preset: the harness preset.
    """
    parts = [f"preset {preset}"]
    for k, paper in setting.items():
        ours = seeds if k == "seeds" else cfg.get(k, "?")
        if not _same(ours, paper):
            name = SETTING_NAMES.get(k, k.rsplit(".", 1)[-1])
            parts.append(f"{name} {_value_text(ours)} (paper {_value_text(paper)})")
    if cfg.get("train.compile"):  # same equations, fused float operations (docs/methods.md)
        parts.append("trained with its step compiled (train.compile)")
    return "; ".join(parts)


def _decimals_of(text: str) -> int:
    return len(text.partition(".")[2]) if "." in text and "e" not in text.lower() else 0


def _headline(table: PaperTable, primary: str) -> str:
    """The column the "ours − paper" difference is taken on: the primary metric if printed."""
    if primary in table.columns:
        return primary
    return next((c for c in table.columns if c not in ("solved", "flops", "params")), "")


def run_command(task: str, preset: str, method: str, knobs: dict[str, Any], seeds: int) -> str:
    """The ``harness run`` command that would fill a paper row."""
    cmd = f"harness run --tasks {task} --methods {method} --preset {preset}"
    cmd += f" --seeds 0-{seeds - 1}" if seeds > 1 else ""
    return cmd + "".join(f" --set {k}={_value_text(v)}" for k, v in knobs.items())


@dataclass
class PaperVsHarness:
    """One paper-vs-harness table: cells, and the notes printed under it."""

    titles: list[str]
    rows: list[list[Cell]]
    notes: list[str]


def paper_vs_harness(
    table: PaperTable,
    agg: pd.DataFrame,
    primary: str,
    rule: Rule,
    task: str = "",
    preset: str = "",
) -> PaperVsHarness:
    """Each paper row beside the harness variant with that row's knobs (``match_variant``).

    Paper numbers are printed as the paper prints them, in its units (``table.scale``); ours are
    in the same units. Rows that no variant fills say ``not run`` and the notes give the command
    that would run them; the setting differences (``setting_diff``) are lettered notes.
    """
    head = _headline(table, primary)
    titles = ["Paper row"]
    for k in table.columns:
        t = scaled(get_metric(k).title, table.scale.get(k, 0))
        titles += [f"Paper: {t}", f"Ours: {t}"]
    if head:
        h = get_metric(head).title
        titles.append(f"Ours − paper: {scaled(h, table.scale.get(head, 0))}")
    titles += ["Ours: knobs", "Ours: seeds", "Setting vs paper", "Commit", "Picked by"]
    rows, letters, commands = [], {}, []
    n_seeds = int(agg["seeds"].max()) if len(agg) else 1
    for prow in table.rows:
        ours, why = match_variant(prow, agg, rule)
        cells: list[Cell] = [(prow.label, False)]
        for k in table.columns:
            sc = table.scale.get(k, 0)
            paper = prow.printed[k]
            if k in prow.printed_std:
                paper += f" ± {prow.printed_std[k]}"
            col = Column(k, k, scale=sc, form=get_metric(k).form)
            mine = cell(ours, col) if ours is not None else "not run"
            cells += [(paper, False), (mine, False)]
        if head:
            diff = "–"
            if ours is not None and not math.isnan(ours[head]):
                d = (ours[head] - prow.values[head]) * 10.0 ** -table.scale.get(head, 0)
                diff = f"{d:+.{_decimals_of(prow.printed[head])}f}".replace("-", "−")
            cells.append((diff, False))
        knobs = ", ".join(f"{k}={_value_text(v)}" for k, v in prow.config.items()) or "–"
        if ours is None:
            commands.append(run_command(task, preset, prow.method, prow.config, n_seeds))
            cells += [(knobs, False), ("0", False), ("–", False), ("–", False), (why, False)]
        else:
            diff_text = setting_diff(table.setting, ours["config"], ours["seeds"], preset)
            letter = letters.setdefault(diff_text, f"({chr(ord('a') + len(letters))})")
            cells += [
                (knobs, False),
                (seeds_cell(ours["seeds"]), False),
                (letter, False),
                (ours["commit"], False),
                (why, False),
            ]
        rows.append(cells)
    notes = [f"Setting vs paper {letter}: {text}." for text, letter in letters.items()]
    if commands:
        notes.append(
            "Not run (no harness variant has the row's knobs); to run them: "
            + "; ".join(f"`{c}`" for c in dict.fromkeys(commands))
            + "."
        )
    return PaperVsHarness(titles, rows, notes)


def task_differences(task: str) -> list[str]:
    """The bullets under "Differences from the paper:" in the task module's docstring."""
    import sys

    from harness.registry import TASKS

    try:
        cls = TASKS.get(task)
    except HarnessError:
        return []
    doc = sys.modules[cls.__module__].__doc__ or ""
    _, found, rest = doc.partition("Differences from the paper:")
    if not found:
        return []
    bullets: list[str] = []
    for line in rest.strip("\n").splitlines():
        if not line.strip():
            break
        if line.lstrip().startswith("- "):
            bullets.append(line.strip()[2:])
        elif bullets:
            bullets[-1] += " " + line.strip()
    return [b.replace("``", "`") for b in bullets]


MATCH_RULE = (
    "- Paper vs harness: a harness variant fills a paper row only if it has every one of the "
    "row's knobs (Ours: knobs, e.g. λ, p, depth); with several such variants, {rule} picks one "
    "on validation data; the test set never breaks a tie. A row no variant fills says `not run`, "
    "and the command that would run it is listed under the table. Settings shared by the table "
    "(preset, T, data size, D, epochs, batch, lr, seeds) may differ from the paper's: "
    "Setting vs paper names, per row, a note listing each difference. Paper numbers are printed "
    "as the paper prints them; Ours − paper is in the paper's unit.\n"
)
