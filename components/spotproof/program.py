"""The Pulumi program every spotproof stack runs: stack config -> fleet spec -> components.

``infra/__main__.py`` calls :func:`main`; ``spotproof plan`` runs that same file offline.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from spotproof.catalog import Cloud
from spotproof.spec import FleetSpec, SpecError, fleet_from_config


def stack_config() -> dict[str, Any]:
    """All config of the running stack as ``namespace:key`` -> value.

    ``pulumi.Config`` can only look keys up one by one; reading the whole map is what lets
    the spec reject a misspelt key instead of silently ignoring it.
    """
    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


def build(spec: FleetSpec) -> None:
    """Declare the fleet with the cloud's components and export what users need."""
    if spec.cloud is not Cloud.GKE:
        raise pulumi.RunError(
            f"spotproof:cloud = {spec.cloud.value!r}: not built yet; allowed: gke"
        )
    # Imported here so a GKE-only install never needs the AWS or Azure SDKs.
    from spotproof.gke import HybridCluster, HybridClusterArgs  # noqa: PLC0415
    from spotproof.kube import SmokeTestJob, SmokeTestJobArgs  # noqa: PLC0415

    cluster = HybridCluster(spec.stack, HybridClusterArgs(spec))
    checkpoint_url = cluster.bucket.url.apply(lambda url: f"{url}/{spec.bucket.prefix}/smoke")

    if spec.smoke_test:
        accelerators = sorted({p.gpu_type for p in spec.pools_of(spec.smoke_test.target)})
        smoke = SmokeTestJob(
            f"{spec.stack}-smoke",
            SmokeTestJobArgs(
                smoke=spec.smoke_test,
                namespace=cluster.baseline.namespace,
                checkpoint_url=checkpoint_url,
                accelerators=accelerators,
                service_account_annotations=cluster.bucket.trainer_email.apply(
                    lambda email: {"iam.gke.io/gcp-service-account": email}
                ),
            ),
            opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cluster.baseline]),
        )
        pulumi.export("smoke_job", smoke.job_name)

    pulumi.export("cluster_name", cluster.cluster_name)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("checkpoint_bucket_url", cluster.bucket.url)
    pulumi.export("checkpoint_url", checkpoint_url)
    pulumi.export("trainer_service_account", cluster.bucket.trainer_email)
    pulumi.export("pool_names", cluster.pool_names)


def main() -> None:
    try:
        spec = fleet_from_config(pulumi.get_stack(), stack_config())
    except SpecError as error:
        # RunError prints the message without a Python traceback.
        raise pulumi.RunError(str(error)) from None
    build(spec)
