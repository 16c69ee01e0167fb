"""The IAM, bucket and queue policy documents of an EKS fleet's roles and stores, as plain
data: trust policies, the node and cluster roles' managed policies, and what the trainer,
the batch workers and KEDA may do with the bucket and the work queue. The Karpenter
controller's own are in ``karpenter_documents``.

Each function returns the JSON document a resource takes, built from ARNs and names, so
that tests read the documents directly.
"""

from __future__ import annotations

from typing import Any

Document = dict[str, Any]
VERSION = "2012-10-17"

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
MANAGED_POLICY = "arn:{partition}:iam::aws:policy/{name}"
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
)
SSM_NODE_POLICY = "AmazonSSMManagedInstanceCore"
"""Session Manager access to a node: only where the stack asks (``nodeSsmAccess``). The
node role needs only the three above (https://docs.aws.amazon.com/eks/latest/userguide/create-node-role.html)."""
CLUSTER_POLICIES = ("AmazonEKSClusterPolicy",)


def document(*statements: Document) -> Document:
    """A policy document of ``statements``, in the policy language's current version."""
    return {"Version": VERSION, "Statement": list(statements)}


def service_trust(service: str) -> Document:
    """A role an AWS service assumes: ``eks.amazonaws.com``, ``ec2.amazonaws.com``."""
    return document(
        {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    )


def pod_identity_trust(cluster_name: str, namespace: str, service_account: str) -> Document:
    """A role only one Kubernetes service account of one cluster may assume, through EKS
    Pod Identity. The agent passes the pod's identity as session tags; the conditions pin
    them, so an association made elsewhere cannot borrow the role."""
    return document(
        {
            "Sid": "PodIdentity",
            "Effect": "Allow",
            "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {
                "StringEquals": {
                    "aws:RequestTag/eks-cluster-name": cluster_name,
                    "aws:RequestTag/kubernetes-namespace": namespace,
                    "aws:RequestTag/kubernetes-service-account": service_account,
                }
            },
        }
    )


def bucket_tls_only(bucket_arn: str) -> Document:
    return document(deny_without_tls("s3:*", [bucket_arn, f"{bucket_arn}/*"]))


def deny_without_tls(actions: str, resource: str | list[str]) -> Document:
    """The statement that refuses every plain-HTTP request to ``resource``."""
    return {
        "Sid": "DenyWithoutTls",
        "Effect": "Deny",
        "Principal": "*",
        "Action": actions,
        "Resource": resource,
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def _bucket_key(kms_key: str | None) -> list[Document]:
    """Using the bucket's KMS key, where it encrypts with one."""
    if not kms_key:
        return []
    return [
        {
            "Sid": "UseBucketKey",
            "Effect": "Allow",
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Resource": kms_key,
        }
    ]


def checkpoint_access(bucket_arn: str, prefix: str, kms_key: str | None) -> Document:
    """Read and write under ``prefix/`` of one bucket, and nothing else.

    Listing is limited to the prefix too (``s3:prefix`` like ``prefix/*``; a bare
    ``prefix`` would admit a listing of ``prefix-other/`` as well, since S3 matches a
    listing's prefix as the start of a key), so a trainer cannot even see other keys.
    Deletes are allowed because retention prunes old checkpoints. No multipart actions:
    parts and manifests are single PUTs of at most 64 MiB (``runtime.checkpointer.transfer``,
    ``runtime.checkpointer.manifest.MAX_MANIFEST_BYTES``), below where s3fs would start a multipart
    upload.
    """
    statements: list[Document] = [
        {
            "Sid": "ListCheckpointPrefix",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": bucket_arn,
            "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
        },
        {
            "Sid": "ReadWriteCheckpoints",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            "Resource": f"{bucket_arn}/{prefix}/*",
        },
    ]
    return document(*statements, *_bucket_key(kms_key))


def queue_tls_only(queue_arn: str) -> Document:
    """Nothing reaches a work queue without TLS (SQS security best practices: "Allow only
    encrypted connections over HTTPS (TLS) using the aws:SecureTransport condition")."""
    return document(deny_without_tls("sqs:*", queue_arn))


WORKER_QUEUE_ACTIONS = (
    "sqs:GetQueueUrl",
    "sqs:GetQueueAttributes",
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:DeleteMessage",
)
"""What ``spotproof.runtime.batch.sqs`` calls; the batch form of a call needs its single
form's permission (``ChangeMessageVisibilityBatch``: ``sqs:ChangeMessageVisibility``)."""


def batch_worker_access(
    queue_arn: str, bucket_arn: str, prefix: str, kms_key: str | None
) -> Document:
    """Consume one queue; read and create results under ``prefix/`` of one bucket.

    No ``s3:DeleteObject``: results are written once (create-only), and a worker that could
    delete one could replace it. Listing is limited to the prefix (``s3:prefix``), as the
    runtime's reachability check and existence checks stay inside it."""
    statements: list[Document] = [
        {
            "Sid": "ConsumeWorkQueue",
            "Effect": "Allow",
            "Action": list(WORKER_QUEUE_ACTIONS),
            "Resource": queue_arn,
        },
        {
            "Sid": "ListResultsPrefix",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": bucket_arn,
            "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
        },
        {
            "Sid": "ReadCreateResults",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Resource": f"{bucket_arn}/{prefix}/*",
        },
    ]
    return document(*statements, *_bucket_key(kms_key))


def queue_depth_reader(queue_arn: str) -> Document:
    """KEDA's SQS scaler calls only ``GetQueueAttributes`` (``catalog.keda``)."""
    return document(
        {
            "Sid": "ReadQueueDepth",
            "Effect": "Allow",
            "Action": "sqs:GetQueueAttributes",
            "Resource": queue_arn,
        }
    )
