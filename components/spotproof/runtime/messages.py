"""Errors as the one line a person reads in a pod's log: the first line, secrets out.

A URL may carry credentials in its user-info (``postgresql://user:password@host/db``,
``s3://KEY:SECRET@bucket``) or its query (an Azure SAS token's ``sig=``, a connection
string's ``AccountKey=``), and an SDK's error often repeats the URL it was given. Every
line the runtime prints about a URL or an SDK error goes through :func:`redacted`.
"""

from __future__ import annotations

import re

_USER_INFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]+@")
_SECRET_FIELDS = re.compile(
    r"(?i)(?P<name>\b(?:sig|AccountKey|SharedAccessSignature|SharedAccessKey|password|"
    r"passwd|secret|token|X-Amz-Signature|X-Amz-Credential|X-Goog-Signature))="
    r"[^&;\s'\"]+"
)
HIDDEN = "***"
MAX_LINE = 300


def redacted(text: str) -> str:
    """``text`` with URL user-info and secret-bearing query or connection-string fields
    replaced by ``***``."""
    text = _USER_INFO.sub(lambda m: f"{m['scheme']}{HIDDEN}@", text)
    return _SECRET_FIELDS.sub(lambda m: f"{m['name']}={HIDDEN}", text)


def first_line(error: BaseException) -> str:
    """The error's type and the first line of its message, at most :data:`MAX_LINE`
    characters, redacted."""
    lines = str(error).strip().splitlines()
    return redacted(f"{type(error).__name__}: {lines[0] if lines else ''}"[:MAX_LINE])
