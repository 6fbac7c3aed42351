"""LaTeX tables that print at 8 pt or more, and the figures' floats.

``render_tex`` sets one table, ``tex_layout`` decides its floats, sizes and splits from widths
estimated with Computer Modern's metrics (``tex_width``); the rules: docs/reports.md, Formats and
LaTeX in a paper.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness.persistence.store import DEFAULT_FILE, store_path
from harness.reporting.text import GREY_OFF, GREY_ON

if TYPE_CHECKING:
    from harness.components.selection import Rule

Cell = tuple[str, bool]  # a table cell: (text, bold)


# Text that becomes math in LaTeX, and the math it becomes.
_MATH = re.compile(r"[×x]10\^\{?(-?\d+)\}?|√\(Acc×Skip\)|\b([DR])_(h|t|z|max)\b|\^")
# Characters LaTeX sets in math, each followed by its command.
_MATH_CHARS = r"""± \pm ↑ \uparrow ↓ \downarrow λ \lambda − - × \times · \cdot √ \surd ≠ \neq
‡ \ddagger † \dagger ≈ \approx""".split()
_TEX_PLAIN = (
    {c: "\\" + c for c in "&%$#_{}"}
    | {c: f"${m}$" for c, m in zip(_MATH_CHARS[::2], _MATH_CHARS[1::2], strict=True)}
    | {"\\": r"\textbackslash{}", "~": r"\textasciitilde{}", "–": "--", "`": ""}
)


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
    """LaTeX for a cell, title or note: ``×10^5``, ``D_h``, ``R_t`` as math, the rest escaped."""
    out, pos = [], 0
    for m in _MATH.finditer(s):
        out.append("".join(_TEX_PLAIN.get(c, c) for c in s[pos : m.start()]))
        out.append(_tex_math(m))
        pos = m.end()
    out.append("".join(_TEX_PLAIN.get(c, c) for c in s[pos:]))
    return "".join(out)


# LaTeX tables are set at 9 pt, or 8 pt where 9 pt does not fit, and never scaled: no table
# prints below 8 pt. The widths below (Computer Modern at 10 pt, in em, from cmr10.tfm) estimate
# a table's natural width; cmr8/cmr9 are wider per em than cmr10, cmbx wider than cmr.
PT_PER_IN = 72.27
# A ``table`` fits a column of a two-column paper (3.3 in); a ``table*`` spans its 7 in text
# width but is set within 6.5 in, so that every table also fits a one-column paper's text width.
TEX_TARGETS = (("table", 3.3 * PT_PER_IN), ("table*", 6.5 * PT_PER_IN))
# The versions of a table: set within the text width (``TEX_TARGETS``), or within one column.
WIDTHS = ("text", "column")
# The tallest float of a column version (the text height of a two-column paper is 9 to 9.7 in):
# a taller part is cut into floats of fewer rows.
COLUMN_HEIGHT = 8.0 * PT_PER_IN
TEX_SIZES = ((9.0, 11.0), (8.0, 9.5))  # (font size, baseline skip) in pt, tried in this order
TABCOLSEP = 4.0  # pt each side of a column
MAX_HEAD_LINES = 3  # a column title wraps onto at most this many lines (more if it must)
MAX_CELL_LINES = 4  # a text cell wraps onto at most this many lines before the table splits
SAFETY = 1.03  # estimated text widths are taken this much wider than the sum of the glyphs
_EM = r"""
0.278 il!',.:;[]`|·  0.306 fj  0.333 -  0.361 I  0.389 t()  0.392 r  0.394 s  0.444 cez†  0.472 ?
0.5 0123456789ago"*/^{}~–↑↓_<>\  0.514 J  0.528 kqvxy  0.556 bdhnpuS  0.583 λ  0.611 Z  0.625 L
0.653 F  0.681 EP  0.708 B  0.722 wCT  0.736 R  0.75 AHNUVXY  0.764 D  0.778 KOQ&+=@±×−≠‡≈  0.785 G
0.833 m#%$√M  1.028 W
""".split()  # glyph widths in em (cmr10), each followed by the characters that have it
_CHAR_EM = {c: float(w) for w, cs in zip(_EM[::2], _EM[1::2], strict=True) for c in cs}
_CHAR_EM |= {" ": 0.333, "`": 0.0}
_DESIGN = {8.0: 1.0625, 9.0: 1.0278}  # width per em of cmr8 / cmr9 relative to cmr10
_BOLD = 1.154  # cmbx relative to cmr
_NUMERIC = re.compile(r"^[\[(]?[-+−]?\.?\d")
_HEX = re.compile(r"^[0-9a-f]{7,}\b")


def _em(s: str) -> float:
    return sum(_CHAR_EM.get(c, 0.6) for c in s)


def _math_em(m: re.Match) -> float:
    """The width in em of a piece ``tex_escape`` sets in math (scripts: 0.85, plus space)."""
    if m.group(1) is not None:  # x10^k
        return 0.778 + 1.0 + 0.85 * _em(m.group(1).replace("-", "−")) + 0.1
    if m.group(0).startswith("√"):  # the radical, a binary operator's spaces, the operands
        return 1.0 + 0.444 + _em("Acc×Skip") + 0.2
    if m.group(2):  # D_h: italic D
        return 1.1 * _em(m.group(2)) + 0.85 * _em(m.group(3)) + 0.1
    return 0.5


def tex_width(text: str, size: float, bold: bool = False) -> float:
    """Estimated natural width in pt of ``tex_escape(text)`` set in Computer Modern at ``size``."""
    em, pos = 0.0, 0
    text = text.replace(GREY_ON, "").replace(GREY_OFF, "")  # colour takes no width
    for m in _MATH.finditer(text):
        em += _em(text[pos : m.start()]) + _math_em(m)
        pos = m.end()
    em += _em(text[pos:])
    return em * size * _DESIGN.get(size, 1.0) * (_BOLD if bold else 1.0) * SAFETY


def _tokens(title: str) -> list[str]:
    """A title's words; a word without a letter or digit (``%``, an arrow) joins the one before."""
    out: list[str] = []
    for w in title.split():
        if out and not any(c.isalnum() for c in w):
            out[-1] += " " + w
        else:
            out.append(w)
    return out


def _lines(words: list[str], width: float, size: float, bold: bool = False) -> list[str]:
    """``words`` broken greedily into lines no wider than ``width`` (a longer word: its own)."""
    lines: list[str] = []
    for w in words:
        if lines and tex_width(lines[-1] + " " + w, size, bold) <= width:
            lines[-1] += " " + w
        else:
            lines.append(w)
    return lines


@dataclass
class _Column:
    """A column of a LaTeX table as laid out at one font size."""

    title: str
    cells: list[Cell]
    align: str  # l or r
    width: float = 0.0  # pt, the column's content width
    wrap: bool = False  # text cells wider than ``width`` are paragraphs ``width`` wide
    head: list[str] | None = None  # the title's lines
    wraps: bool = False  # a text column (not the first, but in a column version): cells may wrap
    stack: bool = False  # a numeric column whose ``mean ± std`` cells print on two lines

    def lines(self, text: str) -> list[str]:
        """The lines a cell prints on unwrapped: ``mean`` and ``± std`` where stacked."""
        return stacked(text) if self.stack else [text]

    def body(self, size: float) -> float:
        return max(
            (tex_width(x, size, b) for t, b in self.cells for x in self.lines(t)), default=0.0
        )

    def longest_word(self, size: float) -> float:
        words = [(w, b) for t, b in self.cells for w in t.split()]
        words += [(w, False) for w in _tokens(self.title)]
        return max((tex_width(w, size, b) for w, b in words), default=0.0)

    def head_lines(self, width: float, size: float) -> list[str]:
        """The title broken to ``width``, widened until it takes at most ``MAX_HEAD_LINES``."""
        words = _tokens(self.title)
        lo = max([width, *(tex_width(w, size) for w in words)])
        hi = max(lo, tex_width(" ".join(words), size))
        while hi - lo > 0.5:
            mid = (lo + hi) / 2
            if len(_lines(words, mid, size)) <= MAX_HEAD_LINES:
                hi = mid
            else:
                lo = mid
        lines = _lines(words, lo, size)
        return lines if len(lines) <= MAX_HEAD_LINES else _lines(words, hi, size)

    def natural(self, size: float) -> float:
        """The width the column takes unwrapped: its widest cell or its title's widest line."""
        body = self.body(size)
        return max([body, *(tex_width(x, size) for x in self.head_lines(body, size))])


def stacked(text: str) -> list[str]:
    """A ``mean ± std`` cell as its two lines (a greyed span closed and reopened); else itself."""
    if " ± " not in text:
        return [text]
    mean, std = text.split(" ± ", 1)
    std = "± " + std
    if mean.count(GREY_ON) > mean.count(GREY_OFF):
        mean, std = mean + GREY_OFF, GREY_ON + std
    return [mean, std]


def _align(i: int, cells: list[Cell]) -> str:
    """``l`` for the first column and for text, ``r`` for numbers (most cells start with one)."""
    text = [t for t, _ in cells if t.strip() and t.strip() not in ("–", "-", "n/a")]
    numeric = [t for t in text if _NUMERIC.match(t) and not _HEX.match(t)]
    return "r" if i > 0 and len(numeric) * 2 >= len(text) else "l"


def _fit(
    cols: list[_Column], size: float, target: float, loose: bool = False
) -> list[_Column] | None:
    """``cols`` laid out at ``size`` within ``target`` pt, or None if they do not fit.

    Numeric columns and the first keep their natural width; text columns wrap, to at most
    ``MAX_CELL_LINES`` lines a cell (``loose``: any number), never narrower than their longest word.
    """
    room = target - 2 * TABCOLSEP * len(cols)
    nat = [c.natural(size) for c in cols]
    low = [
        max(c.longest_word(size), 0 if loose else c.body(size) / MAX_CELL_LINES) if c.wraps else n
        for c, n in zip(cols, nat, strict=True)
    ]
    if sum(min(lo, n) for lo, n in zip(low, nat, strict=True)) > room and not loose:
        return None
    widths = list(nat)
    if sum(nat) > room:  # the text columns share what is left, the narrow ones keeping theirs
        free = {i for i, c in enumerate(cols) if c.wraps and low[i] < nat[i]}

        def at(level: float) -> list[float]:
            return [
                min(n, max(lo, level)) if i in free else n
                for i, (lo, n) in enumerate(zip(low, nat, strict=True))
            ]

        a, b = 0.0, max(nat)
        for _ in range(40):
            mid = (a + b) / 2
            a, b = (mid, b) if sum(at(mid)) <= room else (a, mid)
        widths = at(a)
    out = []
    for c, w, n in zip(cols, widths, nat, strict=True):
        wrap = w < n - 0.01
        head = c.head_lines(w if wrap else c.body(size), size)
        out.append(replace(c, width=w, wrap=wrap, head=head))
    return out


@dataclass
class TexPart:
    """One float of a LaTeX table: which columns, in which environment, at which size."""

    columns: list[int]
    env: str
    size: float
    laid: list[_Column]

    def cells(self, row: list[Cell]) -> list[tuple[_Column, str, bool]]:
        """``row``'s cells in this part, each with its laid-out column."""
        return [(c, *row[i]) for c, i in zip(self.laid, self.columns, strict=True)]


def _place(
    cols: list[_Column],
    idx: list[int],
    sizes: Sequence[float] = (),
    targets: Sequence[tuple[str, float]] = TEX_TARGETS,
) -> TexPart | None:
    """The first of ``table`` at 9 pt, at 8 pt, ``table*`` at 9 pt, at 8 pt that ``idx`` fits."""
    for env, target in targets:
        for size in sizes or [s for s, _ in TEX_SIZES]:
            laid = _fit([cols[i] for i in idx], size, target)
            if laid is not None:
                return TexPart(idx, env, size, laid)
    return None


def tex_layout(
    titles: list[str], rows: list[list[Cell]], keep: Sequence[str] = (), width: str = "text"
) -> list[TexPart]:
    """How a table is set: one float, or its columns split over several, none below 8 pt.

    A ``table`` where it fits 3.3 in, a ``table*`` where it fits 6.5 in, else split: the first part
    keeps the row keys, the ``keep`` columns and every other column that still fits at 8 pt, the
    rest go to later parts with the row keys again. ``width="column"``: every part a ``table``
    within 3.3 in, ``mean ± std`` stacked where the table does not fit, split where it still does
    not.
    """
    if width not in WIDTHS:
        raise ValueError(f"width {width!r}: one of {', '.join(WIDTHS)}")
    aligns = [_align(i, [r[i] for r in rows]) for i in range(len(titles))]
    column = width == "column"
    cols = [
        _Column(t, [r[i] for r in rows], a, wraps=(i > 0 or column) and a == "l")
        for i, (t, a) in enumerate(zip(titles, aligns, strict=True))
    ]
    keys = [0]  # the leading columns that tell the rows apart: the first, the second if needed
    firsts, pairs = [r[0][0] for r in rows], [tuple(t for t, _ in r[:2]) for r in rows]
    if len(set(firsts)) < len(firsts) and len(titles) >= 3 and len(set(pairs)) == len(pairs):
        keys = [0, 1]
    rest = [i for i in range(len(cols)) if i not in keys]
    every, targets = sorted(keys + rest), TEX_TARGETS[:1] if column else TEX_TARGETS
    whole = _place(cols, every, targets=targets)
    if whole is None and column:  # the numbers' spread under their means
        cols = [replace(c, stack=c.align == "r") for c in cols]
        whole = _place(cols, every, targets=targets)
    if whole is not None:
        return [whole]
    env, wide = targets[-1]
    small = TEX_SIZES[-1][0]
    # a part too wide: an ``env`` at 8 pt, text (in a column version numbers' too) wrapped
    # as narrow as it goes (``loose`` never refuses)
    loose = [replace(c, wraps=True) for c in cols] if column else cols
    return [
        _place(cols, p, [small], targets)
        or TexPart(p, env, small, _fit([loose[i] for i in p], small, wide, loose=True) or [])
        for p in _split(cols, keys, rest, keep, wide)
    ]


def _split(
    cols: list[_Column], keys: list[int], rest: list[int], keep: Sequence[str], wide: float
) -> list[list[int]]:
    """The column indices of each part (see ``tex_layout``), each within ``wide`` pt at 8 pt."""
    small = TEX_SIZES[-1][0]
    if not rest or _fit([cols[i] for i in keys + rest], small, wide):
        return [keys + rest]
    order = [i for i in rest if cols[i].title in keep]
    order += [i for i in rest if cols[i].title not in keep]
    chosen: list[int] = []
    for i in order:
        if _fit([cols[j] for j in sorted(keys + chosen + [i])], small, wide):
            chosen.append(i)
    chosen = chosen or order[:1]  # a column too wide even alone gets a part of its own
    left = [i for i in rest if i not in chosen]
    return [sorted(keys + chosen), *(_split(cols, keys, left, keep, wide) if left else [])]


def _cell_lines(c: _Column, text: str, bold: bool, size: float) -> int:
    """How many lines a cell of a laid-out column prints on (stacked, wrapped or one)."""
    lines = c.lines(text)
    if len(lines) == 1 and not (c.wrap and tex_width(text, size, bold) > c.width):
        return 1
    return sum(len(_lines(x.split(), c.width, size, bold)) for x in lines)


def _row_chunks(part: TexPart, rows: list[list[Cell]], caption: str) -> list[tuple[int, int]]:
    """``rows`` cut into as few even runs ``(first, end)`` as keep ``part`` within a page."""
    skip = dict(TEX_SIZES)[part.size]
    line = TEX_TARGETS[0][1]
    cap = f"Table 99: {caption} (continued: more columns of Table 99, rows 99–99)"
    fixed = math.ceil(tex_width(cap, part.size) / line) * skip + 30.0  # + rules, their space
    fixed += max(len(c.head or [c.title]) for c in part.laid) * skip
    tall = [skip * max(_cell_lines(*x, part.size) for x in part.cells(r)) for r in rows]
    for n in range(1, len(rows) + 1):
        cuts = [round(len(rows) * j / n) for j in range(n + 1)]
        runs = list(zip(cuts[:-1], cuts[1:], strict=True))
        if all(fixed + sum(tall[a:b]) <= COLUMN_HEIGHT for a, b in runs):
            return runs
    return [(j, j + 1) for j in range(len(rows))] or [(0, 0)]


def _tex_head(c: _Column) -> str:
    if not c.head or len(c.head) == 1:
        return tex_escape(c.title)
    return _parbox(c, "b", r"\\".join(tex_escape(x) for x in c.head))


def _tex_cell(c: _Column, text: str, bold: bool, size: float) -> str:
    lines = c.lines(text)
    tex = r"\\".join(_tex_text(x, bold) for x in lines)
    if len(lines) > 1 or (c.wrap and tex_width(text, size, bold) > c.width):
        return _parbox(c, "t", tex + r"\strut")  # stacked or wrapped: a paragraph
    return tex


def _parbox(c: _Column, pos: str, tex: str) -> str:
    """``tex`` as a paragraph as wide as column ``c``, flush as it; ``pos``: ``b`` or ``t``."""
    flush = r"\raggedright" if c.align == "l" else r"\raggedleft"
    width = math.floor(c.width * 10) / 10  # rounded down: the widths sum to no more than planned
    return rf"\parbox[{pos}]{{{width:.1f}pt}}{{{flush} {tex}}}"


def _tex_text(text: str, bold: bool) -> str:
    """One line of a cell in LaTeX: escaped, greyed spans in grey, bold if ``bold``."""
    tex = tex_escape(text).replace(GREY_ON, r"\textcolor{gray}{").replace(GREY_OFF, "}")
    if bold and text not in ("", "–"):
        tex = rf"\textbf{{{tex}}}"
    return tex


TEX_FLOAT = r"""\begin{%(env)s}[tbp]
\centering\fontsize{%(size)g}{%(skip)g}\selectfont\setlength{\tabcolsep}{%(sep)gpt}
\caption{%(caption)s}\label{%(label)s}
\begin{tabular}{%(cols)s}
\toprule
%(head)s \\
\midrule
%(body)s
\bottomrule
\end{tabular}%(notes)s
\end{%(env)s}
"""
# A column version's notes: text after its floats, since a float cannot break across pages and
# the notes of a table set in 3.3 in can be taller than a page.
TEX_NOTES = r"""{\footnotesize\raggedright\setlength{\parindent}{0pt}\textit{Notes to
Table~\ref{%(label)s}.} %(notes)s\par}
"""
TEX_FIGURE = r"""\begin{%(env)s}[tbp]\centering
\includegraphics[width=\linewidth]{%(path)s}
\caption{%(caption)s}\label{%(label)s}
\end{%(env)s}
"""


def tex_key(task: str, preset: str, sources: Sequence[str | Path], rule: Rule | None = None) -> str:
    """What a report's LaTeX labels start with, shared by no other report: ``task-preset.store``.

    ``store``: the records' name, their file's stem or, for a store's ``runs.jsonl``, its folder's
    name (several joined by ``+``), then ``.rule`` where a selection rule picked the rows. Made of
    the command alone, so a regenerated report keeps its labels.
    """

    def slug(text: str) -> str:
        return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")

    names = []
    for source in sources:
        store = store_path(source)
        names.append(slug(store.parent.name if store.name == DEFAULT_FILE else store.stem))
    key = f"{slug(task)}-{slug(preset)}.{'+'.join(n or 'runs' for n in names) or 'records'}"
    return key + (f".{slug(str(rule))}" if rule is not None else "")


def tex_name(stem: str, width: str) -> str:
    """The file of one LaTeX version: ``<stem>.tex`` (text width), ``<stem>_column.tex``."""
    return f"{stem}.tex" if width == "text" else f"{stem}_{width}.tex"


def figure_width(pdf: Path) -> float | None:
    """The width in inches of a saved figure, from its PDF's ``/MediaBox``; None if unreadable."""
    try:
        m = re.search(rb"/MediaBox\s*\[\s*([-\d.]+)\s+[-\d.]+\s+([-\d.]+)", pdf.read_bytes())
    except OSError:
        return None
    return (float(m.group(2)) - float(m.group(1))) / 72 if m else None


def figure_env(pdf: Path) -> str:
    """``figure`` for a figure one column wide (3.3 in) or less, else ``figure*``.

    The figures are drawn at the width they print at, so a 7 in figure in a one-column float would
    print its 7 pt text at 3.3 pt.
    """
    width = figure_width(pdf)
    narrow = width is not None and width <= TEX_TARGETS[0][1] / PT_PER_IN + 0.01
    return "figure" if narrow else "figure*"


def render_tex(
    titles: list[str],
    rows: list[list[Cell]],
    caption: str,
    label: str = "tab:table",
    notes: Sequence[str] = (),
    keep: Sequence[str] = (),
    width: str = "text",
) -> str:
    r"""A booktabs table at 9 or 8 pt, never scaled: caption and ``\label`` above.

    ``tex_layout`` decides the floats; a later part is labelled ``<label>-cont<k>``. ``notes`` go
    under the first part's tabular; in the column version (``width="column"``), whose tall parts are
    cut by rows (``_row_chunks``), they follow the floats as text: a float cannot break across
    pages.
    """
    parts = tex_layout(titles, rows, keep, width)
    text = "".join(f"\n\\par\\smallskip\\footnotesize\\raggedright {tex_escape(n)}" for n in notes)
    column = width == "column"
    floats = [  # (part, its first row, the row after its last): a column version's tall parts in
        (part, a, b)  # several floats of fewer rows
        for part in parts
        for a, b in (_row_chunks(part, rows, caption) if column else [(0, len(rows))])
    ]
    out = []
    for k, (part, a, b) in enumerate(floats):
        size = part.size
        cap = tex_escape(caption)
        lab = label if k == 0 else f"{label}-cont{k + 1}"
        some = "same rows" if (a, b) == (0, len(rows)) else f"rows {a + 1}–{b}"
        if part is not parts[0]:
            cap += rf" (continued: more columns of Table~\ref{{{label}}}, {tex_escape(some)})"
        elif k:
            cap += rf" (continued: {tex_escape(some)} of Table~\ref{{{label}}})"
        elif b < len(rows):  # the first of several runs of rows
            cap += f" ({tex_escape(some)})"
        body = [" & ".join(_tex_cell(*x, size) for x in part.cells(r)) + r" \\" for r in rows[a:b]]
        out.append(
            TEX_FLOAT
            % {
                "env": part.env,
                "size": size,
                "skip": dict(TEX_SIZES)[size],
                "sep": TABCOLSEP,
                "caption": cap,
                "label": lab,
                "cols": "".join(c.align for c in part.laid),
                "head": " & ".join(_tex_head(c) for c in part.laid),
                "body": "\n".join(body),
                "notes": text if k == 0 and not column else "",
            }
        )
    if column and notes:  # in the text, where a page or column may break them
        out.append(
            TEX_NOTES
            % {"label": label, "notes": "\n\\par\\smallskip ".join(map(tex_escape, notes))}
        )
    return "\n".join(out)
