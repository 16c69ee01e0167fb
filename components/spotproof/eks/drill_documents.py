"""The IAM documents of an EKS stack's drill grant, as plain data: the role FIS assumes to
interrupt the cluster's target instance, and the managed policy of whoever runs drills.

Both reach one cluster's instances only through their tags: Karpenter's
``kubernetes.io/cluster/<cluster>=owned`` on every node it launches, and the drill's own
target tag (``policy.eks_drill``), which only the drill's operator may set or remove, and
only that key. ``[eks-drill-scoped]`` evaluates the rendered documents against the same.
"""

from __future__ import annotations

from spotproof.eks.iam_documents import Document, document
from spotproof.policy.eks_drill import (
    FIS_ROLE_ACTIONS,
    OWNED,
    TARGET_TAG,
    TARGET_VALUE,
    cluster_tag,
)

FIS_SERVICE = "fis.amazonaws.com"
FIS_LINKED_ROLE = "AWSServiceRoleForFIS"


def _arn(partition: str, service: str, region: str, account: str, resource: str) -> str:
    return f"arn:{partition}:{service}:{region}:{account}:{resource}"


def fis_trust(partition: str, region: str, account: str) -> Document:
    """FIS may assume the role for this account's experiments in ``region`` only: the
    ``aws:SourceAccount`` and ``aws:SourceArn`` conditions keep another account's experiment
    from borrowing it (the confused deputy; the trust policy of "IAM roles for AWS FIS
    experiments", https://docs.aws.amazon.com/fis/latest/userguide/getting-started-iam-service-role.html)."""
    return document(
        {
            "Sid": "FisExperimentsOfThisAccount",
            "Effect": "Allow",
            "Principal": {"Service": "fis.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {
                "StringEquals": {"aws:SourceAccount": account},
                "ArnLike": {
                    "aws:SourceArn": _arn(partition, "fis", region, account, "experiment/*")
                },
            },
        }
    )


def fis_interrupt(partition: str, region: str, account: str, cluster: str) -> Document:
    """Interrupt an instance of ``cluster`` that carries the drill's target tag, and
    describe instances to find it (``policy.eks_drill.FIS_ROLE_ACTIONS``).

    ``ec2:SendSpotInstanceInterruptions`` authorizes on the instance and its
    ``aws:ResourceTag`` keys (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html),
    so both tags are conditions: a template edited to select other instances still
    interrupts none of them."""
    interrupt, describe = FIS_ROLE_ACTIONS
    return document(
        {
            "Sid": "InterruptTheDrillTarget",
            "Effect": "Allow",
            "Action": interrupt,
            "Resource": _arn(partition, "ec2", region, account, "instance/*"),
            "Condition": {
                "StringEquals": {
                    f"aws:ResourceTag/{cluster_tag(cluster)}": OWNED,
                    f"aws:ResourceTag/{TARGET_TAG}": TARGET_VALUE,
                }
            },
        },
        {"Sid": "FindTargets", "Effect": "Allow", "Action": describe, "Resource": "*"},
    )


def drill_operator(
    partition: str, region: str, account: str, cluster: str, template_id: str
) -> Document:
    """What ``spotproof drill`` calls (``spotproof.drill.reclaim.eks``): describe instances
    (no resource-level permissions, above), set and remove the target tag on one of the
    cluster's instances, start the stack's template and follow the experiment.

    ``fis:StartExperiment`` authorizes on the experiment template and on the experiment it
    creates, ``fis:GetExperiment`` on the experiment
    (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsfaultinjectionservice.html).
    Tagging is held to the one key by ``aws:TagKeys``, a multi-valued key: ``ForAllValues``
    admits a request whose every key is the target tag, and ``Null`` false refuses a
    request that names none, which for ``DeleteTags`` would delete every tag of the
    instance (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteTags.html;
    https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html)."""
    experiments = _arn(partition, "fis", region, account, "experiment/*")
    return document(
        {
            "Sid": "StartTheDrillTemplate",
            "Effect": "Allow",
            "Action": "fis:StartExperiment",
            "Resource": [
                _arn(partition, "fis", region, account, f"experiment-template/{template_id}"),
                experiments,
            ],
        },
        {
            "Sid": "FollowTheExperiment",
            "Effect": "Allow",
            "Action": "fis:GetExperiment",
            "Resource": experiments,
        },
        {"Sid": "FindNodes", "Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"},
        {
            # "When you start an experiment, AWS FIS creates a service-linked role on your
            # behalf" (https://docs.aws.amazon.com/fis/latest/userguide/start-experiment-from-template.html),
            # AWSServiceRoleForFIS: the first drill in an account needs the caller to be
            # allowed to create it, that role and no other
            # (https://docs.aws.amazon.com/fis/latest/userguide/using-service-linked-roles.html).
            "Sid": "LetFisCreateItsServiceLinkedRole",
            "Effect": "Allow",
            "Action": "iam:CreateServiceLinkedRole",
            "Resource": _arn(
                partition,
                "iam",
                "",
                account,
                f"role/aws-service-role/{FIS_SERVICE}/{FIS_LINKED_ROLE}",
            ),
            "Condition": {"StringEquals": {"iam:AWSServiceName": FIS_SERVICE}},
        },
        {
            "Sid": "MarkTheTarget",
            "Effect": "Allow",
            "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
            "Resource": _arn(partition, "ec2", region, account, "instance/*"),
            "Condition": {
                "StringEquals": {f"aws:ResourceTag/{cluster_tag(cluster)}": OWNED},
                "ForAllValues:StringEquals": {"aws:TagKeys": [TARGET_TAG]},
                "Null": {"aws:TagKeys": "false"},
            },
        },
    )
