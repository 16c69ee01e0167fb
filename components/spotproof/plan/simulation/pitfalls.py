"""Pitfalls a workload falls into whatever stack it runs on (the field guide's checklist).

Checked for every workload of a plan, and so for every manifest ``spotproof check`` reads:

- ``priority-class-exists``: a pod naming a PriorityClass that does not exist is refused
  at admission (https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/:
  the priority admission controller resolves ``priorityClassName``, and a pod whose class
  is not found is rejected); the stack's own classes and the two built-in ones exist;
- ``gpu-limit``: a container that requests ``nvidia.com/gpu`` must also limit it, to the
  same amount: extended resources cannot be overcommitted, and the API server refuses a
  pod otherwise (https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#extended-resources);
- ``checkpoint-on-ephemeral-storage``: on capacity that is reclaimed (spot) or expires
  (flex-start), checkpoints written to an ``emptyDir``, a ``hostPath`` or the container's
  own filesystem vanish with the node (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir:
  "When a Pod is removed from a node for any reason, the data in the emptyDir is deleted
  permanently"). A checkpoint location is a variable whose name has ``CHECKPOINT`` or
  ``CKPT`` in it and whose value is a local path, or a mount path with either word;
- ``gang-restart``: the pods of one multi-node run wait for each other in their collective,
  so a reclaim of one must restart all of them, without spending the failure budget. A
  ``batch/v1`` Job replaces only the lost pod (the others hang until their collective
  times out); a JobSet restarts the gang through its ``failurePolicy``, whose default
  (no policy: ``maxRestarts`` 0) fails the whole run at the first reclaim
  (kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``);
- ``gang-budget``: a voluntary disruption (scale-down, consolidation, a node upgrade) that
  evicts one pod of a gang restarts all of it, so a budget must allow no eviction of any
  of its pods (``minAvailable`` equal to its pods), as the field guide's pitfall 7 asks.
  Not where a spot pool's reclaim drain would wait on that budget until the VM is gone
  (``CloudProfile.reclaim_waits_on_budgets``: AKS; ``plan.simulation.preemption`` reports a budget
  there instead);
- ``rendezvous-host``: torchrun's ``c10d`` rendezvous on a name only cluster DNS resolves
  leaves every rank waiting for a store nobody hosts while the record is late, and the
  gang exits 1 (``runtime.launcher``, "The rendezvous").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from spotproof import scheduling
from spotproof.catalog import jobset, profile
from spotproof.plan.model import Pool
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation.outcomes import Outcome
from spotproof.plan.simulation.scale_up import BUILTIN_PRIORITIES, PRIORITY_CLASS
from spotproof.policy import Problem, Violation
from spotproof.policy.kubernetes import cloud_of
from spotproof.runtime import launcher
from spotproof.scheduling import fit, pod_templates

PRIORITY_CLASS_POLICY = "priority-class-exists"
GPU_LIMIT_POLICY = "gpu-limit"
EPHEMERAL_CHECKPOINT_POLICY = "checkpoint-on-ephemeral-storage"
GANG_RESTART_POLICY = "gang-restart"
GANG_BUDGET_POLICY = "gang-budget"
RENDEZVOUS_POLICY = "rendezvous-host"
GANG_KINDS = frozenset({"Job", jobset.KIND})
_CHECKPOINT_WORDS = ("CHECKPOINT", "CKPT")
_EPHEMERAL_SOURCES = ("emptyDir", "hostPath")


def check(
    recording: Recording, found: list[Outcome], pools: Sequence[Pool] = ()
) -> list[Violation]:
    """Every pitfall of every workload in ``found``. Each finding stands on its own: a
    workload that fits no pool (``scheduling-fit`` says why) is still judged on the pools
    of the classes it targets, where it is meant to run once its fit is mended."""
    objects = {r.name: r.inputs for r in recording.kubernetes_objects()}
    classes = {*BUILTIN_PRIORITIES} | {
        (r.inputs.get("metadata") or {}).get("name") for r in recording.of_type(PRIORITY_CLASS)
    }
    # Where a spot pool's reclaim drain would wait on a gang's budget, none is asked for.
    cloud = cloud_of(recording.resources)
    budgets_wanted = cloud is None or not profile(cloud).reclaim_waits_on_budgets
    violations = []
    for outcome in found:
        workload = outcome.workload
        wanted = workload.pod_spec.get("priorityClassName")
        if wanted and wanted not in classes and workload.kind != "Chart":
            existing = ", ".join(sorted(c for c in classes if c))
            violations.append(
                Violation(
                    PRIORITY_CLASS_POLICY,
                    workload.resource,
                    f"{workload.label}: PriorityClass {wanted} does not exist, so its pods are "
                    f"refused at admission (existing: {existing})",
                    workload.key_path("priorityClassName"),
                )
            )
        violations += [
            Violation(
                GPU_LIMIT_POLICY,
                workload.resource,
                f"{workload.label}: {problem}",
                workload.container_key_path(container, "resources.limits"),
            )
            for container, problem in _gpu_limits(workload.pod_spec)
        ]
        violations += [
            Violation(
                RENDEZVOUS_POLICY,
                workload.resource,
                f"{workload.label}: {problem}",
                workload.container_key_path(container, "command", "args"),
            )
            for container, problem in _rendezvous(workload.pod_spec)
        ]
        if outcome.system:
            continue
        lost_with = [p.name for p in _meant_for(outcome, pools) if p.shape.reclaimable]
        if lost_with:
            violations += [
                Violation(
                    EPHEMERAL_CHECKPOINT_POLICY,
                    workload.resource,
                    f"{workload.label}: {problem}, lost with the node when "
                    f"{', '.join(lost_with)} is reclaimed or expires; write checkpoints to "
                    "the bucket (CHECKPOINT_URL gs://, s3://, az://)",
                    workload.container_key_path(container, where),
                )
                for container, where, problem in _ephemeral_checkpoints(workload.pod_spec)
            ]
            obj = objects.get(workload.resource) or {}
            # Only a Job's or a JobSet's pods run one computation together; a Deployment's
            # replicas (batch workers) are independent, and evicting one costs only its item.
            gang = (
                workload.kind in GANG_KINDS
                and workload.pods > 1
                and fit.gpu_request(workload.pod_spec) > 0
            )
            if gang and budgets_wanted and not outcome.budgets:
                violations.append(
                    Violation(
                        GANG_BUDGET_POLICY,
                        workload.resource,
                        f"{workload.label}: no PodDisruptionBudget keeps all {workload.pods} "
                        "pods of the gang, so a voluntary eviction of one restarts them all; "
                        f"add one with minAvailable: {workload.pods} over its pods' labels",
                        workload.object_key_path("metadata.name"),
                    )
                )
            violations += [
                Violation(
                    GANG_RESTART_POLICY,
                    workload.resource,
                    f"{workload.label}: {problem}",
                    workload.object_key_path(problem.key_path),
                )
                for problem in _gang_restart(obj, workload.kind, workload.pod_spec, workload.pods)
            ]
    return violations


def _meant_for(outcome: Outcome, pools: Sequence[Pool]) -> Sequence[Pool]:
    """The pools ``outcome``'s workload fits, or where it fits none, those of the classes
    it targets (its node selector's), or any pool where it targets none."""
    if outcome.fits:
        return outcome.fits
    targets = {target.value for target in outcome.workload.targets}
    return [
        p
        for p in pools
        if not targets or p.shape.labels.get(scheduling.POOL_CLASS_LABEL) in targets
    ]


def _gpu_limits(pod_spec: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], str]]:
    """(container, problem) for each container whose GPU limit the API server refuses."""
    for container in pod_templates.containers(pod_spec):
        resources = container.get("resources") or {}
        requested = (resources.get("requests") or {}).get(scheduling.GPU_RESOURCE)
        limited = (resources.get("limits") or {}).get(scheduling.GPU_RESOURCE)
        if requested is not None and str(requested) != str(limited):
            yield (
                container,
                (
                    f"container {container.get('name')} requests {requested} "
                    f"{scheduling.GPU_RESOURCE} but limits {limited or 'none'}; the API server "
                    "refuses the pod (extended resources need limits equal to requests)"
                ),
            )


def _rendezvous(pod_spec: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], str]]:
    """(container, problem) for each container whose command races its rendezvous."""
    for container in pod_templates.containers(pod_spec):
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        host = launcher.racing_rendezvous_host(command)
        if host:
            yield (
                container,
                (
                    f"container {container.get('name')} meets at torchrun's c10d rendezvous on "
                    f"{host}, which rank 0 takes for itself only once cluster DNS resolves it "
                    "(torch _matches_machine_hostname; pytorch/elastic#165): while the record is "
                    "late no rank hosts the store and every rank exits 1; fix: the static "
                    "rendezvous (--node-rank from the completion index and --master-addr, as "
                    "TrainingJob renders it), the service's full name, or --rdzv-conf is_host=..."
                ),
            )


def _checkpoint_paths(container: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(where it was named, that key relative to the container, local path) of each
    checkpoint location of ``container``."""
    found = []
    for index, variable in enumerate(container.get("env") or []):
        name, value = str(variable.get("name", "")), str(variable.get("value") or "")
        if any(word in name.upper() for word in _CHECKPOINT_WORDS):
            path = value.removeprefix("file://")
            if path.startswith("/"):
                found.append((f"env {name}", f"env[{index}]", path))
    for mount in container.get("volumeMounts") or []:
        path = str(mount.get("mountPath", ""))
        if any(word.lower() in path.lower() for word in ("checkpoint", "ckpt")):
            found.append((f"volumeMount {mount.get('name')}", "volumeMounts", path))
    return found


def _ephemeral_checkpoints(
    pod_spec: Mapping[str, Any],
) -> Iterator[tuple[Mapping[str, Any], str, str]]:
    """(container, where it names the path, relative to it, problem) for each checkpoint
    location of a container on a filesystem that goes with the node."""
    volumes = {str(v.get("name")): v for v in pod_spec.get("volumes") or []}
    for container in pod_spec.get("containers") or []:
        mounts = sorted(
            container.get("volumeMounts") or [], key=lambda m: -len(str(m.get("mountPath", "")))
        )
        for named, where, path in _checkpoint_paths(container):
            mount = next((m for m in mounts if _under(path, str(m.get("mountPath", "")))), None)
            if mount is None:
                yield (
                    container,
                    where,
                    (
                        f"container {container.get('name')} checkpoints to {path} ({named}) on "
                        "its own filesystem"
                    ),
                )
                continue
            volume = volumes.get(str(mount.get("name"))) or {}
            source = next((s for s in _EPHEMERAL_SOURCES if s in volume), None)
            if source:
                yield (
                    container,
                    where,
                    (
                        f"container {container.get('name')} checkpoints to {path} ({named}) on "
                        f"{source} volume {mount.get('name')}"
                    ),
                )


def _under(path: str, mount: str) -> bool:
    mount = mount.rstrip("/") or "/"
    return path == mount or path.startswith(mount if mount == "/" else mount + "/")


def _gang_restart(
    obj: Mapping[str, Any], kind: str, pod_spec: Mapping[str, Any], pods: int
) -> Iterator[Problem]:
    if pods < 2 or not fit.gpu_request(pod_spec):
        return
    if kind == "Job":
        yield Problem(
            f"{pods} GPU pods of one Job: a reclaimed pod is replaced alone while its peers "
            "wait in their collective; run them as a JobSet whose failurePolicy restarts the "
            "gang (spotproof's TrainingJob(nodes=N) does)",
            "spec.parallelism",
        )
    elif kind == jobset.KIND:
        policy = (obj.get("spec") or {}).get("failurePolicy") or {}
        free = any(
            rule.get("action") == "RestartJobSetAndIgnoreMaxRestarts"
            for rule in policy.get("rules") or []
        )
        restarts = int(policy.get("maxRestarts") or 0)
        if not free and not restarts:
            yield Problem(
                "no failurePolicy restarts the gang, so the first reclaim fails the JobSet; "
                "add a rule RestartJobSetAndIgnoreMaxRestarts on PodFailurePolicy",
                "spec.failurePolicy",
            )
        elif not free:
            yield Problem(
                f"every reclaim spends one of its {restarts} maxRestarts; add a rule "
                "RestartJobSetAndIgnoreMaxRestarts on PodFailurePolicy",
                "spec.failurePolicy",
            )
