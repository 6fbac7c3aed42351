"""Rendering tables: GitHub Markdown, LaTeX (booktabs and graphicx only), csv and parquet.

A table is a list of titles and rows of ``Cell`` (text, bold). ``render_md`` and ``render_tex``
render one table; ``markdown_document`` and ``latex_document`` a whole report (header, tables with
their notes, figures); ``write_frame`` writes a table's numbers as ``.csv`` or ``.parquet``.
``tex_escape`` turns the reports' text (units ``×10^k``, ``D_h``, arrows, ±) into LaTeX.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import HarnessError
from harness.outputs import write_bytes, write_text

if TYPE_CHECKING:
    import pandas as pd

Cell = tuple[str, bool]  # (text, bold)
FORMATS = ("md", "tex", "csv", "parquet")
NO_PYARROW = "--format parquet needs pyarrow (pip install pyarrow); csv needs nothing more"


@dataclass
class Table:
    """A table of a report: caption, label, cells, and the notes under it."""

    caption: str
    label: str
    titles: list[str]
    rows: list[list[Cell]]
    notes: list[str]


def render_md(titles: list[str], rows: list[list[Cell]]) -> str:
    """A GitHub Markdown table; bold cells as ``**x**``."""
    import pandas as pd

    body = [[f"**{t}**" if b and t not in ("", "–") else t for t, b in r] for r in rows]
    return pd.DataFrame(body, columns=titles).to_markdown(index=False, disable_numparse=True)


# Text that becomes math in LaTeX, and the math it becomes.
_MATH = re.compile(r"[×x]10\^\{?(-?\d+)\}?|√\(Acc×Skip\)|\b([DR])_(h|t|z|max)\b|\^")
_TEX_PLAIN = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "±": r"$\pm$",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "λ": r"$\lambda$",
    "–": "--",
    "−": "$-$",
    "×": r"$\times$",
    "·": r"$\cdot$",
    "√": r"$\surd$",
    "≠": r"$\neq$",
    "`": "",
}


def _tex_math(m: re.Match) -> str:
    text = m.group(0)
    if m.group(1) is not None:
        return rf"$\times 10^{{{m.group(1)}}}$"
    if text.startswith("√"):
        return r"$\sqrt{\mathrm{Acc}\times\mathrm{Skip}}$"
    if m.group(2):
        sub = r"\mathrm{max}" if m.group(3) == "max" else m.group(3)
        return f"${m.group(2)}_{{{sub}}}$"
    return r"\textasciicircum{}"


def tex_escape(s: str) -> str:
    r"""LaTeX for a cell, title or note (needs only booktabs and graphicx).

    ``x10^5`` / ``×10^5`` become ``$\times 10^{5}$``, ``D_h``, ``R_t``, ``R_max`` math; every
    other LaTeX special character is escaped (no ``^`` or ``_`` is left outside math).
    """
    out, pos = [], 0
    for m in _MATH.finditer(s):
        out.append("".join(_TEX_PLAIN.get(c, c) for c in s[pos : m.start()]))
        out.append(_tex_math(m))
        pos = m.end()
    out.append("".join(_TEX_PLAIN.get(c, c) for c in s[pos:]))
    return "".join(out)


TEX_TABLE = r"""\begin{%(env)s}[tbp]
\centering\small
\caption{%(caption)s}\label{%(label)s}
\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%%
\begin{tabular}{l%(cols)s}
\toprule
%(head)s \\
\midrule
%(body)s
\bottomrule
\end{tabular}}%(notes)s
\end{%(env)s}
"""
TEX_FIGURE = r"""\begin{figure}[tbp]\centering
\includegraphics[width=\linewidth]{%s}
\caption{%s}\label{%s}
\end{figure}
"""


def render_tex(
    titles: list[str],
    rows: list[list[Cell]],
    caption: str,
    label: str = "tab:table",
    notes: Sequence[str] = (),
) -> str:
    r"""A booktabs table: caption and ``\label`` above, shrunk to the line width if wider.

    Bold cells are ``\textbf{x}``; ``notes`` are printed under the tabular, in the float. A
    table wider than about 90 characters is a ``table*`` (both columns of a two-column paper).
    """
    lines = [" & ".join(tex_escape(t) for t in titles)]
    lines += [
        " & ".join(rf"\textbf{{{tex_escape(t)}}}" if b else tex_escape(t) for t, b in r)
        for r in rows
    ]
    cols = zip(titles, *[[t for t, _ in r] for r in rows], strict=True)
    widths = [max(len(t) for t in col) for col in cols]
    text = "".join(f"\n\\par\\smallskip\\footnotesize\\raggedright {tex_escape(n)}" for n in notes)
    return TEX_TABLE % {
        "env": "table*" if sum(widths) + 3 * len(widths) > 90 else "table",
        "caption": tex_escape(caption),
        "label": label,
        "cols": "r" * (len(titles) - 1),
        "head": lines[0],
        "body": "\n".join(x + r" \\" for x in lines[1:]),
        "notes": text,
    }


def markdown_document(head: str, tables: list[Table], figs: list, out: Path) -> str:
    """A report in Markdown: ``head``, each table with its notes, each figure with its caption.

    Args:
        head: the header (``harness.reporting.text.header`` and the report's notes).
        tables: the tables.
        figs: ``(caption, [png, pdf])`` per figure.
        out: the report's folder (figures are linked relative to it).
    """
    parts = [head]
    for t in tables:
        parts += [f"## {t.caption}\n", render_md(t.titles, t.rows) + "\n"]
        parts += [f"- {n}" for n in t.notes] + ([""] if t.notes else [])
    for caption, paths in figs:
        parts.append(f"![{caption}]({paths[0].relative_to(out).as_posix()})\n\n*{caption}*\n")
    return "\n".join(parts)


def latex_document(head: str, tables: list[Table], figs: list, out: Path) -> str:
    """A report in LaTeX: the header as comments, the tables, each figure in a float.

    Args are those of ``markdown_document``.
    """
    text = head.replace("<!-- ", "").replace(" -->", "").replace("`", "")
    parts = ["% " + line for line in text.splitlines() if line.strip()]
    parts.append("% Needs \\usepackage{booktabs,graphicx}.\n")
    parts += [render_tex(t.titles, t.rows, t.caption, t.label, t.notes) for t in tables]
    for caption, paths in figs:
        label = "fig:" + paths[1].stem.replace("_", "-")
        parts.append(
            TEX_FIGURE % (paths[1].relative_to(out).as_posix(), tex_escape(caption), label)
        )
    return "\n".join(parts)


def write_frame(df: pd.DataFrame, path: Path) -> None:
    """``df`` as ``.csv`` or ``.parquet`` (pyarrow needed; its absence is one HarnessError line).

    Written through ``harness.outputs.write_bytes``: atomically, never over a records store.
    """
    import io

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
