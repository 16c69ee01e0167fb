"""Run a Pulumi program in-process against mocks and record every registration.

This is how ``spotproof plan`` and the component tests see what a program would create
without the Pulumi engine, providers or credentials. :class:`RecordingMonitor` extends
the SDK's mock monitor to keep what the plain one drops, and as the engine would: each
resource's URN, parent, options and dependencies. What the mocks answer in place of the
clouds is ``plan.recording.offline``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.sync_await import _sync_await

from spotproof.plan.recording.offline import OfflineCloud, OfflineMocks

STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass
class Resource:
    """One registration: what ``pulumi preview`` would show as a row."""

    type: str
    name: str
    urn: str
    parent: str | None
    """URN of the parent; None for the stack itself."""
    custom: bool
    inputs: dict[str, Any]
    provider: str | None = None
    protect: bool = False
    """Pulumi refuses to delete it (``protect=True``)."""
    replace_on_changes: tuple[str, ...] = ()
    ignore_changes: tuple[str, ...] = ()
    """Input paths Pulumi leaves to others after creating the resource (``ignore_changes``)."""
    dependencies: tuple[str, ...] | None = None
    """URNs of the custom resources Pulumi creates before this one (``depends_on``, a
    component standing for its children, and every resource whose output an input
    uses); None for an object applied outside the program (``spotproof check``)."""
    property_dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per input, the URNs its value comes from (a provider's ``kubeconfig``: the cluster
    it connects to, ``plan.recording.clusters``)."""

    @property
    def is_kubernetes(self) -> bool:
        return self.type.startswith("kubernetes:") and self.custom and "apiVersion" in self.inputs


@dataclass
class Recording:
    """Everything a program registered, in registration order."""

    stack: str
    project: str
    resources: list[Resource] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    cluster: str = ""
    """The cluster this is the part of, where the program declares several
    (``plan.recording.clusters``); empty for a whole program."""

    def of_type(self, type_: str) -> list[Resource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str) -> Resource:
        matches = [r for r in self.resources if r.type == type_ and r.name == name]
        if len(matches) != 1:
            known = sorted(r.name for r in self.of_type(type_))
            raise LookupError(f"{len(matches)} resources {type_} named {name!r}; have {known}")
        return matches[0]

    def children(self, parent: Resource) -> Iterator[Resource]:
        return (r for r in self.resources if r.parent == parent.urn)

    def kubernetes_objects(self) -> list[Resource]:
        return [r for r in self.resources if r.is_kubernetes]


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi_mocks.Mocks, recording: Recording) -> None:
        super().__init__(mocks)
        self.recording = recording

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """The URN the engine gives: the parent's whole qualified type, then ours.

        The mock keeps only the parent's last type, so resources the engine tells apart
        could share a URN here and the reverse. The engine's rule (the SDK's own
        ``pulumi.runtime.resource.create_urn``, and ``NewURN`` in
        ``sdk/go/common/resource/urn.go``): ``urn:pulumi:<stack>::<project>::`` then the
        parent's qualified type and ``$`` unless the parent is the stack, the type, ``::``,
        the name."""
        qualified = type_
        if parent and parent.split("::")[2] != STACK_TYPE:
            qualified = f"{parent.split('::')[2]}${type_}"
        stack, project = pulumi.get_stack(), pulumi.get_project()
        return f"urn:pulumi:{stack}::{project}::{qualified}::{name}"

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)
        if request.type != STACK_TYPE:
            inputs = pulumi.runtime.rpc.deserialize_properties(request.object)
            self.recording.resources.append(
                Resource(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent=request.parent or None,
                    custom=bool(request.custom),
                    inputs=whole_numbers(inputs),
                    provider=request.provider or None,
                    protect=bool(request.protect),
                    replace_on_changes=tuple(request.replaceOnChanges),
                    ignore_changes=tuple(request.ignoreChanges),
                    dependencies=tuple(request.dependencies),
                    property_dependencies={
                        key: tuple(value.urns)
                        for key, value in request.propertyDependencies.items()
                    },
                )
            )
        return response


@dataclass(frozen=True)
class Secret:
    """An input the program marked secret; reports show it redacted."""

    value: Any


def reveal(value: Any) -> Any:
    """``value`` with every :class:`Secret` unwrapped (for manifests a user asked to write)."""
    if isinstance(value, Secret):
        return reveal(value.value)
    if isinstance(value, Mapping):
        return {k: reveal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [reveal(v) for v in value]
    return value


def whole_numbers(value: Any) -> Any:
    """Mock inputs carry every number as a float; Kubernetes and cloud APIs want ints back.
    Secrets arrive wrapped in the wire format's signature object; they become :class:`Secret`."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        if value.get(pulumi.runtime.rpc._special_sig_key) == pulumi.runtime.rpc._special_secret_sig:
            return Secret(whole_numbers(value.get("value")))
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [whole_numbers(v) for v in value]
    return value


def record(
    program: Callable[[], None],
    *,
    stack: str,
    project: str,
    config: Mapping[str, str] | None = None,
    secret_keys: Iterable[str] = (),
    cloud: OfflineCloud | None = None,
) -> Recording:
    """Run ``program`` as a Pulumi program of ``project``/``stack`` and return what it registered.

    ``config`` is the flat Pulumi config (``ns:key`` -> string, objects JSON-encoded) exactly
    as the engine would hand it to the program; ``secret_keys`` are the keys whose values
    the engine marks secret, so ``Config.get_secret`` and friends wrap them as secrets.
    """
    recording = Recording(stack=stack, project=project)
    mocks = OfflineMocks(cloud or OfflineCloud())
    # Offline there is no engine to answer for the language host; keep the SDK from waiting.
    os.environ.setdefault("PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "true")
    pulumi.runtime.settings.SETTINGS.rpc_manager.clear()
    pulumi.runtime.settings.SETTINGS.outputs.clear()
    # set_mocks only creates a Stack when none exists; a second plan in the same process
    # must not hang its resources under the first plan's stack.
    pulumi.runtime.settings.ROOT.set(None)
    _ensure_event_loop()
    pulumi_mocks.set_mocks(
        mocks,
        project=project,
        stack=stack,
        preview=True,
        monitor=RecordingMonitor(mocks, recording),
    )
    pulumi.runtime.set_all_config(dict(config or {}), sorted(secret_keys))
    stack_resource = pulumi.runtime.get_root_resource()

    def run() -> None:
        program()

    with placeholder_stack_outputs():
        _sync_await(pulumi.runtime.stack.run_pulumi_func(run))
    if stack_resource is not None:
        recording.outputs = _resolved_outputs(stack_resource)
    return recording


@contextlib.contextmanager
def placeholder_stack_outputs() -> Iterator[None]:
    """Another stack's outputs, read through a ``StackReference``, as known placeholders.

    ``pulumi preview`` reads them from that stack, so a program that adds components to an
    existing cluster sees its name, kubeconfig and ids; offline there is no other stack,
    and unknown values would hide most of what those components render. Each output reads
    as its own name, dashed (``cluster_name`` -> ``cluster-name``): a string that names
    where it came from."""
    reference = pulumi.StackReference
    originals = reference.get_output, reference.require_output

    def placeholder(_self: Any, name: Any) -> pulumi.Output[Any]:
        return pulumi.Output.from_input(name).apply(lambda key: str(key).replace("_", "-"))

    reference.get_output = placeholder  # type: ignore[method-assign]
    reference.require_output = placeholder  # type: ignore[method-assign]
    try:
        yield
    finally:
        reference.get_output, reference.require_output = originals  # type: ignore[method-assign]


def _ensure_event_loop() -> None:
    """The SDK registers resources on the thread's current event loop, which
    ``asyncio.run`` (an async client used earlier in the same test process) leaves unset."""
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        loop = None
    if loop is None or loop.is_closed():
        asyncio.set_event_loop(asyncio.new_event_loop())


def _resolved_outputs(stack_resource: Any) -> dict[str, Any]:
    outputs = getattr(stack_resource, "outputs", {}) or {}
    resolved = {}
    for key, value in outputs.items():
        output = pulumi.Output.from_input(value)
        resolved[key] = _sync_await(output.future())
    return resolved
