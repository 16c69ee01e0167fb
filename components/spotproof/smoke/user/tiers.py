"""``spotproof smoke --command --nodes N --tiers``: the user's trainer as a gang whose ranks
are replaced one at a time, as ``TrainingJob(recovery=GangRecovery.REPLACE_RANK)`` runs it.

Each pod is what ``smoke.processes.elastic_gang`` starts: the launch script, torchrun's
elastic agent, and the user's words as the agent's worker, with a directory of its own
standing for the pod's memory-backed ``emptyDir`` (``MEMORY_TIER_DIR``), so ``training()``
keeps its periodic saves there and replicates them to a peer. The interruptions are
``smoke.runs.tiered``'s, judged the same way: a worker's node lost, a worker reclaimed, a
worker and its replica's holder lost (4 pods or more), the leader's node lost. Before each,
the last pod's worker is held at the step it is placed at, its agent running on, so a script
of millisecond steps is interrupted where the rehearsal says.

The reference run is the user's gang started as a JobSet without replace-rank starts it
(``smoke.user.gang``): the interrupted run must end with its digest, whatever tier each
rank restored from.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.smoke.processes.elastic_gang import ElasticGang, Nodes
from spotproof.smoke.runs.tiered import played, too_short
from spotproof.smoke.user.command import RunResult, Stage, command_env, started


def tiered_room(stage: Stage) -> str | None:
    """Why the learned run is too short for the gang's interruptions, or None."""
    config = stage.config
    return too_short(stage.nodes, config.interval, config.total_steps)


def tiered_interrupted(stage: Stage) -> RunResult:
    """The gang through :func:`smoke.runs.tiered.scenarios`, to its ``done``."""
    url = stage.bucket.prefix("interrupted")
    with stage.bucket.apply():
        observer = CheckpointStore(url)
    result = RunResult("interrupted", url)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spotproof-pods-") as scratch:
        gang: ElasticGang = started(
            ElasticGang,
            command_env(stage.config, stage.bucket, "interrupted"),
            Nodes(Path(scratch), stage.nodes),
            began,
            worker=stage.command.words,
        )
        # The same list the gang appends its replacements to: whatever a failure leaves
        # running is killed with the stage's other processes.
        stage.runs.append(gang.every_pod)
        result.done = played(
            stage.config, gang, observer=observer, report=stage.report, progress=stage.progress
        )
    result.processes = list(gang.every_pod)
    result.seconds = time.monotonic() - began
    return result
