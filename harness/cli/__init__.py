"""The ``harness`` command line: one module per subcommand (``add_parser``, ``cmd_*``).

It parses, calls ``harness.api`` and prints (``tests/test_cli_shape.py``); torch loads only when a
command runs. Bad input gives one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import signal
import sys
import threading
from typing import Any

from harness import api
from harness.cli import bench, check, compare, data, docs, flops, listing, new, report, run, store
from harness.cli.common import Parser, dispatch, includes
from harness.errors import HarnessError, Interrupted

# in the order ``harness --help`` lists them
COMMANDS = (listing, run, report, compare, flops, bench, data, store, check, new, docs)


def make_parser() -> argparse.ArgumentParser:
    """The ``harness`` parser with every subcommand."""
    p = Parser(
        prog="harness",
        description="Benchmark harness for conditional-computation RNNs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="run 'harness COMMAND --help' for a command's options and examples",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"harness {api.__version__}",
        help="print the version and exit",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for module in COMMANDS:
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """The ``harness`` console script: 0 ok, 1 failed runs or drift, 2 bad input, 128 + a signal."""
    program, argv = argv is None, sys.argv[1:] if argv is None else list(argv)
    old_handler = _on_sigterm(_interrupt)
    try:
        api.include(includes(argv))  # first: an included executor's options are flags of run
        return dispatch(make_parser(), argv)
    except HarnessError as e:  # a bad --include
        sys.stderr.write(f"error: {e}\n")
        return 2
    except KeyboardInterrupt as e:  # SIGINT (Ctrl-C) gives 130; SIGTERM (Interrupted) 143
        signum = getattr(e, "signum", signal.SIGINT)
        sys.stderr.write(
            f"interrupted ({signal.Signals(signum).name}); finished runs are recorded\n"
        )
        return 128 + signum
    finally:
        _on_sigterm(old_handler)
        if program:  # the process ends now: its exit need not traverse what its imports made
            gc.freeze()  # (with torch, about 0.3 s); not for a caller that goes on (a test)


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM ends a command as Ctrl-C does (``Interrupted``: exit code 143)."""
    raise Interrupted(signum)


def _on_sigterm(handler: Any) -> Any:
    """Install a SIGTERM handler (main thread only); returns the previous one."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    sys.exit(main())
