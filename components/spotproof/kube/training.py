"""A user's own training run as a preemption-safe Job: ``TrainingJob``.

The Job is the smoke test's (``spotproof.kube.smoke``, whose docstring says why each field is what
it is) with the user's container in it: ``restartPolicy: Never``, a ``podFailurePolicy`` under which
reclaims never spend ``backoffLimit``, a grace period the cloud's preemption path can honour, GPU
limits, the target's tolerations, selector and priority, the workload identity's labels, and a
disruption budget against voluntary evictions where the reclaim drain would not be held back by it.

With ``nodes`` above one the run is a gang: one JobSet (``spotproof.kube.jobset`` says how
a reclaim restarts the whole gang without spending its failure budget), its pods started
by torchrun with the rendezvous on rank 0's pod, and a budget over all of its pods. By
default (``GangRecovery.RESTART_GANG``) it keeps no memory tier (``MEMORY_TIER_DIR``): the
JobSet restarts by recreating every pod, so a restart would find the tier empty, and the
strategy that keeps pods cannot be rendered (``catalog.jobset.IN_PLACE_RESTART_REFUSED``).
With ``GangRecovery.REPLACE_RANK`` a worker's reclaim replaces its pod alone
(``kube.jobset.replace_rank_spec``), so the gang keeps a memory tier, rendered here
(``kube.replace_rank``), with its replica secret and a NetworkPolicy that admits the
gang's own pods, and only them, to every port of its pods.

The trainer keeps the exit-code contract of ``spotproof.runtime.exit_codes``: after
SIGTERM it commits a final checkpoint and exits 143 (what a process killed by SIGTERM
reports anyway), so the Job runs it again for free; a configuration error exits 2 and
fails the Job at once; anything else is a crash that counts against ``backoffLimit``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof.catalog import jobset as jobset_facts
from spotproof.catalog.pulumi_kubernetes import SKIP_AWAIT_ANNOTATION
from spotproof.fleet import PoolClass
from spotproof.kube import jobset, replace_rank
from spotproof.kube.baseline import MANAGED_BY
from spotproof.kube.jobset import GangRecovery
from spotproof.kube.network_policy import allowed_egress, allowed_traffic
from spotproof.kube.pods import TRAINER_CONTAINER, Trainer
from spotproof.kube.training_spec import job_spec, pod_failure_policy
from spotproof.kube.workload import (
    ServiceAccountRef,
    TargetPlacement,
    WorkloadIdentity,
    queue_labels,
)
from spotproof.runtime import settings
from spotproof.runtime.launcher import Launcher
from spotproof.scheduling import Placement, run_profile
from spotproof.scheduling.work_matrix import WORK_LABEL, Work

__all__ = [
    "GangRecovery",
    "Launcher",
    "Trainer",
    "TrainingJob",
    "TrainingJobArgs",
    "disruption_budget",
    "job_spec",
    "pod_failure_policy",
]

_JOB_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DEFAULT_GRACE_SECONDS = 30
"""Where the placement states no bound (capacity that is not reclaimed)."""
NOT_AWAITED = {SKIP_AWAIT_ANNOTATION: "true"}
"""On every Job and JobSet spotproof renders: ``pulumi up`` returns once the run is
submitted instead of failing when the run outlasts the provider's wait for completion."""


def disruption_budget(
    name: str,
    job_name: str,
    namespace: str,
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
    *,
    pods: int = 1,
) -> k8s.policy.v1.PodDisruptionBudget:
    """``minAvailable: <pods>`` over the Job's (or gang's) pods, so no voluntary eviction
    takes one: only an integer ``minAvailable`` is valid over a Job's pods
    (``maxUnavailable`` and percentages need a scale subresource), see
    https://kubernetes.io/docs/tasks/run-application/configure-pdb/."""
    return k8s.policy.v1.PodDisruptionBudget(
        name,
        metadata={"name": job_name, "namespace": namespace, "labels": MANAGED_BY},
        spec={"minAvailable": pods, "selector": {"matchLabels": dict(labels)}},
        opts=opts,
    )


@dataclass(kw_only=True)
class TrainingJobArgs:
    trainer: Trainer
    placement: TargetPlacement
    """The target pool class and what serves it: ``cluster.placement(PoolClass.SPOT_GPU)``
    on a ``HybridCluster``, ``TargetPlacement.on_existing_cluster(cloud)`` on a cluster you
    already have (``spotproof.scheduling.placement(...)`` is what a pod spec gets from it)."""
    identity: WorkloadIdentity
    """The service account the Job runs as (it must exist, bound to the bucket: the
    cluster's ``workload_identity``, or the ``CheckpointBucket``'s ``identity`` on a
    cluster you already have) and what its pods need for that binding."""
    checkpoint_url: pulumi.Input[str]
    """Where this run checkpoints, e.g. ``<bucket url>/checkpoints/<run>``: one prefix per
    run, so two runs never resume from each other's state."""
    job_name: str | None = None
    """The Job's name (a DNS label, at most 63 characters); default: the resource name."""
    grace_period_seconds: int | None = None
    """``terminationGracePeriodSeconds``; default and ceiling: what the target's
    preemption path delivers (``placement.max_grace_seconds``)."""
    backoff_limit: int = 3
    """Crashes tolerated; preemptions never count. For a gang: restarts of the whole gang
    after crashes (the JobSet's ``maxRestarts``)."""
    nodes: int = 1
    """Pods, one per node, each with ``trainer.gpus`` GPUs; above one, a JobSet gang."""
    recovery: GangRecovery = GangRecovery.RESTART_GANG
    """What a gang's node reclaim restarts. ``RESTART_GANG``: every pod. ``REPLACE_RANK``
    (``nodes`` >= 2, ``Launcher.TORCHRUN``): only the reclaimed worker's pod, the others
    waiting for it in torchrun's rendezvous; the leader's reclaim still restarts the gang.
    It adds a memory tier to every pod (its size on top of ``trainer.memory``) and needs
    ``replica_secret``."""
    replica_secret: pulumi.Input[str] | None = None
    """REPLACE_RANK: the gang's replica secret, 32 to 4096 bytes, e.g.
    ``pulumi.Config().require_secret("replicaSecret")`` after ``pulumi config set --secret
    replicaSecret "$(openssl rand -hex 32)"``; rendered into a Kubernetes Secret the pods
    mount read-only."""
    memory_tier_gib: float | None = None
    """REPLACE_RANK: the memory tier's size; default: ``TIER_COPIES`` (6) times
    ``trainer.state_mib``."""
    work: Work | None = None
    """What kind of work it is (``scheduling.work_matrix``): its pods are labelled with it
    and the plan shows the capacity the decision matrix advises next to the target."""
    controllers: Sequence[pulumi.Resource] = ()
    """What the run needs installed first: ``cluster.controllers`` (the JobSet controller for
    a gang; Kueue and its queue for a queued pool, whose webhook must see the Job created)."""
    namespace: str | None = None
    """Where the Job, its disruption budget and (on a cluster you already have) its
    NetworkPolicy go. Default, and the only one allowed: the namespace of the identity's
    service account, as a pod runs only as a service account of its own namespace ("Each
    service account is bound to a Kubernetes namespace",
    https://kubernetes.io/docs/concepts/security/service-accounts/); a team's namespace
    takes an identity there (``CheckpointBucketArgs(trainer=ServiceAccountRef("ml",
    "trainer"))``). Stating it makes a mismatch an error."""

    def __post_init__(self) -> None:
        # A wrong type would otherwise fail as an AttributeError deep inside the component.
        expected = (
            ("trainer", Trainer, "Trainer(image=..., command=...)"),
            (
                "placement",
                TargetPlacement,
                "cluster.placement(PoolClass.SPOT_GPU) on a HybridCluster, "
                "TargetPlacement.on_existing_cluster(cloud) on a cluster you already have",
            ),
            (
                "identity",
                WorkloadIdentity,
                "cluster.workload_identity on a HybridCluster, the CheckpointBucket's "
                "identity on a cluster you already have",
            ),
        )
        for field, wanted, allowed in expected:
            value = getattr(self, field)
            if not isinstance(value, wanted):
                what = type(value)
                hint = (
                    " (the pod fields a placement renders to, without the grace a reclaim "
                    "leaves the pod)"
                    if isinstance(value, Placement)
                    else ""
                )
                raise TypeError(
                    f"TrainingJobArgs.{field}: a {what.__module__}.{what.__qualname__}{hint}, "
                    f"not a {wanted.__name__}; allowed: {allowed}"
                )
        if not isinstance(self.identity.service_account, ServiceAccountRef):
            raise TypeError(
                f"TrainingJobArgs.identity.service_account = {self.identity.service_account!r}; "
                'allowed: ServiceAccountRef("<namespace>", "<name>")'
            )
        if self.namespace is not None and not (
            isinstance(self.namespace, str) and _JOB_NAME.fullmatch(self.namespace)
        ):
            raise ValueError(
                f"TrainingJobArgs.namespace = {self.namespace!r}; allowed: a DNS label "
                "(a-z, 0-9, '-', at most 63), or None for the identity's"
            )


class TrainingJob(pulumi.ComponentResource):
    """A user's trainer as one Job that survives reclaims of its node, and its disruption
    budget, in the identity's namespace. On a cluster spotproof did not create (the
    placement names its cloud) also a NetworkPolicy that isolates the Job's own pods there:
    no baseline of spotproof's isolates that namespace, and one that selects only them
    changes nothing for the rest of a team's namespace."""

    job_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        job_name = args.job_name or name
        grace = _checked(job_name, args)
        super().__init__("spotproof:kube:TrainingJob", name, None, opts)
        namespace = args.identity.service_account.namespace
        own = {"app.kubernetes.io/name": job_name, "app.kubernetes.io/component": "trainer"}
        labels = dict(own)
        if args.work is not None:
            labels[WORK_LABEL] = args.work.value

        replacing = args.recovery is GangRecovery.REPLACE_RANK

        def spec(url: str) -> Any:
            environment = {
                **args.identity.environment,
                **args.trainer.env,
                settings.CHECKPOINT_URL.name: url,
                settings.GRACE_SECONDS.name: str(grace),
            }
            env: list[dict[str, Any]] = [
                {"name": k, "value": str(v)} for k, v in environment.items()
            ]
            trainer = args.trainer
            if replacing:
                return replace_rank.jobs(job_name, args, env, grace, labels)
            if args.nodes > 1 and trainer.launcher is Launcher.TORCHRUN:
                per_node = max(trainer.gpus, 1)
                command = (*jobset.torchrun(job_name, args.nodes, per_node), *trainer.command)
                trainer = dataclasses.replace(trainer, command=command)
                env += jobset.torchrun_environment(grace)
            elif args.nodes > 1:
                env += jobset.gang_environment(job_name, args.nodes)
            return job_spec(
                trainer,
                env,
                placement=args.placement,
                identity=args.identity,
                grace_period_seconds=grace,
                backoff_limit=args.backoff_limit,
                labels=labels,
            )

        metadata = {
            "name": job_name,
            "namespace": namespace,
            "labels": {**MANAGED_BY, **labels, **queue_labels(args.placement)},
            "annotations": NOT_AWAITED,
        }
        isolation = []
        if args.placement.cloud is not None:
            # Before the Job: no pod of it runs before its traffic is confined. A gang that
            # replaces ranks takes its ingress from its own policy alone (replace_rank.objects:
            # its JobSet's pods, by the JobSet controller's label, on every port).
            cloud = args.placement.cloud
            isolation.append(
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-network",
                    metadata={"name": job_name, "namespace": namespace, "labels": MANAGED_BY},
                    spec=allowed_egress(cloud, own) if replacing else allowed_traffic(cloud, own),
                    opts=pulumi.ResourceOptions(parent=self),
                )
            )
        if replacing:
            isolation += replace_rank.objects(name, job_name, namespace, args.replica_secret, self)
        # A pod template is immutable: a change means a new Job (or JobSet).
        replace = pulumi.ResourceOptions(
            parent=self,
            replace_on_changes=["spec"],
            delete_before_replace=True,
            depends_on=[*args.controllers, *args.identity.granted_by, *isolation],
        )
        job_spec_of = pulumi.Output.from_input(args.checkpoint_url).apply(spec)
        budgeted = labels
        job: k8s.batch.v1.Job | k8s.apiextensions.CustomResource
        if args.nodes == 1:
            job = k8s.batch.v1.Job(f"{name}-job", metadata=metadata, spec=job_spec_of, opts=replace)
        else:
            budgeted = {jobset_facts.JOBSET_NAME_LABEL: job_name}
            job = k8s.apiextensions.CustomResource(
                f"{name}-jobset",
                api_version=jobset_facts.API_VERSION,
                kind=jobset_facts.KIND,
                metadata=metadata,
                spec=job_spec_of.apply(
                    lambda one: (
                        jobset.replace_rank_spec(
                            job_name,
                            *one,
                            nodes=args.nodes,
                            max_restarts=args.backoff_limit,
                            container=TRAINER_CONTAINER,
                        )
                        if replacing
                        else jobset.jobset_spec(
                            job_name,
                            one,
                            nodes=args.nodes,
                            max_restarts=args.backoff_limit,
                            container=TRAINER_CONTAINER,
                        )
                    )
                ),
                opts=replace,
            )
        if not args.placement.reclaim_honours_budgets:
            disruption_budget(
                f"{name}-pdb",
                job_name,
                namespace,
                budgeted,
                pulumi.ResourceOptions(parent=self),
                pods=args.nodes,
            )
        self.job_name = job.metadata.apply(lambda m: m["name"])
        self.register_outputs({"job_name": self.job_name})


def _checked(job_name: str, args: TrainingJobArgs) -> int:
    """The grace period to render; ``ValueError`` with one line naming what is wrong."""
    if not _JOB_NAME.fullmatch(job_name):
        raise ValueError(
            f"TrainingJob name {job_name!r}: allowed a DNS label (a-z, 0-9, '-', at most 63)"
        )
    if args.placement.target is PoolClass.SYSTEM:
        raise ValueError(f"TrainingJob {job_name}: training never targets the system pool")
    if not args.trainer.command:
        raise ValueError(f"TrainingJob {job_name}: the trainer needs a command")
    run_profile.annotations_of(args.trainer, f"TrainingJob {job_name}")  # sizes above 0
    if args.trainer.gpus < 0:
        raise ValueError(f"TrainingJob {job_name}: gpus = {args.trainer.gpus}; allowed: 0 or more")
    if args.nodes < 1:
        raise ValueError(f"TrainingJob {job_name}: nodes = {args.nodes}; allowed: 1 or more")
    if args.nodes > 1:
        # Pods are <name>-workers-0-<index>-<5 random characters> (and <name>-leader-0-0-...
        # with REPLACE_RANK, always the shorter), a DNS label of at most 63.
        last = args.nodes - (2 if args.recovery is GangRecovery.REPLACE_RANK else 1)
        longest = f"{job_name}-{jobset.WORKERS}-0-{max(last, 0)}-abcde"
        if len(longest) > jobset_facts.MAX_NAME_LENGTH:
            allowed = len(job_name) - (len(longest) - jobset_facts.MAX_NAME_LENGTH)
            raise ValueError(
                f"TrainingJob {job_name}: too long a name for a gang of {args.nodes} "
                f"(its pods would be named like {longest}); allowed: at most {allowed} characters"
            )
    account = args.identity.service_account
    namespace = account.namespace
    if args.namespace is not None and args.namespace != namespace:
        raise ValueError(
            f"TrainingJob {job_name}: namespace = {args.namespace!r}, but its pods run as "
            f"service account {namespace}/{account.name}, and a pod runs only as a service "
            f"account of its own namespace; allowed: {namespace!r}, or an identity in "
            f"{args.namespace} (on a cluster you already have: "
            f"CheckpointBucketArgs(trainer=ServiceAccountRef({args.namespace!r}, ...)).identity)"
        )
    queue = args.placement.queue
    if queue is not None and queue.namespace != namespace:
        raise ValueError(
            f"TrainingJob {job_name}: runs in namespace {namespace}, but the queue of "
            f"{args.placement.target.value} ({queue.name}) admits only from {queue.namespace}; "
            f"allowed: an identity in {queue.namespace}"
        )
    if args.backoff_limit < 0:
        raise ValueError(f"TrainingJob {job_name}: backoff_limit must be 0 or more")
    if args.recovery is GangRecovery.REPLACE_RANK:
        refused = replace_rank.refusal(job_name, args)
        if refused:
            raise ValueError(refused)
    if settings.MEMORY_TIER_DIR.name in args.trainer.env:
        # Under RESTART_GANG every restart would find the tier empty
        # (plan.simulation.memory_tiers); under REPLACE_RANK the tier is rendered here.
        raise ValueError(
            f"TrainingJob {job_name}: {settings.MEMORY_TIER_DIR.name} needs pods that outlive "
            "a reclaim, and a gang restart recreates them (a JobSet restarts by "
            f"{jobset_facts.RECREATE}); allowed: a trainer env without it, and "
            "recovery=GangRecovery.REPLACE_RANK, which renders the memory tier itself"
        )
    ceiling = args.placement.max_grace_seconds
    grace = args.grace_period_seconds or ceiling or DEFAULT_GRACE_SECONDS
    if grace < 1 or (ceiling is not None and grace > ceiling):
        allowed = f"1..{ceiling}" if ceiling is not None else "1 or more"
        raise ValueError(
            f"TrainingJob {job_name}: grace_period_seconds = {grace} does not fit the "
            f"preemption path of {args.placement.target.value}; allowed: {allowed}"
        )
    return grace
