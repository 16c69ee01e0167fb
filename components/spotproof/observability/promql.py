"""The pieces every spotproof rule is built from: an alert with its annotations, a counter's
events in a window, and the labels that keep clusters apart."""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass

from spotproof.observability.model import Rule

NAMESPACE = "cluster, namespace"
"""The labels a namespace's total keeps. ``cluster`` too: GKE evaluates alerts as Cloud
Monitoring alert policies, which read every cluster of the project until narrowed to one
(:func:`in_cluster`), and its and Azure's collectors label every series with its cluster;
where no collector sets it (an Amazon Managed Service for Prometheus workspace per stack)
it is absent, and absent labels group as one."""
POD = f"{NAMESPACE}, pod"
"""The labels that name one pod, wherever it runs."""
EVALUATION_INTERVAL = "1m"
"""Every group's; alerts measured in minutes need no faster evaluation, and managed
services bill rule evaluation by the samples it reads."""


def shown(*keys: str) -> str:
    """Labels as an annotation shows them: ``{{ $labels.namespace }}/{{ $labels.pod }}``."""
    return "/".join(f"{{{{ $labels.{key} }}}}" for key in keys)


def events(selector: str, window: str) -> str:
    """How much a counter counted within ``window``, per series: ``increase()`` for a series
    that was there a window ago; all it holds for one that began within it, which counted
    from 0 there (``increase()`` cannot see a series' first value: a counter born at 1, as a
    labelled one is at its first event, or a process's count in its only scrape).

    Under GKE's Managed Service for Prometheus a series begins one sample later, at what it
    counted since its first (``runtime.metrics.recorders.Registry`` serves that first at
    0): all it holds is the same count there."""
    return (
        f"((increase({selector}[{window}]) and {selector} offset {window})"
        f" or (max_over_time({selector}[{window}]) unless {selector} offset {window}))"
    )


def alert(
    name: str,
    expr: str,
    severity: str,
    summary: str,
    description: str,
    *,
    for_: str = "",
    **labels: str,
) -> Rule:
    return Rule(
        alert=name,
        expr=expr,
        for_=for_,
        labels={"severity": severity, **labels},
        annotations={"summary": summary, "description": description},
    )


def label_name(key: str, *, prefix: str = "") -> str:
    """A Kubernetes label key as the Prometheus label that names it: ``prefix`` and the key
    with every character outside ``[a-zA-Z0-9_]`` made ``_``. Pod discovery names a pod's
    label so after ``__meta_kubernetes_pod_label_``
    (https://prometheus.io/docs/prometheus/latest/configuration/configuration/,
    ``<kubernetes_sd_config>``, and prometheus-operator's PodMonitor at v0.92.0,
    ``pkg/prometheus/promcfg.go`` ``sanitizeLabelName``), and kube-state-metrics after
    ``label_`` on ``kube_pod_labels`` (kubernetes/kube-state-metrics@v2.20.0
    ``internal/store/utils.go``, ``SanitizeLabelName``)."""
    allowed = (c if c == "_" or (c.isascii() and c.isalnum()) else "_" for c in key)
    return prefix + "".join(allowed)


CLUSTER = "cluster"
"""The label every series of a GKE cluster carries its cluster's name in (see
:func:`in_cluster`)."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?[a-zA-Z0-9]*")
"""A number or a duration (``1h30m``)."""
_MATCHER = re.compile(
    r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(" + _STRING.pattern + r")\s*(?:,|$)"
)
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
"""Keywords a parenthesised list of label names may follow: no selector in it."""
_KEYWORDS = _LABEL_LISTS | {"and", "or", "unless", "offset", "bool", "atan2", "inf", "nan"}


@dataclass(frozen=True)
class Selector:
    """A vector selector in a PromQL expression: its metric name (empty for ``{...}``
    alone) and where it is, its label matchers' braces included when it has them."""

    name: str
    start: int
    end: int
    braces: bool


def selectors(expr: str) -> list[Selector]:
    """Every vector selector of ``expr``, in order: a metric name where a series may be
    named (not a function, an aggregation, a keyword, a label in ``by (...)``, ``on (...)``
    and the like, nor text in a string or a range), with its label matchers."""
    found: list[Selector] = []
    i = 0
    while i < len(expr):
        char = expr[i]
        if char.isspace():
            i += 1
        elif char == "#":
            end = expr.find("\n", i)
            i = len(expr) if end < 0 else end
        elif char in "\"'`":
            i = _match(_STRING, expr, i).end()
        elif char == "[":
            i = _closing(expr, i, "]")
        elif char.isdigit() or (char == "." and expr[i + 1 : i + 2].isdigit()):
            i = _match(_NUMBER, expr, i).end()
        elif char == "{":
            found.append(Selector("", i, _closing(expr, i, "}"), braces=True))
            i = found[-1].end
        elif (word := _IDENTIFIER.match(expr, i)) is not None:
            i = _word(expr, word, found)
        else:
            i += 1
    return found


def _word(expr: str, word: re.Match[str], found: list[Selector]) -> int:
    """Where scanning goes on after ``word``, noting it in ``found`` when it names series."""
    after = _skip_space(expr, word.end())
    keyword = word.group().lower()
    if keyword in _LABEL_LISTS:
        return _closing(expr, after, ")") if expr.startswith("(", after) else word.end()
    following = _IDENTIFIER.match(expr, after)
    if (
        keyword in _KEYWORDS
        or expr.startswith("(", after)  # a function or an aggregation
        or (following is not None and following.group().lower() in ("by", "without"))
    ):
        return word.end()
    if expr.startswith("{", after):
        found.append(Selector(word.group(), word.start(), _closing(expr, after, "}"), True))
    else:
        found.append(Selector(word.group(), word.start(), word.end(), False))
    return found[-1].end


def _skip_space(expr: str, i: int) -> int:
    while i < len(expr) and expr[i].isspace():
        i += 1
    return i


def _match(pattern: re.Pattern[str], expr: str, i: int) -> re.Match[str]:
    found = pattern.match(expr, i)
    if found is None:
        raise ValueError(f"not PromQL at character {i}: {expr[i : i + 20]!r}")
    return found


def _closing(expr: str, i: int, close: str) -> int:
    """The index just past the ``close`` matching the bracket at ``i``, strings skipped."""
    j = i + 1
    while j < len(expr) and expr[j] != close:
        j = _match(_STRING, expr, j).end() if expr[j] in "\"'`" else j + 1
    if j >= len(expr):
        raise ValueError(f"{expr[i]!r} at character {i} is never closed in {expr!r}")
    return j + 1


def in_cluster(expr: str, cluster: str, *, project_wide: Collection[str] = ()) -> str:
    """``expr`` reading one cluster's series only: ``cluster="NAME"`` on every vector
    selector, but those of the ``project_wide`` metrics, which carry no cluster label
    (Cloud Monitoring's own metrics, narrowed by their own labels instead).

    Managed Service for Prometheus keeps every cluster's series in one project-wide store,
    and "the data you query ... is determined by the Cloud Monitoring construct metrics
    scope, regardless of how you query the data"
    (https://cloud.google.com/stackdriver/docs/managed-prometheus/best-practices/config):
    a Cloud Monitoring alert policy or dashboard sees every cluster of the project. GMP
    narrows its own ``ClusterRules`` the same way, adding the cluster's matcher to every
    vector selector (GoogleCloudPlatform/prometheus-engine v0.17.2,
    ``pkg/operator/apis/monitoring/v1/rules_config.go``, ``scope`` and ``setSelector``).
    A selector that already matches another cluster is refused."""
    matcher = f"{CLUSTER}={json.dumps(cluster)}"
    pieces, done = [], 0
    for selector in selectors(expr):
        if selector.name in project_wide:
            continue
        text = expr[selector.start : selector.end]
        pieces += [expr[done : selector.start], _with_matcher(text, selector, cluster, matcher)]
        done = selector.end
    return "".join([*pieces, expr[done:]])


def _with_matcher(text: str, selector: Selector, cluster: str, matcher: str) -> str:
    if not selector.braces:
        return f"{text}{{{matcher}}}"
    opening = text.index("{", len(selector.name))
    inner = text[opening + 1 : -1]
    position = 0
    while inner[position:].strip():
        found = _match(_MATCHER, inner, position)
        label, operator, value = found.groups()
        if label == CLUSTER and (operator, value[1:-1]) == ("=", cluster):
            return text
        if label == CLUSTER:
            raise ValueError(f"{text} selects {label}{operator}{value}, not {matcher}")
        position = found.end()
    kept = inner.rstrip().rstrip(",").rstrip()
    return f"{text[: opening + 1]}{kept}{', ' if kept.strip() else ''}{matcher}}}"
