"""What the subcommands share: the parser class, the shared options, small helpers.

Every option that more than one subcommand takes is declared once here, as a parent parser
(``argparse``'s ``parents=``) made by one of the ``*_option`` functions; a subcommand passes what
differs for it (its default, its help). argparse shares a parent's action objects with every
parser built from it, so a parent is made fresh per subcommand rather than reused: changing one
subcommand's default would otherwise change it for all.

Nothing here imports torch: ``harness --help`` and ``harness --version`` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from harness.config import PRESETS
from harness.errors import ConfigError, HarnessError

DEVICES = ("cpu", "cuda", "auto")
EXECUTORS = ("local", "ray")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Write ``error: MESSAGE (see 'PROG --help')`` to stderr and exit with code 2."""
        sys.stderr.write(f"error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def examples(*lines: str, note: str = "") -> str:
    """An epilog: ``examples:`` followed by the indented command lines, then ``note``."""
    head = "example:" if len(lines) == 1 else "examples:"
    return "\n".join([head, *(f"  {line}" for line in lines), *([note] if note else [])])


def add_command(
    subparsers: Any,
    name: str,
    help: str,
    parents: Sequence[argparse.ArgumentParser] = (),
    epilog: str | None = None,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """Add one subcommand parser (its epilog's examples keep their line breaks).

    Args:
        subparsers: the object ``add_subparsers`` returned.
        name: the subcommand.
        help: one line for ``harness --help``; also the description unless one is given.
        parents: parent parsers with the shared options it takes.
        epilog: examples and notes printed after the options.
        description: a longer text printed before the options.

    Returns:
        The subcommand's parser.
    """
    return subparsers.add_parser(
        name,
        help=help,
        description=description or help,
        parents=list(parents),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


# --- argument types (their errors become argparse's one-line usage error) ----------------------


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects an integer, got '{text}'") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low} (got {value})")
        return value

    return parse


def float_at_least(low: float) -> Callable[[str], float]:
    """An argparse ``type`` accepting numbers >= ``low``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects a number, got '{text}'") from None
        if not value >= low:  # also rejects nan
            raise argparse.ArgumentTypeError(f"must be >= {low:g} (got {text})")
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


# --- shared options, as parent parsers ----------------------------------------------------------


def _option(*flags: str, **kwargs: Any) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(*flags, **kwargs)
    return parent


def methods_option(note: str = "") -> argparse.ArgumentParser:
    """``--methods``: comma-separated method names or globs, or ``all`` (the default)."""
    return _option(
        "--methods",
        default="all",
        metavar="METHOD[,METHOD...]",
        help="comma-separated method names or globs, or 'all' (default: %(default)s; "
        "see 'harness list methods')" + note,
    )


def tasks_option(default: str | None = "all", note: str = "") -> argparse.ArgumentParser:
    """``--tasks``: comma-separated task names or globs, or ``all``."""
    shown = "%(default)s" if default else "all tasks"
    return _option(
        "--tasks",
        default=default,
        metavar="TASK[,TASK...]",
        help=f"comma-separated task names or globs, or 'all' (default: {shown}; "
        "see 'harness list tasks')" + note,
    )


def task_option(help: str) -> argparse.ArgumentParser:
    """``--task``: one task name (no default: no task is special)."""
    return _option("--task", default=None, metavar="TASK", help=help)


def preset_option(
    default: str | None = "smoke", help: str | None = None
) -> argparse.ArgumentParser:
    """``--preset``: one of the presets."""
    return _option(
        "--preset",
        default=default,
        choices=PRESETS,
        help=help or "sizes and training budget of every run (default: %(default)s)",
    )


def set_option(scope: str = "") -> argparse.ArgumentParser:
    """``--set KEY=VALUE`` (repeatable): config overrides; ``scope`` prefixes the help."""
    return _option(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help=f"{scope}override a config field, as section.field or a bare field when unambiguous "
        "(e.g. train.lr=0.01, hidden_size=64); repeatable; a key no selected method or task "
        "has is an error",
    )


def data_dir_option(scope: str = "") -> argparse.ArgumentParser:
    """``--data-dir``: the dataset root; ``scope`` prefixes the help."""
    return _option(
        "--data-dir",
        default=None,
        metavar="DIR",
        help=f"{scope}dataset root (default: $HARNESS_DATA_DIR, else the user cache directory)",
    )


def device_option(default: str, help: str) -> argparse.ArgumentParser:
    """``--device cpu|cuda|auto``."""
    return _option("--device", default=default, choices=DEVICES, help=help)


def threads_option(help: str) -> argparse.ArgumentParser:
    """``--threads N``: torch CPU threads (default 1; 0 leaves torch's default)."""
    return _option("--threads", type=int_at_least(0), default=1, metavar="N", help=help)


# --- helpers of the commands ------------------------------------------------------------------


def parse_seeds(spec: str) -> list[int]:
    """Seeds from ``"0-4"``, ``"0,2,5"`` or ``"3"`` (repeats dropped, order kept).

    Raises:
        ConfigError: anything else, or an empty or descending range.
    """
    seeds: list[int] = []
    try:
        for part in spec.split(","):
            part = part.strip()
            if "-" in part[1:]:
                a, b = part.split("-", 1) if not part.startswith("-") else (part, "")
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                seeds += range(lo, hi + 1)
            elif part:
                seeds.append(int(part))
    except ValueError:
        raise ConfigError(f"--seeds expects e.g. 0-4 or 0,1,2; got '{spec}'") from None
    if not seeds:
        raise ConfigError(f"--seeds expects e.g. 0-4 or 0,1,2; got '{spec}'")
    return list(dict.fromkeys(seeds))


def require_task(task: str | None, command: str) -> str:
    """``task``, or a ConfigError naming the registered tasks when it was not given."""
    if task:
        return task
    from harness.registry import TASKS

    raise ConfigError(f"{command} needs --task TASK; tasks: {', '.join(TASKS.names())}")


def write_report(path: Path, text: str) -> None:
    """Write a generated file (creating its folder); an OSError becomes one HarnessError line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as e:
        raise HarnessError(f"cannot write {path}: {e.strerror or e}") from None


def console() -> Any:
    """A rich console on stderr (progress and tables; stdout keeps the machine-readable part)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)
