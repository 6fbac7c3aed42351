"""Paper-style reports: the seed papers' tables and figures, regenerated from run records.

Per (task, preset): the main table (``harness.reporting.tables``), the paired comparisons
(``harness.reporting.against``), one paper-vs-harness table per published table
(``harness.reporting.versus``) and the figures, rendered to Markdown, LaTeX, csv and parquet. What
they hold and which records: docs/reports.md. pandas and scipy are imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.components.metrics import get_metric
from harness.components.registry import TASKS
from harness.components.selection import Rule, no_row_line
from harness.components.selection import select as select_records
from harness.errors import HarnessError
from harness.persistence.outputs import write_text
from harness.persistence.records import latest
from harness.references import role
from harness.reporting.against import against_table
from harness.reporting.latex import tex_key
from harness.reporting.published import PaperTable, tables_for
from harness.reporting.references import notes as reference_notes
from harness.reporting.references import row as ref_row
from harness.reporting.render import (
    FORMATS,
    Table,
    check_formats,
    latex_document,
    markdown_document,
    render_md,
    table_files,
    write_frame,
)
from harness.reporting.runs import (
    aggregate,
    dirty,
    failed_records,
    failed_summary,
    measures,
    runs_frame,
    tidy,
)
from harness.reporting.tables import build_main_table
from harness.reporting.text import NOTES, header
from harness.reporting.versus import PaperVsHarness, knobs_text, paper_vs_harness

if TYPE_CHECKING:
    import pandas as pd


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
    allow_dirty: bool = False,
    against: Sequence[str] = (),
    widths: Sequence[str] = ("text",),
    tex_root: str | Path | None = None,
) -> list[Path]:
    """Write the paper-style report of every chosen (task, preset) with ok runs.

    Args:
        records: run records (any status, superseded ones included: failed records are counted,
            and a run's latest record is tabulated).
        sources: the records files, named in the header.
        out_dir: directory for ``paper_<task>_<preset>.{md,tex,csv,parquet}`` and ``figures/``.
        tasks: restrict to these tasks (None: all in the records).
        presets: restrict to these presets (None: all in the records).
        formats: any of ``md``, ``tex``, ``csv``, ``parquet``.
        figures: also draw the figures (PNG and PDF).
        published: the published-results file (None: the shipped one).
        select: a selection rule: one row per method (None: every variant; ``best-val`` at a
            paper row).
        allow_dirty: also tabulate records of trees with uncommitted changes.
        against: methods to compare every method row with, paired by seed.
        widths: the LaTeX versions, ``text`` and ``column``.
        tex_root: the folder the LaTeX's figure paths start from, holding ``out_dir``.

    Returns:
        The paths written. Raises HarnessError if no ok run of the chosen tasks and presets.
    """
    check_formats(formats, widths)
    groups = _groups(records, sources, tasks, presets)
    root = None if tex_root is None else Path(tex_root)
    if root is not None and not Path(out_dir).resolve().is_relative_to(root.resolve()):
        raise HarnessError(f"--tex-root {tex_root} does not hold the report's folder {out_dir}")
    args = (sources, formats, figures, published, select, allow_dirty, tuple(against))
    opts = Options(*args, tuple(widths), root)
    out, written = Path(out_dir), list[Path]()
    try:
        out.mkdir(parents=True, exist_ok=True)
        for task, preset, group in groups:
            written += _render(*_build_one(task, preset, group, out, opts), out, opts)
    except OSError as e:
        raise HarnessError(
            f"cannot write the paper report to {out_dir}: {e.strerror or e}"
        ) from None
    return written


def paper_markdown(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    parts: Sequence[str],
    tasks: Sequence[str] | None = None,
    presets: Sequence[str] | None = None,
    select: Rule | None = None,
    allow_dirty: bool = False,
    against: Sequence[str] = (),
) -> str:
    """Tables of the paper-style report in Markdown, for a generated block of the docs.

    Per (task, preset), in the order of ``parts``, its ``main``, ``against`` and ``paper`` tables,
    each under its caption and followed by its notes; no header (it names the rendering commit and
    time), no figures. Raises HarnessError if no ok run of the chosen tasks and presets.
    """
    opts = Options(sources, (), False, None, select, allow_dirty, tuple(against))
    text = []
    for task, preset, group in _groups(records, sources, tasks, presets):
        tables = _build_one(task, preset, group, Path(), opts)[1]
        for part in parts:
            for t in (t for t in tables if t.label.partition("-")[0] == part):  # paper-1: paper
                notes = "".join(f"- {n}\n" for n in t.notes)
                text.append(f"*{t.caption}*\n\n{render_md(t.titles, t.rows)}\n\n{notes}")
    return "\n".join(text)


def _groups(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    tasks: Sequence[str] | None,
    presets: Sequence[str] | None,
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """Each chosen (task, preset) with ok runs and its records; HarnessError if there is none."""
    chosen = [
        r
        for r in records
        if (tasks is None or r["task"] in tasks) and (presets is None or r["preset"] in presets)
    ]
    groups = sorted({(r["task"], r["preset"]) for r in chosen if r.get("status") == "ok"})
    if not groups:
        raise HarnessError(
            f"no ok runs for tasks {list(tasks or ['all'])}, presets "
            f"{list(presets or ['all'])} in {', '.join(sources)}"
        )
    return [(t, p, [r for r in chosen if (r["task"], r["preset"]) == (t, p)]) for t, p in groups]


@dataclass(frozen=True)
class Options:
    """What ``write_paper_report`` was asked for, passed down to each (task, preset)."""

    sources: Sequence[str]
    formats: Sequence[str]
    figures: bool
    published: str | Path | None
    select: Rule | None
    allow_dirty: bool
    against: tuple[str, ...] = ()
    widths: tuple[str, ...] = ("text",)  # the LaTeX versions: text width, one column
    tex_root: Path | None = None  # the folder the LaTeX's figure paths start from


def _dirty_line(task: str, preset: str, left_out: list[dict[str, Any]], opts: Options) -> str:
    n = len(left_out)
    if opts.allow_dirty:
        return (
            f"- Records: dirty trees included (`--allow-dirty`): {n} record{'s' if n != 1 else ''}"
            " of this task and preset come from a tree with uncommitted changes (Commit: "
            "`+dirty`).\n"
        )
    again = allow_dirty_command(opts.sources, task, preset)
    return (
        "- Records: clean commits only (env.git_dirty false): "
        f"{n} record{'s' if n != 1 else ''} of this task and preset from a tree with "
        f"uncommitted changes left out{f' (`{again}` tabulates them)' if n else ''}.\n"
    )


def allow_dirty_command(sources: Sequence[str], task: str, preset: str) -> str:
    """The report command that tabulates a (task, preset) with the dirty records kept."""
    return (
        f"harness report {' '.join(sources)} --paper --task {task} --preset {preset} --allow-dirty"
    )


def _build_one(
    task: str, preset: str, group: list[dict[str, Any]], out: Path, opts: Options
) -> Any:
    """The report of one (task, preset), ``group`` its records: what ``_render`` takes."""
    from harness.reporting.figures import report_figures

    left_out = [r for r in group if dirty(r)]
    kept = group if opts.allow_dirty else [r for r in group if not dirty(r)]
    runs = runs_frame(latest(kept))
    failed = failed_records(kept)
    stem = f"{task}_{preset}"
    select = opts.select
    rule = select or Rule("best-val")
    head_notes = _dirty_line(task, preset, left_out, opts)
    head_notes += f"- Failed runs (not tabulated): {failed_summary(failed)}"
    head_notes += ":\n" if failed else ".\n"
    head_notes += "".join(f"  - {f.line()}\n" for f in failed)
    figs: list = []
    if runs.empty:
        head = header(kept or group, opts.sources, f"{task} ({preset} preset): paper-style report")
        tables = [_no_clean_table(task, preset, len(left_out), opts)]
        return head + head_notes + NOTES, tables, figs, None, None, (task, preset)
    primary, higher = runs["primary"].iloc[0], bool(runs["higher"].iloc[0])  # the registry's
    papers = tables_for(task, opts.published)
    refs = sorted({m for m in runs["method"] if role(m) != "method"})  # reference predictors first
    order = refs + list(dict.fromkeys(r.method for t in papers for r in t.rows))
    keys = list(dict.fromkeys([primary, *measures(list(runs["record"]))]))
    agg = aggregate(runs, keys, order)
    picked, shown = _picked(runs, agg, select)
    seeds = ", ".join(map(str, sorted(runs["seed"].unique())))
    ours = f"harness, preset {preset}, seeds {seeds}"
    tables = _main_tables(task, preset, (agg, shown, runs), primary, higher, picked, ours, opts)
    dirty_runs = runs_frame(latest([] if opts.allow_dirty else left_out))
    dirty_agg = _methods(aggregate(dirty_runs, keys, order)) if len(dirty_runs) else None
    methods = _methods(agg)  # the paper rows are methods
    for j, t in enumerate(papers):
        pvh = paper_vs_harness(
            t, methods, primary, rule, task, preset, failed=failed, dirty_agg=dirty_agg
        )
        tables.append(_versus_table(t, pvh, j, (task, preset, ours), shown, select))
    title = get_metric(primary).title
    if opts.figures:
        ids = runs[runs["variant_id"].isin(picked or {})]
        selected = dict(zip(ids["method"], ids["variant_id"], strict=True)) or None
        why = str(select) if select else ""
        figs = report_figures(runs, primary, higher, title, out / "figures" / stem, selected, why)
    head = header(latest(kept), opts.sources, f"{task} ({preset} preset): paper-style report")
    rows = f"- Rows: {select.describe() if select else 'every variant (no --select rule)'}.\n"
    head += HEAD_NOTES + rows + MATCH_RULE.format(rule=rule) + NOTES + head_notes
    return head, tables, figs, shown, picked, (task, preset)


HEAD_NOTES = (
    "- Bold: best test mean per column (arrow = direction), for display only; Solved, "
    "counts and p-values are never bold. p: the per-seed primary metric against a "
    "reference row chosen on validation, paired tests where the seeds are shared, Holm's "
    "correction (the notes under the table say which).\n"
)


def _methods(agg: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``agg`` that are methods (the paper rows are), no reference predictor's."""
    return agg[[role(m) == "method" for m in agg["method"]]]


def _no_clean_table(task: str, preset: str, n: int, opts: Options) -> Table:
    """The table of a (task, preset) whose ``n`` ok records all come from dirty trees."""
    note = (
        f"Every ok record of this task and preset ({n} records) comes from a tree with "
        "uncommitted changes, and paper tables use records from clean commits only. To "
        f"tabulate them anyway: `{allow_dirty_command(opts.sources, task, preset)}`."
    )
    return Table(
        f"{task} ({preset} preset): no record from a clean commit", "main", ["Method"], [], [note]
    )


def _picked(
    runs: pd.DataFrame, agg: pd.DataFrame, select: Rule | None
) -> tuple[dict[str, str] | None, pd.DataFrame]:
    """What a selection rule picked (variant id -> why; None: no rule) and the rows shown."""
    if select is None:
        return None, agg
    _, why = select_records(list(runs["record"]), select)
    # picked by best-val whatever the rule (harness.components.selection)
    own = "reference predictor"
    picked = {
        k: (f"{select.label()} ({v})" if "/" not in k and not v.startswith(own) else v)
        for k, v in why.items()
    }
    return picked, agg[agg["variant_id"].isin(picked)].reset_index(drop=True)


def _main_tables(
    task: str,
    preset: str,
    frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    primary: str,
    higher: bool,
    picked: dict[str, str] | None,
    ours: str,
    opts: Options,
) -> list[Table]:
    """The main table, and the paired comparisons with ``opts.against``.

    ``frames``: every variant's aggregate row, the rows shown, the runs.
    """
    agg, shown, runs = frames
    select = opts.select
    rows_rule = f"rows picked by {select}" if select else "every variant"
    main = build_main_table(shown, primary, higher, picked, agg)
    unpicked = sorted(k for k in (picked or {}) if "/" in k)
    methods_in = [{m for m in df["method"] if role(m) == "method"} for df in (agg, shown)]
    no_method = select is not None and bool(methods_in[0]) and not methods_in[1]
    versus = against_table(shown, primary, higher, opts.against)
    notes = ([no_row_line(select)] if no_method else []) + main.notes
    notes += [f"{k.split('/')[-1]}: no row ({(picked or {})[k]})." for k in unpicked]
    # what the reference predictors are, whether the task separates the methods (or the command
    # that adds reference rows)
    refs = [ref_row(r["method"], r["label"], r[f"{primary}_vals"]) for _, r in shown.iterrows()]
    store, recs = str(opts.sources[0]) if opts.sources else "results", list(runs["record"])
    notes += reference_notes(task, preset, refs, primary, higher, store=store, records=recs)
    # no named method has a row: no comparison table, its notes say why
    notes += versus[2] if versus is not None and not versus[0] else []
    caption = f"{task} ({preset} preset), {rows_rule}"
    tables = [Table(f"{caption}; {ours}", "main", main.titles, main.rows, notes)]
    if versus is not None and versus[0]:
        names = ", ".join(opts.against)
        tables.append(Table(f"{caption}: paired comparisons with {names}", "against", *versus))
    return tables


def _versus_table(
    t: PaperTable,
    pvh: PaperVsHarness,
    j: int,
    where: tuple[str, str, str],
    shown: pd.DataFrame,
    select: Rule | None,
) -> Table:
    """The ``j``-th (from 0) paper vs harness table: ``pvh``'s rows, caption and notes."""
    task, preset, ours = where
    rule = select or Rule("best-val")
    notes = ([t.note] if t.note else []) + pvh.notes
    if select is not None:
        notes += one_result_notes(t, pvh, shown, select)
    if differences := task_differences(task):
        notes.append(f"The harness's {task} differs from the paper: " + " ".join(differences))
    if pvh.at_setting:
        caption = (
            f"{t.title} vs harness ({ours}); paper rows filled at each row's setting, "
            f"ties by {rule}"
        )
    else:
        own = f" ({pvh.own_setting})" if pvh.own_setting else ""
        caption = (
            f"Harness, {preset} preset{own}, beside {t.title} as context "
            f"(not at the paper's setting; {ours}); rows matched on their knobs, ties by "
            f"{rule}"
        )
    return Table(caption, f"paper-{j + 1}", pvh.titles, pvh.rows, notes)


def _render(
    head: str,
    tables: list[Table],
    figs: list,
    shown: pd.DataFrame | None,
    picked: dict[str, str] | None,
    where: tuple[str, str],
    out: Path,
    opts: Options,
) -> list[Path]:
    """Write one report in each of ``opts.formats``; the figures' paths come first."""
    written = [p for _, ps in figs for p in ps]
    key = tex_key(*where, opts.sources, opts.select)
    formats = [f for f in FORMATS if f in opts.formats]
    for fmt, path, width in table_files(out / f"paper_{'_'.join(where)}", formats, opts.widths):
        if fmt == "md":
            write_text(path, markdown_document(head, tables, figs, out))
        elif fmt == "tex":
            write_text(path, latex_document(head, tables, figs, out, key, opts.tex_root, width))
        elif shown is not None:
            write_frame(tidy(shown, *where, picked), path)
        else:
            continue
        written.append(path)
    return written


def one_result_notes(
    table: PaperTable, pvh: PaperVsHarness, shown: pd.DataFrame, select: Rule
) -> list[str]:
    """Where a paper row shows another variant of a method than the main table, say both."""
    main = {r["method"]: r for _, r in shown.iterrows()}
    notes = []
    for i, row in enumerate(table.rows):
        vid = pvh.filled.get(i)
        m = main.get(row.method)
        if vid is None or m is None or m["variant_id"] == vid:
            continue
        why = f"at the paper's {knobs_text(row.config)}" if row.config else "at the paper's setting"
        notes.append(
            f"{row.label}: this table shows {row.method} {why}; the method table shows its "
            f"{m['label'] or 'variant'} {select.label()} (another variant: each is what its own "
            "rule picked)."
        )
    return notes


def task_differences(task: str) -> list[str]:
    """The bullets under "Differences from the paper:" in the task module's docstring."""
    import sys

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
    "- Paper vs harness, at the paper preset: a harness variant fills a paper row only at the "
    "row's own setting: the row's knobs (Ours: knobs, e.g. λ, p, depth) and every setting the "
    "paper states for the row's table (D, T, embedding, layers, data size, epochs, lr, batch "
    "where stated; `tasks/paper_results.toml`). With several such variants, {rule} picks one on "
    "validation data, among those with the most seeds; the test set never breaks a tie. A row "
    "with none says `not run at this setting`, and the command that would run it is listed "
    "under the table. What the paper does not state (n.s.) and the seed count may differ: "
    "Setting vs paper names, per row, a note listing each difference. At a smaller preset "
    "(quick, smoke) the table is the harness's own, titled with its setting: rows match on "
    "their knobs alone, the paper's numbers are context, and there is no Ours − paper column. "
    "Paper numbers are printed as the paper prints them; Ours − paper is in the paper's unit. "
    "Picked by says what chose each row: the paper's knobs, or the rule.\n"
)
