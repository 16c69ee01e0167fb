"""``spotproof:drill``: off by default and then nothing is granted; on, each cloud's stack
grants exactly what ``spotproof drill`` calls, on this cluster's Spot nodes only, and
exports where it is as the output ``drill`` the drill reads. The grants are judged the way
each cloud would: GKE's IAM condition in CEL, AWS's policies by the IAM evaluator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof.catalog import Cloud
from spotproof.drill.grants import grant_from_outputs, output_keys
from spotproof.fleet import fleet_from_config
from spotproof.plan import PlanResult, run_plan
from spotproof.policy.aws_iam import Request, decide
from spotproof.policy.gke_drill import instance_prefix, node_condition
from tests.support import iam_condition_allows, plan_of, plan_refuses_config, stack_config

DEV = {Cloud.GKE: "gke-dev", Cloud.EKS: "eks-dev", Cloud.AKS: "aks-dev"}
"""The stacks that show the setting on; the prod stacks leave it off."""
INSTANCE = "compute.googleapis.com/Instance"
ACCOUNT = "123456789012"
OWNED = {"aws:ResourceTag/kubernetes.io/cluster/eks-dev": "owned"}
TARGETED = {**OWNED, "aws:ResourceTag/spotproof.io/drill-target": "true"}
EC2_INSTANCE = f"arn:aws:ec2:us-west-2:{ACCOUNT}:instance/i-0123456789abcdef0"
GROUP = "4a1c9f2e-6b7d-4e3a-9c85-2f0d1e6b7a34"


def _inputs(plan: PlanResult, type_: str, name: str) -> dict[str, Any]:
    return plan.recording.one(type_, name).inputs


def _policy(plan: PlanResult, type_: str, name: str) -> dict[str, Any]:
    return json.loads(_inputs(plan, type_, name)["policy"])


# --- off by default ------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["gke-prod", "eks-prod", "aks-prod"])
def test_a_stack_that_does_not_enable_drill_grants_nothing_and_exports_no_drill(
    stack: str,
) -> None:
    plan = plan_of(stack)
    assert fleet_from_config(stack, stack_config(stack)).drill is None
    assert not [r for r in plan.recording.resources if r.type.endswith(":DrillGrant")]
    assert "drill" not in plan.recording.outputs


# --- the output the drill reads --------------------------------------------------------


@pytest.mark.parametrize("cloud", list(DEV))
def test_the_drill_output_has_the_keys_the_drill_reads(cloud: Cloud) -> None:
    outputs = plan_of(DEV[cloud]).recording.outputs
    assert tuple(outputs["drill"]) == output_keys(cloud)
    assert all(outputs["drill"].values())
    assert grant_from_outputs(cloud, outputs, DEV[cloud]) is not None


# --- GKE: a custom role, bound on the cluster's node VMs only ------------------------


def test_gke_drill_role_holds_the_drills_three_calls_and_nothing_else() -> None:
    role = _inputs(
        plan_of("gke-dev"), "gcp:projects/iAMCustomRole:IAMCustomRole", "gke-dev-drill-role"
    )
    assert (role["project"], role["roleId"], role["stage"]) == (
        "spotproof-dev",
        "spotproof_drill_gke_dev",
        "GA",
    )
    assert role["permissions"] == [
        "compute.instances.get",
        "compute.instances.simulateMaintenanceEvent",
        "compute.zoneOperations.get",
    ]


def test_gke_drill_role_is_bound_to_each_principal_under_the_node_condition() -> None:
    plan = plan_of("gke-dev")
    [binding] = [
        r.inputs
        for r in plan.recording.of_type("gcp:projects/iAMMember:IAMMember")
        if r.name.startswith("gke-dev-drill-")
    ]
    assert binding["role"] == "projects/spotproof-dev/roles/spotproof_drill_gke_dev"
    assert (binding["member"], binding["project"]) == ("group:sre@example.com", "spotproof-dev")
    assert binding["condition"]["expression"] == node_condition("us-central1", "gke-dev")
    assert plan.recording.outputs["drill"]["instancePrefix"] == "gke-gke-dev-"


@pytest.mark.parametrize("zone", ["us-central1-a", "us-central1-f"])
def test_gke_drill_condition_admits_a_node_vm_of_this_cluster_in_any_zone_of_its_region(
    zone: str,
) -> None:
    expression = node_condition("us-central1", "gke-dev")
    name = f"projects/spotproof-dev/zones/{zone}/instances/gke-gke-dev-l4-spot-1a2b3c4d-xk2p"
    assert iam_condition_allows(expression, name, resource_type=INSTANCE)


@pytest.mark.parametrize(
    "name",
    [
        "projects/spotproof-dev/zones/us-central1-a/instances/gke-gke-dev2-l4-spot-1a2b3c4d-xk2p",
        "projects/spotproof-dev/zones/us-central1-a/instances/gke-gke-prod-t4-spot-9f8e7d6c-ab12",
        "projects/spotproof-dev/zones/europe-west4-a/instances/gke-gke-dev-l4-spot-1a2b3c4d-xk2p",
        "projects/spotproof-dev/zones/us-central1-a/instances/bastion",
    ],
)
def test_gke_drill_condition_refuses_every_other_vm(name: str) -> None:
    expression = node_condition("us-central1", "gke-dev")
    assert not iam_condition_allows(expression, name, resource_type=INSTANCE)


@pytest.mark.parametrize(
    ("cluster", "prefix"),
    [
        ("gke-dev", "gke-gke-dev-"),
        ("exactly-twenty-chars", "gke-exactly-twenty-chars-"),
        ("a-cluster-name-longer-than-twenty", "gke-a-cluster-name-longe"),
    ],
)
def test_gke_node_prefix_is_the_cluster_name_cut_as_gke_cuts_node_names(
    cluster: str, prefix: str
) -> None:
    assert instance_prefix(cluster) == prefix


# --- EKS: an FIS template, its role, and the operator's policy -------------------------


def test_eks_experiment_template_interrupts_the_tagged_running_spot_instance() -> None:
    plan = plan_of("eks-dev")
    template = _inputs(
        plan, "aws:fis/experimentTemplate:ExperimentTemplate", "eks-dev-drill-experiment"
    )
    assert template["roleArn"] == f"arn:aws:iam::{ACCOUNT}:role/eks-dev-drill-fis"
    assert template["actions"] == [
        {
            "name": "interrupt",
            "actionId": "aws:ec2:send-spot-instance-interruptions",
            "description": "Spot interruption notice, then the interruption",
            "parameters": [{"key": "durationBeforeInterruption", "value": "PT2M"}],
            "target": {"key": "SpotInstances", "value": "drill-target"},
        }
    ]
    assert template["targets"] == [
        {
            "name": "drill-target",
            "resourceType": "aws:ec2:spot-instance",
            "selectionMode": "ALL",
            "resourceTags": [
                {"key": "kubernetes.io/cluster/eks-dev", "value": "owned"},
                {"key": "spotproof.io/drill-target", "value": "true"},
            ],
            "filters": [{"path": "State.Name", "values": ["running"]}],
        }
    ]
    assert template["stopConditions"] == [{"source": "none"}]
    assert template["region"] == "us-west-2"


def test_fis_role_is_assumed_only_by_this_accounts_experiments() -> None:
    role = _inputs(plan_of("eks-dev"), "aws:iam/role:Role", "eks-dev-drill-fis")
    [statement] = json.loads(role["assumeRolePolicy"])["Statement"]
    assert statement["Principal"] == {"Service": "fis.amazonaws.com"}
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": ACCOUNT},
        "ArnLike": {"aws:SourceArn": f"arn:aws:fis:us-west-2:{ACCOUNT}:experiment/*"},
    }


def test_fis_role_may_interrupt_a_cluster_instance_that_carries_the_target_tag() -> None:
    policy = _policy(
        plan_of("eks-dev"), "aws:iam/rolePolicy:RolePolicy", "eks-dev-drill-fis-interrupt"
    )
    interrupt = Request("ec2:SendSpotInstanceInterruptions", EC2_INSTANCE, TARGETED)
    assert decide([policy], interrupt) == "allowed"


@pytest.mark.parametrize(
    "tags",
    [
        OWNED,
        {
            "aws:ResourceTag/kubernetes.io/cluster/eks-prod": "owned",
            "aws:ResourceTag/spotproof.io/drill-target": "true",
        },
        {},
    ],
    ids=["without the target tag", "of another cluster", "untagged"],
)
def test_fis_role_may_not_interrupt_any_other_instance(tags: dict[str, str]) -> None:
    policy = _policy(
        plan_of("eks-dev"), "aws:iam/rolePolicy:RolePolicy", "eks-dev-drill-fis-interrupt"
    )
    interrupt = Request("ec2:SendSpotInstanceInterruptions", EC2_INSTANCE, tags)
    assert decide([policy], interrupt) == "implicitly denied"


def test_drill_operator_may_mark_a_cluster_instance_and_start_the_stacks_template() -> None:
    plan = plan_of("eks-dev")
    policy = _policy(plan, "aws:iam/policy:Policy", "eks-dev-drill-operator")
    template = plan.recording.outputs["drill"]["experimentTemplateId"]
    marked = {**OWNED, "aws:TagKeys": ("spotproof.io/drill-target",)}
    fis = f"arn:aws:fis:us-west-2:{ACCOUNT}"
    requests = [
        Request("ec2:CreateTags", EC2_INSTANCE, marked),
        Request("ec2:DeleteTags", EC2_INSTANCE, marked),
        Request("ec2:DescribeInstances", "*"),
        Request("fis:StartExperiment", f"{fis}:experiment-template/{template}"),
        Request("fis:StartExperiment", f"{fis}:experiment/EXPabc"),
        Request("fis:GetExperiment", f"{fis}:experiment/EXPabc"),
        Request(
            "iam:CreateServiceLinkedRole",
            f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/fis.amazonaws.com/AWSServiceRoleForFIS",
            {"iam:AWSServiceName": "fis.amazonaws.com"},
        ),
    ]
    assert [decide([policy], r) for r in requests] == ["allowed"] * len(requests)


@pytest.mark.parametrize(
    "request_",
    [
        Request("ec2:CreateTags", EC2_INSTANCE, {**OWNED, "aws:TagKeys": ("Name",)}),
        Request(
            "ec2:CreateTags",
            EC2_INSTANCE,
            {**OWNED, "aws:TagKeys": ("spotproof.io/drill-target", "Name")},
        ),
        Request("ec2:CreateTags", EC2_INSTANCE, {"aws:TagKeys": ("spotproof.io/drill-target",)}),
        Request("ec2:DeleteTags", EC2_INSTANCE, OWNED),
        Request("fis:StartExperiment", f"arn:aws:fis:us-west-2:{ACCOUNT}:experiment-template/EXTx"),
        Request("ec2:SendSpotInstanceInterruptions", EC2_INSTANCE, TARGETED),
        Request(
            "iam:CreateServiceLinkedRole",
            f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/ec2.amazonaws.com/AWSServiceRoleForEC2",
            {"iam:AWSServiceName": "ec2.amazonaws.com"},
        ),
    ],
    ids=[
        "tag another key",
        "tag another key beside the target's",
        "tag another cluster's instance",
        "delete every tag",
        "start another template",
        "interrupt by itself",
        "create another service's linked role",
    ],
)
def test_drill_operator_may_do_nothing_else(request_: Request) -> None:
    policy = _policy(plan_of("eks-dev"), "aws:iam/policy:Policy", "eks-dev-drill-operator")
    assert decide([policy], request_) == "implicitly denied"


def test_operator_policy_is_attached_to_each_principal_role(
    make_project: Callable[..., Path],
) -> None:
    config = stack_config("eks-dev")
    config["spotproof:drill"] = {
        "enabled": True,
        "principals": [f"arn:aws:iam::{ACCOUNT}:role/platform/sre"],
    }
    plan = run_plan("eks-test", make_project(config, stack="eks-test"))
    attachment = _inputs(
        plan, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "eks-test-drill-operator-sre"
    )
    assert attachment == {
        "role": "sre",
        "policyArn": f"arn:aws:iam::{ACCOUNT}:policy/eks-test-drill-operator",
    }


# --- AKS: a custom role in the node resource group ------------------------------------


def test_aks_drill_role_holds_the_drills_actions_assignable_in_the_node_resource_group() -> None:
    plan = plan_of("aks-dev")
    role = _inputs(plan, "azure-native:authorization:RoleDefinition", "aks-dev-drill-role")
    group = plan.recording.outputs["drill"]["nodeResourceGroup"]
    scope = (
        f"/subscriptions/{plan.recording.outputs['drill']['subscriptionId']}/resourceGroups/{group}"
    )
    assert group == "MC_aks-dev_aks-dev_eastus2"
    assert (role["scope"], role["assignableScopes"], role["roleType"]) == (
        scope,
        [scope],
        "CustomRole",
    )
    assert role["permissions"] == [
        {
            "actions": [
                "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/simulateEviction/action",
                "Microsoft.Compute/virtualMachines/simulateEviction/action",
                "Microsoft.Compute/virtualMachineScaleSets/read",
                "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
                "Microsoft.Compute/virtualMachines/read",
            ]
        }
    ]


def test_aks_drill_role_is_assigned_to_each_principal_with_its_type_in_that_group() -> None:
    plan = plan_of("aks-dev")
    drill = plan.recording.outputs["drill"]
    assignment = _inputs(
        plan, "azure-native:authorization:RoleAssignment", f"aks-dev-drill-group-{GROUP}"
    )
    assert (assignment["principalId"], assignment["principalType"]) == (GROUP, "Group")
    assert assignment["roleDefinitionId"] == drill["roleDefinitionId"]
    assert assignment["scope"] == (
        f"/subscriptions/{drill['subscriptionId']}/resourceGroups/{drill['nodeResourceGroup']}"
    )


# --- bad config ----------------------------------------------------------------------

BAD_DRILL: dict[str, tuple[str, Any, str, str]] = {
    "enabled that is no boolean": (
        "gke-dev",
        {"enabled": "yes"},
        "spotproof:drill.enabled = 'yes'",
        "true or false",
    ),
    "a GKE drill nobody may run": (
        "gke-dev",
        {"enabled": True},
        "spotproof:drill.principals = []",
        "one or more IAM members",
    ),
    "allUsers as a GKE principal": (
        "gke-dev",
        {"enabled": True, "principals": ["allUsers"]},
        "spotproof:drill.principals[0] = 'allUsers'",
        "group:sre@example.com",
    ),
    "principals while the drill is off": (
        "gke-dev",
        {"principals": ["group:sre@example.com"]},
        "spotproof:drill.principals = ['group:sre@example.com']",
        "spotproof:drill.enabled: true",
    ),
    "the same principal twice": (
        "gke-dev",
        {"enabled": True, "principals": ["group:a@example.com", "group:a@example.com"]},
        "spotproof:drill.principals[1] = 'group:a@example.com'",
        "each once",
    ),
    "a misspelt field": (
        "gke-dev",
        {"enable": True},
        "spotproof:drill.enable = True: unknown field (did you mean enabled?)",
        "enabled, principals",
    ),
    "an IAM user where a role belongs": (
        "eks-dev",
        {"enabled": True, "principals": [f"arn:aws:iam::{ACCOUNT}:user/sre"]},
        f"spotproof:drill.principals[0] = 'arn:aws:iam::{ACCOUNT}:user/sre'",
        "IAM role ARNs",
    ),
    "an Entra object id without its type": (
        "aks-dev",
        {"enabled": True, "principals": [GROUP]},
        f"spotproof:drill.principals[0] = '{GROUP}'",
        "Group:OBJECT_ID",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_DRILL))
def test_bad_drill_config_exits_2_with_one_line_naming_key_and_allowed_values(
    case: str, make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    stack, drill, key, hint = BAD_DRILL[case]
    config = stack_config(stack)
    config["spotproof:drill"] = drill
    test_stack = stack.replace("-dev", "-test")

    err = plan_refuses_config(capsys, make_project(config, stack=test_stack), test_stack)

    assert key in err and hint in err, err
