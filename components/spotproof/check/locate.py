"""Which line of a manifest a finding is about.

Every check says which key it judges (``Violation.key_path``: a policy rule through its
:class:`~spotproof.policy.Problem`, a check of the plan's from the workload it judges, a
schema error from the path its validator names): the finding is at that key's line, or
its nearest ancestor's where the key is not written, whatever its message says. A
finding about a whole resource (no key path) is at the object's first line.
"""

from __future__ import annotations

from spotproof.check.documents import Document
from spotproof.policy import Violation


def line_of(document: Document, violation: Violation) -> int:
    """The line of ``document`` that ``violation`` is about."""
    if violation.key_path is None:
        return document.line
    return document.line_of(violation.key_path)
