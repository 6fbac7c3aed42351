"""Paper vs harness: each row of a seed paper's table beside the harness variant that fills it.

One table per published table of the task (``harness.reporting.published``); the matching rules at
the paper preset and at a smaller one: docs/reports.md, Paper vs harness.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from harness.components.config import resolve
from harness.components.metrics import get_metric
from harness.components.selection import Rule, choose
from harness.errors import HarnessError
from harness.persistence.records import flat_config
from harness.planning.suites import load, plan, suite_names, suite_path
from harness.planning.sweep import build_configs
from harness.reporting.published import PaperRow, PaperTable
from harness.reporting.render import Cell, plain
from harness.reporting.runs import Failed, failed_summary
from harness.reporting.tables import (
    EVENT_MARK,
    Column,
    cell,
    comparable,
    events_notes,
    seed_count_notes,
    solved_notes,
)
from harness.reporting.text import num_first, scaled, seeds_cell

if TYPE_CHECKING:
    import pandas as pd


PAPER_PRESET = "paper"  # the preset whose runs are compared with the papers' numbers
NOT_RUN = "not run at this setting"
ONE = "the one variant at the row's setting"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-15)
    return a == b


def stated(value: Any) -> bool:
    """Whether a paper states a setting (``"n.s."``: not stated)."""
    return not (isinstance(value, str) and value.strip().lower() == "n.s.")


def row_key(row: PaperRow, table: PaperTable, at_setting: bool = True) -> dict[str, Any]:
    """The config a harness variant must have to fill a paper row.

    The row's knobs and, ``at_setting`` (the paper preset), every setting the paper states for its
    table that the row's method has (not ``seeds`` nor ``n.s.``).
    """
    fields = config_fields(row.method, table.task) if at_setting else frozenset()
    key = {
        k: v
        for k, v in table.setting.items()
        if at_setting and k != "seeds" and stated(v) and (k in fields or not fields)
    }
    return {**key, **row.config}


@lru_cache(maxsize=256)
def config_fields(method: str, task: str) -> frozenset[str]:
    """The flat config keys of a method on a task (empty if either is unknown).

    A table setting that only some of its methods have (EI-REHN's ``dz``) keys only their rows.
    """
    try:
        return frozenset(flat_config({"config": resolve(method, task, 0, "smoke").to_dict()}))
    except HarnessError:
        return frozenset()


def has_key(cfg: dict[str, Any], key: dict[str, Any]) -> bool:
    """Whether a flat config has every value of ``key``."""
    return all(_same(cfg.get(k), v) for k, v in key.items())


def match_variant(
    row: PaperRow, agg: pd.DataFrame, rule: Rule, key: dict[str, Any] | None = None
) -> tuple[Any, str]:
    """The harness variant that fills a paper row, and how it was picked (None: ``NOT_RUN``).

    A variant of the row's method with every value of ``key`` (None: the row's knobs); among
    several, ``rule`` picks on validation metrics (``harness.components.selection.choose``).
    """
    key = row.config if key is None else key
    cand = [r for _, r in agg[agg["method"] == row.method].iterrows() if has_key(r["config"], key)]
    if not cand:
        return None, NOT_RUN
    if len(cand) == 1:
        return cand[0], ONE
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
    "embed_size": "embedding",
    "tie_embeddings": "tied embeddings",
    "dz": "D_z",
    "task.max_series": "series",
    "task.max_tokens": "tokens",
    "num_layers": "layers",
    "train.batch_size": "batch",
    "train.epochs": "epochs",
    "train.lr": "lr",
    "lam": "λ",
}


def _value_text(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _shown(key: str, v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v == 0 and key == "embed_size":
        return "as D"
    if v == 0 and key.rsplit(".", 1)[-1].startswith("max_"):
        return "all"
    return _value_text(v)


def _name(key: str) -> str:
    return SETTING_NAMES.get(key, key.rsplit(".", 1)[-1])


def knobs_text(knobs: dict[str, Any]) -> str:
    """``λ = 0.0002, depth = 5``: a row's knobs in words."""
    return ", ".join(f"{_name(k)} = {_value_text(v)}" for k, v in knobs.items())


def setting_diff(setting: dict[str, Any], cfg: dict[str, Any], seeds: int, preset: str) -> str:
    """Where a variant's setting differs from a paper table's: ``T 50 (paper 500); ...``.

    A string setting such as ``n.s.`` always counts as a difference.
    """
    parts = [f"preset {preset}"]
    for k, paper in setting.items():
        if k != "seeds" and k not in cfg:  # a setting of the table's other methods (``dz``)
            continue
        ours = seeds if k == "seeds" else cfg[k]
        if not _same(ours, paper):
            parts.append(f"{_name(k)} {_shown(k, ours)} (paper {_shown(k, paper)})")
    if cfg.get("train.compile"):  # same equations, fused float operations (docs/methods.md)
        parts.append("trained with its step compiled (train.compile)")
    return "; ".join(parts)


def own_setting(table: PaperTable, cfgs: Sequence[dict[str, Any]]) -> str:
    """The harness's values of a table's setting keys: ``D 50, T 50, epochs 15`` (``D 10/15``)."""
    vals = {
        k: sorted({_shown(k, c[k]) for c in cfgs if k in c}, key=num_first) for k in table.setting
    }
    return ", ".join(f"{_name(k)} {'/'.join(v)}" for k, v in vals.items() if v and k != "seeds")


def row_command(
    task: str, preset: str, row: PaperRow, key: dict[str, Any], seeds: int, at_setting: bool
) -> str:
    """The ``harness run`` line that would fill a paper row at ``key``.

    At the paper's setting, a shipped suite whose runs include the key (``suite_command``); else the
    flags, with the values of ``key`` the preset does not already have.
    """
    for name in suite_names() if at_setting else []:
        found = suite_command(
            name, task, preset, row.method, tuple(sorted(key.items())), tuple(row.config)
        )
        if found:
            return found
    try:
        default = flat_config({"config": resolve(row.method, task, 0, preset).to_dict()})
    except Exception:  # an unknown method, task or preset: every value as a flag
        default = {}
    needed = {k: v for k, v in key.items() if k not in default or not _same(default[k], v)}
    cmd = f"harness run --tasks {task} --methods {row.method} --preset {preset}"
    cmd += f" --seeds 0-{seeds - 1}" if seeds > 1 else ""
    return cmd + "".join(f" --set {k}={_value_text(v)}" for k, v in needed.items())


@lru_cache(maxsize=256)
def suite_command(
    name: str, task: str, preset: str, method: str, key: tuple, knobs: tuple
) -> str | None:
    """``harness run --suite NAME --methods METHOD [--set ...]`` if suite ``name`` runs ``key``.

    Narrowed with ``--set`` to the row's knobs and the values of ``key`` the suite sweeps; returned
    only if the runs it resolves to (seed 0, nothing built) include one with every value of ``key``.
    """
    try:
        sweep = load(suite_path(name))
        if sweep.options.get("preset", "smoke") != preset:
            return None
        tasks = sweep.options.get("tasks", task)
        grids = {k for *_, grid in plan(sweep, method, tasks, {}, {}, {"methods"}) for k in grid}
        sets = {
            k: _value_text(v)
            for k, v in key
            if k in knobs or any(k == g or k.rsplit(".", 1)[-1] == g for g in grids)
        }
        flags = "".join(f" --set {k}={v}" for k, v in sets.items())
        for ms, ts, over, grid in plan(sweep, method, tasks, sets, {}, {"methods"}):
            for cfg in build_configs(ms, [task], [0], preset, over, grid) if task in ts else ():
                if has_key(flat_config({"config": cfg.to_dict()}), dict(key)):
                    return f"harness run --suite {name} --methods {method}{flags}"
    except (HarnessError, ValueError, KeyError):
        return None
    return None


@dataclass
class PaperVsHarness:
    """One paper-vs-harness table: cells, notes, and what filled it."""

    titles: list[str]
    rows: list[list[Cell]]
    notes: list[str]
    at_setting: bool = True  # False: the harness's own table, the paper's numbers as context
    own_setting: str = ""  # ``own_setting``'s text
    filled: dict[int, str] = field(default_factory=dict)  # paper row index -> variant id


def paper_vs_harness(
    table: PaperTable,
    agg: pd.DataFrame,
    primary: str,
    rule: Rule,
    task: str = "",
    preset: str = "",
    *,
    failed: Sequence[Failed] = (),
    dirty_agg: pd.DataFrame | None = None,
) -> PaperVsHarness:
    """Each paper row beside the harness variant at that row's setting (``match_variant``).

    ``agg``: the harness variants (``aggregate``); ``rule`` picks among several on validation;
    ``failed``: the task and preset's failed records, counted at the rows' keys; ``dirty_agg``: the
    variants of dirty trees' records, naming the rows only they would fill.
    """
    at_setting = preset == PAPER_PRESET
    titles, head = _titles(table, primary, at_setting)
    rows, letters, commands, filled, keys = [], {}, [], {}, []
    paper_seeds = table.setting.get("seeds")
    n_seeds = int(agg["seeds"].max()) if len(agg) else 1
    if isinstance(paper_seeds, int) and not isinstance(paper_seeds, bool) and at_setting:
        n_seeds = paper_seeds
    only_dirty = []
    for i, prow in enumerate(table.rows):
        key = row_key(prow, table, at_setting)
        keys.append((prow, key))
        ours, why = match_variant(prow, agg, rule, key)
        cells = _number_cells(table, prow, ours, head)
        knobs = ", ".join(f"{k}={_value_text(v)}" for k, v in prow.config.items()) or "–"
        if ours is None:
            commands.append(row_command(task, preset, prow, key, n_seeds, at_setting))
            if dirty_agg is not None and len(dirty_agg):
                if match_variant(prow, dirty_agg, rule, key)[0] is not None:
                    only_dirty.append(prow.label)
            cells += plain(knobs, "0", "–", "–", why)
        else:
            filled[i] = ours["variant_id"]
            diff_text = setting_diff(table.setting, ours["config"], ours["seeds"], preset)
            letter = letters.setdefault(diff_text, f"({chr(ord('a') + len(letters))})")
            mark = f" {EVENT_MARK}" if ours["events"] else ""
            seeds = seeds_cell(ours["seeds"]) + mark
            cells += plain(
                knobs, seeds, letter, ours["commit"], _picked_by(prow, why, rule, at_setting)
            )
        rows.append(cells)
    used = agg[agg["variant_id"].isin(filled.values())] if len(agg) else agg
    notes = _notes(table, used, letters, commands, only_dirty, at_setting, failed, keys)
    if "skip_pct" in table.columns:
        notes += solved_notes([r for _, r in used.iterrows()] if len(used) else [])
    cfgs = list(used["config"]) if len(used) else []
    if not cfgs:
        methods = {r.method for r in table.rows}
        cfgs = [c for m, c in zip(agg["method"], agg["config"], strict=True) if m in methods]
    return PaperVsHarness(
        titles, rows, notes, at_setting, own_setting(table, cfgs) if cfgs else "", filled
    )


def _titles(table: PaperTable, primary: str, at_setting: bool) -> tuple[list[str], str]:
    """The titles, and the measure of "Ours − paper" (the primary, else the first score; "")."""
    head = ""
    if at_setting:
        others = (c for c in table.columns if c not in ("solved", "flops", "params"))
        head = primary if primary in table.columns else next(others, "")
    titles = ["Paper row"]
    for k in table.columns:
        t = scaled(get_metric(k).title, table.scale.get(k, 0))
        titles += [f"Paper: {t}", f"Ours: {t}"]
    if head:
        h = get_metric(head).title
        titles.append(f"Ours − paper: {scaled(h, table.scale.get(head, 0))}")
    titles += ["Ours: knobs", "Ours: seeds", "Setting vs paper", "Commit", "Picked by"]
    return titles, head


def _number_cells(table: PaperTable, prow: PaperRow, ours: Any, head: str) -> list[Cell]:
    """A paper row's label, per column the paper's number and ours, then Ours − paper."""
    cells: list[Cell] = [(prow.label, False)]
    for j, k in enumerate(table.columns):
        paper = prow.printed[k]
        if k in prow.printed_std:
            paper += f" {table.spread_text(prow.printed_std[k])}"
        col = Column(k, k, scale=table.scale.get(k, 0), form=get_metric(k).form)
        mine = cell(ours, col) if ours is not None else (NOT_RUN if j == 0 else "–")
        cells += plain(paper, mine)
    if head:
        diff = "–"
        if ours is not None and not math.isnan(comparable(ours, head)):
            d = (comparable(ours, head) - prow.values[head]) * 10.0 ** -table.scale.get(head, 0)
            text = prow.printed[head]  # to the paper's decimal places
            places = len(text.partition(".")[2]) if "." in text and "e" not in text.lower() else 0
            diff = f"{d:+.{places}f}".replace("-", "−")
        cells.append((diff, False))
    return cells


def _picked_by(row: PaperRow, why: str, rule: Rule, at_setting: bool) -> str:
    if why == ONE and not at_setting:
        why = "the one variant with the row's knobs"
    if row.config:
        return f"at the paper's {knobs_text(row.config)} ({why})"
    if why.startswith("the one variant"):
        return why
    return f"{rule.label()} ({why})"


def _notes(
    table: PaperTable,
    used: pd.DataFrame,
    letters: dict[str, str],
    commands: list[str],
    only_dirty: list[str],
    at_setting: bool,
    failed: Sequence[Failed],
    keys: list[tuple[PaperRow, dict[str, Any]]],
) -> list[str]:
    notes = [
        f"Paper spreads, printed {table.spread} as the paper prints them, are "
        f"{table.spread_name}. Ours ± x: the sample std over seeds."
    ] * any(r.printed_std for r in table.rows)
    notes += [f"Setting vs paper {letter}: {text}." for text, letter in letters.items()]
    if commands:
        where = "at the row's setting" if at_setting else "with the row's knobs"
        notes.append(
            f"Not run (no harness variant {where}); to run them: "
            + "; ".join(f"`{c}`" for c in dict.fromkeys(commands))
            + "."
        )
    if only_dirty:
        notes.append(
            "Rows that only records of a dirty tree would fill (left out; `--allow-dirty` "
            f"tabulates them): {', '.join(dict.fromkeys(only_dirty))}."
        )
    notes += seed_count_notes(used, "any variant filling a row")
    at_rows = [
        f
        for f in failed
        if any(
            f.record["method"] == row.method and has_key(flat_config(f.record), key)
            for row, key in keys
        )
    ]
    notes.append(f"Failed records at this table's rows' settings: {failed_summary(at_rows)}.")
    notes += events_notes(used) if len(used) else []
    return notes
