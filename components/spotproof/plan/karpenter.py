"""Karpenter objects checked against Karpenter's published schemas, and its CEL rules.

The schemas come from the npm package ``@kubernetes-models/karpenter`` (pinned in
``package-lock.json``), run by Node.js through ``karpenter_schema.mjs``: types, enums,
patterns, ranges, required fields, and unknown fields. A wheel carries them bundled
(``scripts/bundle_karpenter_schemas.sh`` writes ``karpenter_schemas/validators.mjs``); a
checkout reads them from ``node_modules``. Without Node.js the check cannot run: the plan
says it skipped it, and ``--strict`` fails. The package leaves out the rules Karpenter's
CRDs state in CEL, so those that a spotproof object could break are checked here, in Python.
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
APIS = frozenset({"karpenter.sh/v1", "karpenter.k8s.aws/v1"})

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
        "Karpenter schemas not found (neither bundled nor in node_modules; run `npm ci`)"
    )


def schema_errors(objects: list[dict[str, Any]], schemas: Path) -> list[list[str]]:
    """One list of schema errors per object, from Karpenter's published schemas."""
    node = shutil.which("node")
    if node is None:
        raise SchemaUnavailable("Node.js not found (`node` on PATH)")
    completed = subprocess.run(
        [node, str(VALIDATOR), str(schemas)],
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if completed.returncode != 0:
        last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise SchemaUnavailable(f"Karpenter schema validator failed: {last}")
    return json.loads(completed.stdout)


def cel_errors(obj: dict[str, Any]) -> list[str]:
    """The CEL rules of Karpenter's CRDs that the npm schemas leave out."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "NodePool":
        return list(_node_pool_rules(spec))
    if kind == "EC2NodeClass":
        return list(_node_class_rules(spec))
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
    if (reference.get("group"), reference.get("kind")) != ("karpenter.k8s.aws", "EC2NodeClass"):
        yield "/spec/template/spec/nodeClassRef: must name a karpenter.k8s.aws EC2NodeClass"
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
