"""``harness docs``: fill the docs' generated blocks (``harness report|bench ... --print``)."""

from __future__ import annotations

import argparse
import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from harness import api
from harness.cli.bench import add_parser as add_bench
from harness.cli.common import Parser, add_command, dispatch, examples, includes
from harness.cli.report import add_parser as add_report
from harness.errors import HarnessError

DEFAULT_DOCS = "docs/*.md"


def add_parser(subparsers: Any) -> None:
    """Add ``docs`` to the ``harness`` subcommands."""
    s = add_command(
        subparsers,
        "docs",
        "fill the docs' generated blocks from the records (--check: only compare)",
        {
            "files": f"Markdown files (default: {DEFAULT_DOCS}, from the current folder)",
            "--check": "write nothing; print one line per block whose body differs from its "
            "command's output and exit 1 if there is one",
        },
        {"files": {"nargs": "*"}},
        epilog=examples(
            "harness docs",
            "harness docs --check",
            "harness docs docs/reproduction.md",
            note="a block: a line '<!-- generated: harness report STORE ... --print PART -->' "
            "(or\n'harness bench --from STORE ... --print PART'), the command's output, a line "
            "'<!-- end -->'\n(docs/reports.md, \"Numbers in the docs\")",
        ),
    )
    s.set_defaults(func=cmd_docs)


def cmd_docs(args: argparse.Namespace) -> int:
    """Fill (or with ``--check`` compare) every block: 0, or 1 when ``--check`` finds one stale."""
    files = args.files or sorted(str(p) for p in Path().glob(DEFAULT_DOCS))
    if not files:
        raise HarnessError(f"no {DEFAULT_DOCS} here: run it from the repository, or name files")
    stale = api.fill(files, run_block, check=args.check)
    for b in stale:
        print(f"{b.where()}: {'stale' if args.check else 'regenerated'}")
    if args.check and stale:
        print(f"{len(stale)} stale block(s): run 'harness docs' to regenerate them")
        return 1
    print(f"{len(files)} file(s): {'no stale block' if not stale else f'{len(stale)} rewritten'}")
    return 0


def run_block(argv: list[str]) -> tuple[int, str, str]:
    """``harness ARGV`` (``report``, ``bench``) here, as if alone: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    parser = Parser(prog="harness")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    add_report(sub)
    add_bench(sub)
    with redirect_stdout(out), redirect_stderr(err):
        try:
            with api.isolated():
                api.include(includes(argv))
                code = dispatch(parser, argv)
        except HarnessError as e:  # a bad --include, as 'harness' says it
            print(f"error: {e}", file=sys.stderr)
            code = 2
        except SystemExit as e:  # a usage error: its line is on stderr already
            code = e.code if isinstance(e.code, int) else 2
        finally:
            api.legacy_values.cache_clear()  # kept by method name: an included one's goes with it
    return code, out.getvalue(), err.getvalue()
