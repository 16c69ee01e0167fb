"""What a stack grants its drill: the stack output ``drill``, present when ``drill.enabled``.

Each cloud's components add exactly what a drill needs and nothing more, and export where it
is; each cloud's reclaim module (``drill.reclaim.<cloud>``) declares the output's shape as
its ``Grant`` dataclass, its ``DRILL.grant`` (fields snake_case here, camelCase in the
output, as every other output of the stack). A stack deployed without it is told which
setting adds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from spotproof import clouds
from spotproof.catalog import Cloud
from spotproof.drill.errors import GrantMissing
from spotproof.drill.instances import RECLAIM_LAYER

OUTPUT = "drill"
"""The stack output holding the grant."""
ENABLE = "spotproof:drill.enabled"
"""The stack setting that adds it."""


def camel(name: str) -> str:
    """``experiment_template_id`` -> ``experimentTemplateId``."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def output_keys(cloud: Cloud) -> tuple[str, ...]:
    """The keys of ``cloud``'s ``drill`` output, in its ``Grant``'s order."""
    grant = clouds.module(RECLAIM_LAYER, cloud).DRILL.grant
    return tuple(camel(f.name) for f in fields(grant))


def grant_from_outputs(cloud: Cloud, outputs: Mapping[str, Any], where: str) -> Any:
    """``cloud``'s ``Grant`` read from a stack's outputs (``where`` they came from, in words:
    ``stack gke-dev``); GrantMissing, naming the setting, when the stack was deployed
    without it (or by a spotproof that exported less)."""
    found = outputs.get(OUTPUT)
    if not isinstance(found, Mapping) or not found:
        raise GrantMissing(
            f"{where} has no {OUTPUT!r} output, so the drill may reclaim none of its nodes; "
            f"set {ENABLE} true, run pulumi up, then drill again"
        )
    grant = clouds.module(RECLAIM_LAYER, cloud).DRILL.grant
    missing = [key for key in output_keys(cloud) if not found.get(key)]
    if missing:
        raise GrantMissing(
            f"the {OUTPUT!r} output of {where} lacks {', '.join(missing)}; run pulumi up "
            f"with this spotproof and {ENABLE} true"
        )
    return grant(**{f.name: str(found[camel(f.name)]) for f in fields(grant)})
