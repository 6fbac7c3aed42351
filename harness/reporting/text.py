"""Text shared by the generated reports: arrows, number formats, notes, the header.

Each measure's title, direction and range come from the metric registry
(``harness.components.metrics``), so one measure reads the same everywhere.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from harness import env
from harness.components.metrics import UNIT_NOTE, get_metric


def arrow(higher: bool | None) -> str:
    """`` ↑`` / `` ↓`` for a measure's direction, nothing for a measure without one."""
    return "" if higher is None else (" ↑" if higher else " ↓")


def column_scale(values: Sequence[float], large: bool = False) -> int:
    """The power of ten a column is printed in, so that no cell needs e-notation.

    ``large`` (FLOPs, parameters): ``x10^(top - 1)`` from 10^5 up, as S-SA prints ``25.7 x10^4``;
    otherwise small values get a multiple of three that brings the smallest to at least 0.1.
    """
    finite = [abs(v) for v in values if v is not None and not math.isnan(v) and v != 0]
    if not finite:
        return 0
    if large:
        top = math.floor(math.log10(max(finite)))
        return top - 1 if top >= 5 else 0
    low = math.floor(math.log10(min(finite)))
    return 3 * math.floor((low + 1) / 3) if low < -2 else 0


def value_text(v: Any) -> str:
    """A config value in a label: a float as ``%g`` (``lam=0.0002``), anything else as ``str``."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def num_first(text: str) -> tuple[int, float, str]:
    """A sort key: numbers in numeric order, then other text."""
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def scaled(title: str, scale: int) -> str:
    """A column title with its unit: ``MSE (×10^-3)``; unchanged for scale 0."""
    return f"{title} (×10^{scale})" if scale else title


def _sig_decimals(x: float, digits: int) -> int:
    if x == 0 or not math.isfinite(x):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(x))))


def fmt_cell(mean: float | None, std: float | None = None, n: int = 1, scale: int = 0) -> str:
    """The one number format of every generated table: ``mean ± std``, never e-notation.

    ``std`` over ``n`` values shows where n > 1: 2 significant digits, the mean to the same place; a
    std of 0 reads ``± 0 (n=5)``. ``scale``: the cell shows value / 10^scale; None or NaN: ``–``.
    """
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    f = 10.0**-scale
    m = mean * f
    if n > 1 and std is not None and not math.isnan(std) and std * f > 0:
        s = std * f
        d = _sig_decimals(s, 2)  # the std to 2 significant digits
        return f"{m:.{d}f} ± {s:.{d}f}"
    text = f"{m:.0f}" if abs(m) >= 100 else f"{m:.{_sig_decimals(m, 3)}f}"  # 3 significant digits
    if n > 1 and std is not None and not math.isnan(std):
        return f"{text} ± 0 (n={n})"
    return text


CI_METHOD = "Student's t"  # how every CI of the reports is computed (``ci95``)


def ci_title(title: str, scale: int = 0) -> str:
    """The title of a CI column, naming its method: ``95 % CI (Student's t), Accuracy %``."""
    return scaled(f"95 % CI ({CI_METHOD}), {title}", scale)


def ci95(vals: Sequence[float]) -> float | None:
    """Half-width of the 95 % confidence interval of a mean (Student's t); None for < 2 values."""
    if len(vals) < 2:
        return None
    from scipy.stats import t

    return float(t.ppf(0.975, len(vals) - 1) * statistics.stdev(vals) / math.sqrt(len(vals)))


def fmt_ci(
    mean: float | None, vals: Sequence[float], scale: int = 0, metric: str | None = None
) -> str:
    """``[low, high]``, the 95 % CI of the mean of ``vals``, clipped to ``metric``'s range."""
    h = ci95(vals)
    if mean is None or math.isnan(mean) or h is None:
        return "–"
    f = 10.0**-scale
    if h == 0:
        return fmt_cell(mean, scale=scale)
    lo_bound, hi_bound = get_metric(metric).range if metric else (None, None)
    low = mean - h if lo_bound is None else max(mean - h, lo_bound)
    high = mean + h if hi_bound is None else min(mean + h, hi_bound)
    d = _sig_decimals(statistics.stdev(vals) * f, 2)
    return f"[{low * f:.{d}f}, {high * f:.{d}f}]"


def commits(records: Sequence[dict[str, Any]]) -> list[str]:
    """The commits (10 hex digits, ``+dirty`` for a dirty tree) of ``records``, sorted."""
    return sorted(
        {
            f"{e['git_sha'][:10]}{'+dirty' if e.get('git_dirty') else ''}"
            for e in (r.get("env") or {} for r in records)
            if e.get("git_sha")
        }
    )


def commit_label(records: Sequence[dict[str, Any]]) -> str:
    """The commit of a set of records; ``mixed: a, b`` for several, ``?`` for none."""
    shas = commits(records)
    if not shas:
        return "?"
    return shas[0] if len(shas) == 1 else "mixed: " + ", ".join(shas)


# Notes printed under the tables of every report (the leaderboard's and the paper report's).
NOTES = (
    "- Cells: mean ± sample std over seeds, the std to 2 significant digits and the mean to the "
    "same decimal place; a std of 0 is printed with its n (`± 0 (n=5)`: every seed gave the "
    "same value). Seeds `1*`: one seed, so no std and no CI. 95 % CI: mean ± t(0.975, n-1) · "
    "std / √n (Student's t), clipped to the metric's range (accuracy within 0-100, MSE and NLL "
    "from 0, perplexity from 1).\n"
    "- Each column has one unit: a power of ten in its title (×10^k) multiplies every cell.\n"
    "- Commit: the code the row's records were made with (`+dirty`: uncommitted changes); "
    "`mixed: ...` flags a row whose seeds come from different commits.\n"
    "- Skip %: the share of (step, unit) state updates skipped on the test set (rows of the "
    "gate matrices). Activity sparsity % (activity-sparse methods): the share of (step, column) "
    "reads skipped, the columns being the input features and the previous-state units a step "
    "would multiply; effective FLOPs charge an updated row only its columns read. Mean depth "
    "(depth-adaptive methods): the mean over steps of R_t, the most highway layers any unit "
    "used at step t. Depth-skip %: the share of the full-depth work (T · D · R_max layer "
    "updates) not done.\n"
)


# A greyed span of a cell's text (``grey``): Markdown renders it as a grey HTML span, LaTeX as
# ``\textcolor{gray}{...}`` (xcolor). The text itself also says what it is, for a viewer that
# drops the colour.
GREY_ON, GREY_OFF = "\x0e", "\x0f"


def grey(text: str) -> str:
    """``text`` marked to be printed greyed (out of the table's comparison)."""
    return f"{GREY_ON}{text}{GREY_OFF}"


def seeds_cell(n: int) -> str:
    """The seed count, ``1*`` for one seed (see ``NOTES``)."""
    return f"{n}*" if n == 1 else str(n)


def fmt_p(p: float | None) -> str:
    """A p-value to 2 significant digits; ``n/a`` when there is none."""
    return "n/a" if p is None or math.isnan(p) else f"{p:.2g}"


def selection_rules(records: Sequence[dict[str, Any]]) -> str:
    """The records' selection rules, each naming its tasks unless every task of them has it."""
    tasks: dict[str, set[str]] = {}
    for r in records:
        if r.get("selection"):
            tasks.setdefault(r["selection"], set()).add(str(r.get("task", "?")))
    every = set().union(*tasks.values())
    parts = []
    for rule, names in sorted(tasks.items()):
        which = f"task{'s' if len(names) > 1 else ''} {', '.join(sorted(names))}"
        parts.append(rule if names == every else f"{rule} ({which})")
    return "; ".join(parts)


def header(
    records: Sequence[dict[str, Any]],
    sources: Sequence[str],
    title: str,
    command: str = "harness report",
) -> str:
    """Generated-file header: provenance of the numbers, selection rule, FLOP unit.

    ``sources``: the records files; ``command``: the command that writes the report.
    """
    envs = [r.get("env", {}) for r in records]
    shas = commits(records) or ["unknown"]
    devices = sorted({e.get("device_name", "?") for e in envs}) or ["unknown"]
    torches = sorted({e.get("torch", "?") for e in envs}) or ["unknown"]
    rules = selection_rules(records)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    sha, dirty = env.git_state()  # the harness commit that renders the report
    at = "an unknown commit" if sha is None else f"{sha[:10]}{'+dirty' if dirty else ' (clean)'}"
    lines = [
        f"# {title}",
        "",
        f"<!-- Generated by `{command}` at {now}. Do not edit by hand. -->",
        "",
        f"- Generated by `{command}` from {', '.join(f'`{s}`' for s in sources)} "
        f"({len(records)} records), rendered by the harness at {at}.",
        f"- Commits: {', '.join(shas)}; devices: {', '.join(devices)}; "
        f"torch: {', '.join(torches)}.",
        f"- Metric selection: {rules or 'n/a'}. Mean ± sample std over seeds.",
        f"- FLOPs: {UNIT_NOTE}. Effective = S-SA convention (updated units × full row cost + "
        "decision network); dense = no skipping.",
        "",
    ]
    return "\n".join(lines)
