"""EC2: a drill interrupts an EKS node's Spot instance through AWS Fault Injection Service.

FIS's ``aws:ec2:send-spot-instance-interruptions`` has EC2 send its own Spot interruption
notice and interrupt the instance once the template's ``durationBeforeInterruption`` has
passed, so the interruption queue, Karpenter and the node see what a real reclaim gives them
(https://docs.aws.amazon.com/fis/latest/userguide/fis-actions-reference.html#send-spot-instance-interruptions,
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/initiate-a-spot-instance-interruption.html).

The stack's experiment template (``Grant``) targets ``aws:ec2:spot-instance`` resources by
tag: the cluster's ``kubernetes.io/cluster/<name>=owned`` and ``<target_tag_key>=true``, in
state ``running``. No instance carries the target tag but the one a drill names, for as
long as the drill needs it: ``reclaim`` tags it, starts the experiment and waits (bounded)
until the experiment has started; the tag stays until the experiment's action has run
(``eks_experiment``), which ``check`` follows while the drill watches the cluster: it then
removes the tag, or, when the experiment or its action failed, removes it and says why in
FIS's words. A failed start removes the tag at once; ``undo`` removes any tag still there.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from spotproof.catalog import Cloud
from spotproof.drill.errors import DrillError, DrillRefused, GrantMissing, StageTimedOut
from spotproof.drill.grants import ENABLE
from spotproof.drill.instances import Instance
from spotproof.drill.reclaim import CloudDrill, Reclaimed
from spotproof.drill.reclaim.eks_experiment import ExperimentFailed, Progress, one_line, progress

if TYPE_CHECKING:
    from boto3.session import Session
    from botocore.client import BaseClient

PROVIDER_ID_FORM = "aws:///ZONE/i-INSTANCEID"
"""What the AWS node controller and Karpenter write: ``aws:///<zone>/<instance id>``
(kubernetes/cloud-provider-aws ``pkg/providers/v1/instances.go`` ``KubernetesInstanceID``
and ``pkg/providers/v1/aws.go``, tag v1.36.1; aws/karpenter-provider-aws
``pkg/cloudprovider/cloudprovider.go``, tag v1.14.1). The same file also reads an empty
zone (``aws:////i-…``); Fargate's ``fargate-<ip>`` ids are no EC2 instance."""

_PROVIDER_ID = re.compile(r"^aws:///([^/]*)/(i-[^/]+)$")

CLUSTER_TAG = "kubernetes.io/cluster/{cluster}"
OWNED = "owned"
"""Karpenter tags every instance it launches ``kubernetes.io/cluster/<cluster>=owned``
(aws/karpenter-provider-aws ``pkg/utils/utils.go`` ``GetTags``, tag v1.14.1), as EKS asks
of self-managed nodes (https://docs.aws.amazon.com/eks/latest/userguide/worker.html)."""

TARGET_VALUE = "true"
SPOT = "spot"
"""``Instance.InstanceLifecycle`` of a Spot instance; absent on on-demand ones
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Instance.html)."""

DENIED = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})
"""EC2's and FIS's codes for a missing IAM permission
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html,
https://docs.aws.amazon.com/fis/latest/APIReference/CommonErrors.html)."""

DESCRIBE = "ec2:DescribeInstances"
TAG = "ec2:CreateTags"
UNTAG = "ec2:DeleteTags"
START = "fis:StartExperiment"
WATCH = "fis:GetExperiment"

ACCEPT_SECONDS = 30.0
"""How long a reclaim waits for the experiment to start (to resolve its target)."""
SETTLE_SECONDS = 300.0
"""How long a reclaim waits for an earlier experiment's action to run before it tags the
next instance (a gang's next rank): the template interrupts every tagged instance, so two
experiments must not find each other's. The stack's template gives its action
``durationBeforeInterruption`` PT2M (``eks.drill``)."""
POLL_SECONDS = 1.0

_T = TypeVar("_T")


def instance(provider_id: str) -> Instance | None:
    """The EC2 instance behind an EKS node's provider id; None for another cloud's."""
    found = _PROVIDER_ID.match(provider_id)
    if not found:
        return None
    zone, instance_id = found.groups()
    return Instance(Cloud.EKS, provider_id, name=instance_id, zone=zone)


@dataclass(frozen=True)
class Grant:
    """The stack output ``drill`` on EKS: the FIS experiment template that interrupts the
    cluster's Spot instances carrying ``target_tag_key=true``, and the managed policy an
    operator needs to tag an instance and start it."""

    region: str
    experiment_template_id: str
    target_tag_key: str
    operator_policy_arn: str


@dataclass
class FisReclaimer:
    """Interrupts this cluster's Spot instances with the stack's FIS experiment template."""

    grant: Grant
    cluster: str
    ec2: BaseClient
    fis: BaseClient
    accept_seconds: float = ACCEPT_SECONDS
    settle_seconds: float = SETTLE_SECONDS
    poll_seconds: float = POLL_SECONDS
    tagged: list[str] = field(default_factory=list)
    """Instances this reclaimer may have tagged and not untagged yet."""
    started: dict[str, Instance] = field(default_factory=dict)
    """Experiments started whose action has not run yet, by id: the instance each
    interrupts, which keeps its tag until then."""

    @property
    def cluster_tag(self) -> str:
        return CLUSTER_TAG.format(cluster=self.cluster)

    def verify(self, instance: Instance) -> str:
        self._in_region(instance)
        reservations = self._call(
            DESCRIBE, instance, lambda: self.ec2.describe_instances(InstanceIds=[instance.name])
        )["Reservations"]
        found = reservations[0]["Instances"][0] if reservations else None
        if not found:
            raise DrillRefused(f"{instance}: no such EC2 instance in {self.grant.region}")
        lifecycle = found.get("InstanceLifecycle", "on-demand")
        if lifecycle != SPOT:
            raise DrillRefused(
                f"{instance} is {lifecycle} capacity; a drill interrupts only Spot instances"
            )
        tags = {tag["Key"]: tag["Value"] for tag in found.get("Tags", [])}
        if tags.get(self.cluster_tag) != OWNED:
            clusters = sorted(key for key in tags if key.startswith("kubernetes.io/cluster/"))
            raise DrillRefused(
                f"{instance} is not tagged {self.cluster_tag}={OWNED} (it has "
                f"{', '.join(clusters) or 'no cluster tag'}); a drill interrupts only this "
                f"cluster's nodes"
            )
        state = found.get("State", {}).get("Name", "unknown")
        if state != "running":
            # The template selects running instances only: it would find none.
            raise DrillRefused(f"{instance} is {state}; a drill interrupts a running instance")
        return f"spot {found.get('InstanceType', '')}".strip()

    def reclaim(self, instance: Instance) -> Reclaimed:
        self._in_region(instance)
        # The template interrupts every running instance of the cluster with the target tag:
        # an earlier experiment's target keeps its tag until its action has run, and a tag
        # an earlier, interrupted drill left behind stops this one.
        self._settle()
        self.undo()
        self._refuse_other_targets(instance)
        self.tagged.append(instance.name)
        try:
            self._call(
                TAG,
                instance,
                lambda: self.ec2.create_tags(
                    Resources=[instance.name],
                    Tags=[{"Key": self.grant.target_tag_key, "Value": TARGET_VALUE}],
                ),
            )
            # The token makes botocore's retries of this call start one experiment, not two
            # (https://docs.aws.amazon.com/fis/latest/APIReference/API_StartExperiment.html).
            started = self._call(
                START,
                instance,
                lambda: self.fis.start_experiment(
                    experimentTemplateId=self.grant.experiment_template_id,
                    clientToken=str(uuid.uuid4()),
                ),
            )
            requested_at = time.time()
            experiment = started["experiment"]["id"]
            self.started[experiment] = instance
            self._await_start(experiment, instance)
        except BaseException as error:
            # Ctrl-C included: a tag left on the instance would let a later experiment
            # of this template interrupt it.
            self._untag_after(error)
            raise
        return Reclaimed(
            instance=instance,
            requested_at=requested_at,
            reference=experiment,
            how=f"FIS experiment {experiment} (template {self.grant.experiment_template_id})",
        )

    def _await_start(self, experiment: str, instance: Instance) -> None:
        """Waits, bounded, until the experiment has resolved its targets and started;
        raises its reason if it ended otherwise (an experiment that finds no target
        fails: https://docs.aws.amazon.com/fis/latest/userguide/experiments.html)."""
        deadline = time.monotonic() + self.accept_seconds
        while True:
            found = self._experiment(experiment, instance)
            if progress(found, str(instance)) is not Progress.STARTING:
                return
            if time.monotonic() >= deadline:
                status = found["state"]["status"]
                raise StageTimedOut(
                    f"reclaim: FIS experiment {experiment} on {instance} was still {status} "
                    f"after {self.accept_seconds:.0f} s"
                )
            time.sleep(self.poll_seconds)

    def _experiment(self, experiment: str, instance: Instance) -> dict[str, Any]:
        answer = self._call(WATCH, instance, lambda: self.fis.get_experiment(id=experiment))
        return answer["experiment"]

    def check(self) -> None:
        """Follows each experiment started: once its action has run, removes its target's
        tag; when it or its action failed, removes the tag and raises FIS's reason in one
        line (``eks_experiment.ExperimentFailed``)."""
        for experiment, instance in list(self.started.items()):
            found = self._experiment(experiment, instance)
            try:
                if progress(found, str(instance)) is not Progress.DONE:
                    continue
            except ExperimentFailed as error:
                self.started.pop(experiment)
                self._untag_after(error)
                raise
            self.started.pop(experiment)
            self._untag(instance.name)
            self.tagged.remove(instance.name)

    def _settle(self) -> None:
        """Waits, bounded, until every experiment started has run its action."""
        deadline = time.monotonic() + self.settle_seconds
        while self.started:
            self.check()
            if not self.started:
                return
            if time.monotonic() >= deadline:
                experiment, instance = next(iter(self.started.items()))
                raise StageTimedOut(
                    f"reclaim: the action of FIS experiment {experiment} on {instance} had "
                    f"not run after {self.settle_seconds:.0f} s, and the next instance is "
                    "tagged only once it has"
                )
            time.sleep(self.poll_seconds)

    def undo(self) -> None:
        """Removes the target tag from every instance this reclaimer tagged. Deleting a tag
        that is gone already succeeds, and the value is named, so a tag someone set to
        another value stays (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeleteTags.html)."""
        self.started.clear()  # their actions may no longer interrupt the instance
        while self.tagged:
            self._untag(self.tagged[-1])
            self.tagged.pop()

    def _untag(self, instance_id: str) -> None:
        target = Instance(Cloud.EKS, instance_id, name=instance_id)
        # DrillRefused: no such instance any more, and its tags went with it.
        with contextlib.suppress(DrillRefused):
            self._call(
                UNTAG,
                target,
                lambda: self.ec2.delete_tags(
                    Resources=[instance_id],
                    Tags=[{"Key": self.grant.target_tag_key, "Value": TARGET_VALUE}],
                ),
            )

    def _untag_after(self, error: BaseException) -> None:
        """``undo`` while ``error`` is on its way out; a failed undo joins its line."""
        try:
            self.undo()
        except DrillError as cleanup:
            if isinstance(error, DrillError):
                raise type(error)(f"{error}; and the target tag stayed: {cleanup}") from error
            # Ctrl-C goes on as Ctrl-C; the caller's own undo tries the tag again.

    def _refuse_other_targets(self, instance: Instance) -> None:
        pages = self._call(
            DESCRIBE,
            instance,
            lambda: list(
                self.ec2.get_paginator("describe_instances").paginate(
                    Filters=[
                        {"Name": f"tag:{self.grant.target_tag_key}", "Values": [TARGET_VALUE]},
                        {"Name": f"tag:{self.cluster_tag}", "Values": [OWNED]},
                        {"Name": "instance-state-name", "Values": ["pending", "running"]},
                    ]
                )
            ),
        )
        others = sorted(
            found["InstanceId"]
            for page in pages
            for reservation in page["Reservations"]
            for found in reservation["Instances"]
            if found["InstanceId"] != instance.name
        )
        if others:
            raise DrillRefused(
                f"{', '.join(others)} already carry the drill's target tag "
                f"{self.grant.target_tag_key}={TARGET_VALUE}, so the experiment would interrupt "
                f"them too; remove it (aws ec2 delete-tags --resources {' '.join(others)} "
                f"--tags Key={self.grant.target_tag_key}) and drill again"
            )

    def _in_region(self, instance: Instance) -> None:
        if instance.cloud is not Cloud.EKS:
            raise DrillRefused(f"{instance} is not an EC2 instance; allowed: EKS nodes")
        region = re.escape(self.grant.region)
        if instance.zone and not re.fullmatch(rf"{region}([a-z]|-.+)", instance.zone):
            # A zone's name is its region's and a letter, or a Local or Wavelength Zone's
            # suffix (us-east-1a, us-west-2-lax-1a).
            raise DrillRefused(
                f"{instance} is in zone {instance.zone}; the drill's experiment template "
                f"is in region {self.grant.region}"
            )

    def _call(self, action: str, instance: Instance, call: Callable[[], _T]) -> _T:
        """``call()``, its failures turned into the one line a user can act on."""
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

        try:
            return call()
        except ClientError as error:
            raise self._translate(error, action, instance) from error
        except BotoCoreError as error:
            raise DrillError(
                f"AWS: {action} on {instance} got no answer ({type(error).__name__}: "
                f"{one_line(error)})"
            ) from error

    def _translate(self, error: Any, action: str, instance: Instance) -> DrillError:
        details = error.response.get("Error", {})
        code = str(details.get("Code", "Unknown"))
        message = one_line(details.get("Message", ""))
        if code in DENIED:
            # EC2's message is an encoded policy dump: the code and the action say enough.
            return GrantMissing(
                f"AWS denied {action} on {instance} ({code}); attach the stack's drill "
                f"policy {self.grant.operator_policy_arn} to the caller and drill again"
            )
        if code.startswith("InvalidInstanceID"):
            return DrillRefused(
                f"{instance}: no such EC2 instance in {self.grant.region} ({code}: {message})"
            )
        if action == START and code == "ResourceNotFoundException":
            return GrantMissing(
                f"FIS has no experiment template {self.grant.experiment_template_id} in "
                f"{self.grant.region} ({code}); run pulumi up with {ENABLE} true"
            )
        return DrillError(f"AWS refused {action} on {instance} ({code}: {message})")


def reclaimer(grant: Grant, cluster: str, *, client: Session | None = None) -> FisReclaimer:
    """A reclaimer with the AWS credential chain, or with ``client`` (a ``boto3`` session,
    as tests pass one whose clients have a stubbed transport)."""
    if client is None:
        import boto3  # noqa: PLC0415

        client = boto3.Session()
    return FisReclaimer(
        grant,
        cluster,
        ec2=client.client("ec2", region_name=grant.region),
        fis=client.client("fis", region_name=grant.region),
    )


DRILL = CloudDrill(
    provider_id_form=PROVIDER_ID_FORM, instance=instance, grant=Grant, reclaimer=reclaimer
)
