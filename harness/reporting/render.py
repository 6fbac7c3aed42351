"""Rendering tables: GitHub Markdown, LaTeX (``harness.reporting.latex``), csv and parquet.

A table is titles and rows of ``Cell`` (text, bold); ``markdown_document`` and ``latex_document``
render a whole report (header, tables with their notes, figures).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.persistence.outputs import write_bytes, write_text
from harness.reporting.latex import (
    TEX_FIGURE,
    WIDTHS,
    Cell,
    figure_env,
    render_tex,
    tex_escape,
    tex_name,
)
from harness.reporting.text import GREY_OFF, GREY_ON

FORMATS = ("md", "tex", "csv", "parquet")
NO_PYARROW = "--format parquet needs pyarrow (pip install pyarrow); csv needs nothing more"


@dataclass
class Table:
    """A table of a report: caption, label, cells, and the notes under it."""

    caption: str
    label: str  # its part of the report (main, against, paper-1): its LaTeX label's last part
    titles: list[str]
    rows: list[list[Cell]]
    notes: list[str]
    keep: tuple[str, ...] = ()  # LaTeX: titles that stay in the first part of a split table


def plain(*texts: str) -> list[Cell]:
    """Cells of ``texts``, none bold."""
    return [(t, False) for t in texts]


def render_md(titles: list[str], rows: list[list[Cell]]) -> str:
    """A GitHub Markdown table; bold cells as ``**x**``."""
    import pandas as pd

    body = [[_md_grey(f"**{t}**" if b and t not in ("", "–") else t) for t, b in r] for r in rows]
    return pd.DataFrame(body, columns=titles).to_markdown(index=False, disable_numparse=True)


def _md_grey(text: str) -> str:
    """Greyed spans (``harness.reporting.text.grey``) as HTML spans."""
    return text.replace(GREY_ON, '<span style="color:gray">').replace(GREY_OFF, "</span>")


def pipe_table(titles: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of an unpadded Markdown table: ``| a | b |`` rows under a ``|---|---|`` rule."""
    rule = "|" + "---|" * len(titles)
    return [f"| {' | '.join(titles)} |", rule, *(f"| {' | '.join(r)} |" for r in rows)]


def markdown_document(head: str, tables: list[Table], figs: list, out: Path) -> str:
    """A report in Markdown: ``head``, each table with its notes, each figure with its caption.

    ``figs``: ``(caption, [png, pdf])`` per figure, linked relative to ``out``.
    """
    parts = [head]
    for t in tables:
        parts += [f"## {t.caption}\n", render_md(t.titles, t.rows) + "\n"]
        parts += [f"- {n}" for n in t.notes] + ([""] if t.notes else [])
    for caption, paths in figs:
        parts.append(f"![{caption}]({paths[0].relative_to(out).as_posix()})\n\n*{caption}*\n")
    return "\n".join(parts)


def latex_document(
    head: str, tables: list[Table], figs: list, out: Path, key: str, root: Path | None, width: str
) -> str:
    r"""A report in LaTeX: the header as comments, the tables, each figure in a float.

    Labels start with ``key`` (``tab:<key>.main``, ``fig:<key>.tradeoff``); a figure's path is
    relative to ``root`` (None: ``out``), the folder a document's ``\graphicspath`` names.
    """
    root = out if root is None else root
    base = out.resolve().relative_to(root.resolve())  # out's place under root
    where = (
        "this file's folder"
        if base == Path()
        else f"the folder holding this file as {base.as_posix()}/"
    )
    text = head.replace("<!-- ", "").replace(" -->", "").replace("`", "")
    parts = ["% " + line for line in text.splitlines() if line.strip()]
    if width == "column":
        parts.append(
            "% Set in one column of a two-column paper (3.3 in, --width column): a table too "
            "wide for it prints mean and ± std on two lines, one still too wide is split by "
            "columns over several tables, one taller than 8 in by rows; its notes follow as text."
        )
    parts += [
        "% Needs \\usepackage{booktabs,graphicx,xcolor}. Figures: paths relative to "
        f"{where}; a document elsewhere names it in its preamble, "
        "\\graphicspath{{<its path>/}} (docs/reports.md).",
        f"% Labels: tab:{key}.main and the like, fig:{key}.<kind>.\n",
    ]
    parts += [
        render_tex(t.titles, t.rows, t.caption, f"tab:{key}.{t.label}", t.notes, t.keep, width)
        for t in tables
    ]
    for caption, paths in figs:
        parts.append(
            TEX_FIGURE
            % {
                "env": figure_env(paths[1]),
                "path": (base / paths[1].relative_to(out)).as_posix(),
                "caption": tex_escape(caption),
                "label": f"fig:{key}.{paths[1].stem.rsplit('_', 1)[-1]}",  # <task>_<preset>_<kind>
            }
        )
    return "\n".join(parts)


def write_frame(rows: Sequence[dict], path: Path) -> None:
    """A table's numbers (one dict a row) as ``.csv`` or ``.parquet`` (pyarrow needed)."""
    import io

    import pandas as pd

    df = pd.DataFrame(rows)
    if path.suffix == ".csv":
        write_text(path, df.to_csv(index=False))
        return
    if not has_pyarrow():
        raise HarnessError(NO_PYARROW)
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    write_bytes(path, buf.getvalue())


def has_pyarrow() -> bool:
    """Whether pyarrow (needed for ``.parquet``) can be imported."""
    from importlib.util import find_spec

    return find_spec("pyarrow") is not None


def check_formats(formats: Sequence[str], widths: Sequence[str]) -> None:
    """Refuse (HarnessError) an unknown format or LaTeX width, and parquet without pyarrow."""
    if unknown := sorted(set(formats) - set(FORMATS)):
        raise HarnessError(f"unknown report formats {unknown}; use any of {', '.join(FORMATS)}")
    if "parquet" in formats and not has_pyarrow():
        raise HarnessError(NO_PYARROW)
    if unknown := sorted(set(widths) - set(WIDTHS)):
        raise HarnessError(f"unknown LaTeX widths {unknown}; use any of {', '.join(WIDTHS)}")


def table_files(
    base: Path, formats: Sequence[str], widths: Sequence[str]
) -> list[tuple[str, Path, str]]:
    """``(format, file, LaTeX width)`` per file: ``<base>.<format>``, one ``.tex`` per width."""
    return [
        (fmt, base.with_name(tex_name(base.name, w) if fmt == "tex" else f"{base.name}.{fmt}"), w)
        for fmt in formats
        for w in (widths if fmt == "tex" else [""])
    ]
