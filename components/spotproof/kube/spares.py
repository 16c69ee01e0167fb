"""Warm spare GPU nodes for a gang whose reclaimed rank is replaced alone: ``WarmSpares``.

A ``TrainingJob(recovery=GangRecovery.REPLACE_RANK)`` replaces a reclaimed worker's pod
alone, but the replacement waits for a node (minutes) and for its image (a minute or more).
A warm spare is a node already up with the trainer's image already pulled, held by a
placeholder pod that any workload aimed there preempts. This is the cluster autoscaler's
overprovisioning pattern (kubernetes/autoscaler ``cluster-autoscaler/FAQ.md``, "How can I
configure overprovisioning with Cluster Autoscaler?"): a Deployment of pause pods at a
priority below every workload's.

How a replacement takes a spare. The scheduler, finding no node for the pending
replacement, preempts lower-priority pods on a node where removing them lets it fit
("Preemption", https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/);
the placeholder's grace period is 0, so its node is free at once and the image is there.
The evicted placeholder is recreated by its Deployment and waits, Pending, for a new node:
the cluster autoscaler adds one for it because its priority is not below the expendable
cutoff (``scheduling.WARM_SPARE_PRIORITY``), and Karpenter provisions for any pod the
scheduler marked unschedulable whatever its priority (kubernetes-sigs/karpenter v1.14.1
``pkg/utils/pod/scheduling.go``, ``IsProvisionable``: no priority among its conditions). So
the spare refills itself behind the replacement.

What keeps a spare's node. The placeholder requests the node's GPUs, so the cluster
autoscaler counts the node as used (a GPU node's utilization is its GPU requests,
``--scale-down-gpu-utilization-threshold``) and, its priority being at the cutoff, does not
treat it as expendable. Karpenter's ``WhenEmpty`` consolidation (every spotproof NodePool's,
``kube.nodepool``) removes only a node without a pod that costs something to move, and a
pod's cost is 1 plus its priority over 2^25 (``pkg/utils/disruption/disruption.go``
``EvictionCost``, ``pkg/controllers/disruption/types.go`` ``IsEmpty``, v1.14.1): about
0.9999997 for a placeholder at -10, so a spare's node is not empty and stays. Karpenter's
drift and expiry still replace it like any node; the placeholder moves with it.

What a placeholder does not carry: ``karpenter.sh/do-not-disrupt`` or ``safe-to-evict:
"false"`` (it protects nothing; it carries ``safe-to-evict: "true"``), a disruption budget,
a service account token, a target-class label (``scheduling.WARM_SPARE_LABEL`` says why).

Not built, only noted: GKE image streaming and AWS's SOCI snapshotter shorten the pull
without a spare node, by lazy-loading the image; neither saves the wait for the node.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog.pulumi_kubernetes import SKIP_AWAIT_ANNOTATION
from spotproof.fleet import PoolClass, images
from spotproof.kube.baseline import MANAGED_BY
from spotproof.kube.pods import RUN_AS, where_to_run
from spotproof.kube.workload import TargetPlacement

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
"""What a placeholder runs: the pause image at the version kubeadm pins as its default
(kubernetes/kubernetes ``cmd/kubeadm/app/constants/constants.go``, ``PauseVersion =
"3.10"``). It sleeps until signalled and runs as non-root since 3.5
(``build/pause/CHANGELOG.md``), so the namespace's ``restricted`` Pod Security admits it."""
PRE_PULL_COMMAND = ("/bin/sh", "-c", "true")
"""What the init container runs in the trainer's image, only so that the kubelet pulls it:
``true`` is a builtin of every POSIX shell (dash, bash, busybox), so the image needs only
``/bin/sh``. An image without one (distroless, scratch) is still pulled, since the kubelet
pulls before it starts anything; the init container then fails to start, and the
placeholder restarts it with a growing back-off, never reaching its pause container. The
spare still holds its node and still has the image: the one cost is a pod shown as failing
to start."""
MIN_COUNT, MAX_COUNT = 1, 64
"""Spares per ``WarmSpares``: each is a GPU node paid for every hour it is up."""
PLACEHOLDER_CONTAINER = "placeholder"
PRE_PULL_CONTAINER = "pre-pull"
PLACEHOLDER_RESOURCES = {"cpu": "10m", "memory": "16Mi"}
"""Enough for ``pause`` and a shell that exits; the GPUs are what hold the node."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(kw_only=True)
class WarmSparesArgs:
    placement: TargetPlacement
    """Where the spares wait: the very placement the gang's ``TrainingJob`` takes, so its
    pods' selector, affinity and tolerations are the placeholders' (``kube.pods.where_to_run``).
    Not the system pool's class; not a class whose work cannot preempt (a ``Never`` class
    would never take a spare: every workload class of the contract preempts, spot work's
    included); not a pool reached only through a Kueue queue."""
    image: str
    """The trainer's image, pulled onto every spare by an init container; pinned: a tag
    other than ``latest`` or a digest (``fleet.images``), so the spare holds the image the
    replacement will run."""
    gpus: int
    """GPUs each placeholder requests, 1 or more: a whole node's, as the trainer's pod asks
    (``Trainer.gpus``), so each spare holds one node the replacement fits on, and the
    cluster autoscaler counts the node as fully used."""
    count: int = 1
    """Spares kept, 1..64: each is a GPU node billed every hour, whether taken or not. One
    covers reclaims that do not overlap: a taken spare is replaced within a node's start."""
    namespace: str
    """Where the Deployment goes: the gang's, whose Pod Security level the placeholders
    meet."""
    controllers: Sequence[pulumi.Resource] = ()
    """What must exist first: ``cluster.controllers`` (the GPU device plugin where the
    cluster installs one, without which no node advertises GPUs to request)."""

    def __post_init__(self) -> None:
        # A wrong type would otherwise fail as an AttributeError deep inside the component.
        if not isinstance(self.placement, TargetPlacement):
            what = type(self.placement)
            raise TypeError(
                f"WarmSparesArgs.placement: a {what.__module__}.{what.__qualname__}, not a "
                "TargetPlacement; allowed: the placement the TrainingJob takes "
                "(cluster.placement(...) or TargetPlacement.on_existing_cluster(...))"
            )


class WarmSpares(pulumi.ComponentResource):
    """``count`` GPU nodes kept up with the trainer's image on them, each held by a
    placeholder pod any workload aimed at the same pools preempts: the placeholders'
    PriorityClass and their Deployment."""

    deployment_name: pulumi.Output[str]
    priority_class_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: WarmSparesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        _check(name, args)
        super().__init__("spotproof:kube:WarmSpares", name, None, opts)
        spec = scheduling.WARM_SPARE_PRIORITY
        # PriorityClasses are cluster-wide: one per WarmSpares, so two never collide.
        priority_name = f"{spec.name}-{name}"
        priority = k8s.scheduling.v1.PriorityClass(
            f"{name}-priority",
            metadata={"name": priority_name, "labels": MANAGED_BY},
            value=spec.value,
            global_default=False,
            preemption_policy="Never",
            description=spec.description,
            opts=pulumi.ResourceOptions(parent=self),
        )
        own = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "warm-spare"}
        secure = {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        gpus = {scheduling.GPU_RESOURCE: str(args.gpus)}
        pod = {
            **where_to_run(args.placement),
            "priorityClassName": priority_name,
            # Preempted, it leaves at once: the replacement waits for nothing.
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RUN_AS,
                "runAsGroup": RUN_AS,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "initContainers": [
                {
                    "name": PRE_PULL_CONTAINER,
                    "image": args.image,
                    # The replacement's own pull policy for a pinned image: it finds it here.
                    "imagePullPolicy": "IfNotPresent",
                    "command": list(PRE_PULL_COMMAND),
                    "resources": {
                        "requests": PLACEHOLDER_RESOURCES,
                        "limits": {"memory": PLACEHOLDER_RESOURCES["memory"]},
                    },
                    "securityContext": secure,
                }
            ],
            "containers": [
                {
                    "name": PLACEHOLDER_CONTAINER,
                    "image": PAUSE_IMAGE,
                    "resources": {
                        "requests": {**PLACEHOLDER_RESOURCES, **gpus},
                        "limits": {"memory": PLACEHOLDER_RESOURCES["memory"], **gpus},
                    },
                    "securityContext": secure,
                }
            ],
        }
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={
                "name": name,
                "namespace": args.namespace,
                "labels": {**MANAGED_BY, **own},
                # Spares wait minutes for GPU nodes, or longer when capacity is short:
                # `pulumi up` returns once the Deployment is accepted instead of failing
                # after the provider's wait for its pods to be ready.
                "annotations": {SKIP_AWAIT_ANNOTATION: "true"},
            },
            spec={
                "replicas": args.count,
                "selector": {"matchLabels": own},
                # One placeholder at a time and never one more: a changed template (a new
                # trainer image) never asks for an extra GPU node.
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
                },
                "template": {
                    "metadata": {
                        "labels": {**own, scheduling.WARM_SPARE_LABEL: "true"},
                        "annotations": {
                            # A placeholder protects nothing: the autoscaler may move it.
                            "cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
                        },
                    },
                    "spec": pod,
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[priority, *args.controllers]),
        )
        self.deployment_name = deployment.metadata.apply(lambda m: m["name"])
        self.priority_class_name = priority.metadata.apply(lambda m: m["name"])
        self.register_outputs(
            {
                "deployment_name": self.deployment_name,
                "priority_class_name": self.priority_class_name,
            }
        )


def _check(name: str, args: WarmSparesArgs) -> None:
    """``ValueError`` with one line naming what is wrong and what is allowed."""
    where = f"WarmSpares {name}"
    if not _DNS_LABEL.fullmatch(name):
        raise ValueError(f"{where}: allowed a name that is a DNS label (a-z, 0-9, '-', at most 63)")
    count = args.count
    if isinstance(count, bool) or not isinstance(count, int) or not MIN_COUNT <= count <= MAX_COUNT:
        raise ValueError(
            f"{where}: count = {count!r}; allowed: {MIN_COUNT}..{MAX_COUNT} spares "
            "(each a GPU node billed every hour; no spares: no WarmSpares)"
        )
    if isinstance(args.gpus, bool) or not isinstance(args.gpus, int) or args.gpus < 1:
        raise ValueError(
            f"{where}: gpus = {args.gpus!r}; allowed: 1 or more, the GPUs the trainer's pod "
            "asks for (a whole node's)"
        )
    target = args.placement.target
    if target is PoolClass.SYSTEM:
        raise ValueError(
            f"{where}: placement targets the system pool, which runs no GPU work; allowed: "
            "the placement of the TrainingJob the spares are for"
        )
    work = scheduling.contract(target).priority
    if not work.preempts:
        raise ValueError(
            f"{where}: work on {target.value} runs at {work.name}, whose preemptionPolicy is "
            "Never, so it would never take a spare's node and the spare would cost for "
            f"nothing; allowed: a placement on "
            + ", ".join(
                c.value
                for c in PoolClass
                if c is not PoolClass.SYSTEM and scheduling.contract(c).priority.preempts
            )
        )
    if args.placement.queue is not None:
        raise ValueError(
            f"{where}: {target.value} gets nodes only through Kueue's queue "
            f"{args.placement.queue.name} (a ProvisioningRequest), never for a placeholder's "
            "pod; allowed: a placement whose pools scale for pending pods"
        )
    parsed = images.parse(args.image) if isinstance(args.image, str) else None
    if parsed is None or parsed.mutable:
        reason = "not an image reference" if parsed is None else "pulls whatever 'latest' is"
        raise ValueError(f"{where}: image = {args.image!r}: {reason}; allowed: {images.ALLOWED}")
    if not (isinstance(args.namespace, str) and _DNS_LABEL.fullmatch(args.namespace)):
        raise ValueError(
            f"{where}: namespace = {args.namespace!r}; allowed: a DNS label (a-z, 0-9, '-', "
            "at most 63), the gang's namespace"
        )
