"""What ``harness run`` shows while and after a sweep runs: progress, dry runs, the leaderboard.

On stderr but the dry run's list and the leaderboard (a table per task and preset, with notes).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import api

FORMATS = ("table", "md")  # run --format
PIPE_WIDTH = 100  # the columns of a table printed to a pipe or a file (no terminal width)


def print_board(
    records: Sequence[dict], rule: Any, store: Path, board: Path, given: str | None
) -> None:
    """Print the leaderboard on stdout: tables, or (``given`` ``md``) the Markdown of ``board``."""
    from rich.console import Console

    if given == "md":
        print(board.read_text())
        return
    stdout = Console(highlight=False)
    if not stdout.is_terminal:
        stdout.width = PIPE_WIDTH
    print_tables(records, rule, str(store), stdout, board)


def print_tables(records: Sequence[dict], rule: Any, store: str, console: Any, board: Path) -> None:
    """Print the leaderboard of ``records`` on ``console``, and where its Markdown ``board`` is.

    ``rule`` picks the rows (no table: a line says why). A table too wide even with the method's
    cell and the titles wrapped keeps only its ``TERSE`` columns; numbers never wrap.
    """
    from rich.measure import Measurement

    picked, wide = None, console.options.update_width(10_000)  # the narrowest it can be
    ok = any(r.get("status") == "ok" for r in records)  # before the rule picks
    if rule is not None:
        records, picked = api.select(records, rule)
    tables = api.boards(records, picked)
    for b in tables:
        for place, tight in ((api.WIDE, False), (api.WIDE, True), (api.TERSE, True)):
            table = _table(b.title, *api.terminal(b, place), tight)
            if Measurement.get(console, wide, table).minimum <= console.width:
                break
        console.print(table)
        for note in api.record_notes(records, b.task, b.preset, store, brief=True):
            console.print(f"  {note}", highlight=False, markup=False)
    if not tables:
        why = f"--select {rule} keeps no row" if rule is not None and ok else "no run finished ok"
        console.print(f"{why}: no table", highlight=False)
    console.print(
        f"the full leaderboard (CIs, dense cost, parameters, time, commits, failures): {board}",
        highlight=False,
    )


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], tight: bool) -> Any:
    """A ``rich`` table: the method's cell wraps; a number never, a title (``tight``) by words."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False
    )
    widest = max((len(row[0].split(" ")[0]) for row in rows), default=6)
    table.add_column(columns[0], overflow="fold", min_width=max(widest, 6))
    for j, col in enumerate(columns[1:], 1):
        title_width = max(map(len, col.split())) if tight else len(col)
        whole = max((len(row[j]) for row in rows), default=1)
        table.add_column(col, justify="right", width=max(whole, title_width))
    for row in rows:
        table.add_row(*row)
    return table


def fmt_duration(seconds: float) -> str:
    """A duration as a person reads it: ``0.4 s``, ``12 s``, ``3 min 20 s``, ``2 h 05 min``."""
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def estimate_line(todo: list[Any], records: list[dict[str, Any]], workers: int = 1) -> str:
    """``--dry-run``'s estimate of the runs' time from the store's (and on ``workers``)."""
    per_run, n = api.estimate_runs(todo, records)
    seconds = sum(s for s in per_run if s is not None)
    known = n["variant"] + n["method"]
    if not known:
        return "estimated time: unknown (no recorded run of these variants or methods in the store)"
    parts = [f"{n['variant']} from recorded seeds of the same variant"]
    if n["method"]:
        parts.append(f"{n['method']} from the same method, task and preset")
    text = f"estimated time: {fmt_duration(seconds)} in one process"
    if workers > 1:
        wall = fmt_duration(api.wall_seconds(per_run, workers))
        longest = fmt_duration(max(s for s in per_run if s is not None))
        text += f", {wall} on {workers} workers (the longest run: {longest})"
    text += f" ({', '.join(parts)}"
    if n["unknown"]:
        text += f"; {n['unknown']} run(s) with no recorded run like them, not counted"
    return text + "; times as recorded, machine load included)"


def print_dry_run(cfgs: list[Any], todo_ids: set[str], labels: dict[str, str]) -> None:
    """The resolved runs, one line each on stdout: status, method, task, seed, run id, variant."""
    rows = [("status", "method", "task", "seed", "run id", "variant")]
    for c in cfgs:
        status = "to run" if c.run_id in todo_ids else "recorded"
        rows.append((status, c.method, c.task, str(c.seed), c.run_id, labels.get(c.run_id, "")))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[5])


class SweepProgress:
    """The progress display of a sweep (``SweepEvent`` s; enter its ``progress``): runs, ETA.

    ``serial``: the runs train in this process in the order of ``todo``, so the run in progress
    and its epoch are shown too (every epoch's losses with ``verbose``).
    """

    def __init__(
        self, console: Any, todo: list[Any], labels: dict[str, str], serial: bool, verbose: bool
    ) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.todo, self.labels, self.serial, self.verbose = todo, labels, serial, verbose
        self.finished, self.started = 0, time.monotonic()
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
        self.progress = Progress(*columns, TextColumn("{task.fields[eta]}"), console=console)
        self.bar = self.progress.add_task(self._current(), total=len(todo), eta="")

    def name(self, cfg: Any) -> str:
        """``method | task seed N variant``."""
        label = self.labels.get(cfg.run_id, "")
        return f"{cfg.method} | {cfg.task} seed {cfg.seed}" + (f" {label}" if label else "")

    def _current(self, epoch: str = "") -> str:
        if self.finished >= len(self.todo):
            return "done"
        return f"running {self.name(self.todo[self.finished])}{epoch}" if self.serial else "running"

    def on_event(self, event: Any) -> None:
        """Show an epoch, a finished run (line, bar, ETA), a note (unwritten: ``stopped_line``)."""
        console = self.progress.console
        if event.kind == "epoch":  # of the run in progress (serial)
            cfg = self.todo[min(self.finished, len(self.todo) - 1)]
            at = f" epoch {event.epoch + 1}/{cfg.train.epochs}"
            self.progress.update(self.bar, description=self._current(at))
            if self.verbose:
                row = event.row.items()
                values = (f"{k} {v:.4g}" for k, v in row if k != "epoch" and isinstance(v, float))
                console.print(f"  {self.name(cfg)}{at}: {' '.join(values)}", highlight=False)
        elif event.kind == "finished":
            self.finished += 1
            left = len(self.todo) - self.finished
            per_run = (time.monotonic() - self.started) / self.finished
            eta = f"ETA {fmt_duration(per_run * left)}" if left else ""
            self.progress.update(self.bar, advance=1, description=self._current(), eta=eta)
            console.print(summary(self.name(event.cfg), event.record), highlight=False)
        elif event.kind == "note":
            console.print(f"[yellow]{event.error}[/]", highlight=False)


def summary(name: str, rec: dict[str, Any]) -> str:
    """One finished run as a line: its name and variant, primary metric, Skip %, duration."""
    if rec["status"] != "ok":
        return f"[red]✗ {name}: {rec['error']}[/]"
    m, primary = rec["metrics"], rec["primary"]
    extra = f" skip {m['skip_pct']:.1f}%" if m.get("skip_pct") is not None else ""
    if "mean_depth" in m:
        extra += f" depth {m['mean_depth']:.2f}"
    t = rec.get("time", {})
    took = fmt_duration(t.get("train_s", 0.0) + t.get("eval_s", 0.0))
    return f"✓ {name}: {primary} {m.get(primary, float('nan')):.4g}{extra} ({took})"


def print_match_skip(rows: list[dict[str, Any]], target: float, swept: list[str], out: Any) -> None:
    """Per method, the variant with Skip % nearest ``target`` (``RunJob.match_skip``'s rows)."""
    from rich.table import Table

    table = Table(title=f"variants nearest test Skip {target:g} % (test-based)")
    for col in ("task", "method", *swept, "Skip %", "metric", "seeds", "candidates"):
        table.add_column(col)
    for row in rows:
        values, primary = [str(row["values"][k]) for k in swept], row["primary"]
        sparsity = "" if row["budget"] == api.BUDGETS["skip_pct"] else " (activity sparsity)"
        skip, metric = f"{row['skip_pct']:.1f}{sparsity}", f"{primary} {row[primary]:.4g}"
        counts = str(row["seeds"]), str(row["candidates"])
        table.add_row(row["task"], row["method"], *values, skip, metric, *counts)
    out.print(table)
    out.print("to choose on validation data instead: harness report --select val-skip-band:T:W")


def say_resume(plan: Any, console: Any, limit: int = 10) -> None:
    """Print what resuming found: records of changed method code, failed runs retried or kept."""

    def names(recs: list[dict[str, Any]]) -> str:
        shown = [api.label(r) for r in recs[:limit]]
        more = f" and {len(recs) - limit} more" if len(recs) > limit else ""
        return ", ".join(shown) + more

    if plan.stale:
        methods = sorted({r["method"] for r in plan.stale})
        codes = ", ".join(f"{m} now {api.method_code(m)}" for m in methods)
        what = "rerun (the new records supersede them; --keep-stale keeps them)"
        what = "kept (--keep-stale)" if plan.kept_stale else what
        console.print(
            f"[yellow]warning: {len(plan.stale)} record(s) were made by other code of their "
            f"method ({codes}): {what}: {names(plan.stale)}[/]",
            highlight=False,
        )
    if plan.failed:
        console.print(
            f"retrying {len(plan.failed)} failed run(s): {names(plan.failed)}", highlight=False
        )
    if plan.kept_failed:
        console.print(f"failed earlier: {names(plan.kept_failed)}", highlight=False)


def say_finish(result: Any, console: Any) -> None:
    """Print the runs other sweeps took, and what the executor said at its close."""
    lines = list(result.notes)
    if result.taken:
        lines.append(f"{len(result.taken)} run(s) left to other sweeps on {result.store}:")
    for cfg, holder in result.taken:
        by = f"claimed by pid {holder.get('pid')} on {holder.get('host')}"
        by = "recorded by another sweep" if holder.get("recorded") else by
        lines.append(f"  {cfg.method}/{cfg.task}/{cfg.preset}/seed{cfg.seed} ({cfg.run_id}): {by}")
    for line in lines:
        console.print(line, highlight=False)


def stopped_line(result: Any) -> str:
    """Why a sweep stopped (``SweepResult.write_error``) and where its records are, in one line."""
    store, fallback = result.store, result.fallback
    kept = len(result.unwritten)
    recorded = len(result.records) - kept
    left = len(result.todo) - len(result.records) - len(result.taken)
    parts = [f"the sweep stopped: {result.write_error}"]
    if recorded:
        parts.append(f"{recorded} finished run(s) recorded in {store}")
    if kept:
        parts.append(
            f"{kept} finished run(s) kept in {fallback} (once there is room: "
            f"cat {fallback} >> {store})"
        )
    if left:
        parts.append(f"{left} run(s) not started (the same command resumes the sweep)")
    return "; ".join(parts)
