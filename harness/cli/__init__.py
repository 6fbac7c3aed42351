"""The ``harness`` command line: its subcommands (``COMMANDS``, in the order ``--help`` lists them).

One module per subcommand (``add_parser`` and its ``cmd_*`` function); what they share is in
``harness.cli.common``. The command functions import the torch-heavy machinery when they run,
so ``harness --help`` and ``harness --version`` stay fast. The CLI parses, calls ``harness.api`` and
prints: a CLI module imports nothing of the project but ``harness.api``, ``harness.errors`` and
other CLI modules (``tests/test_cli_shape.py``).

Bad input (unknown names, bad ``--set`` values, missing data, unwritable output, malformed
records) gives one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import sys
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
    """Entry point of the ``harness`` console script.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 success, 1 failed runs or drift, 2 bad input, 128 + the signal when
        interrupted (130 SIGINT, 143 SIGTERM).
    """
    program, argv = argv is None, sys.argv[1:] if argv is None else list(argv)
    old_handler = _on_sigterm(_interrupt)
    try:
        api.include(includes(argv))  # first: an included executor's options are flags of run
        return dispatch(make_parser(), argv)
    except HarnessError as e:  # a bad --include
        sys.stderr.write(f"error: {e}\n")
        return 2
    except KeyboardInterrupt as e:  # SIGINT (Ctrl-C) gives 130; SIGTERM (Interrupted) 143
        import signal

        signum = getattr(e, "signum", signal.SIGINT)
        name = signal.Signals(signum).name
        sys.stderr.write(f"interrupted ({name}); finished runs are recorded\n")
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
    import signal
    import threading

    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    sys.exit(main())
