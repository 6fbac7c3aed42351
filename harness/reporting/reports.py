"""Reading records and writing what they say: the leaderboard, the paper report, the gate.

Every output is checked before anything is written: never over a records store, never over one of
the command's inputs (``harness.persistence.outputs``). ``harness.api`` re-exports these.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.components.config import coerce, key_type, legacy_values
from harness.components.plugins import INCLUDE_ENV
from harness.components.registry import TASKS
from harness.components.selection import empty_tables, parse_rule, select
from harness.errors import ConfigError, HarnessError
from harness.persistence.outputs import check_writable, refuse_overwrite, write_text
from harness.persistence.records import RunRecord, flat_config
from harness.persistence.store import load, store_path
from harness.references import resolve_names
from harness.reporting import compare as gate
from harness.reporting import leaderboard as lb
from harness.reporting import paper
from harness.reporting.render import check_formats, table_files, write_frame
from harness.reporting.runs import dirty
from harness.training import tracking


def load_records(sources: Sequence[str | Path]) -> tuple[list[RunRecord], list[str]]:
    """The usable records of several stores, and one line per unusable line."""
    return load(sources, legacy_values)


def report(
    sources: Sequence[str | Path],
    out: str | Path,
    *,
    formats: Sequence[str] = ("md",),
    select: str | None = None,
    figures: bool = True,
    option: str = "the leaderboard",
    command: str = "harness report",
    widths: Sequence[str] = ("text",),
) -> tuple[list[Path], list[str]]:
    """The leaderboard of the records in ``sources``, written to ``out`` (other formats beside it).

    A ``select`` rule that keeps no method row of a table is said on stderr and in the table.

    Args:
        sources: records files or folders.
        out: the Markdown file (``.tex``, ``.csv``, ``.parquet`` go beside it with their suffix).
        formats: any of ``md``, ``tex``, ``csv``, ``parquet``.
        select: a selection rule (``best-val``, ``val-skip-band:T:W``, ``val-skip-nearest:T``).
        figures: also draw the learning curves (``<out stem>_curves.png`` / ``.pdf``).
        option: how the caller names ``out`` in messages (``--out``).
        command: the command writing it, named in its header (``harness run``).
        widths: the LaTeX versions, ``text`` and ``column``.

    Returns:
        The paths written, and the unusable lines of the sources.
    """
    out = Path(out)
    inputs = _inputs(sources)
    check_formats(formats, widths)
    paths = [
        (f, out if f == "md" else p, w)
        for f, p, w in table_files(out.parent / out.stem, formats, widths)
    ]
    curves = out.with_name(f"{out.stem}_curves")
    drawn = [curves.with_suffix(".png"), curves.with_suffix(".pdf")] if figures else []
    for path in [*(p for _, p, _ in paths), *drawn]:
        refuse_overwrite(path, option if path == out else f"{option} ({path.name})", inputs)
    rule = _rule(select)
    records, problems = load_records(sources)
    _say_empty(records, rule)
    written = []
    names = [str(s) for s in sources]
    for fmt, path, width in paths:
        if fmt == "md":
            write_text(path, lb.leaderboard_markdown(records, names, problems, rule, command))
        elif fmt == "tex":
            write_text(path, lb.leaderboard_tex(records, rule, command, names, width))
        else:
            write_frame(lb.leaderboard_numbers(records, rule), path)
        written.append(path)
    if figures:
        from harness.reporting.figures import write_curves

        written += write_curves(records, curves)
    return written, problems


def export_tensorboard(
    sources: Sequence[str | Path], out_dir: str | Path
) -> tuple[list[Path], list[str]]:
    """Each run of the records in ``sources`` as TensorBoard HParams under ``out_dir``.

    ``out_dir`` must be new or empty: a second export would add a second event file to every run.
    Returns the run folders written and the unusable lines; HarnessError where it cannot.
    """
    out_dir = Path(out_dir)
    refuse_overwrite(out_dir, "--tensorboard", _inputs(sources))
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise HarnessError(
            f"--tensorboard {out_dir} is not empty: export into a new or empty folder "
            "(delete it to export again)"
        )
    records, problems = load_records(sources)
    if not records:
        raise HarnessError(f"--tensorboard: no usable record in {', '.join(map(str, sources))}")
    tracking.check_log_dir(out_dir, "--tensorboard")
    return tracking.write_hparams(records, out_dir), problems


def paper_report(
    sources: Sequence[str | Path],
    out_dir: str | Path,
    *,
    tasks: Sequence[str] | None = None,
    preset: str | None = None,
    formats: Sequence[str] = ("md", "tex"),
    select: str | None = None,
    figures: bool = True,
    allow_dirty: bool = False,
    against: Sequence[str] = (),
    widths: Sequence[str] = ("text",),
    tex_root: str | Path | None = None,
) -> tuple[list[Path], list[str]]:
    """The paper-style report of the records in ``sources`` (tables, figures) into ``out_dir``.

    The tables and the figures already in ``out_dir/figures`` are checked before anything is
    written. A ``select`` rule that keeps no method row, and an ``against`` method with no ok
    record, are said on stderr. The options: ``harness.reporting.paper.write_paper_report``.
    Returns the paths written, and the unusable lines of the sources.
    """
    out_dir = Path(out_dir)
    records, problems = load_records(sources)
    inputs = _inputs(sources)
    tabled = _chosen(records, tasks, preset)
    # the files it may write, known before it writes any: its tables and the figures already in
    # figures/ under their stem (the figures drawn depend on the runs: the existing ones count)
    for task, pre in sorted({(r["task"], r["preset"]) for r in tabled}):
        stem = f"{task}_{pre}"
        figs = sorted((out_dir / "figures").glob(f"{stem}_*"))
        tables = [p for _, p, _ in table_files(out_dir / f"paper_{stem}", formats, widths)]
        for path in [*tables, *figs]:
            refuse_overwrite(path, f"--out-dir {out_dir}:", inputs)
    _say_empty(tabled, _rule(select))
    ran = {r.get("method") for r in tabled if r.get("status") == "ok"}
    absent = [m for m in against if m not in ran]
    if absent:  # the report says so under its main table
        sys.stderr.write(
            f"warning: --against {', '.join(absent)}: no ok record of it in these records, so no "
            "comparison with it\n"
        )
    paths = paper.write_paper_report(
        records,
        [str(s) for s in sources],
        out_dir,
        tasks=list(tasks) if tasks else None,
        presets=[preset] if preset else None,
        formats=tuple(formats),
        figures=figures,
        select=_rule(select),
        allow_dirty=allow_dirty,
        against=tuple(against),
        widths=tuple(widths),
        tex_root=tex_root,
    )
    return paths, problems


PARTS = ("count", "main", "against", "paper")  # what --print prints


def print_parts(
    sources: Sequence[str | Path],
    parts: Sequence[str],
    *,
    tasks: Sequence[str] | None = None,
    preset: str | None = None,
    where: Sequence[str] = (),
    select: str | None = None,
    allow_dirty: bool = False,
    against: Sequence[str] = (),
) -> tuple[str, list[str]]:
    """Parts of a report of the records in ``sources``, as Markdown text; nothing is written.

    What a generated block of the docs holds (docs/reports.md, Numbers in the docs): no time, no
    rendering commit. ``parts``: any of ``PARTS``; ``where``: ``KEY=VALUE[,VALUE...]`` filters
    (``_where``); the other options as for ``paper_report``. Returns the text and the unusable
    lines.
    """
    records, problems = _load_once(sources)
    records = _where(_chosen(records, tasks, preset), where)
    text = []
    if "count" in parts:
        runs, dirties = len({r["run_id"] for r in records}), sum(map(dirty, records))
        failed = sum(r.get("status") == "failed" for r in records)
        text.append(
            f"{len(records):,} records ({failed:,} failed, {dirties:,} from a dirty tree), "
            f"{runs:,} runs\n"
        )
    if tables := [p for p in parts if p != "count"]:
        names, presets = [str(s) for s in sources], [preset] if preset else None
        rule = _rule(select)
        text.append(
            paper.paper_markdown(records, names, tables, tasks, presets, rule, allow_dirty, against)
        )
    return "\n".join(text), problems


_LOADED: dict[tuple[tuple[str, str], ...], tuple[list[RunRecord], list[str]]] = {}


def _load_once(sources: Sequence[str | Path]) -> tuple[list[RunRecord], list[str]]:
    """``load_records``, kept for the process by the files' digests (for ``print_parts``)."""
    paths = [store_path(s) for s in sources]
    if not all(p.is_file() for p in paths):
        return load_records(sources)  # says which is missing
    # the included files too: the records are read with the legacy values their methods declare
    key = tuple((str(p), hashlib.blake2b(p.read_bytes()).hexdigest()) for p in paths)
    key += ((INCLUDE_ENV, os.environ.get(INCLUDE_ENV, "")),)
    if key not in _LOADED:
        _LOADED[key] = load_records(sources)
    return _LOADED[key]


def _where(records: list[RunRecord], where: Sequence[str]) -> list[RunRecord]:
    """The records whose fields have the values ``where`` names (``KEY=V[,V...]`` each).

    ``KEY`` is ``method``, ``task`` (names or globs) or a config field, whose values are read as its
    type (``lam=1e-2`` keeps ``0.01``). Filters that keep nothing warn on stderr; a malformed item,
    an unknown field, name, or a value the field can never hold raise HarnessError.
    """
    fields = [{"method": r.get("method"), "task": r.get("task"), **flat_config(r)} for r in records]
    kept = []
    for item in where:
        key, _, values = (part.strip() for part in item.partition("="))
        texts = [v.strip() for v in values.split(",") if v.strip()]
        if not key or not texts:
            raise HarnessError(f"--where expects KEY=VALUE[,VALUE...], got '{item}'")
        if records and not any(key in f for f in fields):
            raise HarnessError(
                f"--where {key}: no record has this field (a config field as --set names it, "
                "method or task)"
            )
        match = _matcher(key, texts, [f for f in fields if key in f])
        kept.append({i for i, f in enumerate(fields) if key in f and match(f)})
    both = set.intersection(*kept) if kept else set(range(len(records)))
    if none := [w for w, k in zip(where, kept, strict=True) if not k]:
        sys.stderr.write(f"warning: --where {', '.join(none)}: no record matches it\n")
    elif where and not both:
        sys.stderr.write(f"warning: --where {' --where '.join(where)}: no record matches all\n")
    return [r for i, r in enumerate(records) if i in both]


def _matcher(key: str, texts: list[str], fields: list[dict[str, Any]]) -> Any:
    """Whether a record's fields hold one of ``texts`` at ``key``; raises for a value none can."""
    if key in ("method", "task"):
        try:
            names = set(resolve_names(texts) if key == "method" else TASKS.resolve(texts))
        except HarnessError as e:
            raise HarnessError(f"--where {key}={','.join(texts)}: {e}") from None
        return lambda f: f[key] in names
    types: dict[tuple[Any, Any], Any] = {}

    def kind(f: dict[str, Any]) -> Any:  # the registered config's type, else the record's
        pair = (f["method"], f["task"])
        if pair not in types:
            try:
                types[pair] = key_type(*pair, key)
            except HarnessError:  # a method or task not registered here
                types[pair] = None
        return types[pair] or type(f[key])

    def read(text: str, tp: Any) -> tuple[Any, str]:  # (the value, or why text is none)
        try:
            return coerce(text, tp, key), ""
        except ConfigError as e:
            return None, str(e)

    kinds = list(dict.fromkeys(map(kind, fields)))
    for text in texts:
        why = [e for tp in kinds if (e := read(text, tp)[1])]
        if kinds and len(why) == len(kinds):
            raise HarnessError(f"--where {key}={text}: {why[0]}, so no record can match it")
    return lambda f: any(str(f[key]) == t or read(t, kind(f)) == (f[key], "") for t in texts)


def _say_empty(records: Sequence[dict[str, Any]], rule: Any) -> None:
    """Warn on stderr, in one line, of the tables in which ``rule`` keeps no method row."""
    if rule is not None and (empty := empty_tables(records, select(records, rule)[0])):
        where = ", ".join(f"{task} ({preset})" for task, preset in empty)
        sys.stderr.write(
            f"warning: --select {rule} keeps no method row of {where}: no variant qualifies "
            "(the report says why, per method)\n"
        )


def _chosen(records: list[RunRecord], tasks: Sequence[str] | None, preset: str | None) -> list:
    """The records of ``tasks`` (None: all) and ``preset`` (None: all)."""
    return [
        r
        for r in records
        if (not tasks or r.get("task") in tasks) and (not preset or r.get("preset") == preset)
    ]


def _rule(select: str | None) -> Any:
    return parse_rule(select) if select else None


def _inputs(sources: Sequence[str | Path]) -> list[tuple[str, Path]]:
    """The records files a report reads, as ``refuse_overwrite`` takes them."""
    return [("an input (records)", store_path(s)) for s in sources]


def compare(
    reference: str | Path,
    current: str | Path,
    tol: dict[str, tuple[float, float]] | None = None,
    *,
    only_present: bool = False,
    allow_empty: bool = False,
    skip_malformed: bool = False,
    markdown: str | Path | None = None,
) -> tuple[Any, list[str]]:
    """The drift gate: the records of ``current`` against those of ``reference``.

    Args:
        reference: the reference store.
        current: the store checked against it.
        tol: ``{measure prefix: (abs, rel)}`` over the default tolerances.
        only_present: compare only the runs in both (a partial rerun).
        allow_empty: pass a comparison that compared nothing.
        skip_malformed: skip unusable lines (the second value) instead of refusing.
        markdown: also write the comparison there (never over an input or a records store).

    Returns:
        The ``harness.reporting.compare.Comparison`` and the skipped lines.
    """
    if markdown is not None:
        inputs = [("the reference (REFERENCE)", reference), ("CURRENT", current)]
        refuse_overwrite(markdown, "--markdown", inputs)
        check_writable(markdown)
    skipped: list[str] = []
    if skip_malformed:
        (ref, a), (cur, b) = load_records([str(reference)]), load_records([str(current)])
        skipped = a + b
    else:
        ref, cur = gate.load_strict(str(reference)), gate.load_strict(str(current))
    res = gate.compare(ref, cur, tol, only_present=only_present, allow_empty=allow_empty)
    if markdown is not None:
        write_text(markdown, gate.markdown(res, str(reference), str(current)))
    return res, skipped
