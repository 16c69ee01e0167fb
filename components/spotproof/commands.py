"""What every ``spotproof`` command shares with the CI systems that run it.

Exit statuses, which CI relies on: ``EXIT_OK`` when every check passes, ``EXIT_FAILED``
when one fails (a policy, the scheduling check, different digests), ``EXIT_BAD_INPUT``
on bad input, always reported as one line on stderr and never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

T = TypeVar("T")

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

REPORT_FORMATS = ("text", "json", "markdown", "github")
"""The forms ``plan`` and ``check`` report in: text (terminal), json (the report on stdout),
markdown (a PR comment or job summary), github (annotations on the lines at fault)."""


def written(command: str, path: Path, action: Callable[[], T]) -> T:
    """``action()``, which writes ``path`` (its folder is made first); a failure is one line
    on stderr naming the file, and exit 2."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return action()
    except OSError as error:
        blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        why = f"{blocking} is a file, not a folder" if blocking else error.strerror
        print(f"spotproof {command}: cannot write {path}: {why}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None


# Argument types every command's parser shares: a bad value is argparse's one line.


def whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def count_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = whole(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range; allowed: {low}..{high}")
        return value

    return parse


def one_of(allowed: tuple[int, ...]) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = whole(text)
        if value not in allowed:
            raise argparse.ArgumentTypeError(
                f"{value} is not allowed; allowed: {', '.join(map(str, allowed))}"
            )
        return value

    return parse


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.05 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{value:g} is out of range; allowed: 0.05..1")
    return value


class InstalledVersion(argparse.Action):
    """``--version``: the installed distribution's version, read only when asked, since
    importing ``importlib.metadata`` would cost every other command a fifth of a second
    (``docs/performance.md``, the plan's start-up)."""

    def __init__(self, option_strings: list[str], dest: str, **_: object) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show program's version number and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        from importlib import metadata  # noqa: PLC0415

        try:
            version = metadata.version("spotproof")
        except metadata.PackageNotFoundError:
            version = "unknown (not installed)"
        print(f"{parser.prog} {version}")
        parser.exit()
