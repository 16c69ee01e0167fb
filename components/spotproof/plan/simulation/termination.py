"""How a reclaimed pod's work ends, and whether anything brings it back.

- ``bare-pod-on-reclaimable``: a Pod no controller owns is never recreated: when its node
  is reclaimed it is gone for good ("Pods do not, by themselves, self-heal. If a Pod is
  scheduled to a node that then fails, the Pod is deleted",
  https://kubernetes.io/docs/concepts/workloads/pods/#working-with-pods). On capacity the
  cloud takes back, run it from a Job.
- ``sigterm-exit-zero``: a reclaim reaches the container as SIGTERM. A Job's container
  that answers it with exit 0 ends Succeeded, and the Job counts a run cut short as
  complete: neither ``backoffLimit`` nor ``podFailurePolicy`` sees a failure
  (https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy
  matches failed pods only). One that ignores SIGTERM (``trap '' TERM``) never saves and
  is killed when the grace runs out. The runtime's contract: save, then exit 143.
  Found in the shell commands and inline Python a container runs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation.outcomes import Outcome
from spotproof.policy import Violation

BARE_POD_POLICY = "bare-pod-on-reclaimable"
SIGTERM_POLICY = "sigterm-exit-zero"
JOB_KINDS = frozenset({"Job", "CronJob", "JobSet"})
SUCCESS_ACTIONS = frozenset({"exit", "exit 0", "true", ":", "exit $?"})
_PYTHON_EXIT_ZERO = re.compile(
    r"signal\.signal\(\s*signal\.SIGTERM\s*,[^\n]*?(sys\.exit|os\._exit|exit)\(\s*0?\s*\)"
)


def check(recording: Recording, found: list[Outcome]) -> list[Violation]:
    owned = {
        r.name: bool((r.inputs.get("metadata") or {}).get("ownerReferences"))
        for r in recording.kubernetes_objects()
    }
    violations = []
    for outcome in found:
        workload = outcome.workload
        reclaimable = [p.name for p in outcome.fits if p.shape.reclaimable]
        if workload.kind == "Pod" and reclaimable and not owned.get(workload.resource):
            violations.append(
                Violation(
                    BARE_POD_POLICY,
                    workload.resource,
                    f"{workload.label} runs bare on reclaimable pool(s) "
                    f"{', '.join(reclaimable)}: nothing recreates a Pod whose node is "
                    "reclaimed; run it from a Job",
                    workload.key_path(),
                )
            )
        if workload.kind in JOB_KINDS:
            violations += [
                Violation(
                    SIGTERM_POLICY,
                    workload.resource,
                    f"{workload.label}: {problem}",
                    workload.container_key_path(container, "command", "args"),
                )
                for container in workload.pod_spec.get("containers") or []
                for problem in _sigterm_answers(container)
            ]
    return violations


def _sigterm_answers(container: Mapping[str, Any]) -> Iterator[str]:
    """Each way ``container``'s command answers SIGTERM wrongly."""
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    name = container.get("name")
    for action in _term_traps(words):
        if action == "":
            yield (
                f"container {name} ignores SIGTERM (trap '' TERM): a reclaim cannot make it "
                "save, and it is killed when the grace runs out; save, then exit 143"
            )
        elif _ends_in_success(action):
            yield (
                f"container {name} exits 0 on SIGTERM (trap {action!r} TERM): a reclaimed "
                "pod ends Succeeded and the Job counts the cut-short run as complete; "
                "save, then exit 143"
            )
    if any(_PYTHON_EXIT_ZERO.search(word) for word in words):
        yield (
            f"container {name} exits 0 on SIGTERM (a SIGTERM handler calls exit(0)): a "
            "reclaimed pod ends Succeeded and the Job counts the cut-short run as "
            "complete; save, then exit 143"
        )


def _term_traps(words: list[str]) -> Iterator[str]:
    """The action of every ``trap ACTION SIGNAL...`` naming SIGTERM in the shell scripts
    among ``words`` (``sh -c SCRIPT`` keeps its script in one word)."""
    for word in words:
        if "trap" not in word:
            continue
        # A newline ends a command as ";" does.
        lexer = shlex.shlex(word.replace("\n", ";"), posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:  # an unbalanced quote: not a script the shell would run either
            continue
        for index, token in enumerate(tokens):
            if token != "trap" or index + 2 >= len(tokens) or tokens[index + 1] == "-":
                continue
            signals = set()
            for signal in tokens[index + 2 :]:
                if set(signal) <= set(";&|"):
                    break
                signals.add(signal.upper().removeprefix("SIG"))
            if "TERM" in signals or "15" in signals:
                yield tokens[index + 1]


def _ends_in_success(action: str) -> bool:
    """Whether a trap's action ends the shell with status 0 (its last command)."""
    last = action.replace("\n", ";").split(";")[-1]
    return " ".join(last.split()) in SUCCESS_ACTIONS
