"""Which line of a manifest a finding is about.

A finding names a rule and says what is wrong in words; the line is that of the key the
rule judges, looked up in the object's pod template where the rule is about pods.
"""

from __future__ import annotations

import re
from typing import Any

from spotproof.check.documents import Document
from spotproof.scheduling.pod_templates import pod_spec_path

FIT_WORDS = (
    ("nodeSelector ", "{pod}.nodeSelector"),
    ("taint ", "{pod}.tolerations"),
    ("affinity", "{pod}.affinity"),
    ("needs ", "{pod}.containers"),
)
"""What a fit message names per pool -> the key; the one named most often is the line."""
POD_KEYS: dict[str, tuple[str, ...]] = {
    "system-off-spot": ("{pod}.tolerations", "{pod}.nodeSelector", "{pod}.affinity"),
    "priority-class-exists": ("{pod}.priorityClassName",),
    "scale-up": ("{pod}.priorityClassName", "{pod}.nodeSelector", "{pod}.affinity"),
    "preemption-path": ("{pod}.terminationGracePeriodSeconds",),
    "gang-capacity": ("{pod}.containers",),
    "pod-security": ("{pod}.securityContext", "{pod}.volumes", "{pod}.containers"),
}
"""Rule -> keys it judges (``{pod}``: the pod spec; ``{job}``: the Job spec holding it);
the first one written in the file is the line."""
OBJECT_KEYS: dict[str, tuple[str, ...]] = {
    "queue-admission": ("metadata.labels", "metadata"),
    "gang-restart": ("spec.failurePolicy", "spec.parallelism", "spec"),
    "gang-budget": ("metadata.name",),
    "pdb-valid-for-owner": ("spec.minAvailable", "spec.maxUnavailable", "spec"),
}
"""Rule -> keys of the object itself."""
MESSAGE_KEYS = (
    ("restartPolicy", "{pod}.restartPolicy"),
    ("podFailurePolicy", "{job}.podFailurePolicy"),
    ("terminationGracePeriodSeconds", "{pod}.terminationGracePeriodSeconds"),
    ("PriorityClass", "{pod}.priorityClassName"),
    ("toleration key", "{pod}.tolerations"),
    ("nodeSelector key", "{pod}.nodeSelector"),
    ("node affinity key", "{pod}.affinity"),
)
"""Words in the message of a rule that judges several keys -> the key it is about."""
_CONTAINER = re.compile(r"container ([^\s),;]+)")
_UNEXPECTED = re.compile(r"'([^']+)' was unexpected")
_ENV = re.compile(r"\(env (\S+)\)")
_LABEL = re.compile(r"label (pod-security\.kubernetes\.io/[a-z-]+)=")


def line_of(document: Document, policy: str, message: str) -> int:
    if policy == "kubernetes-schema":
        # "Kind/name: path: message", the message naming an unexpected key if that is it
        parts = message.split(": ", 2)
        if len(parts) < 3:
            return document.line
        unexpected = _UNEXPECTED.search(parts[2])
        path = f"{parts[1]}.{unexpected.group(1)}" if unexpected else parts[1]
        return document.line_of(path.removeprefix("(root)."))
    if policy in OBJECT_KEYS:
        return _first(document, OBJECT_KEYS[policy])
    label = _LABEL.search(message) if policy == "pod-security" else None
    if label:  # a namespace's label the API server refuses
        line = document.lines.get(("metadata", "labels", label.group(1)))
        return line or _first(document, ("metadata.labels",))
    part = _part(document, message)
    pod = pod_spec_path(document.obj, part)
    if policy == "pod-security":
        # The first reason decides the line.
        message = message.rsplit(": ", maxsplit=1)[-1].split("; ", maxsplit=1)[0]
        if "(volume " in message or message.startswith("hostPath volume"):
            return _first(document, (f"{pod}.volumes", pod))
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
            if policy == "pod-security":
                return _first(document, (f"{where}.securityContext", where))
            if policy in ("rendezvous-host", "sigterm-exit-zero"):
                return _first(document, (f"{where}.command", f"{where}.args", where))
            return _first(document, (f"{where}.resources.limits", f"{where}.resources"))
    if policy == "scheduling-fit":
        ranked = sorted(FIT_WORDS, key=lambda pair: -message.count(pair[0]))
        templates = tuple(key for _, key in ranked)
    else:
        templates = POD_KEYS.get(policy) or tuple(t for w, t in MESSAGE_KEYS if w in message)
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
