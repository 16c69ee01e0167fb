"""A gang's memory tier as the platform would treat it: does a restart find it, and does
the pod have room for it?

A trainer with ``MEMORY_TIER_DIR`` keeps its periodic saves, and replicas of one peer's, in
a directory on its node (``runtime.checkpointer.tiers``); only every ``PERSIST_EVERY``-th
save reaches the bucket. Three checks, on every workload whose container sets it, whoever
wrote the object:

- ``memory-tier-restart``: the tier is worth its memory only if a restart finds it. A
  JobSet restarts by ``Recreate`` unless told otherwise, which deletes every child Job and
  pod, and every pod's ``emptyDir`` with it (``catalog.jobset.RECREATE``): each restart
  starts with empty memory, and a kill without notice loses the saves that never reached
  the bucket. Only ``InPlaceRestart`` keeps the surviving pods
  (``catalog.jobset.KEEPS_PODS``; the JobSet schema check refuses it where the chart cannot
  turn its gate on), or a reclaim the JobSet never sees: a replicated Job whose
  ``podFailurePolicy`` ignores ``DisruptionTarget`` replaces the reclaimed pod alone
  (``catalog.kubernetes_job.IGNORE``, ``REPLACED_PER_INDEX``) and does not fail, so the
  JobSet does nothing (``catalog.jobset.ACTS_ON_FAILED_JOBS_ONLY``) and every other pod
  keeps its tier (``TrainingJob(recovery=GangRecovery.REPLACE_RANK)``: a worker's reclaim
  replaces its pod alone, the leader's restarts the gang). A directory on no volume is the
  container's own filesystem, lost even with the pod kept.
- ``memory-tier-room``: a memory-backed ``emptyDir`` is a tmpfs, and "files you write count
  against the memory limit of the container that wrote them"
  (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir). The trainer writes both
  its own saves and, through its replica server (a thread of the same process,
  ``runtime.storage.peer``), its peer's. Without a ``sizeLimit`` the volume is "sized to
  node allocatable memory" (same page) and may use "up to that pod's memory limit"
  (https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#memory-backed-emptydir),
  so a full tier gets the trainer OOM-killed rather than a save refused. With one, it must
  hold :data:`TIER_COPIES` of the state the pod states, and the container's memory limit
  must hold it on top of the trainer's own host copy of that state (the capture a save is
  written from, ``runtime.checkpointer.async_save``).
- ``memory-tier-peers``: a rank announces its replica server at ``POD_IP`` and never holds a
  replica on its own node, by ``NODE_NAME`` (``runtime.settings``); unset, peers are sent to
  127.0.0.1 and every rank counts as a node of its own. Each comes from the downward API,
  ``status.podIP`` and ``spec.nodeName``
  (https://kubernetes.io/docs/concepts/workloads/pods/downward-api/#downwardapi-fieldRef).
- ``memory-tier-secret``: the replica server takes only requests signed with the gang's
  secret, read from the file ``REPLICA_SECRET_FILE`` names (``runtime.storage.replica_auth``),
  and a trainer with a tier and no such file refuses to start. The file must be on a
  volume of a Secret (``secret``, or a ``projected`` volume with a ``secret`` source):
  anywhere else it is the image's, the same for every run and for whoever pulls it.

Who may reach the replica port at all is ``policy.network_policies``' rule
``memory-tier-network``: it needs the namespace's NetworkPolicies.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.catalog import jobset, kubernetes_job
from spotproof.plan.model import Workload
from spotproof.policy import Violation
from spotproof.runtime import settings
from spotproof.scheduling import quantity
from spotproof.scheduling.run_profile import TIER_COPIES, RunProfile

RESTART_POLICY = "memory-tier-restart"
ROOM_POLICY = "memory-tier-room"
PEERS_POLICY = "memory-tier-peers"
SECRET_POLICY = "memory-tier-secret"
DOWNWARD = {settings.POD_IP.name: "status.podIP", settings.NODE_NAME.name: "spec.nodeName"}
MIB = 1 << 20


def check(workload: Workload) -> list[Violation]:
    """Every problem of ``workload``'s memory tiers, one violation each, at the container's
    resources (its memory is what a tier holds); a tier's room, judged on its volume, at
    the pod spec that holds the volumes."""
    return [
        Violation(
            policy,
            workload.resource,
            f"{workload.label}: {problem}",
            workload.key_path()
            if policy == ROOM_POLICY
            else workload.container_key_path(container, "resources.limits"),
        )
        for policy, container, problem in problems(workload)
    ]


def problems(workload: Workload) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    """``(policy, container, problem)`` for each container of ``workload`` that keeps a
    memory tier."""
    for container in workload.pod_spec.get("containers") or []:
        env = {str(v.get("name")): v for v in container.get("env") or []}
        tier = env.get(settings.MEMORY_TIER_DIR.name)
        if tier is None:
            continue
        name = str(container.get("name"))
        strategy = _restart_strategy(workload)
        if (
            strategy is not None
            and strategy not in jobset.KEEPS_PODS
            and not replaces_reclaimed_pods_alone(workload.spec)
        ):
            lost = (
                f"container {name} keeps a memory tier ({settings.MEMORY_TIER_DIR.name}) but the "
                f"JobSet restarts by {strategy}, which deletes every pod and its memory: every "
                "restart finds the tier empty, and a kill without notice loses the saves that "
                f"never reached the bucket; fix: unset {settings.MEMORY_TIER_DIR.name} "
                f"({jobset.IN_PLACE_RESTART_REFUSED})"
            )
            yield RESTART_POLICY, container, lost
        if workload.kind == jobset.KIND or workload.pods > 1:
            yield from ((PEERS_POLICY, container, problem) for problem in _peers(name, env))
        secret = _secret(workload.pod_spec, container, env.get(settings.REPLICA_SECRET_FILE.name))
        if secret is not None:
            yield SECRET_POLICY, container, f"container {name} {secret}"
        directory = tier.get("value")
        if not isinstance(directory, str):
            continue  # set through valueFrom: no path the plan can follow
        volume = _volume_under(workload.pod_spec, container, directory)
        if volume is None:
            nowhere = (
                f"container {name} keeps its memory tier at {directory}, on no volume: the "
                "container's own filesystem is lost whenever it restarts; fix: mount an "
                "emptyDir with medium Memory there"
            )
            yield RESTART_POLICY, container, nowhere
            continue
        empty_dir = volume.get("emptyDir")
        if isinstance(empty_dir, Mapping) and empty_dir.get("medium") == "Memory":
            state = RunProfile.of(workload.pod_annotations, container.get("env") or []).state_mib
            for problem in _room(name, volume, empty_dir, container, state):
                yield ROOM_POLICY, container, problem


def _restart_strategy(workload: Workload) -> str | None:
    """How the workload's controller restarts it, where that decides what its pods keep."""
    if workload.kind != jobset.KIND:
        return None
    policy = workload.spec.get("failurePolicy") or {}
    return str(policy.get("restartStrategy") or jobset.RECREATE)


def replaces_reclaimed_pods_alone(spec: Mapping[str, Any]) -> bool:
    """Whether some replicated Job of a JobSet ``spec`` replaces a pod reclaimed with
    ``DisruptionTarget`` itself, uncounted, so the JobSet restarts nothing."""
    disrupted = {"type": "DisruptionTarget", "status": "True"}
    for replicated in spec.get("replicatedJobs") or []:
        job = (replicated.get("template") or {}).get("spec") or {}
        for rule in (job.get("podFailurePolicy") or {}).get("rules") or []:
            if disrupted in (rule.get("onPodConditions") or []):
                # The first rule on the condition decides the reclaimed pod's fate.
                if rule.get("action") == kubernetes_job.IGNORE:
                    return True
                break
    return False


UNSET = {
    settings.POD_IP.name: "its peers would send its replicas to 127.0.0.1, their own pod",
    settings.NODE_NAME.name: (
        "every rank counts as a node of its own, so a replica may be held on the node it is "
        "meant to outlive"
    ),
}
"""What the runtime does without each of :data:`DOWNWARD` (``runtime.settings``)."""


def _peers(container: str, env: Mapping[str, Mapping[str, Any]]) -> Iterator[str]:
    for variable, field in DOWNWARD.items():
        source = ((env.get(variable) or {}).get("valueFrom") or {}).get("fieldRef") or {}
        if source.get("fieldPath") != field:
            yield (
                f"container {container} keeps a memory tier but does not set {variable} from "
                f"the downward API's {field}: {UNSET[variable]}; fix: env {variable} "
                f"valueFrom.fieldRef.fieldPath {field}"
            )


def _secret(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any], variable: Mapping[str, Any] | None
) -> str | None:
    """What is wrong with where the container reads its replica secret; None if nothing."""
    name = settings.REPLICA_SECRET_FILE.name
    fix = (
        f"fix: mount a Secret holding 32 or more random bytes (openssl rand -hex 32) and set "
        f"{name} to the path of its file"
    )
    if variable is None:
        return (
            f"keeps a memory tier but sets no {name}: the trainer refuses to start without "
            f"the gang's replica secret, which keeps everything but the gang out of its "
            f"replica server; {fix}"
        )
    path = variable.get("value")
    if not isinstance(path, str):
        return None  # set through valueFrom: no path the plan can follow
    volume = _volume_under(pod_spec, container, path)
    if volume is None or not _holds_a_secret(volume):
        return (
            f"reads its replica secret from {name}={path}, which is on no Secret volume: a "
            f"file of the image is the same for every run and for whoever pulls it; {fix}"
        )
    return None


def _holds_a_secret(volume: Mapping[str, Any]) -> bool:
    if volume.get("secret") is not None:
        return True
    sources = (volume.get("projected") or {}).get("sources") or []
    return any(isinstance(s, Mapping) and s.get("secret") is not None for s in sources)


def _volume_under(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any], directory: str
) -> Mapping[str, Any] | None:
    """The volume whose mount holds ``directory`` (the deepest mount that contains it)."""
    path = posixpath.normpath(directory)
    holding = [
        mount
        for mount in container.get("volumeMounts") or []
        if isinstance(mount.get("mountPath"), str)
        and _contains(posixpath.normpath(mount["mountPath"]), path)
    ]
    if not holding:
        return None
    mount = max(holding, key=lambda m: len(posixpath.normpath(m["mountPath"])))
    volumes = {v.get("name"): v for v in pod_spec.get("volumes") or []}
    return volumes.get(mount.get("name"))


def _contains(mount: str, path: str) -> bool:
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def _room(
    container: str,
    volume: Mapping[str, Any],
    empty_dir: Mapping[str, Any],
    spec: Mapping[str, Any],
    state_mib: float | None,
) -> Iterator[str]:
    where = f"container {container}'s memory tier (emptyDir {volume.get('name')}, medium Memory)"
    size = _mib(empty_dir.get("sizeLimit"))
    if size is None:
        if "sizeLimit" not in empty_dir:  # else no quantity: the schema check reports it
            least = f" of at least {_needed(state_mib):.0f}Mi" if state_mib else ""
            yield (
                f"{where} has no sizeLimit: it may grow to the container's whole memory limit "
                f"and get the trainer OOM-killed; fix: a sizeLimit{least}"
            )
        return
    if state_mib is not None and size < _needed(state_mib):
        yield (
            f"{where} has a sizeLimit of {size:.0f}Mi, less than the "
            f"{_needed(state_mib):.0f}Mi it holds ({TIER_COPIES} copies of the {state_mib:g} "
            "MiB of state the pod states: its own saves and its peer's replicas); fix: raise "
            "the sizeLimit"
        )
    limit = _mib(((spec.get("resources") or {}).get("limits") or {}).get("memory"))
    own = state_mib or 0.0
    if limit is not None and limit < size + own:
        trainer = f" and the trainer's {own:g} MiB host copy of its state" if own else ""
        yield (
            f"{where}: its files count against the container's memory limit, and "
            f"{limit:.0f}Mi does not hold its sizeLimit of {size:.0f}Mi{trainer}; fix: a "
            f"memory limit of at least {size + own:.0f}Mi plus what the trainer needs besides"
        )


def _needed(state_mib: float) -> float:
    return TIER_COPIES * state_mib


def _mib(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return quantity.parse(value) / MIB
    except ValueError:
        return None  # the schema check reports it
