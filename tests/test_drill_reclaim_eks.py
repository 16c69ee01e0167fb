"""``spotproof drill`` on EKS: a Spot instance interrupted by the stack's FIS experiment
template, which targets the cluster's running Spot instances tagged ``<key>=true``.

EC2 and FIS are moto's (in-process, no network). Every request boto3 sends is seen at
botocore's ``before-send`` hook, as it would leave the machine (method, path, form or JSON
body); the same hook stands in for AWS where moto cannot: a denied permission, an
experiment that fails, Ctrl-C in the middle of a call."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse, HeadersDict
from moto import mock_aws

from spotproof.catalog import Cloud
from spotproof.drill.errors import DrillError, DrillRefused, GrantMissing
from spotproof.drill.instances import Instance
from spotproof.drill.reclaim import eks

REGION = "us-east-1"
ZONE = "us-east-1a"
CLUSTER = "research"
CLUSTER_TAG = f"kubernetes.io/cluster/{CLUSTER}"
TARGET_TAG = "spotproof-drill-target"
POLICY = "arn:aws:iam::123456789012:policy/research-spotproof-drill"

Answer = Callable[[AWSPreparedRequest], AWSResponse | None]


@dataclass
class Sent:
    operation: str
    method: str
    path: str
    form: dict[str, list[str]]
    """EC2's query-protocol body, parsed."""
    json: dict[str, Any]
    """FIS's rest-json body, parsed."""


@dataclass
class Wire:
    """Records every request; ``answers`` by operation name replace AWS's answer."""

    sent: list[Sent] = field(default_factory=list)
    answers: dict[str, Answer] = field(default_factory=dict)

    def __call__(self, request: AWSPreparedRequest, event_name: str, **_: Any) -> Any:
        operation = event_name.rsplit(".", 1)[-1]
        body = request.body or b""
        text = body.decode() if isinstance(body, bytes) else str(body)
        url = urlsplit(request.url)
        is_json = text.startswith("{")
        self.sent.append(
            Sent(
                operation,
                request.method,
                url.path,
                {} if is_json else parse_qs(text),
                json.loads(text) if is_json else {},
            )
        )
        answer = self.answers.get(operation)
        if answer is None:
            return None
        response = answer(request)
        # botocore calls every before-send handler and takes the first answer: moto's
        # handler, later in line, must not carry the request out as well.
        request.url = "https://answered-by-the-test.invalid/"
        return response

    def operations(self) -> list[str]:
        return [sent.operation for sent in self.sent]

    def one(self, operation: str) -> Sent:
        [found] = [sent for sent in self.sent if sent.operation == operation]
        return found


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def _response(request: AWSPreparedRequest, status: int, body: bytes, **headers: str) -> AWSResponse:
    return AWSResponse(request.url, status, HeadersDict(headers), _Raw(body))


def _ec2_denied(request: AWSPreparedRequest) -> AWSResponse:
    body = (
        "<?xml version='1.0' encoding='UTF-8'?><Response><Errors><Error>"
        "<Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this "
        "operation. Encoded authorization failure message: AbCdEf</Message></Error></Errors>"
        "<RequestID>req-1</RequestID></Response>"
    )
    return _response(request, 403, body.encode())


def _fis_denied(request: AWSPreparedRequest) -> AWSResponse:
    body = {"message": "User: arn:aws:iam::123456789012:user/dev is not authorized"}
    return _response(
        request,
        403,
        json.dumps(body).encode(),
        **{"x-amzn-ErrorType": "AccessDeniedException", "Content-Type": "application/json"},
    )


def _experiment_state(status: str, reason: str, **actions: tuple[str, str]) -> Answer:
    """GetExperiment's answer: the experiment in ``status``, each named action in its
    ``(status, reason)`` (the shapes of botocore's ``fis`` model, ``Experiment``)."""

    def answer(request: AWSPreparedRequest) -> AWSResponse:
        experiment_id = urlsplit(request.url).path.rsplit("/", 1)[-1]
        experiment: dict[str, Any] = {
            "id": experiment_id,
            "state": {"status": status, "reason": reason},
        }
        if actions:
            experiment["actions"] = {
                name: {
                    "actionId": "aws:ec2:send-spot-instance-interruptions",
                    "state": {"status": action_status, "reason": action_reason},
                }
                for name, (action_status, action_reason) in actions.items()
            }
        body = json.dumps({"experiment": experiment}).encode()
        return _response(request, 200, body, **{"Content-Type": "application/json"})

    return answer


def _interrupt(_request: AWSPreparedRequest) -> None:
    raise KeyboardInterrupt


@dataclass
class Aws:
    session: boto3.Session
    ec2: Any
    """A client of moto's EC2 without the wire: the test's own look at the instances."""
    grant: eks.Grant
    wire: Wire

    def launch(self, *, spot: bool = True, tags: dict[str, str] | None = None) -> Instance:
        more: dict[str, Any] = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
        tags = {CLUSTER_TAG: "owned"} if tags is None else tags
        if tags:
            more["TagSpecifications"] = [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": key, "Value": value} for key, value in tags.items()],
                }
            ]
        launched = self.ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=1,
            MaxCount=1,
            InstanceType="g5.xlarge",
            Placement={"AvailabilityZone": ZONE},
            **more,
        )["Instances"][0]
        found = eks.instance(f"aws:///{ZONE}/{launched['InstanceId']}")
        assert found is not None
        return found

    def tags(self, instance: Instance) -> dict[str, str]:
        described = self.ec2.describe_instances(InstanceIds=[instance.name])
        found = described["Reservations"][0]["Instances"][0]
        return {tag["Key"]: tag["Value"] for tag in found.get("Tags", [])}

    def reclaimer(self, **kwargs: float) -> eks.FisReclaimer:
        found = eks.reclaimer(self.grant, CLUSTER, client=self.session)
        for name, value in kwargs.items():
            setattr(found, name, value)
        return found


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        template = session.client("fis").create_experiment_template(
            clientToken="template",
            description="spotproof drill: interrupt the tagged Spot instance",
            roleArn="arn:aws:iam::123456789012:role/research-spotproof-fis",
            stopConditions=[{"source": "none"}],
            targets={
                "spot": {
                    "resourceType": "aws:ec2:spot-instance",
                    "resourceTags": {CLUSTER_TAG: "owned", TARGET_TAG: "true"},
                    "filters": [{"path": "State.Name", "values": ["running"]}],
                    "selectionMode": "ALL",
                }
            },
            actions={
                "interrupt": {
                    "actionId": "aws:ec2:send-spot-instance-interruptions",
                    "parameters": {"durationBeforeInterruption": "PT2M"},
                    "targets": {"SpotInstances": "spot"},
                }
            },
        )["experimentTemplate"]["id"]
        ec2 = session.client("ec2")
        wire = Wire()
        # Registered after the test's own clients: only the reclaimer's clients copy it.
        session.events.register_first("before-send", wire)
        yield Aws(session, ec2, eks.Grant(REGION, template, TARGET_TAG, POLICY), wire)


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


# The provider id.


def test_an_eks_provider_id_names_the_zone_and_instance() -> None:
    provider_id = "aws:///us-east-1a/i-0123456789abcdef0"
    assert eks.instance(provider_id) == Instance(
        Cloud.EKS, provider_id, name="i-0123456789abcdef0", zone="us-east-1a"
    )


def test_a_provider_id_without_a_zone_is_read_as_the_node_controller_reads_it() -> None:
    found = eks.instance("aws:////i-0123456789abcdef0")
    assert found is not None
    assert (found.name, found.zone) == ("i-0123456789abcdef0", "")


@pytest.mark.parametrize(
    "provider_id",
    [
        "gce://ml-research/us-central1-a/gke-research-l4-spot-5f3c2a1b-x7kq",
        "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/v",
        "aws:///us-east-1a/fargate-ip-10-0-1-23.ec2.internal",
        "i-0123456789abcdef0",
        "aws:///us-east-1a/i-0123/extra",
        "",
    ],
)
def test_other_provider_ids_are_no_ec2_instance(provider_id: str) -> None:
    assert eks.instance(provider_id) is None


# verify.


def test_verify_describes_the_instance_and_accepts_this_clusters_spot_instance(aws: Aws) -> None:
    node = aws.launch()
    assert aws.reclaimer().verify(node) == "spot g5.xlarge"
    sent = aws.wire.one("DescribeInstances")
    assert (sent.method, sent.path) == ("POST", "/")
    assert sent.form["InstanceId.1"] == [node.name]


def test_verify_refuses_an_on_demand_instance(aws: Aws) -> None:
    with pytest.raises(DrillRefused) as refused:
        aws.reclaimer().verify(aws.launch(spot=False))
    assert "is on-demand capacity; a drill interrupts only Spot instances" in _one_line(refused)


def test_verify_refuses_a_spot_instance_of_another_cluster(aws: Aws) -> None:
    node = aws.launch(tags={"kubernetes.io/cluster/production": "owned"})
    with pytest.raises(DrillRefused) as refused:
        aws.reclaimer().verify(node)
    line = _one_line(refused)
    assert f"is not tagged {CLUSTER_TAG}=owned" in line
    assert "kubernetes.io/cluster/production" in line


def test_verify_refuses_an_instance_that_is_not_running(aws: Aws) -> None:
    node = aws.launch()
    aws.ec2.stop_instances(InstanceIds=[node.name])
    with pytest.raises(DrillRefused) as refused:
        aws.reclaimer().verify(node)
    assert "a drill interrupts a running instance" in _one_line(refused)


def test_verify_refuses_an_instance_outside_the_templates_region_without_asking(
    aws: Aws,
) -> None:
    node = eks.instance("aws:///eu-west-1b/i-0123456789abcdef0")
    assert node is not None
    with pytest.raises(DrillRefused) as refused:
        aws.reclaimer().verify(node)
    assert "the drill's experiment template is in region us-east-1" in _one_line(refused)
    assert aws.wire.sent == []


def test_verify_refuses_an_instance_that_is_gone_with_ec2s_code(aws: Aws) -> None:
    node = eks.instance(f"aws:///{ZONE}/i-0123456789abcdef0")
    assert node is not None
    with pytest.raises(DrillRefused) as refused:
        aws.reclaimer().verify(node)
    assert "no such EC2 instance in us-east-1 (InvalidInstanceID.NotFound" in _one_line(refused)


def test_a_denied_describe_is_a_missing_grant_naming_the_action_and_policy(aws: Aws) -> None:
    aws.wire.answers["DescribeInstances"] = _ec2_denied
    with pytest.raises(GrantMissing) as missing:
        aws.reclaimer().verify(aws.launch())
    line = _one_line(missing)
    assert "AWS denied ec2:DescribeInstances" in line
    assert f"(UnauthorizedOperation); attach the stack's drill policy {POLICY}" in line


# reclaim.


def test_reclaim_tags_the_instance_and_starts_the_experiment(aws: Aws) -> None:
    node = aws.launch()
    before = time.time()
    reclaimed = aws.reclaimer(poll_seconds=0).reclaim(node)
    # GetExperiment until moto's experiment, initiating at first, runs.
    operations = aws.wire.operations()
    assert operations[:3] == ["DescribeInstances", "CreateTags", "StartExperiment"]
    assert set(operations[3:]) == {"GetExperiment"}
    others = aws.wire.one("DescribeInstances").form
    assert others["Filter.1.Name"] == [f"tag:{TARGET_TAG}"]
    assert others["Filter.2.Name"] == [f"tag:{CLUSTER_TAG}"]
    tagged = aws.wire.one("CreateTags").form
    assert (tagged["ResourceId.1"], tagged["Tag.1.Key"], tagged["Tag.1.Value"]) == (
        [node.name],
        [TARGET_TAG],
        ["true"],
    )
    started = aws.wire.one("StartExperiment")
    assert (started.method, started.path) == ("POST", "/experiments")
    assert started.json["experimentTemplateId"] == aws.grant.experiment_template_id
    assert set(started.json) == {"experimentTemplateId", "clientToken"}
    watched = next(s for s in aws.wire.sent if s.operation == "GetExperiment")
    assert (watched.method, watched.path) == ("GET", f"/experiments/{reclaimed.reference}")
    assert reclaimed.how.startswith(f"FIS experiment {reclaimed.reference}")
    assert before <= reclaimed.requested_at <= time.time()


def test_the_tag_stays_until_the_experiments_action_has_run(aws: Aws) -> None:
    # The experiment runs, its action not yet: the FIS role's interruption, allowed only
    # on a tagged instance, is still to come.
    node = aws.launch()
    aws.wire.answers["GetExperiment"] = _experiment_state(
        "running", "Experiment is running.", interrupt=("pending", "Action is pending.")
    )
    reclaimer = aws.reclaimer(poll_seconds=0)
    reclaimer.reclaim(node)
    assert aws.tags(node)[TARGET_TAG] == "true"
    reclaimer.check()
    assert aws.tags(node)[TARGET_TAG] == "true"
    assert "DeleteTags" not in aws.wire.operations()

    aws.wire.answers["GetExperiment"] = _experiment_state(
        "running", "Experiment is running.", interrupt=("completed", "Action completed.")
    )
    reclaimer.check()
    untagged = aws.wire.one("DeleteTags").form
    assert (untagged["Tag.1.Key"], untagged["Tag.1.Value"]) == ([TARGET_TAG], ["true"])
    assert TARGET_TAG not in aws.tags(node)
    reclaimer.check()
    assert aws.wire.operations().count("GetExperiment") == 3  # none once the action ran


def test_an_action_that_fails_after_the_start_is_one_line_with_fis_reason_and_untags(
    aws: Aws,
) -> None:
    node = aws.launch()
    aws.wire.answers["GetExperiment"] = _experiment_state(
        "running", "Experiment is running.", interrupt=("pending", "Action is pending.")
    )
    reclaimer = aws.reclaimer(poll_seconds=0)
    reclaimed = reclaimer.reclaim(node)
    denied = (
        "Unable to interrupt i-0abc: not authorized to perform ec2:SendSpotInstanceInterruptions"
    )
    aws.wire.answers["GetExperiment"] = _experiment_state(
        "failed", "Experiment failed.", interrupt=("failed", f"{denied}\nRequest id r-1")
    )
    with pytest.raises(DrillError) as failed:
        reclaimer.check()
    assert _one_line(failed) == (
        f"FIS experiment {reclaimed.reference} on {node} is failed: Experiment failed.; "
        f"action interrupt is failed: {denied}"
    )
    assert TARGET_TAG not in aws.tags(node)


def test_a_skipped_action_fails_the_reclaim_even_in_a_completed_experiment(aws: Aws) -> None:
    node = aws.launch()
    aws.wire.answers["GetExperiment"] = _experiment_state(
        "completed", "Experiment completed.", interrupt=("skipped", "No targets resolved.")
    )
    with pytest.raises(DrillError) as failed:
        aws.reclaimer(poll_seconds=0).reclaim(node)
    assert _one_line(failed).endswith("action interrupt is skipped: No targets resolved.")
    assert TARGET_TAG not in aws.tags(node)


def test_each_reclaim_starts_its_experiment_with_a_fresh_client_token(aws: Aws) -> None:
    reclaimer = aws.reclaimer(poll_seconds=0)
    reclaimer.reclaim(aws.launch())
    reclaimer.reclaim(aws.launch())
    tokens = [s.json["clientToken"] for s in aws.wire.sent if s.operation == "StartExperiment"]
    assert len(set(tokens)) == 2


def test_a_gangs_second_reclaim_waits_for_the_first_action_and_finds_it_untagged(
    aws: Aws,
) -> None:
    first, second = aws.launch(), aws.launch()
    reclaimer = aws.reclaimer(poll_seconds=0)
    reclaimer.reclaim(first)
    assert aws.tags(first)[TARGET_TAG] == "true"
    reclaimer.reclaim(second)  # moto's first experiment completes on the next read
    assert TARGET_TAG not in aws.tags(first)
    assert aws.tags(second)[TARGET_TAG] == "true"
    reclaimer.check()
    assert TARGET_TAG not in aws.tags(second)


def test_a_next_reclaim_waits_for_the_earlier_action_only_so_long(aws: Aws) -> None:
    first, second = aws.launch(), aws.launch()
    aws.wire.answers["GetExperiment"] = _experiment_state(
        "running", "Experiment is running.", interrupt=("running", "Action is running.")
    )
    reclaimer = aws.reclaimer(poll_seconds=0, settle_seconds=0)
    reclaimed = reclaimer.reclaim(first)
    with pytest.raises(DrillError) as timed_out:
        reclaimer.reclaim(second)
    assert f"the action of FIS experiment {reclaimed.reference} on {first} had not run" in (
        _one_line(timed_out)
    )
    assert TARGET_TAG not in aws.tags(second)
    reclaimer.undo()
    assert TARGET_TAG not in aws.tags(first)


def test_reclaim_refuses_while_another_instance_carries_the_target_tag(aws: Aws) -> None:
    left_behind = aws.launch(tags={CLUSTER_TAG: "owned", TARGET_TAG: "true"})
    with pytest.raises(DrillRefused) as refused:
        aws.reclaimer().reclaim(aws.launch())
    line = _one_line(refused)
    assert f"{left_behind.name} already carry the drill's target tag" in line
    assert "aws ec2 delete-tags" in line
    assert "CreateTags" not in aws.wire.operations()


def test_a_denied_start_removes_the_tag_and_names_the_action_and_policy(aws: Aws) -> None:
    node = aws.launch()
    aws.wire.answers["StartExperiment"] = _fis_denied
    with pytest.raises(GrantMissing) as missing:
        aws.reclaimer().reclaim(node)
    line = _one_line(missing)
    assert "AWS denied fis:StartExperiment" in line
    assert f"(AccessDeniedException); attach the stack's drill policy {POLICY}" in line
    assert aws.wire.operations()[-1] == "DeleteTags"
    assert TARGET_TAG not in aws.tags(node)


def test_a_denied_tag_is_a_missing_grant_and_starts_nothing(aws: Aws) -> None:
    aws.wire.answers["CreateTags"] = _ec2_denied
    with pytest.raises(GrantMissing) as missing:
        aws.reclaimer().reclaim(aws.launch())
    assert "AWS denied ec2:CreateTags" in _one_line(missing)
    assert "StartExperiment" not in aws.wire.operations()


def test_a_missing_template_is_a_missing_grant_naming_the_setting(aws: Aws) -> None:
    node = aws.launch()
    gone = eks.Grant(REGION, "EXT0000000000000", TARGET_TAG, POLICY)
    reclaimer = eks.reclaimer(gone, CLUSTER, client=aws.session)
    with pytest.raises(GrantMissing) as missing:
        reclaimer.reclaim(node)
    line = _one_line(missing)
    assert "FIS has no experiment template EXT0000000000000 in us-east-1" in line
    assert "spotproof:drill.enabled" in line
    assert TARGET_TAG not in aws.tags(node)


def test_an_experiment_that_fails_is_a_drill_error_with_its_reason_and_untags(
    aws: Aws,
) -> None:
    node = aws.launch()
    aws.wire.answers["GetExperiment"] = _experiment_state(
        "failed", "Target resolution returned empty set"
    )
    with pytest.raises(DrillError) as failed:
        aws.reclaimer().reclaim(node)
    assert "is failed: Target resolution returned empty set" in _one_line(failed)
    assert TARGET_TAG not in aws.tags(node)


def test_an_experiment_still_initiating_at_the_bound_times_out_and_untags(aws: Aws) -> None:
    node = aws.launch()
    aws.wire.answers["GetExperiment"] = _experiment_state("initiating", "Resolving targets")
    with pytest.raises(DrillError) as timed_out:
        aws.reclaimer(accept_seconds=0, poll_seconds=0).reclaim(node)
    assert "was still initiating after 0 s" in _one_line(timed_out)
    assert TARGET_TAG not in aws.tags(node)


def test_ctrl_c_during_the_start_removes_the_tag_and_goes_on_as_ctrl_c(aws: Aws) -> None:
    node = aws.launch()
    aws.wire.answers["StartExperiment"] = _interrupt
    with pytest.raises(KeyboardInterrupt):
        aws.reclaimer().reclaim(node)
    assert TARGET_TAG not in aws.tags(node)


# undo.


def test_undo_removes_a_tag_a_failed_reclaim_could_not_and_is_safe_twice(aws: Aws) -> None:
    node = aws.launch()
    aws.wire.answers["StartExperiment"] = _fis_denied
    aws.wire.answers["DeleteTags"] = _ec2_denied
    reclaimer = aws.reclaimer()
    with pytest.raises(GrantMissing) as missing:
        reclaimer.reclaim(node)
    assert "and the target tag stayed: AWS denied ec2:DeleteTags" in _one_line(missing)
    assert aws.tags(node)[TARGET_TAG] == "true"
    del aws.wire.answers["DeleteTags"]
    reclaimer.undo()
    assert TARGET_TAG not in aws.tags(node)
    deletes = aws.wire.operations().count("DeleteTags")
    reclaimer.undo()
    assert aws.wire.operations().count("DeleteTags") == deletes


def test_undo_of_an_instance_that_is_gone_succeeds(aws: Aws) -> None:
    node = aws.launch()
    aws.wire.answers["StartExperiment"] = _fis_denied
    aws.wire.answers["DeleteTags"] = _ec2_denied
    reclaimer = aws.reclaimer()
    with pytest.raises(GrantMissing):
        reclaimer.reclaim(node)
    aws.wire.answers["DeleteTags"] = lambda request: _response(
        request,
        400,
        b"<Response><Errors><Error><Code>InvalidInstanceID.NotFound</Code>"
        b"<Message>gone</Message></Error></Errors></Response>",
    )
    reclaimer.undo()
    reclaimer.undo()


def test_undo_without_a_reclaim_asks_nothing(aws: Aws) -> None:
    aws.reclaimer().undo()
    assert aws.wire.sent == []
