"""Can each pod do what its checkpoint store will ask of the cloud, with the role it gets?

A pod on EKS gets a role through a Pod Identity association (namespace, service account,
role). Its checkpoint store, at the ``CHECKPOINT_URL`` in its environment, makes the calls
``runtime.storage.s3.iam_requests`` lists; every one must be allowed by the policies of
that role (inline and attached), evaluated as IAM would (``policy.aws_iam``). moto accepts
every request, so without this rule a role missing one grant would pass every offline
test and fail each pod's start on a real account.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from spotproof.policy import aws_iam
from spotproof.policy.base import PlannedResource, Problem, Scope, StackRule, pod_key_path
from spotproof.runtime import settings
from spotproof.runtime.storage.s3 import iam_requests
from spotproof.scheduling import pod_templates

ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POLICY = "aws:iam/policy:Policy"


def _s3_stores(spec: Mapping[str, Any]) -> Iterator[str]:
    for container in pod_templates.containers(spec):
        for variable in container.get("env") or []:
            value = variable.get("value")
            is_store = variable.get("name") == settings.CHECKPOINT_URL.name
            if is_store and isinstance(value, str) and value.startswith("s3://"):
                yield value


def _role_documents(resources: list[PlannedResource], role_name: str) -> list[Any]:
    inline = [
        r.inputs.get("policy")
        for r in resources
        if r.type == ROLE_POLICY and r.inputs.get("role") == role_name
    ]
    # An attached policy of the stack's own is found by the name its ARN ends with; an
    # AWS managed policy is not in the program, and none grants a bucket's objects here.
    attached_names = {
        str(r.inputs.get("policyArn", "")).rpartition("/")[2]
        for r in resources
        if r.type == ATTACHMENT and r.inputs.get("role") == role_name
    }
    attached = [
        r.inputs.get("policy")
        for r in resources
        if r.type == POLICY and r.inputs.get("name") in attached_names
    ]
    return [document for document in [*inline, *attached] if isinstance(document, str)]


def checkpoint_access(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    roles = {
        (r.inputs.get("namespace"), r.inputs.get("serviceAccount")): str(
            r.inputs.get("roleArn", "")
        ).rpartition("/")[2]
        for r in resources
        if r.type == ASSOCIATION
    }
    for resource, namespace, template in pod_templates.workload_templates(resources):
        account = template.spec.get("serviceAccountName", "default")
        for url in _s3_stores(template.spec):
            role = roles.get((namespace, account))
            if role is None:
                yield (
                    resource.name,
                    Problem(
                        f"{url}: service account {namespace}/{account} has no Pod Identity "
                        "association, so the pod has no AWS credentials",
                        pod_key_path(resource, template),
                    ),
                )
                continue
            parsed = urlparse(url)
            documents = _role_documents(resources, role)
            for action, arn, context in iam_requests(parsed.netloc, parsed.path.strip("/")):
                request = aws_iam.Request(action, arn, context)
                verdict = aws_iam.decide(documents, request)
                if verdict != "allowed":
                    yield (
                        resource.name,
                        Problem(
                            f"role {role} of {namespace}/{account} is {verdict} {request}, "
                            f"which the checkpoint store at {url} needs",
                            pod_key_path(resource, template),
                        ),
                    )


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "s3-checkpoint-access",
        "The role a pod gets allows every call its checkpoint store makes.",
        checkpoint_access,
        scope=Scope(needs_stack=True),
    ),
)
