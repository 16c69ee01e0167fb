"""``spotproof:eks:CheckpointBucket``: the S3 bucket and the one identity that may write it."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from spotproof.catalog import Cloud
from spotproof.cloud_tags import stack_tags
from spotproof.eks import iam_documents
from spotproof.eks.roles import pod_identity_role
from spotproof.fleet import BucketSpec
from spotproof.fleet.config import judge_bucket
from spotproof.kube.workload import ServiceAccountRef, WorkloadIdentity


@dataclass
class CheckpointBucketArgs:
    bucket: BucketSpec
    region: str
    """The bucket's region: the cluster's."""
    cluster_name: pulumi.Input[str]
    """The EKS cluster whose pods assume the trainer role (it runs the Pod Identity agent)."""
    trainer: ServiceAccountRef
    """The Kubernetes service account the Pod Identity association maps to the role."""
    protect: bool = True
    """Refuse to delete the bucket (and keep its objects on ``destroy``); off only for a
    disposable stack."""
    name_prefix: str | None = None
    """Starts the cloud names of what this component creates (the trainer's IAM role); default
    the component's name. Two components in one account need different prefixes."""

    def __post_init__(self) -> None:
        judge_bucket(Cloud.EKS, self.bucket, self.region, "CheckpointBucketArgs.bucket")


class CheckpointBucket(pulumi.ComponentResource):
    """An S3 bucket in the cluster's region, hardened for checkpoints.

    - Same region as the cluster (set explicitly on the bucket, not inherited).
    - Versioning on; a noncurrent version expires ``noncurrent_days`` after it became
      noncurrent, delete markers left with nothing under them are removed, and abandoned
      multipart uploads go after a day.
    - All four public-access blocks, ``BucketOwnerEnforced`` ownership (ACLs off),
      server-side encryption (SSE-S3, or SSE-KMS with the stack's key and a bucket key),
      and a bucket policy denying every request without TLS.
    - A role the smoke Job's service account assumes through EKS Pod Identity, allowed to
      read, write and list only the checkpoint prefix: no access keys anywhere.
    """

    name: pulumi.Output[str]
    arn: pulumi.Output[str]
    url: pulumi.Output[str]
    trainer_role_arn: pulumi.Output[str]
    identity: WorkloadIdentity
    """The trainer's service account; Pod Identity needs no annotation on it."""

    def __init__(
        self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:eks:CheckpointBucket", name, args.bucket.recorded(), opts)
        self._prefix = args.name_prefix or name
        settings, prefix, region = args.bucket, self._prefix, args.region
        child = pulumi.ResourceOptions(parent=self)
        bucket = aws.s3.Bucket(
            f"{name}-bucket",
            bucket=settings.name,
            region=region,
            force_destroy=not args.protect,
            tags=stack_tags(pulumi.get_stack(), purpose="checkpoints"),
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        public_access = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=bucket.bucket,
            region=region,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=bucket.bucket,
            region=region,
            rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child,
        )
        versioning = aws.s3.BucketVersioning(
            f"{name}-versioning",
            bucket=bucket.bucket,
            region=region,
            versioning_configuration={"status": "Enabled"},
            opts=child,
        )
        encryption = (
            {"sse_algorithm": "aws:kms", "kms_master_key_id": settings.kms_key}
            if settings.kms_key
            else {"sse_algorithm": "AES256"}
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=bucket.bucket,
            region=region,
            rules=[
                {
                    "apply_server_side_encryption_by_default": encryption,
                    "bucket_key_enabled": bool(settings.kms_key),
                }
            ],
            opts=child,
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=bucket.bucket,
            region=region,
            rules=[
                {
                    "id": "expire-noncurrent-versions",
                    "status": "Enabled",
                    "filter": {"prefix": ""},
                    # Days alone: with NewerNoncurrentVersions too, S3 expires a version only
                    # once both hold, and a checkpoint key written once never has a newer
                    # noncurrent version, so its data would be kept forever.
                    "noncurrent_version_expiration": {"noncurrent_days": settings.noncurrent_days},
                    # A deleted key keeps a delete marker; once its data expires the marker
                    # has nothing under it and is removed too, so markers do not pile up.
                    "expiration": {"expired_object_delete_marker": True},
                    "abort_incomplete_multipart_upload": {"days_after_initiation": 1},
                }
            ],
            # S3 refuses lifecycle rules on noncurrent versions until versioning is on.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning]),
        )
        aws.s3.BucketPolicy(
            f"{name}-tls-only",
            bucket=bucket.bucket,
            region=region,
            policy=bucket.arn.apply(lambda arn: json.dumps(iam_documents.bucket_tls_only(arn))),
            # A policy is refused while the public-access block is being applied.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[public_access]),
        )

        trainer = pod_identity_role(
            f"{name}-trainer",
            role_name=f"{prefix}-trainer",
            cluster_name=args.cluster_name,
            pod=args.trainer,
            policy=bucket.arn.apply(
                lambda arn: iam_documents.checkpoint_access(arn, settings.prefix, settings.kms_key)
            ),
            description="Writes checkpoints; assumed through EKS Pod Identity.",
            stack=pulumi.get_stack(),
            opts=child,
            policy_suffix="checkpoints",  # the name it has always had: no replacement
        )

        self.name = bucket.bucket
        self.arn = bucket.arn
        self.url = bucket.bucket.apply(lambda bucket_name: f"s3://{bucket_name}")
        self.trainer_role_arn = trainer.arn
        self.identity = WorkloadIdentity(
            service_account=args.trainer, cloud_identity=trainer.arn, granted_by=(self,)
        )
        self.register_outputs(
            {"name": self.name, "url": self.url, "trainer_role_arn": self.trainer_role_arn}
        )
