"""The look shared by every report figure: sizes, palette, fonts, per-method styles, saving.

The rules: docs/reports.md, Figures. Figures are ``matplotlib.figure.Figure`` objects built under
``style()``, never through pyplot's global state, so many reports can be drawn in one process;
matplotlib and seaborn are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import functools
import math
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
# MARKERS: the 63 (colour, marker) pairs in the order ``pairs`` gives them, neighbours differing
# in both, and no two of the first 30 ``confusable`` (one marker family, colours less than
# DISTINCT apart: orange and vermilion, blue and light blue, purple and pink, orange and tan).
MARKERS = ("o", "^", "s", "P", "v", "D", "X")
MARKER_FAMILY = {"o": "o", "^": "triangle", "v": "triangle", "s": "s", "D": "D", "P": "+", "X": "+"}
DISTINCT = 40.0  # CIELAB distance (CIE76) below which two colours read as one
OFF_AXIS = {"up": "$\\uparrow$", "down": "$\\downarrow$"}  # a CI past an axis: no method's shape
OFF_AXIS_COLOR = "0.45"
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


def lab(color: Any) -> np.ndarray:
    """A matplotlib colour in CIELAB (D65): L*, a*, b*."""
    from matplotlib.colors import to_rgb

    rgb = np.asarray(to_rgb(color))
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = xyz @ lin / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def confusable(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Whether two (colour, marker) pairs read as one: one marker family, colours < DISTINCT."""
    same_shape = MARKER_FAMILY.get(a[1], a[1]) == MARKER_FAMILY.get(b[1], b[1])
    return same_shape and float(np.linalg.norm(lab(a[0]) - lab(b[0]))) < DISTINCT


@functools.cache
def pairs() -> tuple[tuple[str, str], ...]:
    """The 63 (colour, marker) pairs in the order methods take them.

    Each is the first of colour ``k mod 9`` and marker ``k mod 7`` not taken that differs from the
    one before in both and is ``confusable`` with none taken, while one is (the first 30); then the
    first that differs from the one before in both.
    """
    colors = palette()
    order = [(colors[k % len(colors)], MARKERS[k % len(MARKERS)]) for k in range(63)]
    clash = {(p, q): confusable(p, q) for p in order for q in order}
    out: list[tuple[str, str]] = []
    while len(out) < len(order):
        left = [p for p in order if p not in out]
        fits = [p for p in left if not out or (p[0] != out[-1][0] and p[1] != out[-1][1])]
        clear = [p for p in fits if not any(clash[p, q] for q in out)]
        out.append((clear or fits or left)[0])
    return tuple(out)


def style_at(i: int) -> dict[str, str]:
    """The ``color``, ``marker`` and ``linestyle`` of the ``i``-th method (registry order)."""
    color, marker = pairs()[i % 63]
    return {
        "color": color,
        "marker": marker,
        "linestyle": LINESTYLES[(i // len(palette())) % len(LINESTYLES)],
    }


def method_style(method: str) -> dict[str, str]:
    """A method's ``color``, ``marker`` and ``linestyle``, the same in every figure.

    A name not registered gets a style past the registered methods', from a checksum of the name.
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


def readable_log(axis: Any) -> None:
    """Give a log ``axis`` (limits set) at least three labelled ticks: 1, 2, 5 per decade."""
    from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, NullFormatter

    lo, hi = sorted(axis.get_view_interval())
    if lo <= 0 or math.floor(math.log10(hi)) - math.ceil(math.log10(lo)) + 1 >= 3:
        return
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    eng = EngFormatter(sep="")
    axis.set_major_formatter(FuncFormatter(lambda v, _: eng(v) if v >= 1e4 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


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


def legend(fig: Figure, methods: Sequence[str]) -> None:
    """One legend entry per method, right of a wide figure where it fits, else under the axes."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], **method_style(m)) for m in methods]
    wide = fig.get_figwidth() > ONE_COLUMN + 0.01
    if wide and legend_height(len(methods)) <= fig.get_figheight():
        fig.legend(handles, methods, loc="outside right upper")
    else:
        ncols = max(min(len(methods), 6 if wide else 2), 1)
        fig.legend(handles, methods, loc="outside lower center", ncols=ncols)


def save(fig: Figure, stem: Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.pdf`` (``write_bytes``: atomic, never over a store)."""
    import io

    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    with style():
        for p in paths:
            buf = io.BytesIO()
            fig.savefig(buf, format=p.suffix[1:])
            write_bytes(p, buf.getvalue())
    return paths
