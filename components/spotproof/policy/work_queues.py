"""Rules for batch work queues and the identities that consume them, on every cloud.

A work queue loses work silently in ways no API refuses (the sources are in each cloud's
``WorkQueue`` component, ``spotproof.gke.work_queue`` and its siblings):

- **Pub/Sub**: a subscription without an expiration policy is deleted after 31 idle days;
  dead letters published to a topic without a subscription are lost; without the Pub/Sub
  service agent's publisher role on the dead-letter topic and subscriber role on the
  source subscription nothing is forwarded (and delivery attempts are not counted);
  acknowledgement deadlines outside 10-600 s are refused.
- **SQS**: a dead-letter queue that keeps messages no longer than its source drops them
  early (the original enqueue time counts); queues must be encrypted and TLS-only.
- **Azure Storage Queues** have no dead-lettering of their own: the runtime moves poison
  items to ``<queue>-poison``, which must exist.

And a consumer's identity, the worker's, must reach no further than its queue and its
results prefix: whoever holds it can read the bucket, so a wider grant is a leak.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.catalog.aks import BLOB_DATA_CONTRIBUTOR, confined_prefix
from spotproof.policy.base import PlannedResource, StackRule

# --- GCP Pub/Sub ---------------------------------------------------------------------------

TOPIC = "gcp:pubsub/topic:Topic"
SUBSCRIPTION = "gcp:pubsub/subscription:Subscription"
TOPIC_IAM = "gcp:pubsub/topicIAMMember:TopicIAMMember"
SUBSCRIPTION_IAM = "gcp:pubsub/subscriptionIAMMember:SubscriptionIAMMember"
BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
PUBSUB_AGENT = "@gcp-sa-pubsub.iam.gserviceaccount.com"
ACK_DEADLINE_SECONDS = (10, 600)
DELIVERY_ATTEMPTS = (5, 100)
WORKER_BUCKET_ROLES = frozenset({"roles/storage.objectCreator", "roles/storage.objectViewer"})


def _short(name_or_path: Any) -> str:
    """``projects/p/topics/t`` or ``t`` -> ``t``."""
    return str(name_or_path or "").rsplit("/", 1)[-1]


def _of(resources: list[PlannedResource], type_: str) -> list[PlannedResource]:
    return [r for r in resources if r.type == type_]


def pubsub_queues_keep_work(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """Over work subscriptions (those with a dead-letter policy) and the subscriptions of
    their dead-letter topics."""
    subscriptions = _of(resources, SUBSCRIPTION)
    subscribed_topics = {_short(s.inputs.get("topic")) for s in subscriptions}
    agent_grants = {
        (r.type, _short(r.inputs.get("topic") or r.inputs.get("subscription")), r.inputs["role"])
        for r in [*_of(resources, TOPIC_IAM), *_of(resources, SUBSCRIPTION_IAM)]
        if PUBSUB_AGENT in str(r.inputs.get("member"))
    }
    dead_topics = {
        _short((s.inputs.get("deadLetterPolicy") or {}).get("deadLetterTopic"))
        for s in subscriptions
        if s.inputs.get("deadLetterPolicy")
    }
    for subscription in subscriptions:
        inputs, name = subscription.inputs, _short(subscription.inputs.get("name"))
        # A work queue (it dead-letters) or a dead-letter queue; other subscriptions a
        # stack may have are none of this rule's business.
        if not inputs.get("deadLetterPolicy") and _short(inputs.get("topic")) not in dead_topics:
            continue
        if (inputs.get("expirationPolicy") or {}).get("ttl") != "":
            yield (
                subscription.name,
                f'subscription {name}: without expirationPolicy.ttl "" Pub/Sub deletes it '
                "after 31 days without activity, backlog and all",
            )
        deadline = inputs.get("ackDeadlineSeconds")
        low, high = ACK_DEADLINE_SECONDS
        if deadline is not None and not low <= deadline <= high:
            yield (
                subscription.name,
                f"subscription {name}: ackDeadlineSeconds {deadline}; allowed: {low}..{high}",
            )
        policy = inputs.get("deadLetterPolicy")
        if not policy:
            continue
        attempts, dead = policy.get("maxDeliveryAttempts"), _short(policy.get("deadLetterTopic"))
        low, high = DELIVERY_ATTEMPTS
        if attempts is not None and not low <= attempts <= high:
            yield (
                subscription.name,
                f"subscription {name}: maxDeliveryAttempts {attempts}; allowed: {low}..{high}",
            )
        if dead not in subscribed_topics:
            yield (
                subscription.name,
                f"subscription {name} dead-letters to topic {dead}, which has no subscription: "
                "messages published to a topic with no subscriptions are lost",
            )
        if (TOPIC_IAM, dead, "roles/pubsub.publisher") not in agent_grants:
            yield (
                subscription.name,
                f"subscription {name}: the Pub/Sub service agent needs roles/pubsub.publisher "
                f"on dead-letter topic {dead}, or nothing is forwarded",
            )
        if (SUBSCRIPTION_IAM, name, "roles/pubsub.subscriber") not in agent_grants:
            yield (
                subscription.name,
                f"subscription {name}: the Pub/Sub service agent needs roles/pubsub.subscriber "
                "on it to remove forwarded messages",
            )


def pubsub_consumers_scoped(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """A member that consumes a work subscription gets objects under a prefix, nothing more."""
    consumers = {
        str(r.inputs.get("member"))
        for r in _of(resources, SUBSCRIPTION_IAM)
        if PUBSUB_AGENT not in str(r.inputs.get("member"))
    }
    for grant in _of(resources, BUCKET_IAM):
        member, role = str(grant.inputs.get("member")), grant.inputs.get("role")
        if member not in consumers:
            continue
        expression = str((grant.inputs.get("condition") or {}).get("expression") or "")
        if role not in WORKER_BUCKET_ROLES:
            yield (
                grant.name,
                f"queue consumer {member} holds {role} on a bucket; allowed: "
                f"{', '.join(sorted(WORKER_BUCKET_ROLES))} under its results prefix",
            )
        elif "/objects/" not in expression:
            yield (
                grant.name,
                f"queue consumer {member} holds {role} on the whole bucket; allowed: a "
                'condition resource.name.startsWith("projects/_/buckets/B/objects/PREFIX/")',
            )
    for grant in _of(resources, PROJECT_IAM):
        if str(grant.inputs.get("member")) in consumers:
            yield (
                grant.name,
                f"queue consumer {grant.inputs.get('member')} holds {grant.inputs.get('role')} "
                "on the whole project; grant it on the subscription and bucket instead",
            )


# --- AWS SQS -------------------------------------------------------------------------------

QUEUE = "aws:sqs/queue:Queue"
QUEUE_POLICY = "aws:sqs/queuePolicy:QueuePolicy"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
DEFAULT_RETENTION_SECONDS = 345_600
"""``MessageRetentionPeriod`` when unset: 4 days."""


def _json(value: Any) -> Any:
    """A policy document from its JSON text or its dict; ``{}`` for anything else (an
    unparseable text, or a value not known until the resources exist)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _statements(document: Any) -> list[Mapping[str, Any]]:
    statements = _json(document).get("Statement") or []
    return [statements] if isinstance(statements, Mapping) else list(statements)


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def _denies_plain_http(document: Any) -> bool:
    return any(
        s.get("Effect") == "Deny"
        and (s.get("Condition") or {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        for s in _statements(document)
    )


def sqs_queues_keep_work(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    queues = {str(q.inputs.get("name", q.name)): q for q in _of(resources, QUEUE)}
    tls_only = {
        _short(p.inputs.get("queueUrl"))
        for p in _of(resources, QUEUE_POLICY)
        if _denies_plain_http(p.inputs.get("policy"))
    }
    for name, queue in queues.items():
        redrive = _json(queue.inputs.get("redrivePolicy"))
        if not redrive:
            continue
        dead_name = _short(str(redrive.get("deadLetterTargetArn", "")).replace(":", "/"))
        dead = queues.get(dead_name)
        for each_name, each in ((name, queue), (dead_name, dead)):
            if each is None:
                continue
            if not (each.inputs.get("sqsManagedSseEnabled") or each.inputs.get("kmsMasterKeyId")):
                yield (each.name, f"queue {each_name} is not encrypted (sqsManagedSseEnabled)")
            if each_name not in tls_only:
                yield (each.name, f"queue {each_name} has no policy denying requests without TLS")
        if dead is None:
            continue
        kept = queue.inputs.get("messageRetentionSeconds", DEFAULT_RETENTION_SECONDS)
        dead_kept = dead.inputs.get("messageRetentionSeconds", DEFAULT_RETENTION_SECONDS)
        if dead_kept <= kept:
            yield (
                dead.name,
                f"dead-letter queue {dead_name} keeps messages {dead_kept} s, no longer than "
                f"its source {name} ({kept} s): a dead letter keeps its first enqueue time "
                "and would expire early; keep it longer",
            )


def sqs_consumers_scoped(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """A role that receives from a queue reads and creates objects under a prefix only."""
    for policy in _of(resources, ROLE_POLICY):
        statements = _statements(policy.inputs.get("policy"))
        actions = [a for s in statements for a in _listed(s.get("Action"))]
        # A batch worker consumes a queue and stores results (Karpenter's controller
        # receives from its interruption queue but touches no bucket).
        consumes = "sqs:ReceiveMessage" in actions or "sqs:*" in actions
        if consumes and any(a.startswith("s3:") for a in actions):
            for statement in statements:
                for problem in _too_wide(statement):
                    yield (policy.name, f"queue consumer {problem}")


def _too_wide(statement: Mapping[str, Any]) -> Iterator[str]:
    actions, targets = _listed(statement.get("Action")), _listed(statement.get("Resource"))
    if "*" in targets or any(a.endswith(":*") for a in actions):
        yield f"statement {statement.get('Sid')} is not scoped: {actions} on {targets}"
    if "s3:DeleteObject" in actions:
        yield "may delete objects; results are written once"
    objects = [a for a in actions if a in ("s3:GetObject", "s3:PutObject")]
    # arn:aws:s3:::BUCKET/PREFIX/* names a prefix; arn:aws:s3:::BUCKET/* the whole bucket.
    if objects and any(t.count("/") < 2 for t in targets if t.startswith("arn:aws:s3")):
        yield (
            f"may {', '.join(objects)} anywhere in the bucket; allowed: "
            "arn:aws:s3:::BUCKET/PREFIX/*"
        )
    if "s3:ListBucket" in actions and "s3:prefix" not in json.dumps(statement.get("Condition")):
        yield "may list the whole bucket; allowed: a StringLike s3:prefix condition"


# --- Azure Storage Queues ------------------------------------------------------------------

STORAGE_QUEUE = "azure-native:storage:Queue"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
POISON_SUFFIX = "-poison"
QUEUE_DATA_CONTRIBUTOR = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"


def storage_queues_have_poison_queues(
    resources: list[PlannedResource],
) -> Iterator[tuple[str, str]]:
    queues = {
        (str(q.inputs.get("accountName")), str(q.inputs.get("queueName"))): q
        for q in _of(resources, STORAGE_QUEUE)
    }
    for (account, name), queue in queues.items():
        if name.endswith(POISON_SUFFIX):
            continue
        if (account, name + POISON_SUFFIX) not in queues:
            yield (
                queue.name,
                f"storage queue {name} has no {name}{POISON_SUFFIX}: storage queues cannot "
                "dead-letter, and the workers move poison items there",
            )


def storage_queue_consumers_scoped(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    assignments = _of(resources, ROLE_ASSIGNMENT)
    consumers = {
        str(a.inputs.get("principalId"))
        for a in assignments
        if str(a.inputs.get("roleDefinitionId", "")).endswith(QUEUE_DATA_CONTRIBUTOR)
        and "/queues/" in str(a.inputs.get("scope"))
    }
    for assignment in assignments:
        if str(assignment.inputs.get("principalId")) not in consumers:
            continue
        scope = str(assignment.inputs.get("scope"))
        if "/queues/" not in scope and "/containers/" not in scope:
            yield (
                assignment.name,
                f"queue consumer holds a role on {scope}; allowed: one queue or one container",
            )
        role = str(assignment.inputs.get("roleDefinitionId", ""))
        condition = str(assignment.inputs.get("condition") or "")
        version = assignment.inputs.get("conditionVersion")
        if role.endswith(BLOB_DATA_CONTRIBUTOR) and not confined_prefix(condition, version):
            yield (
                assignment.name,
                "queue consumer may reach the whole container; allowed: a condition "
                "confining it to its results prefix (spotproof.catalog.aks.blobs_under)",
            )


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "pubsub-work-queue",
        "Pub/Sub subscriptions never expire, dead-letter to a subscribed topic with the "
        "service agent's roles, and keep deadlines and attempts in range",
        pubsub_queues_keep_work,
    ),
    StackRule(
        "sqs-work-queue",
        "SQS work queues and their dead-letter queues are encrypted, TLS-only, and the "
        "dead-letter queue keeps messages longer than its source",
        sqs_queues_keep_work,
    ),
    StackRule(
        "storage-queue-poison",
        "every Azure storage work queue has its poison queue",
        storage_queues_have_poison_queues,
    ),
    StackRule(
        "queue-consumer-scope",
        "a work queue's consumer reaches its queue and its results prefix, nothing more",
        lambda resources: [
            *pubsub_consumers_scoped(resources),
            *sqs_consumers_scoped(resources),
            *storage_queue_consumers_scoped(resources),
        ],
    ),
)
