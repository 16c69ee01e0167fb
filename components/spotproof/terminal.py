"""Colour on a terminal, plain text everywhere else; text from elsewhere made printable.

Colour goes to a standard output that is a terminal, and never when ``NO_COLOR`` is set
to a non-empty value (https://no-color.org) or ``TERM`` is ``dumb``: piped into a file, a CI log
or another program, every line stays plain. Only whole lines are coloured, by what they
say: a passing verdict green, a failing one and each finding red, a warning or a skipped
check yellow.

Text a command prints but did not write (a cluster's messages and names, an error that
repeats them) goes through :func:`printable`: a control character there would be obeyed
by the terminal (``ESC [`` sequences recolour, move the cursor, retitle the window; a
carriage return or a newline overwrites or forges a line), and a bidirectional override
shows characters in another order than they are. Each is shown escaped (``\x1b``,
``\u202e``) instead.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TextIO

GREEN, RED, YELLOW, BOLD = "32", "31", "33", "1"
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""The bidirectional marks, embeddings, overrides and isolates."""
_UNPRINTABLE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
"""C0 and C1 controls, DEL, and :data:`_BIDI`."""
_UNPRINTABLE_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI}]")
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


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with every control character escaped (``\\x1b``); ``lines`` keeps its
    newlines, for text whose lines this program made."""
    pattern = _UNPRINTABLE_BUT_NEWLINE if lines else _UNPRINTABLE
    return pattern.sub(_escaped, text)


def _escaped(found: re.Match[str]) -> str:
    code = ord(found[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
