"""What an EKS drill reads of its FIS experiment: whether it has started, whether its action
has run, and, when either ended otherwise, the one line that says why in FIS's own words.

``GetExperiment`` answers ``{"experiment": {"id", "state": {"status", "reason", "error":
{"code", "location"}}, "actions": {<name>: {"actionId", "state": {"status", "reason"}}}}}``
(botocore's service model ``fis`` 2020-12-01: ``GetExperimentResponse``, ``Experiment``,
``ExperimentState``, ``ExperimentError``, ``ExperimentAction``, ``ExperimentActionState``;
https://docs.aws.amazon.com/fis/latest/APIReference/API_GetExperiment.html).

The experiment being ``running`` says only that it has started: its action may still be
``pending`` or ``initiating``, and the interruption, which the FIS role sends and which the
role's policy allows only on an instance carrying the drill's target tag
(``eks.drill_documents.fis_interrupt``), may come after it. So the tag stays until the
action is ``completed`` (or the whole experiment is).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from spotproof.drill.errors import DrillError

EXPERIMENT_STARTING = frozenset({"pending", "initiating"})
EXPERIMENT_RUNNING = "running"
EXPERIMENT_COMPLETED = "completed"
EXPERIMENT_ENDED = frozenset({"stopping", "stopped", "failed", "cancelled"})
"""``ExperimentState.status`` is one of pending, initiating, running, completed, stopping,
stopped, failed, cancelled (https://docs.aws.amazon.com/fis/latest/APIReference/API_ExperimentState.html;
the same enum, ``ExperimentStatus``, in botocore's model). Stopping leads only to stopped:
the action will not run."""

ACTION_WAITING = frozenset({"pending", "initiating", "running"})
ACTION_COMPLETED = "completed"
ACTION_ENDED = frozenset({"cancelled", "stopping", "stopped", "failed", "skipped"})
"""``ExperimentActionState.status`` is one of pending, initiating, running, completed,
cancelled, stopping, stopped, failed, skipped
(https://docs.aws.amazon.com/fis/latest/APIReference/API_ExperimentActionState.html;
``ExperimentActionStatus`` in botocore's model). A skipped action interrupted nothing."""


class Progress(enum.Enum):
    STARTING = "starting"
    """Resolving its targets: the tag must stay, nothing has been asked of EC2 yet."""
    RUNNING = "running"
    """Started; its action has not run yet: the tag must stay."""
    DONE = "done"
    """Every action completed: the tag's work is done."""


class ExperimentFailed(DrillError):
    """The experiment, or its action, ended without interrupting the instance."""


def _state(found: Mapping[str, Any]) -> tuple[str, str]:
    state = found.get("state") or {}
    return str(state.get("status", "")), one_line(state.get("reason", ""))


def one_line(text: object) -> str:
    """The first line of ``text``: FIS's and EC2's messages, as a drill prints them."""
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def progress(experiment: Mapping[str, Any], on: str) -> Progress:
    """How far ``experiment`` (``GetExperiment``'s ``experiment``) has come; raises
    :class:`ExperimentFailed`, one line with FIS's reason, when it or an action ended
    without completing. ``on`` names the instance, for that line."""
    name = f"FIS experiment {experiment.get('id', '?')} on {on}"
    status, reason = _state(experiment)
    code = str(((experiment.get("state") or {}).get("error") or {}).get("code") or "")
    failed = [
        f"action {action} is {action_status}" + (f": {action_reason}" if action_reason else "")
        for action, found in sorted((experiment.get("actions") or {}).items())
        for action_status, action_reason in [_state(found)]
        if action_status in ACTION_ENDED
    ]
    if status in EXPERIMENT_ENDED or failed:
        said = f"{name} is {status}" + (f": {reason}" if reason else "")
        said += f" (error {code})" if code else ""
        raise ExperimentFailed("; ".join([said, *failed]))
    if status in EXPERIMENT_STARTING:
        return Progress.STARTING
    if status == EXPERIMENT_COMPLETED:
        return Progress.DONE
    if status != EXPERIMENT_RUNNING:
        raise ExperimentFailed(f"{name} is {status or 'without a state'}, a state unknown here")
    actions = [_state(found)[0] for found in (experiment.get("actions") or {}).values()]
    unknown = sorted(set(actions) - ACTION_WAITING - {ACTION_COMPLETED})
    if unknown:
        raise ExperimentFailed(f"{name}: an action is {unknown[0]}, a state unknown here")
    if actions and all(a == ACTION_COMPLETED for a in actions):
        return Progress.DONE
    return Progress.RUNNING
