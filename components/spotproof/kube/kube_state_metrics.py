"""``spotproof:kube:KubeStateMetrics``: the Kubernetes objects' state as Prometheus series,
for a cluster whose managed Prometheus brings none that the rules can use. EKS: Amazon
Managed Service for Prometheus scrapes, it does not run an exporter. GKE: its managed
kube-state-metrics package exports neither ``kube_pod_labels`` nor ``kube_pod_created`` and
takes no label allowlist, so it is turned off and this one runs instead
(``gke.monitoring``). AKS needs none: its metrics add-on runs kube-state-metrics with the
allowlist the cluster's monitor profile sets (``aks.monitoring_documents``).

The Pending alerts ask, per target class, how long pods have been Pending
(``kube_pod_status_phase`` joined with ``kube_pod_labels``). A Pending pod has no node, so
its class comes from its own ``scheduling.TARGET_CLASS_LABEL``, which kube-state-metrics
exports only when allowlisted (``--metric-labels-allowlist``); nodes export their
``scheduling.POOL_CLASS_LABEL`` the same way.

The manifests are kube-state-metrics' own ``examples/standard`` at ``v2.20.0`` (commit
4ffeda2ef866b0fef372849825a803296483b336 of kubernetes/kube-state-metrics: image
``registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0``, ports ``http-metrics``
8080 and ``telemetry`` 8081, ``/livez`` and ``/readyz`` probes, a non-root read-only
container), with three changes:

- it runs on the system pool (its nodeSelector and toleration), at
  ``system-cluster-critical``, so it is neither reclaimed with spot capacity nor evicted
  for work;
- it watches only the resources spotproof's rules and dashboards read (``RESOURCES``), and
  its ClusterRole grants exactly those: fewer series to pay for, and no reading of Secrets
  or ConfigMaps, which the default set lists cluster-wide;
- it allowlists the two spotproof labels above.

Its README supports only the latest release and records its client-go against
Kubernetes minor versions (v2.20.0: client-go 1.36); the pod, node and workload metrics
used here are ``STABLE`` in ``docs/metrics``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog import Cloud
from spotproof.kube.addons import system_placement
from spotproof.kube.baseline import MANAGED_BY

VERSION = "v2.20.0"
IMAGE = f"registry.k8s.io/kube-state-metrics/kube-state-metrics:{VERSION}"
NAME = "kube-state-metrics"
NAMESPACE = "kube-system"
METRICS_PORT = ("http-metrics", 8080)
TELEMETRY_PORT = ("telemetry", 8081)
LABELS = {"app.kubernetes.io/name": NAME}

RESOURCES: dict[str, tuple[str, ...]] = {
    "": ("pods", "nodes", "namespaces"),
    "apps": ("deployments", "statefulsets", "daemonsets", "replicasets"),
    "batch": ("jobs", "cronjobs"),
    "policy": ("poddisruptionbudgets",),
}
"""What kube-state-metrics watches, by API group: pods (phase, conditions, the target
class), the nodes they run on (their pool class), and the controllers and budgets that
own them."""
LABELS_ALLOWLIST = {
    "pods": (scheduling.TARGET_CLASS_LABEL,),
    "nodes": (scheduling.POOL_CLASS_LABEL,),
}


def arguments() -> list[str]:
    """The container's flags (``docs/developer/cli-arguments.md`` at ``v2.20.0``)."""
    resources = ",".join(sorted(r for group in RESOURCES.values() for r in group))
    allowlist = ",".join(
        f"{resource}=[{','.join(labels)}]" for resource, labels in LABELS_ALLOWLIST.items()
    )
    return [
        f"--port={METRICS_PORT[1]}",
        f"--telemetry-port={TELEMETRY_PORT[1]}",
        f"--resources={resources}",
        f"--metric-labels-allowlist={allowlist}",
    ]


def cluster_role_rules() -> list[dict[str, Any]]:
    """List and watch, on exactly ``RESOURCES``."""
    return [
        {"apiGroups": [group], "resources": list(resources), "verbs": ["list", "watch"]}
        for group, resources in RESOURCES.items()
    ]


def pod_spec(cloud: Cloud) -> dict[str, Any]:
    container = {
        "name": NAME,
        "image": IMAGE,
        "args": arguments(),
        "ports": [
            {"name": port, "containerPort": number}
            for port, number in (METRICS_PORT, TELEMETRY_PORT)
        ],
        "livenessProbe": {
            "httpGet": {"path": "/livez", "port": METRICS_PORT[0]},
            "initialDelaySeconds": 5,
            "timeoutSeconds": 5,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": TELEMETRY_PORT[0]},
            "initialDelaySeconds": 5,
            "timeoutSeconds": 5,
        },
        "resources": {
            "requests": {"cpu": "50m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    placement = system_placement(cloud)
    return {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"kubernetes.io/os": "linux", **placement["nodeSelector"]},
        "tolerations": placement["tolerations"],
        "containers": [container],
    }


@dataclass(frozen=True)
class KubeStateMetricsArgs:
    provider: k8s.Provider
    cloud: Cloud
    """Whose system-pool contract places it."""
    ready: Sequence[pulumi.Resource] = ()
    """What must exist before its pod can start: the system nodes."""


class KubeStateMetrics(pulumi.ComponentResource):
    """kube-state-metrics, pinned, in ``kube-system`` on the system pool, with its own
    service account, read-only ClusterRole and headless Service."""

    def __init__(
        self, name: str, args: KubeStateMetricsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:kube:KubeStateMetrics", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        metadata = {"name": NAME, "labels": {**LABELS, **MANAGED_BY}}
        namespaced = {**metadata, "namespace": NAMESPACE}
        account = k8s.core.v1.ServiceAccount(
            f"{name}-account",
            metadata=namespaced,
            automount_service_account_token=False,
            opts=child,
        )
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-role", metadata=metadata, rules=cluster_role_rules(), opts=child
        )
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata=metadata,
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            subjects=[{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
            opts=child,
        )
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=namespaced,
            spec={
                "replicas": 1,
                "selector": {"matchLabels": LABELS},
                "template": {"metadata": {"labels": LABELS}, "spec": pod_spec(args.cloud)},
            },
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(depends_on=[account, role, binding, *args.ready]),
            ),
        )
        k8s.core.v1.Service(
            f"{name}-service",
            metadata=namespaced,
            spec={
                "clusterIP": "None",
                "selector": LABELS,
                "ports": [
                    {"name": port, "port": number, "targetPort": port}
                    for port, number in (METRICS_PORT, TELEMETRY_PORT)
                ],
            },
            opts=child,
        )
        self.deployment_name = deployment.metadata.apply(lambda m: m["name"])
        self.register_outputs({"deployment_name": self.deployment_name, "version": VERSION})
