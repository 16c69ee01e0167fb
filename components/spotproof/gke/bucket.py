"""The regional checkpoint bucket and the identity that may write to it."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from spotproof.catalog import Cloud
from spotproof.cloud_tags import stack_tags
from spotproof.fleet import BucketSpec
from spotproof.fleet.config import judge_bucket
from spotproof.gke.identity import annotations, bind_workload_identity, under_prefix
from spotproof.gke.names import service_account_id, service_account_member
from spotproof.kube.workload import ServiceAccountRef, WorkloadIdentity

OBJECT_ROLE = "roles/storage.objectUser"
"""Read, write, list and delete objects; no say over the bucket's own settings or IAM.
Granted under the checkpoint prefix only (``gke.identity.under_prefix``)."""


@dataclass
class CheckpointBucketArgs:
    bucket: BucketSpec
    project: pulumi.Input[str]
    """The project of the bucket and of the cluster whose Workload Identity pool
    (``<project>.svc.id.goog``) the trainer comes from."""
    trainer: ServiceAccountRef
    """The Kubernetes service account that Workload Identity maps to the trainer's account."""
    protect: bool = True
    """Refuse to delete the bucket (and keep its objects on ``destroy``); off only for a
    disposable stack."""
    name_prefix: str | None = None
    """Starts the cloud names of what this component creates (the trainer's service account);
    default the component's name. Two components in one project need different prefixes."""

    def __post_init__(self) -> None:
        judge_bucket(Cloud.GKE, self.bucket, None, "CheckpointBucketArgs.bucket")


class CheckpointBucket(pulumi.ComponentResource):
    """A bucket in the cluster's region, hardened for checkpoints, writable by one identity.

    - Same region as the cluster: checkpoint traffic stays local and is not billed as egress.
    - Versioning on, with a lifecycle rule that deletes a noncurrent version
      ``noncurrent_days`` after it became noncurrent, so a deleted checkpoint can be
      recovered for a while without the bucket growing forever. Days alone: a checkpoint
      key is written once, and ``numNewerVersions`` (which counts the live version too)
      would keep its one noncurrent version forever.
    - Uniform bucket-level access and public access prevention enforced: no ACLs, no
      public objects. GCS serves its APIs over TLS only, so there is no plain-HTTP path to
      deny.
    - The trainer's Google service account gets ``roles/storage.objectUser`` on this bucket
      alone, conditioned on the checkpoint prefix: it reads, writes, deletes and lists
      only there (``gke.identity.under_prefix``). The Kubernetes
      service account impersonates it through Workload Identity: no key files anywhere.
    """

    name: pulumi.Output[str]
    url: pulumi.Output[str]
    trainer_email: pulumi.Output[str]
    identity: WorkloadIdentity
    """What the trainer's pods need: its service account, annotated for Workload Identity."""

    def __init__(
        self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:gke:CheckpointBucket", name, args.bucket.recorded(), opts)
        self._prefix = args.name_prefix or name
        settings = args.bucket
        child = pulumi.ResourceOptions(parent=self)

        bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=settings.name,
            project=args.project,
            location=settings.location.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning={"enabled": True},
            lifecycle_rules=[
                {
                    "action": {"type": "Delete"},
                    "condition": {
                        "days_since_noncurrent_time": settings.noncurrent_days,
                        "with_state": "ARCHIVED",
                    },
                },
                {"action": {"type": "AbortIncompleteMultipartUpload"}, "condition": {"age": 1}},
            ],
            force_destroy=not args.protect,
            labels=stack_tags(pulumi.get_stack(), purpose="checkpoints"),
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )

        trainer = gcp.serviceaccount.Account(
            f"{name}-trainer",
            account_id=service_account_id(self._prefix, "trainer"),
            project=args.project,
            display_name=f"spotproof trainer ({self._prefix})",
            description="Writes checkpoints; impersonated through GKE Workload Identity.",
            opts=child,
        )
        gcp.storage.BucketIAMMember(
            f"{name}-trainer-objects",
            bucket=bucket.name,
            role=OBJECT_ROLE,
            member=service_account_member(trainer.email),
            condition=under_prefix(bucket.name, settings.prefix, listing=True),
            opts=child,
        )
        pod = args.trainer
        bind_workload_identity(
            f"{name}-trainer-workload-identity", trainer, args.project, pod, child
        )

        self.name = bucket.name
        self.url = bucket.name.apply(lambda bucket_name: f"gs://{bucket_name}")
        self.trainer_email = trainer.email
        self.identity = WorkloadIdentity(
            service_account=pod,
            cloud_identity=trainer.email,
            service_account_annotations=annotations(trainer),
            granted_by=(self,),
        )
        self.register_outputs(
            {"name": self.name, "url": self.url, "trainer_email": self.trainer_email}
        )
