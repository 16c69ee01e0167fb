"""Render a recording as a tree, like the resource list of ``pulumi preview``."""

from __future__ import annotations

from spotproof.plan.recording.recorder import Recording, Resource


def render(recording: Recording) -> str:
    by_parent: dict[str | None, list[Resource]] = {}
    for resource in recording.resources:
        by_parent.setdefault(resource.parent, []).append(resource)
    stack_name = f"{recording.project}-{recording.stack}"
    stack_urn = (
        f"urn:pulumi:{recording.stack}::{recording.project}::pulumi:pulumi:Stack::{stack_name}"
    )
    rows: list[tuple[str, str]] = [("pulumi:pulumi:Stack", stack_name)]

    def walk(parent: str | None, prefix: str) -> None:
        # Resources before sub-components, then by type and name: registration order under
        # mocks follows input resolution and is not stable from run to run.
        children = sorted(by_parent.get(parent, []), key=lambda r: (not r.custom, r.type, r.name))
        for index, child in enumerate(children):
            last = index == len(children) - 1
            rows.append((f"{prefix}{'└─ ' if last else '├─ '}{child.type}", child.name))
            walk(child.urn, prefix + ("   " if last else "│  "))

    walk(stack_urn, "")
    width = max(len(type_) for type_, _ in rows) + 3
    lines = [f"     {'Type':<{width}}Name"]
    lines += [f" +   {type_:<{width}}{name}" for type_, name in rows]
    return "\n".join(lines)
