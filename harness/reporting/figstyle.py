"""The look shared by every report figure: sizes, palette, fonts, per-method styles, saving.

Every figure gives a method the same colour, marker and line style (``method_style``, assigned
from the registry order: seaborn's colour-blind-safe palette times marker shapes, each method its
own pair); axes whose values span a decade or more are logarithmic (``spans_decades``); bands
and error bars of a percentage (the metric registry's ``percent``, ``harness.components.metrics``)
stay within [0, 100] (``band``, ``error_bars``). Figures are sized for one column (``ONE_COLUMN``
inches wide) or two (``TWO_COLUMNS``), text is at least 7 pt (``STYLE``) and PDFs embed TrueType
fonts.

matplotlib and seaborn are imported inside the functions (``import harness`` stays light).
Figures are ``matplotlib.figure.Figure`` objects built under ``style()``, never through pyplot's
global state, so many reports can be drawn in one process.
"""

from __future__ import annotations

import contextlib
import functools
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.components.metrics import get_metric
from harness.components.registry import METHODS
from harness.persistence.outputs import write_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ONE_COLUMN = 3.3  # inches: one column of a two-column paper
TWO_COLUMNS = 7.0  # inches: the full text width
# Each method's colour comes from seaborn's colour-blind-safe "colorblind" palette (``palette``:
# its 10 colours less its grey, which the reference predictors' bands keep), and its marker from
# MARKERS. With 9 colours and 7 markers (coprime), the i-th method's (colour, marker) pair is
# unique for the first 63, neighbours differ in both, and two methods of one colour (i, i + 9)
# get markers two apart in MARKERS, ordered so that such pairs differ in shape (never ^ and v).
MARKERS = ("o", "^", "s", "P", "v", "D", "X")
LINESTYLES = ("-", "--", ":", "-.")
MARK_COLOR = "#EE3377"  # the steps a task marks, on the update patterns
STYLE = {
    "pdf.fonttype": 42,  # TrueType fonts embedded in PDFs (not Type 3)
    "ps.fonttype": 42,
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "figure.titlesize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.2,
    "lines.markersize": 4,
    "errorbar.capsize": 1.5,
    "legend.frameon": False,
    "savefig.dpi": 200,
    "image.interpolation": "nearest",
}


@contextlib.contextmanager
def style() -> Iterator[None]:
    """Apply the report figures' rcParams (``STYLE``), on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context(STYLE):
        yield


@contextlib.contextmanager
def figure(width: float, height: float, *grid: int, **kw: Any) -> Iterator[tuple[Figure, Any]]:
    """Under ``style()``, a ``width`` x ``height`` in figure (constrained) and its subplots."""
    from matplotlib.figure import Figure

    with style():
        fig = Figure(figsize=(width, height), layout="constrained")
        yield fig, fig.subplots(*grid, **kw)


@functools.cache
def palette() -> tuple[str, ...]:
    """The methods' colours: seaborn's "colorblind" palette without its grey, as hex strings."""
    import seaborn as sns

    return tuple(c for c in sns.color_palette("colorblind").as_hex() if c != "#949494")


def style_at(i: int) -> dict[str, str]:
    """The ``color``, ``marker`` and ``linestyle`` of the ``i``-th method (registry order).

    Colour ``i mod 9`` of ``palette()``, marker ``i mod 7`` of ``MARKERS``; past every colour,
    the next line style. Two indices below 63 never share a (colour, marker) pair.
    """
    colors = palette()
    return {
        "color": colors[i % len(colors)],
        "marker": MARKERS[i % len(MARKERS)],
        "linestyle": LINESTYLES[(i // len(colors)) % len(LINESTYLES)],
    }


def method_style(method: str) -> dict[str, str]:
    """The ``color``, ``marker`` and ``linestyle`` of a method, the same in every figure.

    The i-th registered method (registry order) gets ``style_at(i)``, so every registered
    method has its own (colour, marker) pair; a name not registered gets a style past them,
    from a checksum of the name, whose pair no registered method has.
    """
    names = METHODS.names()
    if method in names:
        return style_at(names.index(method))
    pairs = len(palette()) * len(MARKERS)  # 63 distinct (colour, marker) pairs
    return style_at(len(names) + zlib.crc32(method.encode()) % max(pairs - len(names), 1))


def method_order(methods: Sequence[str]) -> list[str]:
    """Distinct methods in registry order (unregistered ones last, by name)."""
    names = METHODS.names()
    uniq = list(dict.fromkeys(methods))
    return sorted(uniq, key=lambda m: (names.index(m), "") if m in names else (len(names), m))


def spans_decades(values: Any) -> bool:
    """Whether positive ``values`` span a factor of 10 or more (then the axis is logarithmic)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return bool(v.size) and bool((v > 0).all()) and v.max() >= 10 * v.min()


def band(mean: np.ndarray, std: np.ndarray, key: str) -> tuple[np.ndarray, np.ndarray]:
    """``mean ± std`` (std NaN: 0), clipped to [0, 100] where measure ``key`` is a percentage."""
    std = np.nan_to_num(np.asarray(std, dtype=float))
    lo, hi = mean - std, mean + std
    if get_metric(key).percent:
        lo, hi = np.clip(lo, 0, 100), np.clip(hi, 0, 100)
    return lo, hi


def error_bars(mean: Any, std: Any, key: str) -> np.ndarray:
    """Asymmetric error bars ``[[below], [above]]`` of ``band``."""
    mean = np.asarray(mean, dtype=float)
    lo, hi = band(mean, std, key)
    return np.vstack([mean - lo, hi - mean])


def legend_height(entries: int) -> float:
    """The height (inches) a one-column legend of ``entries`` lines needs at ``STYLE``'s size."""
    return entries * 1.6 * STYLE["legend.fontsize"] / 72 + 0.1


def legend(fig: Figure, methods: Sequence[str], below: bool = False) -> None:
    """One legend entry per method (its colour, marker and line style), outside the axes.

    On the right of a wide figure where one column of entries fits its height, unless
    ``below``; otherwise under the axes, in rows of up to 6 entries (2 under a one-column one).
    """
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], **method_style(m)) for m in methods]
    wide = fig.get_figwidth() > ONE_COLUMN + 0.01
    if wide and legend_height(len(methods)) <= fig.get_figheight() and not below:
        fig.legend(handles, methods, loc="outside right upper")
    else:
        ncols = max(min(len(methods), 6 if wide else 2), 1)
        fig.legend(handles, methods, loc="outside lower center", ncols=ncols)


def save(fig: Figure, stem: Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.pdf`` at the figure's size; returns both paths.

    Each is rendered in memory and written through ``harness.persistence.outputs.write_bytes``
    (atomically, never over a records store).
    """
    import io

    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    with style():
        for p in paths:
            buf = io.BytesIO()
            fig.savefig(buf, format=p.suffix[1:])
            write_bytes(p, buf.getvalue())
    return paths
