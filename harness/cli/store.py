"""``harness store``: check a records store, or repair one (move its unusable lines aside)."""

from __future__ import annotations

import argparse
from typing import Any

from harness.cli.common import add_command, examples


def add_parser(subparsers: Any) -> None:
    """Add ``store`` (``check``, ``repair``) to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "store",
        "check a records store, or repair it (unusable lines moved to a side file)",
        epilog=examples(
            "harness store check results/runs.jsonl",
            "harness store repair results/runs.jsonl",
            note="check exits 1 when some line is unusable (a torn last line, a record with wrong "
            "types\nor an unknown schema); repair moves those lines, byte for byte, to "
            "STORE.rejected-TIME\nand keeps the rest (written under the store's lock)",
        ),
    )
    sub = s.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=type(s))
    for name, help in (
        ("check", "list every unusable line with its number; exit 1 if there is one"),
        ("repair", "move the unusable lines to STORE.rejected-TIME, keeping every byte"),
    ):
        a = sub.add_parser(name, help=help, description=help)
        a.add_argument("path", metavar="STORE", help="a records file (.jsonl) or --out directory")
        a.set_defaults(func=cmd_store)


def cmd_store(args: argparse.Namespace) -> int:
    """``check``: 0 if every line is usable, else 1; ``repair``: 0 once repaired."""
    from harness.errors import RecordError
    from harness.results import Store, store_path

    store = Store(store_path(args.path))
    if not store.path.is_file():
        raise RecordError(f"no records file at {store.path}")
    if args.action == "check":
        lines = store.lines()
        bad = [line for line in lines if line.problem]
        for line in bad:
            print(f"{store.path}:{line.number}: {line.problem}")
        good = sum(line.record is not None for line in lines)
        verdict = f"{len(bad)} unusable line(s): run 'harness store repair {args.path}'"
        print(f"{store.path}: {good} record(s), {verdict if bad else 'no unusable line'}")
        return 1 if bad else 0
    res = store.repair()
    if not res.moved:
        print(f"{store.path}: {res.kept} record(s), nothing to repair")
        return 0
    for number, problem in res.moved:
        print(f"moved line {number}: {problem}")
    print(f"{store.path}: {res.kept} record(s) kept; {len(res.moved)} line(s) moved to {res.side}")
    return 0


class SweepStore:
    """The store's side of a ``harness run`` sweep: claims, unwritable records, SIGTERM.

    - ``claimed(todo)`` yields the runs this sweep claimed, just in time (``results.Claims``),
      and remembers the ones another sweep on the same store holds or has recorded.
    - ``append(rec)`` appends a record; one that cannot be written (a full disk, after retries)
      is kept in a fallback file (``results.save_unwritten``) and the sweep goes on.
    - On leaving ``with`` (an interrupt included), the claims of runs not recorded are dropped.

    Args:
        store: the ``results.Store``.
        console: the rich console the notes go to.
    """

    def __init__(self, store: Any, console: Any) -> None:
        from harness.results import Claims

        self.store, self.console = store, console
        self.claims = Claims(store)
        self.taken: list[tuple[Any, dict[str, Any]]] = []  # (config, what holds it)
        self.unwritten: list[dict[str, Any]] = []
        self.fallback: Any = None  # the fallback file, once a record went there
        self.error: str = ""

    def __enter__(self) -> SweepStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.claims.release()

    def claimed(self, todo: list[Any]) -> Any:
        """The configs of ``todo`` this sweep claimed, claimed as they are read."""
        for cfg in todo:
            holder = self.claims.take(cfg.run_id)
            if holder is None:
                yield cfg
            else:
                self.taken.append((cfg, holder))

    def append(self, rec: dict[str, Any]) -> None:
        """Append ``rec``; if the store cannot take it, keep it in the fallback file."""
        from harness.results import AppendError, save_unwritten

        try:
            self.store.append(rec)
        except AppendError as e:
            self.error = e.error.strerror or str(e.error)
            self.fallback = save_unwritten(rec, self.store.path, self.fallback)
            self.unwritten.append(rec)
            self.console.print(
                f"[red]could not write run {rec['run_id']} to {self.store.path} ({self.error}); "
                f"kept in {self.fallback}[/]",
                highlight=False,
            )

    def finish(self) -> bool:
        """Print the runs other sweeps took and the runs not written; True if none is unwritten."""
        if self.taken:
            self.console.print(
                f"{len(self.taken)} run(s) left to other sweeps on {self.store.path}:",
                highlight=False,
            )
            for cfg, holder in self.taken:
                by = (
                    "recorded by another sweep"
                    if holder.get("recorded")
                    else f"claimed by pid {holder.get('pid')} on {holder.get('host')}"
                )
                self.console.print(
                    f"  {cfg.method}/{cfg.task}/{cfg.preset}/seed{cfg.seed} ({cfg.run_id}): {by}",
                    highlight=False,
                )
        if not self.unwritten:
            return True
        self.console.print(
            f"[red]error: {len(self.unwritten)} finished run(s) not written to {self.store.path} "
            f"({self.error}); their records are in {self.fallback}:[/]",
            highlight=False,
        )
        for r in self.unwritten:
            self.console.print(
                f"  {r['method']}/{r['task']}/{r['preset']}/seed{r['seed']} ({r['run_id']})",
                highlight=False,
            )
        self.console.print(
            f"once there is room: cat {self.fallback} >> {self.store.path}", highlight=False
        )
        return False


def say_resume(plan: Any, console: Any, limit: int = 10) -> None:
    """Print what resuming found: records of changed method code, failed runs retried.

    Args:
        plan: the ``results.ResumePlan``.
        console: the rich console.
        limit: records named per kind (the rest are counted).
    """
    from harness.results import method_code

    def names(recs: list[dict[str, Any]]) -> str:
        shown = [f"{r['method']}/{r['task']}/{r['preset']}/seed{r['seed']}" for r in recs[:limit]]
        more = f" and {len(recs) - limit} more" if len(recs) > limit else ""
        return ", ".join(shown) + more

    if plan.stale:
        methods = sorted({r["method"] for r in plan.stale})
        codes = ", ".join(f"{m} now {method_code(m)}" for m in methods)
        what = (
            "kept (--keep-stale)"
            if plan.kept_stale
            else "rerun (the new records supersede them; --keep-stale keeps them)"
        )
        console.print(
            f"[yellow]warning: {len(plan.stale)} record(s) were made by other code of their "
            f"method ({codes}): {what}: {names(plan.stale)}[/]",
            highlight=False,
        )
    if plan.failed:
        console.print(
            f"retrying {len(plan.failed)} failed run(s): {names(plan.failed)}", highlight=False
        )
