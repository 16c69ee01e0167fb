"""What the offline plan answers in place of the clouds: the mocks a recording runs under.

:class:`OfflineMocks` answers each registration with its inputs plus plausible values for
the outputs a program reads back (a cluster's endpoint, a service account's email), and
each data source a program calls with what the cloud would say, so ``apply`` chains run to
completion. What a type's outputs are is its cloud's to say: each cloud's plan module
contributes its fakers (:class:`CloudRecording`, handed over as ``CloudPlan.recording``),
looked up by type token.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks

from spotproof import clouds

OFFLINE_ACCOUNT = "123456789012"
"""AWS account id the offline plan pretends to run in (AWS's documentation example)."""
OFFLINE_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
OFFLINE_TENANT = "11111111-1111-1111-1111-111111111111"
"""Azure subscription and tenant the offline plan pretends to run in."""
FAKE_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\noffline\n-----END").decode()


@dataclass(frozen=True)
class OfflineCloud:
    """Where the offline plan pretends to run: the values fakers put into outputs."""

    project: str = "offline-project"
    project_number: str = "123456789012"
    region: str = "us-east-1"
    account: str = OFFLINE_ACCOUNT
    subscription: str = OFFLINE_SUBSCRIPTION
    tenant: str = OFFLINE_TENANT

    def arn(self, service: str, resource: str, *, regional: bool = True) -> str:
        return f"arn:aws:{service}:{self.region if regional else ''}:{self.account}:{resource}"


# Outputs a program reads back from resources, per type, computed from the inputs.
OutputFaker = Callable[[str, dict[str, Any], OfflineCloud], dict[str, Any]]
CallFaker = Callable[[OfflineCloud], dict[str, Any]]
"""Results of a data source (invoke) a program calls."""


@dataclass(frozen=True)
class CloudRecording:
    """One cloud's part of recording a program offline."""

    outputs: Mapping[str, OutputFaker] = field(default_factory=dict)
    """By type token: the outputs a program reads back from the cloud's resources."""
    calls: Mapping[str, CallFaker] = field(default_factory=dict)
    """By token: what the cloud's data sources answer."""
    cluster_inputs: Mapping[str, str] = field(default_factory=dict)
    """By type: the input naming the cluster a resource is for (a pool's), and the cluster
    type's own name input; how a program of several clusters is cut into one part per
    cluster where a resource names its cluster by a literal (``plan.recording.clusters``)."""


def every_cloud() -> list[CloudRecording]:
    """Every registered cloud's, in the registry's order: each cloud's plan module hands
    it over within its plan (``CloudPlan.recording``), which is above the recording."""
    return [module.PLAN.recording for module in clouds.modules("spotproof.plan")]


@functools.cache
def _fakers() -> dict[str, OutputFaker]:
    return {type_: fake for cloud in every_cloud() for type_, fake in cloud.outputs.items()}


@functools.cache
def _calls() -> dict[str, CallFaker]:
    return {token: fake for cloud in every_cloud() for token, fake in cloud.calls.items()}


# An input that is unknown until deploy (an output of another stack, say) is handed to the
# fakers as this text, and whatever they derive from it comes back unknown, as in a preview.
_UNKNOWN_MARK = "\x00unknown\x00"


def _leaves(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` with ``leaf`` applied to everything that is not a mapping or a list."""
    if isinstance(value, Mapping):
        return {k: _leaves(v, leaf) for k, v in value.items()}
    if isinstance(value, list):
        return [_leaves(v, leaf) for v in value]
    return leaf(value)


def _marked(value: Any) -> Any:
    return _UNKNOWN_MARK if isinstance(value, pulumi.output.Unknown) else value


def _unknown_where_marked(value: Any) -> Any:
    if isinstance(value, str) and _UNKNOWN_MARK in value:
        return pulumi.runtime.rpc.UNKNOWN
    return value


class OfflineMocks(pulumi_mocks.Mocks):
    def __init__(self, cloud: OfflineCloud) -> None:
        self.cloud = cloud

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict]:
        outputs = dict(args.inputs)
        faker = _fakers().get(args.typ)
        if faker:
            faked = faker(args.name, _leaves(args.inputs, _marked), self.cloud)
            outputs.update(_leaves(faked, _unknown_where_marked))
        # Azure resources are referred to by their ARM id, which a faker builds.
        return outputs.pop("id", f"{args.name}-id"), outputs

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict, list]:
        result = _calls().get(args.token)
        return (result(self.cloud) if result else {}), []
