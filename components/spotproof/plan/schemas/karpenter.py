"""Karpenter objects checked against Karpenter's published schemas, and its CEL rules.

The schemas come from the npm package ``@kubernetes-models/karpenter`` (pinned in
``package-lock.json``), run by Node.js through ``karpenter_schema.mjs``: types, enums,
patterns, ranges, required fields, and unknown fields. A wheel carries them bundled
(``scripts/bundle_karpenter_schemas.sh`` writes ``karpenter_schemas/validators.mjs``); a
checkout reads them from ``node_modules``. Without Node.js, or without the schemas, the
check cannot run: the plan says it skipped it and fails, unless ``--allow-skipped``. The
package leaves out the rules Karpenter's CRDs state in CEL, so those that a spotproof
object could break are checked here, in Python.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKAGE = Path("node_modules") / "@kubernetes-models" / "karpenter"
VALIDATOR = Path(__file__).with_name("karpenter_schema.mjs")
BUNDLE = Path(__file__).with_name("karpenter_schemas") / "validators.mjs"
PUBLISHED_APIS = frozenset({"karpenter.sh/v1", "karpenter.k8s.aws/v1"})
"""What ``@kubernetes-models/karpenter`` has schemas for."""
AKS_NODE_CLASS_API = "karpenter.azure.com/v1beta1"
APIS = PUBLISHED_APIS | {AKS_NODE_CLASS_API}
NODE_CLASSES = {("karpenter.k8s.aws", "EC2NodeClass"), ("karpenter.azure.com", "AKSNodeClass")}
"""The node classes a NodePool may name: EKS's and AKS node auto-provisioning's."""

AKS_NODE_CLASS_FIELDS = frozenset(
    {
        "artifactStreaming",
        "fipsMode",
        "gpu",
        "imageFamily",
        "kubelet",
        "linuxOSConfig",
        "localDNS",
        "maxPods",
        "osDiskSizeGB",
        "security",
        "tags",
        "vnetSubnetID",
    }
)
AKS_IMAGE_FAMILIES = ("Ubuntu", "Ubuntu2204", "Ubuntu2404", "AzureLinux")
AKS_GPU_MODES = ("Driver", "None")
"""No npm package publishes AKS's Karpenter schemas, so the AKSNodeClass ``v1beta1`` spec
rules spotproof's objects could break are stated here, from Azure/karpenter-provider-azure
``pkg/apis/crds/karpenter.azure.com_aksnodeclasses.yaml``: its spec fields, the
``imageFamily`` and ``gpu.mode`` enums, ``osDiskSizeGB`` 30-2048, ``maxPods`` 10-250,
tag keys up to 512 characters without ``<>%&?\\`` and values up to 256, and FIPS not
on Ubuntu2404."""

_ALIAS = re.compile(r"^(al2|al2023|bottlerocket|windows2019|windows2022)@(latest|v[0-9.]+)$")
_RESERVED_TAGS = re.compile(
    r"^(kubernetes\.io/cluster/.*|eks:eks-cluster-name|karpenter\.sh/nodepool|"
    r"karpenter\.sh/nodeclaim|karpenter\.k8s\.aws/ec2nodeclass)$"
)


class SchemaUnavailable(RuntimeError):
    """Node.js or the schemas are missing: the schema check is skipped, and says why."""


def is_karpenter(obj: dict[str, Any]) -> bool:
    return obj.get("apiVersion") in APIS


def find_schemas(*starts: Path) -> Path:
    """The validators: the bundle installed with the package, else
    ``@kubernetes-models/karpenter`` under ``$SPOTPROOF_NODE_MODULES`` or the nearest
    ``node_modules`` above one of ``starts`` (a checkout after ``npm ci``)."""
    if BUNDLE.is_file():
        return BUNDLE
    override = os.environ.get("SPOTPROOF_NODE_MODULES")
    candidates = [Path(override) / PACKAGE.relative_to("node_modules")] if override else []
    for start in starts:
        candidates += [folder / PACKAGE for folder in (start, *start.parents)]
    for candidate in candidates:
        if (candidate / "package.json").is_file():
            return candidate
    raise SchemaUnavailable(
        "Karpenter's schemas are not in this install of spotproof (a build from a checkout "
        "without `npm ci`; a release wheel, or any build after `npm ci`, bundles them) nor in "
        "a node_modules above the project"
    )


def schema_errors(objects: list[dict[str, Any]], schemas: Path) -> list[list[str]]:
    """One list of schema errors per object, from Karpenter's published schemas."""
    published = [obj for obj in objects if obj.get("apiVersion") in PUBLISHED_APIS]
    if not published:
        return [[] for _ in objects]
    node = shutil.which("node")
    if node is None:
        raise SchemaUnavailable("Node.js not found (`node` on PATH)")
    completed = subprocess.run(
        [node, str(VALIDATOR), str(schemas)],
        input=json.dumps(published),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if completed.returncode != 0:
        last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise SchemaUnavailable(f"Karpenter schema validator failed: {last}")
    found = iter(json.loads(completed.stdout))
    return [next(found) if obj.get("apiVersion") in PUBLISHED_APIS else [] for obj in objects]


def cel_errors(obj: dict[str, Any]) -> list[str]:
    """The CEL rules of Karpenter's CRDs that the npm schemas leave out."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "NodePool":
        return list(_node_pool_rules(spec))
    if kind == "EC2NodeClass":
        return list(_node_class_rules(spec))
    if kind == "AKSNodeClass":
        return list(_aks_node_class_rules(spec))
    return []


def _node_pool_rules(spec: dict[str, Any]) -> Iterator[str]:
    template = (spec.get("template") or {}).get("spec") or {}
    for index, requirement in enumerate(template.get("requirements") or []):
        path = f"/spec/template/spec/requirements/{index}"
        operator, values = requirement.get("operator"), requirement.get("values") or []
        if operator == "In" and not values:
            yield f"{path}: operator In needs at least one value"
        if operator in ("Gt", "Lt") and (len(values) != 1 or not str(values[0]).isdigit()):
            yield f"{path}: operator {operator} takes exactly one non-negative integer"
        min_values = requirement.get("minValues")
        if operator == "In" and min_values and len(values) < min_values:
            yield f"{path}: minValues {min_values} exceeds the {len(values)} values listed"
    reference = template.get("nodeClassRef") or {}
    if (reference.get("group"), reference.get("kind")) not in NODE_CLASSES:
        yield (
            "/spec/template/spec/nodeClassRef: must name a karpenter.k8s.aws EC2NodeClass or "
            "a karpenter.azure.com AKSNodeClass"
        )
    for index, budget in enumerate((spec.get("disruption") or {}).get("budgets") or []):
        if bool(budget.get("schedule")) != bool(budget.get("duration")):
            yield f"/spec/disruption/budgets/{index}: schedule and duration go together"


def _node_class_rules(spec: dict[str, Any]) -> Iterator[str]:
    terms = spec.get("amiSelectorTerms") or []
    aliases = [t["alias"] for t in terms if "alias" in t]
    if aliases and len(terms) > 1:
        yield "/spec/amiSelectorTerms: an alias must be the only term"
    for alias in aliases:
        if not _ALIAS.match(str(alias)):
            yield f"/spec/amiSelectorTerms: alias {alias!r} is not family@version"
    if ("role" in spec) == ("instanceProfile" in spec):
        yield "/spec: exactly one of role and instanceProfile"
    for key in spec.get("tags") or {}:
        if _RESERVED_TAGS.match(key):
            yield f"/spec/tags/{key}: reserved for Karpenter"


def _whole_number(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _aks_node_class_rules(spec: dict[str, Any]) -> Iterator[str]:
    for key in sorted(set(spec) - AKS_NODE_CLASS_FIELDS):
        yield f"/spec/{key}: unknown field; allowed: {', '.join(sorted(AKS_NODE_CLASS_FIELDS))}"
    family = spec.get("imageFamily", "Ubuntu")
    if family not in AKS_IMAGE_FAMILIES:
        yield f"/spec/imageFamily: {family!r} is not one of {', '.join(AKS_IMAGE_FAMILIES)}"
    if "osDiskSizeGB" in spec and not _whole_number(spec["osDiskSizeGB"], 30, 2048):
        yield f"/spec/osDiskSizeGB: {spec['osDiskSizeGB']!r} is not an integer in 30-2048"
    if "maxPods" in spec and not _whole_number(spec["maxPods"], 10, 250):
        yield f"/spec/maxPods: {spec['maxPods']!r} is not an integer in 10-250"
    gpu = spec.get("gpu") or {}
    if set(gpu) - {"mode"}:
        yield "/spec/gpu: only mode is allowed"
    if gpu.get("mode", "Driver") not in AKS_GPU_MODES:
        yield f"/spec/gpu/mode: {gpu.get('mode')!r} is not one of {', '.join(AKS_GPU_MODES)}"
    for key, value in (spec.get("tags") or {}).items():
        if len(key) > 512 or re.search(r"[<>%&?\\]", key):
            yield f"/spec/tags/{key}: keys are at most 512 characters, without <>%&?\\"
        if len(str(value)) > 256:
            yield f"/spec/tags/{key}: values are at most 256 characters"
    if spec.get("fipsMode") == "FIPS" and family == "Ubuntu2404":
        yield "/spec/fipsMode: FIPS is not supported on Ubuntu2404"
