"""Pod Security admission, as the API server applies it to the pods of a namespace.

A namespace labelled ``pod-security.kubernetes.io/enforce: baseline|restricted`` refuses
every pod that breaks a check of that level. Workload objects are admitted however they
break it (enforce "is not applied to workload resources, only to the resulting pod
objects", https://kubernetes.io/docs/concepts/security/pod-security-admission/), so a Job
is created and each of its pods refused: the run never starts and nothing says so at
``pulumi up``. This package evaluates every pod template of a stack or a manifest against
the level its namespace enforces, at the version it enforces it.

Which checks run depends on that version, as upstream's do: each check of ``baseline`` and
``restricted`` knows from which minor each of its variants applies (``registry``), read
from kubernetes/pod-security-admission ``policy/check_*.go`` at each minor spotproof
supports. The version is the one ``pod-security.kubernetes.io/enforce-version`` pins,
capped at the cluster's, or the cluster's own for ``latest`` and for no label
(``versions``). The cluster's minor is the stack's ``spotproof:kubernetesVersion`` (the
version spotproof creates the cluster at, 1.33 where the stack leaves it out) or
``spotproof:existingCluster.kubernetesVersion``. Where it is not known (``spotproof check``
without ``--stack``, an existing cluster whose stack does not state it, a CrossGuard
preview, which sees resources and not the stack's config), the pod is judged on every minor
a stack may run and reported with the minors that refuse it: admitting it on the strength
of one minor would guess the cluster's. A GKE cluster in its release channel has its
control plane upgraded past that minor in time, and ``latest`` follows it: the stack's
version is then the one to raise.

Not followed: cluster-wide defaults and exemptions an admin may configure (a namespace
without the label is left alone: upstream's default is ``privileged``, and neither GKE, EKS
nor AKS documents another), an API server emulating an older minor, and alpha feature
gates (taken as off, as managed control planes leave them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.policy.base import PlannedResource, Problem, StackRule
from spotproof.policy.pod_security import baseline, registry, restricted, versions
from spotproof.scheduling import pod_templates

LABEL_PREFIX = "pod-security.kubernetes.io/"
ENFORCE_LABEL = f"{LABEL_PREFIX}enforce"
VERSION_LABEL = f"{ENFORCE_LABEL}-version"
MODES = ("enforce", "audit", "warn")
"""Each mode's level and version labels must parse, or the namespace is refused."""
LEVELS = ("privileged", "baseline", "restricted")
JUDGED = ("baseline", "restricted")
"""The levels that refuse anything: ``privileged`` admits every pod."""
NAMESPACE = "kubernetes:core/v1:Namespace"
DAEMON_SET = "DaemonSet"
CHECKS = (*baseline.CHECKS, *restricted.CHECKS)
UNSTATED = "the cluster's minor is not stated, so every minor a stack may run was judged"


@dataclass(frozen=True)
class Enforced:
    """What a namespace's labels enforce."""

    level: str
    pinned: int | None
    """The minor ``enforce-version`` pins; None for ``latest``."""
    label: str
    """As the API server names it in a refusal: ``restricted:latest``."""


def refused(
    level: str,
    pod: Mapping[str, Any],
    annotations: Mapping[str, str],
    version: int = versions.SUPPORTED[-1],
    server: int | None = None,
) -> list[Problem]:
    """Why a namespace enforcing ``level`` at minor ``version`` refuses ``pod`` (a pod
    spec), on an API server at minor ``server`` (default: ``version``); empty if admitted."""
    if level not in JUDGED:
        return []
    request = registry.Request(pod, annotations, version if server is None else server)
    return [
        finding
        for variant in registry.in_force(CHECKS, level, version)
        for finding in variant.check(request)
    ]


def _templates(resource: PlannedResource) -> list[pod_templates.PodTemplate]:
    """A workload's pod templates, and a DaemonSet's (whose pods admission judges too)."""
    obj = resource.inputs
    if obj.get("kind") == DAEMON_SET and str(obj.get("apiVersion")) == "apps/v1":
        template = (obj.get("spec") or {}).get("template") or {}
        if template.get("spec") is not None:
            return [
                pod_templates.PodTemplate(None, template.get("metadata") or {}, template["spec"], 1)
            ]
        return []
    return pod_templates.pod_templates(obj)


def _label_errors(labels: Mapping[str, Any]) -> Iterator[Problem]:
    """Each Pod Security label the API server refuses the namespace for
    (``ValidateNamespace``), one line each, at the label."""
    for mode in MODES:
        level_key, version_key = f"{LABEL_PREFIX}{mode}", f"{LABEL_PREFIX}{mode}-version"
        if level_key in labels and labels[level_key] not in LEVELS:
            yield Problem(
                f'label {level_key}="{labels[level_key]}" is not a Pod Security level, so the '
                f"API server refuses the namespace; allowed: {', '.join(LEVELS)}",
                _label_path(level_key),
            )
        if version_key in labels:
            try:
                versions.pinned(str(labels[version_key]))
            except versions.VersionLabelError as error:
                yield Problem(
                    f'label {version_key}="{labels[version_key]}" is not a Pod Security '
                    f"version, so the API server refuses the namespace; {error}",
                    _label_path(version_key),
                )


def _label_path(key: str) -> str:
    """The key path of a label, quoted: its key holds dots."""
    return f'metadata.labels["{key}"]'


def enforced(
    resources: list[PlannedResource],
) -> tuple[dict[str, Enforced | None], list[tuple[str, str]]]:
    """Namespace -> what its labels enforce, for the namespaces declared (None for one the
    API server refuses for its labels, whose pods then have nowhere to be judged), and a
    finding for each label refused."""
    found: dict[str, Enforced | None] = {}
    findings = []
    for namespace in (r for r in resources if r.type == NAMESPACE):
        metadata = namespace.inputs.get("metadata") or {}
        name, labels = metadata.get("name"), metadata.get("labels") or {}
        errors = list(_label_errors(labels))
        findings += [
            (namespace.name, Problem(f"Namespace {name}: {error}", error.key_path))
            for error in errors
        ]
        if not name:
            continue
        if errors:
            found[str(name)] = None
            continue
        version = str(labels.get(VERSION_LABEL, versions.LATEST))
        level = str(labels.get(ENFORCE_LABEL, "privileged"))
        found[str(name)] = Enforced(level, versions.pinned(version), f"{level}:{version}")
    return found, findings


def _runs(
    verdicts: list[tuple[int, list[Problem]]],
) -> Iterator[tuple[list[int], list[Problem]]]:
    """Consecutive minors with the same reasons, together."""
    run: list[int] = []
    for index, (minor, reasons) in enumerate(verdicts):
        run.append(minor)
        if index + 1 == len(verdicts) or verdicts[index + 1][1] != reasons:
            yield run, reasons
            run = []


def pods_admitted(
    resources: list[PlannedResource], kubernetes_version: str | None = None
) -> Iterator[tuple[str, str]]:
    """Every pod template its namespace refuses, on a cluster at ``kubernetes_version``
    (``1.33``), or on any minor a stack may run where that is None or unreadable."""
    minor = versions.cluster_minor(kubernetes_version) if kubernetes_version else None
    servers = versions.SUPPORTED if minor is None else (minor,)
    namespaces, findings = enforced(resources)
    yield from findings
    for resource in resources:
        metadata = resource.inputs.get("metadata") or {}
        namespace = str(metadata.get("namespace", "default"))
        policy = namespaces.get(namespace)
        if policy is None or policy.level not in JUDGED:
            continue
        for template in _templates(resource):
            annotations = template.metadata.get("annotations") or {}
            verdicts = [
                (
                    server,
                    refused(
                        policy.level,
                        template.spec,
                        annotations,
                        versions.in_force(policy.pinned, server),
                        server,
                    ),
                )
                for server in servers
            ]
            part = f"/{template.part}" if template.part else ""
            pod_spec = pod_templates.pod_spec_path(resource.inputs, template.part)
            for minors, reasons in _runs(verdicts):
                if not reasons:
                    continue
                where = f"on Kubernetes {versions.span(minors)}"
                if minor is None:
                    where += f" ({UNSTATED})"
                # Reported at what the first reason is about.
                yield (
                    resource.name,
                    Problem(
                        f"{resource.inputs.get('kind')} {namespace}/{metadata.get('name')}"
                        f'{part}: namespace {namespace} enforces Pod Security "{policy.label}", '
                        f"which {where} refuses every pod of it: {'; '.join(reasons)}",
                        reasons[0].under(pod_spec).key_path,
                    ),
                )


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "pod-security",
        "Every pod passes the Pod Security Standard its namespace enforces, at the version "
        "it enforces.",
        pods_admitted,
        at_version=pods_admitted,
    ),
)
