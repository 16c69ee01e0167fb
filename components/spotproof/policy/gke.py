"""Rules for GKE resources: pools, the cluster, the GCS bucket, IAM grants."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof import scheduling
from spotproof.catalog import Cloud
from spotproof.catalog import gke as gke_catalog
from spotproof.fleet.pools import PoolClass
from spotproof.policy import exposure, gke_drill, gke_monitoring, gke_shutdown
from spotproof.policy.base import PlannedResource, ResourceRule, StackRule
from spotproof.policy.identity_readiness import IdentityBinding
from spotproof.scheduling import gke as gke_shapes
from spotproof.scheduling import node_shapes

NODE_POOL = gke_shapes.NODE_POOL
CLUSTER = "gcp:container/cluster:Cluster"
BUCKET = "gcp:storage/bucket:Bucket"
SERVICE_ACCOUNT_KEY = "gcp:serviceaccount/key:Key"
PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
OBJECT_REPLACING_ROLES = frozenset(
    {
        "roles/storage.objectUser",
        "roles/storage.objectAdmin",
        "roles/storage.admin",
        "roles/storage.legacyBucketWriter",
        "roles/storage.legacyBucketOwner",
    }
)
"""Bucket roles that may delete or overwrite objects (storage.objects.delete)
(https://cloud.google.com/storage/docs/access-control/iam-roles)."""
OBJECT_LISTING_ROLES = frozenset(
    {
        "roles/storage.objectUser",
        "roles/storage.objectViewer",
        "roles/storage.objectAdmin",
        "roles/storage.admin",
        "roles/storage.legacyBucketReader",
        "roles/storage.legacyBucketWriter",
        "roles/storage.legacyBucketOwner",
    }
)
"""Bucket roles that may list objects (storage.objects.list), same page."""
_ADMITS_THE_BUCKET = re.compile(
    r'resource\.name\s*==|resource\.name\.startsWith\("projects/_/buckets/[^/"]*/?"\)'
)
"""A condition clause that a call on the bucket itself (a listing) satisfies."""


def system_pool_on_demand(inputs: Mapping[str, Any]) -> Iterator[str]:
    shape = gke_shapes.node_pool(inputs)
    if node_shapes.pool_class(shape) != PoolClass.SYSTEM:
        return
    if shape.spot:
        yield "the system pool must be on-demand: add-ons cannot survive spot reclaims"
    taint = scheduling.system_taint(Cloud.GKE)
    if taint not in shape.taints:
        yield (
            f"the system pool must be tainted {taint.key}={taint.value}:NO_SCHEDULE, the "
            "taint GKE's own add-ons tolerate"
        )


def spot_pool_isolated(inputs: Mapping[str, Any]) -> Iterator[str]:
    shape = gke_shapes.node_pool(inputs)
    if not shape.spot:
        return
    spot_taint = scheduling.contract(PoolClass.SPOT_GPU).taints[0]
    if spot_taint not in shape.taints:
        yield (
            f"spot pool lacks taint {spot_taint.key}={spot_taint.value}:NO_SCHEDULE; "
            "untolerating pods (system add-ons among them) could land on it"
        )
    if (inputs.get("autoscaling") or {}).get("locationPolicy") != "ANY":
        yield "spot pool should autoscale with locationPolicy ANY to find capacity in any zone"
    elif inputs.get("initialNodeCount"):
        yield (
            f"initialNodeCount {inputs['initialNodeCount']} on a locationPolicy ANY pool: GKE "
            "expects 0 and lets the autoscaler place nodes where capacity is; fix: "
            "initialNodeCount 0 (minNodeCount still applies)"
        )


def gpu_driver_managed(inputs: Mapping[str, Any]) -> Iterator[str]:
    for accelerator in (inputs.get("nodeConfig") or {}).get("guestAccelerators") or []:
        version = (accelerator.get("gpuDriverInstallationConfig") or {}).get("gpuDriverVersion")
        if not version or version == "INSTALLATION_DISABLED":
            yield f"{accelerator.get('type')}: set gpuDriverInstallationConfig so GKE installs it"


def boot_disk_supported(inputs: Mapping[str, Any]) -> Iterator[str]:
    config = inputs.get("nodeConfig") or {}
    machine_type = str(config.get("machineType") or "")
    disk_type = str(config.get("diskType") or "pd-standard")
    if machine_type.startswith(gke_catalog.HYPERDISK_ONLY_SERIES) and disk_type.startswith("pd-"):
        yield (
            f"{machine_type} attaches only Hyperdisk, so a {disk_type} boot disk fails to "
            "create; fix: diskType hyperdisk-balanced"
        )


def flex_start_settings(inputs: Mapping[str, Any]) -> Iterator[str]:
    config = inputs.get("nodeConfig") or {}
    if not config.get("flexStart"):
        return
    if not config.get("maxRunDuration"):
        yield "flex-start pool needs maxRunDuration"
    affinity = (config.get("reservationAffinity") or {}).get("consumeReservationType")
    if affinity != "NO_RESERVATION":
        yield "flex-start pool must not consume reservations (reservationAffinity NO_RESERVATION)"
    if (inputs.get("management") or {}).get("autoRepair") is not False:
        yield "flex-start pool must have auto-repair off"
    autoscaling = inputs.get("autoscaling") or {}
    if autoscaling.get("locationPolicy") != "ANY" or (autoscaling.get("minNodeCount") or 0) != 0:
        yield "flex-start pool must autoscale from 0 with locationPolicy ANY"


def node_metadata_server(inputs: Mapping[str, Any]) -> Iterator[str]:
    mode = ((inputs.get("nodeConfig") or {}).get("workloadMetadataConfig") or {}).get("mode")
    if mode != "GKE_METADATA":
        yield "node pool must run the GKE metadata server (workloadMetadataConfig GKE_METADATA)"


def cluster_workload_identity(inputs: Mapping[str, Any]) -> Iterator[str]:
    if not (inputs.get("workloadIdentityConfig") or {}).get("workloadPool"):
        yield "Workload Identity must be on: pods reach the bucket without static keys"
    if not inputs.get("removeDefaultNodePool"):
        yield "remove the default node pool: it is untainted and would take any pod"


def cluster_network_hardened(inputs: Mapping[str, Any]) -> Iterator[str]:
    network = str(inputs.get("network") or "default")
    if network.rsplit("/", 1)[-1] == "default":
        yield (
            "the cluster is on the project's default network, whose default firewall rules "
            "admit SSH and RDP from anywhere; allowed: a network of its own (gke.Network)"
        )
    dataplane_v2 = inputs.get("datapathProvider") == "ADVANCED_DATAPATH"
    if not dataplane_v2 and not (inputs.get("networkPolicy") or {}).get("enabled"):
        yield (
            "NetworkPolicy is not enforced; allowed: datapathProvider ADVANCED_DATAPATH "
            "(Dataplane V2)"
        )
    defaults = (inputs.get("clusterAutoscaling") or {}).get("autoProvisioningDefaults") or {}
    shielded = defaults.get("shieldedInstanceConfig") or {}
    if (inputs.get("clusterAutoscaling") or {}).get("enabled") and not shielded.get(
        "enableSecureBoot"
    ):
        yield (
            "auto-provisioned nodes boot without secure boot (GKE's default is off); allowed: "
            "autoProvisioningDefaults.shieldedInstanceConfig.enableSecureBoot true"
        )


def bucket_hardened(inputs: Mapping[str, Any]) -> Iterator[str]:
    if not (inputs.get("versioning") or {}).get("enabled"):
        yield "versioning must be on"
    if not inputs.get("uniformBucketLevelAccess"):
        yield "uniform bucket-level access must be on"
    if inputs.get("publicAccessPrevention") != "enforced":
        yield "public access prevention must be enforced"
    rules = inputs.get("lifecycleRules") or []
    expires_noncurrent = any(
        (r.get("action") or {}).get("type") == "Delete"
        and (
            (r.get("condition") or {}).get("numNewerVersions")
            or (r.get("condition") or {}).get("daysSinceNoncurrentTime")
        )
        for r in rules
    )
    if not expires_noncurrent:
        yield "a lifecycle rule must delete old noncurrent versions"


def no_static_keys(_inputs: Mapping[str, Any]) -> Iterator[str]:
    yield "service account keys are forbidden: use Workload Identity"


def bucket_in_cluster_region(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    regions = {str(r.inputs.get("location", "")).lower() for r in resources if r.type == CLUSTER}
    for bucket in (r for r in resources if r.type == BUCKET):
        location = str(bucket.inputs.get("location", "")).lower()
        if regions and location not in regions:
            yield bucket.name, f"bucket in {location}, cluster in {', '.join(sorted(regions))}"


def bucket_access_scoped(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    for grant in (r for r in resources if r.type == PROJECT_IAM_MEMBER):
        role = str(grant.inputs.get("role", ""))
        if role.startswith("roles/storage."):
            yield grant.name, f"{role} granted project-wide; grant it on the checkpoint bucket"


def object_deletion_scoped(inputs: Mapping[str, Any]) -> Iterator[str]:
    role = str(inputs.get("role", ""))
    expression = str((inputs.get("condition") or {}).get("expression") or "")
    if role in OBJECT_REPLACING_ROLES and "/objects/" not in expression:
        yield (
            f"{role} lets {inputs.get('member')} delete every object in the bucket; allowed: "
            'a condition resource.name.startsWith("projects/_/buckets/B/objects/PREFIX/")'
        )


def object_listing_scoped(inputs: Mapping[str, Any]) -> Iterator[str]:
    """A listing is a call on the bucket; only the list request's prefix, an API attribute
    of IAM Conditions, narrows it (``spotproof.gke.identity``)."""
    role = str(inputs.get("role", ""))
    if role not in OBJECT_LISTING_ROLES:
        return
    expression = str((inputs.get("condition") or {}).get("expression") or "")
    allowed = (
        f'allowed: a condition admitting the bucket only with api.getAttribute("'
        f'{gke_catalog.LIST_PREFIX_ATTRIBUTE}", "").startsWith("PREFIX/")'
    )
    if not expression or (
        _ADMITS_THE_BUCKET.search(expression)
        and gke_catalog.LIST_PREFIX_ATTRIBUTE not in expression
    ):
        yield f"{role} lets {inputs.get('member')} list every object in the bucket; {allowed}"


# --- what the internet can reach (``policy.exposure``) --------------------
# Unless told otherwise GKE gives nodes external IPs and the API a public endpoint for
# any address.


def api_restricted(inputs: Mapping[str, Any]) -> Iterator[str]:
    """A private endpoint needs the authorized-networks block too: without it the provider
    sends ``enabled: false`` (terraform-provider-google
    ``expandMasterAuthorizedNetworksConfig``) and GKE answers "Master authorized networks
    must be enabled if private endpoint is enabled" (GoogleCloudPlatform/magic-modules#8338);
    it also refuses Google Cloud's public ranges beside a private endpoint."""
    authorized = inputs.get("masterAuthorizedNetworksConfig")
    if (inputs.get("privateClusterConfig") or {}).get("enablePrivateEndpoint"):
        if authorized is None:
            yield (
                "a private endpoint without masterAuthorizedNetworksConfig is refused by GKE "
                "at pulumi up (the provider sends it disabled); allowed: the block, with "
                "gcpPublicCidrsAccessEnabled false"
            )
        elif authorized.get("gcpPublicCidrsAccessEnabled"):
            yield "GKE refuses gcpPublicCidrsAccessEnabled beside a private endpoint"
        return
    if not authorized:
        yield f"the API's public endpoint accepts every address; {exposure.FIX}"
        return
    blocks = [block.get("cidrBlock") for block in authorized.get("cidrBlocks") or []]
    if opened := exposure.open_ranges(blocks):
        yield f"authorized network {opened[0]} opens the API to everyone; {exposure.FIX}"
    if authorized.get("gcpPublicCidrsAccessEnabled"):
        yield "gcpPublicCidrsAccessEnabled lets any Google Cloud VM of any project reach the API"


def private_nodes(inputs: Mapping[str, Any]) -> Iterator[str]:
    if not (inputs.get("privateClusterConfig") or {}).get("enablePrivateNodes"):
        yield (
            "nodes get external IPs; allowed: privateClusterConfig.enablePrivateNodes true "
            "(they reach the internet through Cloud NAT)"
        )


def pool_private(inputs: Mapping[str, Any]) -> Iterator[str]:
    if (inputs.get("networkConfig") or {}).get("enablePrivateNodes") is False:
        yield "networkConfig.enablePrivateNodes false gives this pool's nodes external IPs"


# --- the identity a pod runs as (``policy.identity_readiness``) ----------------------

ACCOUNT_IAM_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"
WORKLOAD_IDENTITY_ANNOTATION = "iam.gke.io/gcp-service-account"


def _workload_identity_account(inputs: Mapping[str, Any]) -> tuple[str, str] | None:
    """``roles/iam.workloadIdentityUser`` granted to ``PROJECT.svc.id.goog[NAMESPACE/NAME]``."""
    if inputs.get("role") != "roles/iam.workloadIdentityUser":
        return None
    member = str(inputs.get("member", ""))
    if "[" in member and member.endswith("]"):
        namespace, _, name = member[member.index("[") + 1 : -1].partition("/")
        return namespace, name
    return None


def _account_grants(
    resources: list[PlannedResource], _binding: PlannedResource, account: Mapping[str, Any]
) -> list[PlannedResource]:
    """The IAM members of the Google service account the Kubernetes one is annotated with."""
    annotations = (account.get("metadata") or {}).get("annotations") or {}
    email = annotations.get(WORKLOAD_IDENTITY_ANNOTATION)
    return [
        r
        for r in resources
        if r.type in (BUCKET_IAM_MEMBER, PROJECT_IAM_MEMBER)
        and r.inputs.get("member") == f"serviceAccount:{email}"
    ]


IDENTITY_BINDINGS = (
    IdentityBinding(ACCOUNT_IAM_MEMBER, _workload_identity_account, _account_grants),
)

RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule(
        "gke-system-pool-on-demand",
        "System pool is on-demand and tainted.",
        NODE_POOL,
        system_pool_on_demand,
    ),
    ResourceRule(
        "gke-spot-pool-isolated",
        "Spot pools are tainted and find capacity anywhere.",
        NODE_POOL,
        spot_pool_isolated,
    ),
    ResourceRule(
        "gke-gpu-driver-managed", "GKE installs the GPU driver.", NODE_POOL, gpu_driver_managed
    ),
    ResourceRule(
        "gke-boot-disk-supported",
        "Boot disks are of a type the machine series attaches.",
        NODE_POOL,
        boot_disk_supported,
    ),
    ResourceRule(
        "gke-flex-start-settings",
        "Flex-start pools meet GKE's requirements.",
        NODE_POOL,
        flex_start_settings,
    ),
    ResourceRule(
        "gke-node-metadata-server",
        "Nodes serve Workload Identity.",
        NODE_POOL,
        node_metadata_server,
    ),
    ResourceRule(
        "gke-workload-identity",
        "Cluster has Workload Identity, no default pool.",
        CLUSTER,
        cluster_workload_identity,
    ),
    ResourceRule(
        "gke-cluster-network",
        "Own network, NetworkPolicy enforced, shielded auto-provisioned nodes.",
        CLUSTER,
        cluster_network_hardened,
    ),
    ResourceRule(
        "gcs-bucket-hardened",
        "Checkpoint bucket is versioned and private.",
        BUCKET,
        bucket_hardened,
    ),
    ResourceRule(
        "gcs-deletion-scoped",
        "Whoever may delete objects may do so under a prefix only.",
        BUCKET_IAM_MEMBER,
        object_deletion_scoped,
    ),
    ResourceRule(
        "gcs-listing-scoped",
        "Whoever may list objects may list under a prefix only.",
        BUCKET_IAM_MEMBER,
        object_listing_scoped,
    ),
    ResourceRule(
        "gcp-no-static-keys", "No service account keys.", SERVICE_ACCOUNT_KEY, no_static_keys
    ),
    ResourceRule(
        "gke-api-restricted",
        "The Kubernetes API is private or open to named networks only.",
        CLUSTER,
        api_restricted,
    ),
    ResourceRule("gke-private-nodes", "Nodes have no external IPs.", CLUSTER, private_nodes),
    ResourceRule(
        "gke-pool-private-nodes", "No pool overrides private nodes.", NODE_POOL, pool_private
    ),
    *gke_shutdown.RESOURCE_RULES,
    *gke_monitoring.RESOURCE_RULES,
)

STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "bucket-in-cluster-region",
        "Checkpoints stay in the cluster's region.",
        bucket_in_cluster_region,
    ),
    StackRule(
        "bucket-access-scoped",
        "Storage roles are granted on the bucket only.",
        bucket_access_scoped,
    ),
    *gke_drill.STACK_RULES,
    *gke_shutdown.STACK_RULES,
)
