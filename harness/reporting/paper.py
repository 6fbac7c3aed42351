"""Paper-style reports: the seed papers' tables and figures, regenerated from run records.

Per (task, preset), ``write_paper_report`` writes ``paper_<task>_<preset>.md`` / ``.tex`` (and
``.csv`` / ``.parquet``: the main table's numbers) and figures (``harness.reporting.figures``):
- the main table (``harness.reporting.tables``), in the layout of the seed paper that reports
  this kind of task. One row per method variant (runs differing only by seed,
  ``harness.reporting.runs``), labelled by the config values that vary among a method's
  variants, or with a selection rule (``harness.selection``) one row per method, picked on
  validation data. Cells are ``harness.reporting.text.fmt_cell`` (mean ± std over seeds, one
  unit per column); the best mean per measured column is bold; a 95 % CI of the primary metric,
  the commit of the row's records, and a Welch's t-test column against the best variant (left
  out when all n/a);
- one "paper vs harness" table per published table of the task (``harness.reporting.versus``).
  Methods that a published table lists come first in the main table, in its order.
The header (``harness.reporting.text.header``) names the records, commits, devices, FLOP unit and
the rule that chose each test metric. LaTeX output compiles with booktabs and graphicx
(``harness.reporting.render``). pandas and scipy are imported inside the functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.metrics import get_metric
from harness.outputs import write_text
from harness.records import latest
from harness.reporting.published import tables_for
from harness.reporting.render import (
    FORMATS,
    NO_PYARROW,
    Table,
    has_pyarrow,
    latex_document,
    markdown_document,
    render_tex,
    tex_escape,
    write_frame,
)
from harness.reporting.runs import KEYS, aggregate, failed_runs, runs_frame, tidy
from harness.reporting.tables import main_table
from harness.reporting.text import NOTES, header
from harness.reporting.versus import MATCH_RULE, paper_vs_harness, task_differences
from harness.selection import Rule
from harness.selection import select as select_records

if TYPE_CHECKING:
    import pandas as pd

# Importable from here as before the report was split into modules (the CLI and tests use them).
__all__ = [
    "FORMATS",
    "NO_PYARROW",
    "render_tex",
    "tex_escape",
    "write_frame",
    "write_paper_report",
]


def write_paper_report(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    out_dir: str | Path,
    tasks: Sequence[str] | None = None,
    presets: Sequence[str] | None = None,
    formats: Sequence[str] = ("md", "tex"),
    figures: bool = True,
    published: str | Path | None = None,
    select: Rule | None = None,
) -> list[Path]:
    """Write the paper-style report of every chosen (task, preset) with ok runs.

    Args:
        records: run records (any status; failed runs are counted, not tabulated).
        sources: the records files, named in the header.
        out_dir: directory for ``paper_<task>_<preset>.{md,tex,csv,parquet}`` and ``figures/``.
        tasks: restrict to these tasks (None: all in the records).
        presets: restrict to these presets (None: all in the records).
        formats: any of ``md``, ``tex``, ``csv``, ``parquet`` (csv / parquet: the main table's
            numbers, one row per variant).
        figures: also draw the figures (PNG and PDF).
        published: the published-results file to compare with (None: the shipped one; see
            ``harness.reporting.published.load_tables``).
        select: a selection rule (``harness.selection``): the main table then has one row per
            method, the variant the rule picks on validation data. It also picks among several
            variants with a paper row's knobs (None: ``best-val`` there, all variants in the
            main table).

    Returns:
        The paths written. Raises HarnessError if nothing matches the selection.
    """
    if unknown := sorted(set(formats) - set(FORMATS)):
        raise HarnessError(f"unknown report formats {unknown}; use any of {', '.join(FORMATS)}")
    if "parquet" in formats and not has_pyarrow():
        raise HarnessError(NO_PYARROW)
    records = latest(records)
    runs = runs_frame(records)
    if not runs.empty:
        chosen = runs["task"].isin(tasks or runs["task"])
        runs = runs[chosen & runs["preset"].isin(presets or runs["preset"])]
    if runs.empty:
        raise HarnessError(
            f"no ok runs for tasks {list(tasks or ['all'])}, presets "
            f"{list(presets or ['all'])} in {', '.join(sources)}"
        )
    try:
        return _write(records, runs, sources, Path(out_dir), formats, figures, published, select)
    except OSError as e:
        raise HarnessError(
            f"cannot write the paper report to {out_dir}: {e.strerror or e}"
        ) from None


def _write(
    records: list[dict[str, Any]],
    runs: pd.DataFrame,
    sources: Sequence[str],
    out: Path,
    formats: Sequence[str],
    figures: bool,
    published: str | Path | None,
    select: Rule | None,
) -> list[Path]:
    """One report per (task, preset) of ``runs``; see ``write_paper_report``."""
    from harness.reporting.figures import report_figures

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    rule = select or Rule("best-val")
    for (task, preset), t_runs in runs.groupby(["task", "preset"]):
        primary, higher = t_runs["primary"].iloc[0], bool(t_runs["higher"].iloc[0])  # registry's
        papers = tables_for(task, published)
        order = list(dict.fromkeys(r.method for t in papers for r in t.rows))
        keys = list(dict.fromkeys([primary, *KEYS]))
        agg = aggregate(t_runs, keys, order)
        picked = None
        shown = agg
        if select is not None:
            _, picked = select_records(list(t_runs["record"]), select)
            shown = agg[agg["variant_id"].isin(picked)].reset_index(drop=True)
        seeds = ", ".join(map(str, sorted(t_runs["seed"].unique())))
        ours = f"harness, preset {preset}, seeds {seeds}"
        stem = f"{task}_{preset}"
        slug = re.sub(r"[^a-z0-9]+", "-", stem.lower())
        rows_rule = f"rows picked by {select}" if select else "every variant"
        titles, rows = main_table(shown, primary, higher, picked)
        unpicked = sorted(k for k in (picked or {}) if "/" in k)
        tables = [
            Table(
                f"{task} ({preset} preset), {rows_rule}; {ours}",
                f"tab:{slug}",
                titles,
                rows,
                [f"{k.split('/')[-1]}: no row ({picked[k]})." for k in unpicked],
            )
        ]
        differences = task_differences(task)
        for j, t in enumerate(papers):
            pvh = paper_vs_harness(t, agg, primary, rule, task, preset)
            notes = ([t.note] if t.note else []) + pvh.notes
            if differences:
                notes.append(
                    f"The harness's {task} differs from the paper: " + " ".join(differences)
                )
            tables.append(
                Table(
                    f"{t.title} vs harness ({ours}); paper rows filled by knob match, "
                    f"ties by {rule}",
                    f"tab:{slug}-paper-{j + 1}",
                    pvh.titles,
                    pvh.rows,
                    notes,
                )
            )
        title = get_metric(primary).title
        figs = (
            report_figures(t_runs, primary, higher, title, out / "figures" / stem)
            if figures
            else []
        )
        written += [p for _, ps in figs for p in ps]
        in_group = [r for r in records if r["task"] == task and r["preset"] == preset]
        failed = failed_runs(in_group)
        head = header(in_group, sources, f"{task} ({preset} preset): paper-style report") + (
            "- Bold: best mean per column (arrow = direction); Solved, counts and p-values are "
            f"never bold. p: Welch's t-test of the per-seed {primary} against the best "
            "variant's (the column is left out when every p is n/a: < 2 seeds on a side).\n"
            f"- Rows: {select.describe() if select else 'every variant (no --select rule)'}.\n"
            + MATCH_RULE.format(rule=rule)
            + NOTES
            + f"- Failed runs (not tabulated): {len(failed)}{'.' if not failed else ':'}\n"
            + "".join(f"  - {line}\n" for line in failed)
        )
        for fmt, render in (("md", markdown_document), ("tex", latex_document)):
            if fmt in formats:
                path = out / f"paper_{stem}.{fmt}"
                write_text(path, render(head, tables, figs, out))
                written.append(path)
        for fmt in ("csv", "parquet"):
            if fmt in formats:
                path = out / f"paper_{stem}.{fmt}"
                write_frame(tidy(shown, task, preset, picked), path)
                written.append(path)
    return written
