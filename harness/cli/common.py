"""What the subcommands share: the parser class, the option tables, argument types, helpers.

A subcommand declares its options as a table (``add_options``): ``"--flag METAVAR"`` and its help;
their other argparse keywords are its own or, for an option several subcommands take, ``KINDS``'.
Nothing here imports torch: ``harness --help`` and ``harness --version`` stay fast.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from harness.api import DEVICES, MAX_THREADS, PRESETS, TASKS
from harness.api import parse_seeds as parse_seeds
from harness.errors import ConfigError, HarnessError


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit code 2.

    An empty value is a usage error for every option: taken as given it would quietly mean the
    default (``--config ''`` ran the default sweep, ``--out ''`` wrote into the current folder).
    """

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """``argparse``'s, then refuse an option or argument given as an empty string."""
        ns, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            value = getattr(ns, action.dest, None)
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, str) and not v.strip() and v != action.default:
                    name = "/".join(action.option_strings) or action.metavar or action.dest
                    self.error(f"argument {name}: expects a non-empty value, got {v!r}")
        return ns, extras

    def error(self, message: str) -> NoReturn:
        """Write ``error: MESSAGE (see 'PROG --help')`` to stderr and exit with code 2."""
        sys.stderr.write(f"error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def dispatch(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    """Parse ``argv`` and run its command: its exit code, or 2 with one line for bad input."""
    try:
        args = parser.parse_args(argv)
        args.argv = argv  # the command line a generated report names
        return args.func(args)
    except HarnessError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2


def includes(argv: list[str]) -> list[str]:
    """The ``--include`` paths of ``argv``: imported first, as an executor's options are flags."""
    pre = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    pre.add_argument("--include", action="append", default=[])
    try:
        return pre.parse_known_args(argv)[0].include
    except argparse.ArgumentError:
        return []


def examples(*lines: str, note: str = "") -> str:
    """An epilog: ``examples:`` followed by the indented command lines, then ``note``."""
    head = "example:" if len(lines) == 1 else "examples:"
    return "\n".join([head, *(f"  {line}" for line in lines), *([note] if note else [])])


def add_command(
    subparsers: Any,
    name: str,
    help: str,
    options: dict[str, str],
    kinds: dict[str, dict[str, Any]] | None = None,
    **texts: str,
) -> argparse.ArgumentParser:
    """Add a subcommand parser with its ``options`` (``add_options``).

    ``help`` is its line in ``harness --help`` and its description unless ``texts`` gives one;
    ``texts``: ``description``, ``epilog`` (its examples keep their line breaks).
    """
    parser = subparsers.add_parser(
        name,
        help=help,
        description=texts.get("description") or help,
        epilog=texts.get("epilog"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser, options, kinds)
    return parser


def add_options(
    parser: Any, options: dict[str, str], kinds: dict[str, dict[str, Any]] | None = None
) -> None:
    """Add each option ``"FLAG [FLAG...] [METAVAR]"`` (a positional: ``"NAME [METAVAR]"``) -> help.

    Its other ``add_argument`` keywords are ``KINDS``' updated by ``kinds``', by its first flag;
    a flag with neither a metavar nor keywords is a switch (``store_true``).
    """
    for spec, help in options.items():
        words = spec.split()
        flags = [w for w in words if w.startswith("-")] or words[:1]
        kw = KINDS.get(flags[0], {}) | (kinds or {}).get(flags[0], {})
        if words[len(flags) :]:
            kw = {"metavar": words[-1], **kw}
        elif not kw and flags[0].startswith("-"):
            kw = {"action": "store_true"}
        parser.add_argument(*flags, help=help, **kw)


# --- argument types (their errors become argparse's one-line usage error) ----------------------


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers >= ``low`` (and <= ``high`` when given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects an integer, got '{text}'") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low} (got {value})")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high} (got {value})")
        return value

    return parse


def float_at_least(low: float, below: float | None = None) -> Callable[[str], float]:
    """An argparse ``type`` accepting finite numbers >= ``low`` (and < ``below`` when given)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects a number, got '{text}'") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expects a finite number, got '{text}'")
        if not value >= low:
            raise argparse.ArgumentTypeError(f"must be >= {low:g} (got {text})")
        if below is not None and not value < below:
            raise argparse.ArgumentTypeError(f"must be in [{low:g}, {below:g}) (got {text})")
        return value

    return parse


def comma_list(item: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """An argparse ``type`` for ``A,B,C``: each item parsed by ``item`` (another such type)."""

    def parse(text: str) -> list[Any]:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expects a comma-separated list, got '{text}'")
        return [item(p) for p in parts]

    return parse


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """An argparse ``type`` (for ``comma_list``) accepting one of ``choices``."""

    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(
                f"unknown value '{text}' (choose from {', '.join(choices)})"
            )
        return text

    return parse


# --- options several subcommands take ---------------------------------------------------------

KINDS: dict[str, dict[str, Any]] = {
    "--methods": {"default": "all"},
    "--tasks": {"default": "all"},
    "--preset": {"default": "smoke", "choices": PRESETS},
    "--device": {"choices": DEVICES},
    "--threads": {"type": int_at_least(0, MAX_THREADS), "default": 1},
    "--set": {"action": "append"},
    "--include": {"action": "append"},
    "--where": {"action": "append"},
}
METHODS_HELP = (
    "comma-separated method names or globs, or 'all' (default: %(default)s; see 'harness list "
    "methods')"
)
TASKS_HELP = "comma-separated task names or globs, or 'all' (default: {}; see 'harness list tasks')"
SET_HELP = (
    "override a config field, as section.field or a bare field when unambiguous (e.g. "
    "train.lr=0.01, hidden_size=64); repeatable; a key no selected method or task has is an error"
)
SELECT_HELP = (
    "one row per method, the variant RULE picks on the validation split: best-val, or "
    "val-skip-band:TARGET:WIDTH (best validation metric among variants whose validation Skip %% "
    "is within TARGET +- WIDTH), or val-skip-nearest:TARGET (validation Skip %% nearest TARGET); "
    "default: every variant"
)
DATA_DIR_HELP = "dataset root (default: $HARNESS_DATA_DIR, else the user cache directory)"
INCLUDE = {
    "--include PATH": "import the methods and tasks of a .py file, or of every .py file of a "
    "folder (not test_*.py, _*.py), before the registry is read; repeatable; also "
    "$HARNESS_INCLUDE (see docs/plugins.md)"
}


# --- helpers of the commands ------------------------------------------------------------------


def require_task(task: str | None, command: str, many: bool = False) -> str:
    """The one task ``task`` names (``many``: the several, a comma list); else a ConfigError."""
    if not task:
        raise ConfigError(f"{command} needs --task TASK; tasks: {', '.join(TASKS.names())}")
    names = TASKS.resolve(task)
    if many:
        return ",".join(names)
    if len(names) != 1:
        raise ConfigError(f"{command} takes one task; '{task}' matches {', '.join(names)}")
    return names[0]


def console() -> Any:
    """A rich console on stderr (progress and tables; stdout keeps the machine-readable part)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)
