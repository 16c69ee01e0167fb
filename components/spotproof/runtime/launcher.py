"""How a gang's pod starts its trainer, and which exit code each way leaves after SIGTERM.

A Job tells a reclaim from a crash by the pod's ``DisruptionTarget`` condition or, where a
reclaim adds none, by the container's exit code: ``PREEMPTED`` (143) after SIGTERM, which
its ``podFailurePolicy`` ignores (``spotproof.runtime.exit_codes``). Most reclaims add the
condition (an eviction, the kubelet's graceful shutdown, the pod garbage collector after
the node is gone), but Karpenter deletes pods with a plain DELETE once a NodePool's
``terminationGracePeriod`` runs out, which adds none (kubernetes-sigs/karpenter
``pkg/controllers/node/termination/terminator/terminator.go``, ``DeleteExpiringPods``,
v1.6.3 and later): there only the exit code speaks.

torchrun never exits 143. On SIGTERM it forwards the signal to its workers, waits for them
(30 s, ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), and re-raises the signal as an exception that
nothing catches, so the interpreter exits 1; a worker's own 143 also ends torchrun with 1
(torch 2.13 ``distributed/elastic/agent/server/api.py`` ``SimpleElasticAgent.run``,
``distributed/launcher/api.py`` ``launch_agent``; the tests run torchrun and see it). Under
torchrun a reclaimed rank therefore looks exactly like a crash. :data:`LAUNCH_SCRIPT` is the
remedy: a POSIX shell, PID 1 of the container, that starts the command as its child,
forwards SIGTERM to it, and exits 143 if the command then stops with any other failure;
without a SIGTERM the command's own code passes through, so a crash stays a crash.

The rendezvous: torchrun's ``c10d`` backend decides which pod hosts its store by matching
the endpoint against the pod's own names, and a JobSet pod's ``<hostname>.<subdomain>``
matches only once cluster DNS has its record (torch ``elastic/rendezvous/utils.py``,
``_matches_machine_hostname``; pytorch/elastic#165): when the record is late no pod hosts
the store and every rank exits 1. The ``static`` backend needs no such guess: the pod of
node rank 0 hosts it, and every rank retries the connection until the record resolves
(``static_tcp_rendezvous.py``; 900 s under torchrun), as JobSet's own PyTorch example
starts a gang (kubernetes-sigs/jobset ``site/static/examples/pytorch/cnn-mnist``).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from enum import StrEnum

from spotproof.runtime import exit_codes


class Launcher(StrEnum):
    """How each pod of a multi-node run starts the trainer."""

    TORCHRUN = "torchrun"
    """torchrun runs the command once per GPU and sets ``RANK``, ``WORLD_SIZE`` and the rest
    after its static rendezvous on rank 0's pod, started through :data:`LAUNCH_SCRIPT`."""
    NONE = "none"
    """The command itself, one process per pod, given ``RANK`` (the pod's index),
    ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` to form its process group."""


LAUNCHER_NAME = "spotproof-launch"
"""``$0`` of :data:`LAUNCH_SCRIPT`, which is how a rendered command is recognised."""

LAUNCH_SCRIPT = """\
trap 'stopped=1; kill -TERM "$child" 2>/dev/null' TERM
"$@" &
child=$!
status=0
wait "$child" || status=$?
while kill -0 "$child" 2>/dev/null; do
  if wait "$child"; then status=0; else status=$?; fi
done
if [ -n "${stopped-}" ] && [ "$status" -ne 0 ]; then exit 143; fi
exit "$status"
"""
"""Run ``"$@"``; after a SIGTERM, a failed stop is 143. The first ``wait`` returns early
when the trap runs, so the loop waits again until the child is gone for its real status."""

TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
TORCHRUN_EXIT_AFTER_SIGTERM = 1
RENDEZVOUS_PORT = 29500
"""torchrun's default ``--master-port``."""


def wrapped(command: Sequence[str]) -> list[str]:
    """``command`` started through :data:`LAUNCH_SCRIPT`."""
    return ["/bin/sh", "-c", LAUNCH_SCRIPT, LAUNCHER_NAME, *command]


def torchrun(
    *,
    nodes: int,
    processes_per_node: int,
    node_rank: str,
    master_addr: str,
    master_port: int = RENDEZVOUS_PORT,
    executable: Sequence[str] = ("torchrun",),
) -> list[str]:
    """torchrun with the static rendezvous on node rank 0 and no restarts of its own: a
    lost node cannot come back inside a pod, so every restart is the JobSet's, of the whole
    gang. The trainer's command follows, run as an executable (``--no-python``)."""
    return [
        *executable,
        f"--nnodes={nodes}",
        f"--nproc-per-node={processes_per_node}",
        f"--node-rank={node_rank}",
        f"--master-addr={master_addr}",
        f"--master-port={master_port}",
        "--max-restarts=0",
        "--no-python",
    ]


def is_wrapped(command: Sequence[str]) -> bool:
    """Started through :data:`LAUNCH_SCRIPT` by a POSIX shell, however a manifest written by
    hand spaces the script."""
    return (
        len(command) > 4
        and os.path.basename(command[0]) in ("sh", "bash", "dash")
        and command[1] == "-c"
        and command[2].split() == LAUNCH_SCRIPT.split()
        and command[3] == LAUNCHER_NAME
    )


def is_torchrun(command: Sequence[str]) -> bool:
    """torchrun itself, or ``python -m torch.distributed.run`` (or the older ``launch``)."""
    if not command:
        return False
    if os.path.basename(command[0]) == "torchrun":
        return True
    return any(
        command[i] == "-m" and command[i + 1] in TORCHRUN_MODULES for i in range(len(command) - 1)
    ) and os.path.basename(command[0]).startswith("python")


def _flag(command: Sequence[str], *names: str) -> str | None:
    """The value of a flag given as ``--name=value`` or ``--name value``."""
    for index, word in enumerate(command):
        for name in names:
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
            if word == name and index + 1 < len(command):
                return command[index + 1]
    return None


def racing_rendezvous_host(command: Sequence[str]) -> str | None:
    """The endpoint host of torchrun's ``c10d`` rendezvous when only cluster DNS can tell
    rank 0 it is that host (module docstring): a name, neither an address nor a service's
    full name (``....svc....``, which the kubelet writes into the pod's ``/etc/hosts``), and
    no ``is_host`` given; None otherwise."""
    inner = list(command[4:]) if is_wrapped(command) else list(command)
    if not is_torchrun(inner):
        return None
    if _flag(inner, "--rdzv-backend", "--rdzv_backend") != "c10d":
        return None
    if "is_host=" in (_flag(inner, "--rdzv-conf", "--rdzv_conf") or ""):
        return None
    endpoint = _flag(inner, "--rdzv-endpoint", "--rdzv_endpoint") or ""
    host = endpoint.rsplit(":", 1)[0] if endpoint.count(":") == 1 else endpoint
    if not host or host == "localhost" or ".svc." in f"{host}.":
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host
    return None


def exit_after_sigterm(command: Sequence[str]) -> int:
    """The exit code a container running ``command`` leaves when SIGTERM stops it: 143
    through :data:`LAUNCH_SCRIPT` or from a process that follows the contract (or dies of
    the signal, which the runtime also reports as 128 + 15); 1 from torchrun."""
    if is_wrapped(command):
        return exit_codes.PREEMPTED
    if is_torchrun(command):
        return TORCHRUN_EXIT_AFTER_SIGTERM
    return exit_codes.PREEMPTED
