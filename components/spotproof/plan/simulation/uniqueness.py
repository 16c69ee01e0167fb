"""Two resources with one identity: what ``pulumi up`` or the cloud refuses when a program
declares the same thing twice, typically two clusters (or two components) in one stack.

- **URNs.** The engine refuses a program that registers one URN twice ("Duplicate
  resource URN", ``pkg/resource/deploy/step_generator.go``); a URN is the stack, the
  project, the chain of parent types and the resource's name, so two components of one
  type whose children take their names from anything but the component collide.
- **Cloud names.** Names unique within a project, an account, a resource group or the
  whole cloud (buckets, service accounts, IAM roles, queues, clusters): the second
  create fails with "already exists" (GCS and S3 bucket names are global; IAM role names
  per account, https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html;
  service account ids per project; Azure storage account names global,
  https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules).
  Identities are compared as planned; a name only the cloud knows is skipped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from spotproof.catalog import PROFILES
from spotproof.plan.recording.recorder import Recording, Resource
from spotproof.policy import Violation

RULE = "unique-names"

CLOUD_IDENTITY: dict[str, tuple[str, ...]] = {
    type_: names for profile in PROFILES.values() for type_, names in profile.unique_names.items()
}
"""Per resource type, the inputs that name it where the cloud requires names unique."""


def check(recording: Recording) -> list[Violation]:
    return [*_same_urns(recording.resources), *_same_cloud_names(recording.resources)]


def _same_urns(resources: Iterable[Resource]) -> list[Violation]:
    counts: dict[str, int] = defaultdict(int)
    for resource in resources:
        counts[resource.urn] += 1
    return [
        Violation(
            RULE,
            urn.rsplit("::", 1)[-1],
            f"{urn} is declared {count} times; pulumi up refuses a duplicate URN. Give each "
            "component a name of its own: its children are named after it",
        )
        for urn, count in counts.items()
        if count > 1
    ]


def _same_cloud_names(resources: Iterable[Resource]) -> list[Violation]:
    holders: dict[tuple[str, tuple[str, ...]], list[str]] = defaultdict(list)
    for resource in resources:
        keys = CLOUD_IDENTITY.get(resource.type)
        if keys is None:
            continue
        identity = tuple(resource.inputs.get(key) for key in keys)
        if all(isinstance(part, str) for part in identity):
            holders[(resource.type, identity)].append(resource.name)  # type: ignore[arg-type]
    # Registration order under mocks depends on timing: name them in a stable order.
    return [
        Violation(
            RULE,
            later,
            f"{type_} {'/'.join(identity)} is also declared by {first}: the cloud refuses "
            "the second create. Give each cluster (or component) its own name prefix",
        )
        for (type_, identity), names in sorted(holders.items())
        for first, *rest in [sorted(names)]
        for later in rest
    ]
