"""What a drill may do on EKS, and the rule that holds a stack's grant to it.

``spotproof drill`` interrupts an EKS node's Spot instance through AWS Fault Injection
Service (``spotproof.drill.reclaim.eks``): it tags the one instance it names with
:data:`TARGET_TAG` and starts the stack's experiment template, which targets running Spot
instances carrying that tag and the cluster's own. With ``spotproof:drill`` the stack
creates the template, the role FIS assumes to run it, and a managed policy for whoever
runs drills (``spotproof.eks.drill``). Each is held to this cluster's tagged instances by
``[eks-drill-scoped]``, which evaluates the rendered policies as IAM would
(``policy.aws_iam``), so a hand-edited statement or template is told.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.policy import aws_iam
from spotproof.policy.base import PlannedResource, StackRule

FIS_ACTION = "aws:ec2:send-spot-instance-interruptions"
FIS_TARGET_TYPE = "aws:ec2:spot-instance"
FIS_TARGET_KEY = "SpotInstances"
NOTICE = "PT2M"
"""The action, its resource type, the key its template names its target by, and its
``durationBeforeInterruption``: EC2 sends the Spot interruption notice, then interrupts
the instance that long after (two minutes, the notice a real reclaim gives; the least the
action takes) (https://docs.aws.amazon.com/fis/latest/userguide/fis-actions-reference.html#send-spot-instance-interruptions;
the same keys in awslabs/ec2-spot-workshops ``workshops/fis/fisspotinterruption.yaml``)."""

FIS_ROLE_ACTIONS = ("ec2:SendSpotInstanceInterruptions", "ec2:DescribeInstances")
"""What the experiment role needs for the action: the actions reference lists both, FIS
describing the instances to resolve the template's tags and state filter before it
interrupts them (aws/amazon-ec2-spot-interrupter ``pkg/itn/itn.go`` grants its FIS role
the same two). ``DescribeInstances`` takes no resource-level permissions or tag
conditions (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html),
so only the interruption can be held to tagged instances."""

TARGET_TAG = "spotproof.io/drill-target"
TARGET_VALUE = "true"
"""The tag a drill puts on the one instance it reclaims, and removes after."""
OWNED = "owned"


def cluster_tag(cluster: str) -> str:
    """``kubernetes.io/cluster/<cluster>=owned``: Karpenter tags every instance it launches
    so, and refuses the key in an EC2NodeClass's own tags (aws/karpenter-provider-aws
    ``pkg/utils/utils.go`` ``GetTags``, ``pkg/apis/v1/labels.go``
    ``RestrictedTagPatterns``). spotproof's Spot nodes on EKS are all Karpenter's; its
    managed node group is on-demand."""
    return f"kubernetes.io/cluster/{cluster}"


CLUSTER = "aws:eks/cluster:Cluster"
TEMPLATE = "aws:fis/experimentTemplate:ExperimentTemplate"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
POLICY = "aws:iam/policy:Policy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"


def _resource_tags(target: Mapping[str, Any]) -> dict[str, str]:
    tags = target.get("resourceTags") or []
    if isinstance(tags, Mapping):
        return {str(k): str(v) for k, v in tags.items()}
    return {str(t.get("key")): str(t.get("value")) for t in tags}


def _known(documents: list[Any]) -> list[Any]:
    """The documents a preview knows already: one computed from an output still to come
    (a template's id) is judged on the run that knows it."""
    known = []
    for document in documents:
        try:
            known.append(json.loads(document) if isinstance(document, str) else dict(document))
        except (TypeError, ValueError):
            continue
    return known


def _role_documents(resources: list[PlannedResource], role: str) -> list[Any]:
    attached = {
        str(r.inputs.get("policyArn", "")).rpartition("/")[2]
        for r in resources
        if r.type == ATTACHMENT and r.inputs.get("role") == role
    }
    return _known(
        [
            r.inputs.get("policy")
            for r in resources
            if (r.type == ROLE_POLICY and r.inputs.get("role") == role)
            or (r.type == POLICY and r.inputs.get("name") in attached)
        ]
    )


def _arn(role_arn: str, service: str, region: str, resource: str) -> str:
    """An ARN in the account and partition of ``role_arn`` (``arn:aws:iam::ACCOUNT:role/x``)."""
    parts = (role_arn.split(":") + [""] * 5)[:5]
    return f"arn:{parts[1]}:{service}:{region}:{parts[4]}:{resource}"


def _template_scoped(
    template: PlannedResource, resources: list[PlannedResource], cluster: str, region: str
) -> Iterator[str]:
    wanted = {cluster_tag(cluster): OWNED, TARGET_TAG: TARGET_VALUE}
    for target in template.inputs.get("targets") or []:
        tags = _resource_tags(target)
        if target.get("resourceArns") or any(tags.get(k) != v for k, v in wanted.items()):
            yield (
                f"target {target.get('name')} selects more than the drill's instance; allowed: "
                f"resourceTags {', '.join(f'{k}={v}' for k, v in wanted.items())}"
            )
    role_arn = str(template.inputs.get("roleArn", ""))
    documents = _role_documents(resources, role_arn.rpartition("/")[2])
    instance = _arn(role_arn, "ec2", region, "instance/i-0drill")
    own = f"aws:ResourceTag/{cluster_tag(cluster)}"
    marked = f"aws:ResourceTag/{TARGET_TAG}"
    other = f"aws:ResourceTag/{cluster_tag(cluster + '-other')}"
    probes = (
        ({own: OWNED}, f"an instance without {TARGET_TAG}"),
        ({other: OWNED, marked: TARGET_VALUE}, "another cluster's instance"),
    )
    for context, what in probes:
        request = aws_iam.Request(FIS_ROLE_ACTIONS[0], instance, context)
        if aws_iam.decide(documents, request) == "allowed":
            yield (
                f"its role may interrupt {what}; allowed: {FIS_ROLE_ACTIONS[0]} only on "
                f"instances tagged {cluster_tag(cluster)}={OWNED} and {TARGET_TAG}={TARGET_VALUE}"
            )
    target = aws_iam.Request(FIS_ROLE_ACTIONS[0], instance, {own: OWNED, marked: TARGET_VALUE})
    if aws_iam.decide(documents, target) != "allowed":
        yield f"its role may not interrupt the drill's target ({target}), so every drill fails"


def _operator_scoped(
    documents: list[Any], role_arn: str, region: str, cluster: str
) -> Iterator[str]:
    instance = _arn(role_arn, "ec2", region, "instance/i-0drill")
    owned = {f"aws:ResourceTag/{cluster_tag(cluster)}": OWNED}
    tags = f"{TARGET_TAG} only (ForAllValues aws:TagKeys, Null false) on {cluster_tag(cluster)}"
    probes = (
        ("ec2:CreateTags", instance, {**owned, "aws:TagKeys": ("owner",)}, "tag other keys", tags),
        (
            "ec2:CreateTags",
            instance,
            {"aws:TagKeys": (TARGET_TAG,)},
            "tag another cluster's instances",
            tags,
        ),
        ("ec2:DeleteTags", instance, owned, "delete every tag of the cluster's nodes", tags),
        (
            "iam:CreateServiceLinkedRole",
            _arn(
                role_arn, "iam", "", "role/aws-service-role/ec2.amazonaws.com/AWSServiceRoleForEC2"
            ),
            {"iam:AWSServiceName": "ec2.amazonaws.com"},
            "create another service's linked role",
            "FIS's own, AWSServiceRoleForFIS",
        ),
        (
            "fis:StartExperiment",
            _arn(role_arn, "fis", region, "experiment-template/EXTother"),
            {},
            "start other experiment templates",
            "the stack's template and experiment/*",
        ),
    )
    for action, resource, context, what, allowed in probes:
        if aws_iam.decide(documents, aws_iam.Request(action, resource, context)) == "allowed":
            yield f"the drill operator may {what}; allowed: {action} of {allowed}"


def _cluster_of(template: PlannedResource, clusters: dict[str, str]) -> str:
    """The stack's cluster the template names in its tags; the first one if none."""
    for target in template.inputs.get("targets") or []:
        for key in _resource_tags(target):
            name = key.removeprefix(cluster_tag(""))
            if key.startswith(cluster_tag("")) and name in clusters:
                return name
    return next(iter(clusters))


def drill_scoped(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """The experiment templates that interrupt Spot instances, their roles and the
    operator policies that start them reach this cluster's target instance only."""
    clusters = {
        str(r.inputs.get("name")): str(r.inputs.get("region"))
        for r in resources
        if r.type == CLUSTER
    }
    if not clusters:
        return
    for template in (r for r in resources if r.type == TEMPLATE):
        if FIS_ACTION not in [a.get("actionId") for a in template.inputs.get("actions") or []]:
            continue
        cluster = _cluster_of(template, clusters)
        region = str(template.inputs.get("region") or clusters[cluster])
        for problem in _template_scoped(template, resources, cluster, region):
            yield template.name, f"experiment template: {problem}"
        role_arn = str(template.inputs.get("roleArn", ""))
        for policy in (r for r in resources if r.type == POLICY):
            documents = _known([policy.inputs.get("policy")])
            if "fis:StartExperiment" in json.dumps(documents):
                for problem in _operator_scoped(documents, role_arn, region, cluster):
                    yield policy.name, problem


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "eks-drill-scoped",
        "The drill interrupts and tags this cluster's target instance only.",
        drill_scoped,
    ),
)
