"""The Pulumi program every spotproof stack runs: stack config -> fleet spec -> components.

``infra/__main__.py`` calls :func:`main`; ``spotproof plan`` runs that same file offline.
"""

from __future__ import annotations

import importlib
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from spotproof import clouds
from spotproof.catalog import PROFILES
from spotproof.fleet import FleetSpec, SpecError, fleet_from_config
from spotproof.kube.batch import WorkQueueBinding
from spotproof.kube.cluster import ClusterForWorkloads
from spotproof.runtime.metrics.names import DEFAULT_PORT


def stack_config() -> dict[str, Any]:
    """All config of the running stack as ``namespace:key`` -> value.

    ``pulumi.Config`` can only look keys up one by one; reading the whole map is what lets
    the spec reject a misspelt key instead of silently ignoring it.
    """
    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


CLUSTER_PACKAGES = {cloud: clouds.module_name("spotproof", cloud) for cloud in PROFILES}
"""Each cloud's package; its ``HybridCluster`` takes ``HybridClusterArgs(fleet)``."""


def hybrid_cluster(spec: FleetSpec) -> ClusterForWorkloads:
    """The fleet's cluster, declared with its cloud's components. Imported here so an
    install for one cloud never needs the other clouds' SDKs."""
    package = CLUSTER_PACKAGES.get(spec.cloud)
    if package is None:
        raise pulumi.RunError(
            f"spotproof:cloud = {spec.cloud.value!r}: not built yet; "
            f"allowed: {', '.join(c.value for c in CLUSTER_PACKAGES)}"
        )
    module = importlib.import_module(package)
    return module.HybridCluster(spec.stack, module.HybridClusterArgs(spec))


def build(spec: FleetSpec) -> None:
    """Declare the fleet and export what users need."""
    from spotproof.kube import SmokeTestJob, SmokeTestJobArgs  # noqa: PLC0415

    cluster = hybrid_cluster(spec)
    checkpoint_url = cluster.bucket.url.apply(lambda url: f"{url}/{spec.bucket.prefix}/smoke")

    if spec.smoke_test:
        smoke = SmokeTestJob(
            f"{spec.stack}-smoke",
            SmokeTestJobArgs(
                smoke=spec.smoke_test,
                checkpoint_url=checkpoint_url,
                placement=cluster.placement(spec.smoke_test.target),
                identity=cluster.workload_identity,
                metrics_port=metrics_port(spec),
            ),
            # The controllers include Kueue and its queue where the target is queued.
            opts=pulumi.ResourceOptions(
                provider=cluster.provider,
                depends_on=[cluster.baseline, cluster.trainer_account, *cluster.controllers],
            ),
        )
        pulumi.export("smoke_job", smoke.job_name)

    if spec.batch is not None and cluster.work_queue is not None:
        batch_workers(spec, cluster, cluster.work_queue)

    pulumi.export("cluster_name", cluster.cluster_name)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("checkpoint_bucket_url", cluster.bucket.url)
    pulumi.export("checkpoint_url", checkpoint_url)
    pulumi.export("trainer_identity", cluster.workload_identity.cloud_identity)
    pulumi.export("pool_names", cluster.pool_names)
    if cluster.monitoring_outputs is not None:
        pulumi.export("monitoring", dict(cluster.monitoring_outputs))
    if cluster.drill_grant is not None:
        # Keys as spotproof.drill.grants reads them (output_keys): camelCase.
        pulumi.export("drill", dict(cluster.drill_grant))


def metrics_port(spec: FleetSpec) -> int | None:
    """Where the stack's own workloads serve their metrics: only where its monitoring
    scrapes them (a worker image without prometheus-client would otherwise stop at once)."""
    return DEFAULT_PORT if spec.monitoring.enabled else None


def batch_workers(spec: FleetSpec, cluster: ClusterForWorkloads, queue: WorkQueueBinding) -> None:
    """The stack's batch workers on their queue; exports where to publish and read."""
    from spotproof.kube.batch import BatchWorkers, BatchWorkersArgs  # noqa: PLC0415

    assert spec.batch is not None
    needs: list[pulumi.Resource] = list(cluster.namespaces)
    if cluster.autoscaler is not None:
        needs.append(cluster.autoscaler)  # the ScaledObject's CRD and webhook
    workers = BatchWorkers(
        f"{spec.stack}-batch",
        BatchWorkersArgs(
            batch=spec.batch,
            placement=cluster.placement(spec.batch.target),
            queue=queue,
            autoscaled=cluster.autoscaler is not None,
            cloud=spec.cloud,
            ready=list(cluster.namespaces),
            metrics_port=metrics_port(spec),
        ),
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=needs),
    )
    pulumi.export("batch_workers", workers.deployment_name)
    pulumi.export("work_queue_url", queue.queue_url)
    pulumi.export("batch_results_url", queue.results_url)
    pulumi.export("batch_worker_identity", queue.identity.cloud_identity)


def main() -> None:
    try:
        spec = fleet_from_config(pulumi.get_stack(), stack_config())
    except SpecError as error:
        # RunError prints the message without a Python traceback.
        raise pulumi.RunError(str(error)) from None
    build(spec)
