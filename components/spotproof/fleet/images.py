"""Container image references: which ones say exactly what will run.

A reference is ``[registry[:port]/]path[:tag][@sha256:<digest>]`` (the grammar of
distribution's ``reference`` package). Without a tag the runtime pulls ``latest``; a
``latest`` tag, like any tag, can be pushed again, so two pods of one Job may run
different code and a resumed run may not be the run that checkpointed. A tag other than
``latest`` is accepted (it is how images are usually released), a digest pins the bytes;
in production the plan advises a digest (``fleet.advice``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from spotproof.fleet.errors import SpecError

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
ALLOWED = (
    "an image with a tag other than latest (ghcr.io/acme/trainer:1.4.2) or a digest "
    "(ghcr.io/acme/trainer@sha256:<64 hex>)"
)


@dataclass(frozen=True)
class ImageReference:
    name: str
    tag: str | None
    digest: str | None

    @property
    def mutable(self) -> bool:
        """Pulls whatever ``latest`` is at the time: no tag, or ``latest``, and no digest."""
        return self.digest is None and self.tag in (None, "latest")

    @property
    def registry(self) -> str:
        """The host it is pulled from: the first path component when it names a host (has
        a ``.`` or a ``:``, or is ``localhost``), else Docker Hub, as distribution's
        ``normalize`` reads a reference."""
        first, _, rest = self.name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            return first
        return "docker.io"


def parse(reference: str) -> ImageReference | None:
    match = _REFERENCE.fullmatch(reference)
    if match is None:
        return None
    return ImageReference(match["name"], match["tag"], match["digest"])


def image_reference(key: str, raw: Any) -> str:
    """A config value naming an image that is not ``latest`` (see the module)."""
    parsed = parse(raw) if isinstance(raw, str) else None
    if parsed is None:
        raise SpecError(key, raw, "not an image reference", ALLOWED)
    if parsed.mutable:
        raise SpecError(key, raw, "pulls whatever 'latest' is when each pod starts", ALLOWED)
    return raw
