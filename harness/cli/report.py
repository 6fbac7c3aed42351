"""``harness report``: the leaderboard, the paper report, TensorBoard HParams or report parts."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness import api
from harness.api import METHODS, PARTS, TASKS, WIDTHS, beside_records, parse_rule
from harness.cli.common import INCLUDE, SELECT_HELP, add_command, comma_list, examples, one_of
from harness.errors import HarnessError

FORMATS = ("md", "tex", "csv", "parquet")
DEFAULT_RECORDS = "results/runs.jsonl"
# the flags whose value is not under their own name
DESTS = {"--format": "formats", "--print": "parts", "--width": "widths"}


def add_parser(subparsers: Any) -> None:
    """Add ``report`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "report",
        "leaderboard from records (or, with --paper, paper tables and figures)",
        {
            "--task TASK[,TASK...]": "--paper: only these tasks, comma-separated names or globs "
            "as 'run --tasks' takes them (default: every task in the records)",
            "--preset": "--paper: only this preset (default: every preset in the records)",
            **INCLUDE,
            "records": f"records files or directories (default: {DEFAULT_RECORDS})",
            "--out FILE": "the leaderboard to write (default: next to the records: "
            "DIR/LEADERBOARD.md for DIR or DIR/runs.jsonl, X.md for X.jsonl)",
            "--paper": "paper tables (md/tex), figures, paper-vs-harness and significance, instead",
            "--out-dir DIR": "--paper: output directory (default: paper/ in the records' folder)",
            "--format --formats FORMAT[,FORMAT...]": f"table formats, any of {', '.join(FORMATS)} "
            "(parquet needs pyarrow); the leaderboard's go beside --out with their suffix "
            "(default: md; --paper: md,tex)",
            "--select RULE": SELECT_HELP,
            "--against METHOD[,METHOD...]": "--paper: a table after the main one comparing every "
            "method row with each of these methods, paired by seed (row - method: mean "
            "difference, paired t and Wilcoxon p, Holm per column), on the primary metric and, "
            "against a method that skips, on √(Acc×Skip)",
            "--allow-dirty": "--paper: also tabulate records made from a tree with uncommitted "
            "changes (default: clean commits only; each report says how many it left out)",
            "--width WIDTH[,WIDTH...]": "the LaTeX versions (--format tex): text, set within a "
            "one-column paper's text width (X.tex), and column, set in one column of a two-column "
            "paper, 3.3 in (X_column.tex) (default: text)",
            "--tex-root DIR": "--paper: the LaTeX's figure paths start from DIR, a folder holding "
            "--out-dir, so that a document naming DIR in its \\graphicspath includes several "
            "reports' figures (default: --out-dir)",
            "--no-figures": "tables only: no learning curves beside the leaderboard, no --paper "
            "figures",
            "--tensorboard DIR": "instead of a report, write each run's knobs (HParams) and "
            "test/val metrics, FLOPs and parameters into a new or empty DIR for TensorBoard's "
            "HParams dashboard (needs the tensorboard extra)",
            "--print PART[,PART...]": "write nothing; print Markdown to stdout (for the docs' "
            "generated blocks, 'harness docs'): count (records, failed and dirty ones, runs), or "
            "with --paper the main, against or paper (vs harness) tables of each task and preset",
            "--where KEY=VALUE[,VALUE...]": "--print: only the records whose config field KEY (as "
            "--set names it), method or task is one of the values (methods and tasks: names or "
            "globs; others read as the field's type); repeatable",
        },
        {
            "--preset": {"default": None},
            "records": {"nargs": "*"},
            "--format": {"dest": "formats", "type": comma_list(one_of(FORMATS))},
            "--against": {"type": comma_list(str)},
            "--width": {"dest": "widths", "type": comma_list(one_of(WIDTHS))},
            "--print": {"dest": "parts", "type": comma_list(one_of(PARTS))},
        },
        epilog=examples(
            "harness report results/runs.jsonl",
            "harness report results/runs.jsonl --paper --task TASK --preset quick",
            "harness report results/runs.jsonl --paper --task 'TASK,PREFIX-*'",
            "harness report results/runs.jsonl --tensorboard tb/ && tensorboard --logdir tb/",
            "harness report results/runs.jsonl --paper --task TASK --where train.lr=0.001 "
            "--print main",
            note="malformed record lines are skipped and listed in the report, which is still "
            "written;\nthe exit code is then 2",
        ),
    )
    s.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """Write the report (``harness.api.report`` / ``paper_report`` / ``export_tensorboard``).

    Malformed records are an error (exit 2) once the report is written (printed) without them.
    """
    sources, tasks = args.records or [DEFAULT_RECORDS], _check_flags(args)
    written = {"select": args.select, "figures": not args.no_figures}
    written["widths"] = tuple(args.widths or ("text",))
    paper = {"tasks": tasks, "preset": args.preset, "allow_dirty": args.allow_dirty}
    paper["against"], listed = args.against or (), ", listed in the report"
    if args.parts:  # nothing written: parts of a report on stdout
        where = args.where or ()
        text, problems = api.print_parts(
            sources, args.parts, where=where, select=args.select, **paper
        )
        print(text, end="")
        listed = ""
    elif args.tensorboard:
        paths, problems = api.export_tensorboard(sources, args.tensorboard)
        print(f"wrote {len(paths)} runs' HParams: tensorboard --logdir {args.tensorboard}")
    elif not args.paper:
        out, formats = Path(args.out or beside_records(sources)[0]), tuple(args.formats or ("md",))
        option = "--out" if args.out else "the leaderboard (next to its records)"
        paths, problems = api.report(sources, out, formats=formats, option=option, **written)
        for p in paths:
            print(f"wrote {p}")
    else:
        out = args.out_dir or beside_records(sources)[1] / "paper"
        written |= {"formats": tuple(args.formats or ("md", "tex")), "tex_root": args.tex_root}
        paths, problems = api.paper_report(sources, out, **written, **paper)
        for p in paths:
            print(p)
    if problems:  # the report is written without them; the input is still bad
        more = f" (and {len(problems) - 1} more{listed})" if len(problems) > 1 else ""
        raise HarnessError(f"{problems[0]}{more}")
    return 0


def _check_flags(args: argparse.Namespace) -> list[str] | None:
    """Refuse misplaced flags, unknown names and a bad rule; return the tasks named."""

    def used(*flags: str) -> list[str]:  # the flags given (their values: DESTS or own name)
        return [f for f in flags if getattr(args, DESTS.get(f, f[2:].replace("-", "_")))]

    given = used("--task", "--preset", "--out-dir", "--allow-dirty", "--against", "--tex-root")
    flags = used("--paper", "--out", "--format", "--select", "--no-figures", "--print", "--width")
    flags += given
    if args.tensorboard and flags:
        raise HarnessError(
            f"{', '.join(flags)}: not used with --tensorboard, which writes only the export"
        )
    writes = used("--out", "--out-dir", "--format", "--no-figures", "--width", "--tex-root")
    if args.parts and writes:
        raise HarnessError(f"{', '.join(writes)}: not used with --print, which writes nothing")
    formats = args.formats or (("md", "tex") if args.paper else ("md",))
    if args.widths and "tex" not in formats:
        raise HarnessError("--width: the LaTeX versions, with --format tex")
    if args.where and not args.parts:
        raise HarnessError("--where: only used with --print")
    if not args.paper and (tables := [p for p in args.parts or () if p != "count"]):
        raise HarnessError(f"--print {','.join(tables)}: tables of the paper report, with --paper")
    if "against" in (args.parts or ()) and not args.against:  # else it prints nothing
        raise HarnessError("--print against needs --against METHOD[,METHOD...]")
    if given and not args.paper:
        raise HarnessError(f"{', '.join(given)}: only used with --paper (the leaderboard: --out)")
    if args.out and args.paper:
        raise HarnessError("--out: the leaderboard's file; --paper writes into --out-dir")
    tasks = TASKS.resolve(args.task) if args.task else None  # names and globs, as 'run --tasks'
    for name in args.against or ():  # an unknown method is one line before anything is read
        METHODS.get(name)
    if args.select:  # a bad rule is one line before anything is read
        parse_rule(args.select)
    return tasks
