"""The Pulumi program every spotproof stack runs: stack config -> fleet spec -> components.

``infra/__main__.py`` calls :func:`main`; ``spotproof plan`` runs that same file offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from spotproof.catalog import Cloud
from spotproof.spec import FleetSpec, PoolClass, SpecError, fleet_from_config


def stack_config() -> dict[str, Any]:
    """All config of the running stack as ``namespace:key`` -> value.

    ``pulumi.Config`` can only look keys up one by one; reading the whole map is what lets
    the spec reject a misspelt key instead of silently ignoring it.
    """
    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


@dataclass(frozen=True)
class _Built:
    """What the cloud-neutral part of the program needs from a cloud's cluster."""

    cluster: Any
    trainer_identity: pulumi.Output[str]
    service_account_annotations: pulumi.Input[dict[str, str]]
    accelerators: list[str]
    fallback: list[PoolClass]


def _gke(spec: FleetSpec) -> _Built:
    from spotproof.gke import HybridCluster, HybridClusterArgs  # noqa: PLC0415

    cluster = HybridCluster(spec.stack, HybridClusterArgs(spec))
    target = spec.smoke_test.target if spec.smoke_test else PoolClass.SPOT_GPU
    return _Built(
        cluster=cluster,
        trainer_identity=cluster.bucket.trainer_email,
        service_account_annotations=cluster.bucket.trainer_email.apply(
            lambda email: {"iam.gke.io/gcp-service-account": email}
        ),
        accelerators=sorted({p.gpu_type for p in spec.pools_of(target)}),  # type: ignore[union-attr]
        fallback=[],
    )


def _eks(spec: FleetSpec) -> _Built:
    from spotproof.eks import HybridCluster, HybridClusterArgs  # noqa: PLC0415

    cluster = HybridCluster(spec.stack, HybridClusterArgs(spec))
    target = spec.smoke_test.target if spec.smoke_test else PoolClass.SPOT_GPU
    # Spot work may fall back to the on-demand NodePool; Karpenter's weights pick spot first.
    has_fallback = target is PoolClass.SPOT_GPU and spec.pools_of(PoolClass.ON_DEMAND_GPU)
    return _Built(
        cluster=cluster,
        trainer_identity=cluster.bucket.trainer_role_arn,
        # Pod Identity maps the service account to its role on the EKS side: no annotation.
        service_account_annotations={},
        accelerators=[],
        fallback=[PoolClass.ON_DEMAND_GPU] if has_fallback else [],
    )


_BUILDERS = {Cloud.GKE: _gke, Cloud.EKS: _eks}


def build(spec: FleetSpec) -> None:
    """Declare the fleet with the cloud's components and export what users need."""
    builder = _BUILDERS.get(spec.cloud)
    if builder is None:
        raise pulumi.RunError(
            f"spotproof:cloud = {spec.cloud.value!r}: not built yet; "
            f"allowed: {', '.join(c.value for c in _BUILDERS)}"
        )
    # Imported here so an install for one cloud never needs the other clouds' SDKs.
    from spotproof.kube import SmokeTestJob, SmokeTestJobArgs  # noqa: PLC0415

    built = builder(spec)
    cluster = built.cluster
    checkpoint_url = cluster.bucket.url.apply(lambda url: f"{url}/{spec.bucket.prefix}/smoke")

    if spec.smoke_test:
        smoke = SmokeTestJob(
            f"{spec.stack}-smoke",
            SmokeTestJobArgs(
                smoke=spec.smoke_test,
                namespace=cluster.baseline.namespace,
                checkpoint_url=checkpoint_url,
                accelerators=built.accelerators,
                fallback=built.fallback,
                service_account_annotations=built.service_account_annotations,
            ),
            opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cluster.baseline]),
        )
        pulumi.export("smoke_job", smoke.job_name)

    pulumi.export("cluster_name", cluster.cluster_name)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("checkpoint_bucket_url", cluster.bucket.url)
    pulumi.export("checkpoint_url", checkpoint_url)
    pulumi.export("trainer_identity", built.trainer_identity)
    pulumi.export("pool_names", cluster.pool_names)


def main() -> None:
    try:
        spec = fleet_from_config(pulumi.get_stack(), stack_config())
    except SpecError as error:
        # RunError prints the message without a Python traceback.
        raise pulumi.RunError(str(error)) from None
    build(spec)
