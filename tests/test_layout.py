"""The library's structure, as docs/layout.md draws it: imports run one way, no module
grows past what a reader takes in at once, and the map names every room."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import spotproof

PACKAGE_ROOT = Path(spotproof.__file__).parent
MAX_LINES = 400
"""A guide to one concept per module, as long as a reader takes in at once: a module past it
is split by concept, or is named in :data:`LONGER_THAN_MAX_LINES` with its reason."""
LONGER_THAN_MAX_LINES: dict[str, str] = {}
"""Modules allowed past :data:`MAX_LINES`, by dotted name, each with one line saying why it is
one concept that a split would only scatter (issue 45 item 6). Never shorten a docstring or
a comment that says why to pass the test: name the module here instead, and let the review
judge the reason. Whoever brings a module back under the limit removes its entry; an entry
left for a short or a missing module fails the test, so the list cannot go stale."""
LAYERS = [
    {"catalog", "commands", "terminal", "bounded_yaml", "cloud_tags"},
    {"clouds", "runtime", "bounded_json"},
    {"extras", "fleet", "ci"},
    {"scheduling"},
    {"kube", "policy"},
    {"observability"},
    {"gke", "eks", "aks", "plan"},
    {"program", "testing", "check", "drill"},
    {"smoke", "status"},
    {"cli"},
]
"""The library's top-level parts, lowest first; docs/layout.md's table lists them in an
order these layers allow. Each may import only from a lower layer. ``clouds`` and
``program`` reach each cloud's module through the registry, an import made when first asked
for, which this static reading does not follow (docs/layout.md says why that is allowed)."""
PLAN_LAYERS = [
    {"config", "schemas", "model"},
    {"recording"},
    {"cloud"},
    {"simulation"},
    {"gke"},
    {"eks", "aks", "result"},
    {"reporting"},
    {"judge"},
    {"run"},
    {"command"},
]
"""``plan``'s own parts, lowest first, as docs/layout.md's ``plan`` row tells them: the
plan's model of a cluster, the recording, the interface each cloud's module fills, the
simulations, the clouds' modules (``eks`` reads a spot node group's reclaim as ``gke``'s),
the result, its reports, the checks that make it, the run of a stack, the command. The
recording reaches the clouds' modules through the registry, as ``clouds`` does."""
KNOWN_CIRCLES: dict[frozenset[str], str] = {}
"""Circles known and owned, each with why it may stand for now; whoever opens one removes
its entry."""


def _modules() -> dict[str, Path]:
    """Every module of the library by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The library modules ``name`` imports, at module level, inside a function (an import
    deferred into a function still ties the two modules) or under ``if TYPE_CHECKING`` (a
    type named in a signature ties them as well: a reader of one must know the other);
    ``from package import module`` counts as the module."""
    tree = ast.parse(path.read_text())
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                targets.add(child if child in modules else node.module)
    return {t for t in targets if t in modules and t != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other_even_through_others() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert [c for c in _cycles(graph) if frozenset(c) not in KNOWN_CIRCLES] == []


def _upward(layers: list[set[str]], package: str) -> list[str]:
    """Imports between the parts of ``package`` (its modules and subpackages) that do not run
    down ``layers``."""
    rank = {part: level for level, parts in enumerate(layers) for part in parts}
    depth = package.count(".") + 1
    modules = _modules()
    return sorted(
        f"{name} imports {target}"
        for name, path in modules.items()
        if name.startswith(f"{package}.")
        for target in _imports(name, path, modules)
        if target.startswith(f"{package}.")
        and (mine := name.split(".")[depth]) != (theirs := target.split(".")[depth])
        and rank[theirs] >= rank[mine]
    )


def _parts(package: str) -> set[str]:
    depth = package.count(".") + 1
    return {name.split(".")[depth] for name in _modules() if name.startswith(f"{package}.")}


def test_every_import_runs_down_the_layers() -> None:
    assert _upward(LAYERS, "spotproof") == []


def test_every_import_within_the_plan_runs_down_its_layers() -> None:
    assert _upward(PLAN_LAYERS, "spotproof.plan") == []


def test_every_part_of_the_library_has_its_layer() -> None:
    assert _parts("spotproof") == set().union(*LAYERS)
    assert _parts("spotproof.plan") == set().union(*PLAN_LAYERS)


def _line_counts() -> dict[str, int]:
    return {name: len(path.read_text().splitlines()) for name, path in _modules().items()}


def test_no_module_passes_four_hundred_lines() -> None:
    """Past :data:`MAX_LINES`, split the module by concept or name it in
    :data:`LONGER_THAN_MAX_LINES` with its reason; never cut what explains the code."""
    lines = _line_counts()
    longer = {
        name: count
        for name, count in lines.items()
        if count > MAX_LINES and name not in LONGER_THAN_MAX_LINES
    }
    assert longer == {}, (
        "split by concept, or name it in LONGER_THAN_MAX_LINES with why it is one concept"
    )


def test_every_exception_to_the_line_limit_is_needed_and_says_why_in_one_line() -> None:
    lines = _line_counts()
    stale = {name for name in LONGER_THAN_MAX_LINES if lines.get(name, 0) <= MAX_LINES}
    assert stale == set(), "back under the limit, or gone: remove their entries"
    unexplained = {
        name
        for name, reason in LONGER_THAN_MAX_LINES.items()
        if not reason.strip() or "\n" in reason
    }
    assert unexplained == set(), "each exception needs its reason, in one line"


def test_the_layout_page_names_every_package_and_module() -> None:
    """docs/layout.md names each module by its path below ``spotproof`` (``plan.recording``
    for a package, ``recorder`` within its package's row), so a new room cannot go unmapped."""
    page = (Path(__file__).parents[1] / "docs" / "layout.md").read_text()
    named = set(re.findall(r"`([a-z_][a-z0-9_.]*)`", page))
    unnamed = sorted(
        name
        for name in _modules()
        if name != "spotproof"
        and name.removeprefix("spotproof.") not in named
        and name.rsplit(".", 1)[-1] not in named
    )
    assert unnamed == []
