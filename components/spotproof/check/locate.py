"""Which line of a manifest a finding is about.

A rule that knows the key it judges says so (``Violation.key_path``): the finding is at
that key's line, or its nearest ancestor's where the key is not written, whatever its
message says. A schema error is at the path its validator names. The plan's own checks
(``spotproof.plan.simulation``: the scheduling fit, scale-up, the pitfalls) do not give a
key path yet; until they do, their findings are placed by the keys each one judges and
the words of its message (``_BY_RULE``).
"""

from __future__ import annotations

import re
from typing import Any

from spotproof.check.documents import Document
from spotproof.plan.recording.manifests import SCHEMA_POLICY
from spotproof.policy import Violation
from spotproof.scheduling.pod_templates import pod_spec_path

_UNEXPECTED = re.compile(r"'([^']+)' was unexpected")
"""How the schema validator names a key the schema does not have."""


def line_of(document: Document, violation: Violation) -> int:
    """The line of ``document`` that ``violation`` is about."""
    if violation.key_path is not None:
        return document.line_of(violation.key_path)
    if violation.policy == SCHEMA_POLICY:
        return _schema_line(document, violation.message)
    return _by_rule(document, violation.policy, violation.message)


def _schema_line(document: Document, message: str) -> int:
    """A schema error says ``Kind/name: path: what``, naming an unexpected key in ``what``
    where that is the error."""
    parts = message.split(": ", 2)
    if len(parts) < 3:
        return document.line
    unexpected = _UNEXPECTED.search(parts[2])
    path = f"{parts[1]}.{unexpected.group(1)}" if unexpected else parts[1]
    return document.line_of(path.removeprefix("(root)."))


# --- the plan's own checks, until they give a key path --------------------------------------

_FIT_WORDS = (
    ("nodeSelector ", "{pod}.nodeSelector"),
    ("taint ", "{pod}.tolerations"),
    ("affinity", "{pod}.affinity"),
    ("needs ", "{pod}.containers"),
)
"""What a fit message names per pool -> the key; the one named most often is the line."""
_POD_KEYS: dict[str, tuple[str, ...]] = {
    "system-off-spot": ("{pod}.tolerations", "{pod}.nodeSelector", "{pod}.affinity"),
    "priority-class-exists": ("{pod}.priorityClassName",),
    "scale-up": ("{pod}.priorityClassName", "{pod}.nodeSelector", "{pod}.affinity"),
    "preemption-path": ("{pod}.terminationGracePeriodSeconds",),
    "gang-capacity": ("{pod}.containers",),
}
"""Check -> keys it judges (``{pod}``: the pod spec; ``{job}``: the Job spec holding it);
the first one written in the file is the line."""
_OBJECT_KEYS: dict[str, tuple[str, ...]] = {
    "queue-admission": ("metadata.labels", "metadata"),
    "gang-restart": ("spec.failurePolicy", "spec.parallelism", "spec"),
    "gang-budget": ("metadata.name",),
}
"""Check -> keys of the object itself."""
_MESSAGE_KEYS = (
    ("restartPolicy", "{pod}.restartPolicy"),
    ("podFailurePolicy", "{job}.podFailurePolicy"),
    ("terminationGracePeriodSeconds", "{pod}.terminationGracePeriodSeconds"),
    ("PriorityClass", "{pod}.priorityClassName"),
    ("toleration key", "{pod}.tolerations"),
    ("nodeSelector key", "{pod}.nodeSelector"),
    ("node affinity key", "{pod}.affinity"),
)
"""Words in the message of a check that judges several keys -> the key it is about."""
_CONTAINER = re.compile(r"container ([^\s),;]+)")
_ENV = re.compile(r"\(env (\S+)\)")
_COMMAND_CHECKS = ("rendezvous-host", "sigterm-exit-zero")
"""Checks of what a container runs: at its command."""


def _by_rule(document: Document, policy: str, message: str) -> int:
    if policy in _OBJECT_KEYS:
        return _first(document, _OBJECT_KEYS[policy])
    pod = pod_spec_path(document.obj, _part(document, message))
    container = _CONTAINER.search(message)
    if container:
        names = [_name(c) for c in _items(document.value(f"{pod}.containers"))]
        if container.group(1) in names:
            where = f"{pod}.containers[{names.index(container.group(1))}]"
            env = _ENV.search(message)
            if env:
                names = [_name(v) for v in _items(document.value(f"{where}.env"))]
                index = names.index(env.group(1)) if env.group(1) in names else 0
                return document.line_of(f"{where}.env[{index}]")
            if "(volumeMount " in message:
                return document.line_of(f"{where}.volumeMounts")
            if policy in _COMMAND_CHECKS:
                return _first(document, (f"{where}.command", f"{where}.args", where))
            return _first(document, (f"{where}.resources.limits", f"{where}.resources"))
    if policy == "scheduling-fit":
        ranked = sorted(_FIT_WORDS, key=lambda pair: -message.count(pair[0]))
        templates = tuple(key for _, key in ranked)
    else:
        templates = _POD_KEYS.get(policy) or tuple(t for w, t in _MESSAGE_KEYS if w in message)
    job = pod.removesuffix(".template.spec")
    return _first(document, (*(t.format(pod=pod, job=job) for t in templates), pod))


def _first(document: Document, paths: tuple[str, ...]) -> int:
    return next((document.line_of(p) for p in paths if document.written(p)), document.line)


def _part(document: Document, message: str) -> str | None:
    metadata = document.obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    match = re.search(rf"/{re.escape(str(name))}/([a-z0-9-]+)", message)
    return match.group(1) if match else None


def _items(value: Any) -> list[Any]:
    """A list as written; anything else (the schema finding says so) as empty."""
    return value if isinstance(value, list) else []


def _name(item: Any) -> Any:
    return item.get("name") if isinstance(item, dict) else None
