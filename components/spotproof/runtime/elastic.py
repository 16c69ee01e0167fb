"""How a gang's pod runs torchrun so that its ranks are replaced one at a time: the elastic
agent, the ``c10d`` rendezvous for exactly N nodes with its store on one pod, and what the
pod's environment adds (``runtime.launcher`` starts it, through the launch script).

When a node is lost the surviving agents keep their pods and wait; when the replacement's
agent joins they stop their workers and start them again in the same pods, which keep
their memory (``TrainingJob(recovery=GangRecovery.REPLACE_RANK)``, ``kube.jobset``; the
rehearsal ``smoke.processes.elastic_gang`` runs exactly these commands).
"""

from __future__ import annotations

from collections.abc import Sequence

from spotproof.runtime import settings
from spotproof.runtime.launcher import TEARDOWN_WAIT_ENV, WARM_TORCHRUN, shutdown_environment

RENDEZVOUS_STORE_PORT = 29400
"""torchrun's ``c10d`` rendezvous store port when the endpoint names none
(``DEFAULT_PORT``, torch 2.13 ``elastic/rendezvous/c10d_rendezvous_backend.py``)."""
OWN_WORKER_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
"""1: each rendezvous round, rank 0's workers host a store of their own for the process
group instead of sharing the agent's. A shared store's address is learnt once, in the
first round, by every agent but rank 0's (``DynamicRendezvousHandler.next_rendezvous``,
torch 2.13 ``elastic/rendezvous/dynamic_rendezvous.py``), so were rank 0 to move to
another pod after a membership change, the workers would be sent to the old one. Under
``GangRecovery.REPLACE_RANK`` rank 0 is always the leader (its name sorts first) and a
leader's loss restarts everything, so this only keeps the workers' store from depending on
that order."""


KEEP_ALIVE_SECONDS = 1
KEEP_ALIVE_ATTEMPTS = 3
"""How often each agent tells the rendezvous it is alive, and how many beats it may miss:
a node silent for their product is dropped from the rendezvous, and only then can the
survivors and a replacement form the next round (``_remove_dead_nodes``, torch 2.13
``elastic/rendezvous/dynamic_rendezvous.py``; torch's defaults, 5 s and 3, make every
replacement wait 15 s for the dead node to be forgotten). A beat is a compare-and-set of
the whole rendezvous state by each agent (``_keep_alive``, ``sync``), so a gang of hundreds
of pods, or agents starved of CPU for three seconds, want longer beats: a live agent that
misses them is dropped from the round like a dead one."""


def elastic_torchrun(
    *,
    nodes: int,
    processes_per_node: int,
    endpoint: str,
    hosts_store: bool,
    run_id: str,
    max_restarts: int,
    join_timeout: int,
    local_addr: str | None = None,
    executable: Sequence[str] = (WARM_TORCHRUN,),
) -> list[str]:
    """torchrun whose gang survives the loss of any node but the one hosting its store: the
    ``c10d`` rendezvous with exactly ``nodes`` nodes, so when a node is gone the surviving
    agents keep their pods and wait, and when its replacement's agent joins they stop and
    restart their workers in place (torch 2.13 ``elastic/agent/server/api.py``
    ``_invoke_run``: a node waiting to join restarts the group without spending
    ``max_restarts``; a failed worker spends one). The ranks are the agents' order by
    address (``_RendezvousJoinOp``'s completion sorts the participants), so a replacement
    with its predecessor's address gets its rank.

    ``hosts_store`` says outright which pod serves the store (``is_host``), since guessing
    from the endpoint's name races cluster DNS (``runtime.launcher``'s docstring); the
    others retry their connection to it for ``join_timeout`` seconds (``read_timeout``: the
    client's connect timeout, 60 s by default, ``_create_tcp_store`` in torch 2.13
    ``c10d_rendezvous_backend.py``, and with ``is_host`` given outright there is no second
    try), which matters after a leader's loss: the other pods start again on their nodes
    at once, the leader only once it has a node. ``join_timeout`` is also how long the
    survivors wait for a replacement. A node that stops beating (:data:`KEEP_ALIVE_SECONDS`)
    is dropped from the rendezvous within seconds. The trainer's command follows, run as an
    executable; by default spotproof's torchrun (``runtime.warm_torchrun``), which starts a
    Python trainer's workers warm, since every survivor restarts its workers whenever a
    rank is replaced."""
    conf = ",".join(
        [
            f"is_host={str(hosts_store).lower()}",
            f"join_timeout={join_timeout}",
            f"read_timeout={join_timeout}",
            f"keep_alive_interval={KEEP_ALIVE_SECONDS}",
            f"keep_alive_max_attempt={KEEP_ALIVE_ATTEMPTS}",
        ]
    )
    return [
        *executable,
        f"--nnodes={nodes}:{nodes}",
        f"--nproc-per-node={processes_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf={conf}",
        *([f"--local-addr={local_addr}"] if local_addr else []),
        f"--max-restarts={max_restarts}",
        "--no-python",
    ]


def elastic_environment(
    grace_seconds: int, teardown_wait_seconds: int, join_timeout: int
) -> dict[str, str]:
    """What a pod running :func:`elastic_torchrun` sets: the workers' shutdown timeout
    (:func:`shutdown_environment`), a store of the workers' own each round
    (:data:`OWN_WORKER_STORE_ENV`), the launch script's wait for a teardown after the
    agent fails (:data:`TEARDOWN_WAIT_ENV`), and a worker stopped by a lost peer waiting as
    long as its agent waits for the replacement (``join_timeout``): the agent stops it when
    the replacement joins, which spends none of ``max_restarts``, where a worker that gave
    up first would spend one (``PEER_WAIT_SECONDS``)."""
    return {
        **shutdown_environment(grace_seconds),
        OWN_WORKER_STORE_ENV: "1",
        TEARDOWN_WAIT_ENV: str(teardown_wait_seconds),
        settings.PEER_WAIT_SECONDS.name: str(join_timeout),
    }
