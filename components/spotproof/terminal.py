"""Colour on a terminal, plain text everywhere else.

Colour goes to a standard output that is a terminal, and never when ``NO_COLOR`` is set
to a non-empty value (https://no-color.org) or ``TERM`` is ``dumb``: piped into a file, a CI log
or another program, every line stays plain. Only whole lines are coloured, by what they
say: a passing verdict green, a failing one and each finding red, a warning or a skipped
check yellow.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TextIO

GREEN, RED, YELLOW, BOLD = "32", "31", "33", "1"
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(0 violations|0 findings|PASSED)"), GREEN),
    (re.compile(r"^(\d+ violation|\d+ finding|FAILED|  \[|.*: \[[a-z0-9-]+\] )"), RED),
    (re.compile(r"^(warning|skipped|note): "), YELLOW),
    (re.compile(r"^==> "), BOLD),
)


def colour_wanted(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def paint(text: str, *, enabled: bool | None = None) -> str:
    """``text`` with each line coloured by what it says, where colour is wanted."""
    if not (colour_wanted() if enabled is None else enabled):
        return text
    return "\n".join(_line(line) for line in text.split("\n"))


def _line(line: str) -> str:
    for pattern, style in _RULES:
        if pattern.match(line):
            return f"\033[{style}m{line}\033[0m"
    return line
