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

The shutdown: torchrun's agent answers SIGTERM by stopping its workers with
``shutdown_timeout``: SIGTERM to each, a wait of that many seconds, then SIGKILL (torch 2.13
``distributed/elastic/agent/server/api.py`` ``SimpleElasticAgent.run``,
``distributed/elastic/multiprocessing/api.py`` ``_close``). The timeout is
``--shutdown-timeout`` (or its ``PET_SHUTDOWN_TIMEOUT``, ``distributed/argparse_util.py``),
else ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, else 30 s (``distributed/launcher/api.py``
``LaunchConfig.__post_init__``; added by pytorch/pytorch#172596, merged 2026-03-03: an older
torchrun waits 30 s whatever it is told). A pod's grace beyond that timeout buys a gang's
final save nothing: :func:`shutdown_timeout` reads what a command will get,
:func:`shutdown_timeout_for` what to give it, and :func:`worker_grace` is how much of its
grace a worker under torchrun can use.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import fields
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


WARM_TORCHRUN = "spotproof-torchrun"
"""The console script of ``runtime.warm_torchrun``: torchrun whose workers start warm."""
WARM_TORCHRUN_MODULE = "spotproof.runtime.warm_torchrun"

LAUNCHER_NAME = "spotproof-launch"
"""``$0`` of :data:`LAUNCH_SCRIPT`, which is how a rendered command is recognised."""

_STOP_AND_WAIT = """\
trap 'stopped=1; kill -TERM "$child" 2>/dev/null' TERM
"$@" &
child=$!
status=0
wait "$child" || status=$?
while kill -0 "$child" 2>/dev/null; do
  if wait "$child"; then status=0; else status=$?; fi
done
if [ -n "${stopped-}" ] && [ "$status" -ne 0 ]; then exit 143; fi
"""
_HOLD_FAILURE = """\
if [ "$status" -ne 0 ] && [ "${SPOTPROOF_TEARDOWN_WAIT:-0}" -gt 0 ]; then
  sleep "$SPOTPROOF_TEARDOWN_WAIT" &
  child=$!
  wait "$child"
  if [ -n "${stopped-}" ]; then exit 143; fi
fi
"""
_EXIT = 'exit "$status"\n'
LAUNCH_SCRIPT = _STOP_AND_WAIT + _HOLD_FAILURE + _EXIT
"""Run ``"$@"``; after a SIGTERM, a failed stop is 143. The first ``wait`` returns early
when the trap runs, so the loop waits again until the child is gone for its real status.
With :data:`TEARDOWN_WAIT_ENV` set, a command that fails without a SIGTERM waits that many
seconds for one before the failure is reported: 143 when the teardown comes first."""
EARLIER_LAUNCH_SCRIPTS = (_STOP_AND_WAIT + _EXIT,)
"""What earlier releases rendered as :data:`LAUNCH_SCRIPT` (without the teardown wait): the
same exits after a SIGTERM, so ``check`` reads manifests they rendered as wrapped too."""
TEARDOWN_WAIT_ENV = "SPOTPROOF_TEARDOWN_WAIT"
"""Seconds the launch script holds back a failure, waiting to be torn down (a whole number;
unset or 0: none). Set on the pods of a gang whose ranks are replaced one at a time
(``runtime.elastic``): when the pod hosting the rendezvous is reclaimed, every other
rank's agent fails at once, and were those failures reported before the reclaimed pod's
own, the JobSet would restart the gang as after a crash, from its budget for crashes
(``catalog.jobset.FIRST_MATCHING_RULE_WINS``); held back, they are torn down by the free
restart the reclaim itself starts."""

TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch", WARM_TORCHRUN_MODULE)
TORCHRUN_PROGRAMS = ("torchrun", WARM_TORCHRUN)
"""torchrun's console script, and spotproof's torchrun whose workers start warm
(``runtime.warm_torchrun``): the same parser, agent and exits."""
TORCHRUN_EXIT_AFTER_SIGTERM = 1
RENDEZVOUS_PORT = 29500
"""torchrun's default ``--master-port``."""
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
"""What torchrun reads for its workers' shutdown timeout when no flag gives one."""
SHUTDOWN_TIMEOUT_FLAG_ENV = "PET_SHUTDOWN_TIMEOUT"
"""The flag's own variable (torchrun's ``env`` arguments read ``PET_<dest>``), which
takes precedence over :data:`SHUTDOWN_TIMEOUT_ENV`."""
SHUTDOWN_TIMEOUT_FLAGS = ("--shutdown-timeout", "--shutdown_timeout")
DEFAULT_SHUTDOWN_TIMEOUT = 30
"""Seconds torchrun gives its workers after SIGTERM when nothing says otherwise."""
AGENT_EXIT_SECONDS = 3
"""Of a pod's grace, what torchrun and the launch script need after the workers are gone:
the agent re-raises the signal, closes its rendezvous and its interpreter tears down with
torch loaded (1.1 s on a quiet 2-core machine, over 2.5 s with other work beside it, as
``runtime.metrics.EXIT_MARGIN_SECONDS`` measured for a trainer)."""
WORKER_RUN_ID_ENV = "TORCHELASTIC_RUN_ID"
"""Set by torchrun's agent for every worker it starts (``local_elastic_agent.py``
``_start_workers``): how a worker knows it runs under torchrun."""


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
    executable: Sequence[str] = (WARM_TORCHRUN,),
) -> list[str]:
    """torchrun with the static rendezvous on node rank 0 and no restarts of its own: a
    lost node cannot come back inside a pod, so every restart is the JobSet's, of the whole
    gang. The trainer's command follows, run as an executable (``--no-python``). By
    default spotproof's torchrun (:data:`WARM_TORCHRUN`): the same agent, whose Python
    worker starts forked from a process that has imported torch, so a pod imports torch
    once instead of twice (its agent's, then its worker's)."""
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


def shutdown_timeout_for(grace_seconds: int) -> int:
    """The shutdown timeout to give torchrun in a pod with ``grace_seconds`` of grace: all of
    it but what the agent needs to leave on its own before the kubelet's SIGKILL."""
    return max(1, grace_seconds - AGENT_EXIT_SECONDS)


def shutdown_environment(grace_seconds: int) -> dict[str, str]:
    """What a torchrun pod with ``grace_seconds`` of grace sets so that its workers get
    the grace (:func:`shutdown_timeout_for`); the environment, not the flag, because a
    torchrun older than the flag would refuse the flag and fail every start."""
    return {SHUTDOWN_TIMEOUT_ENV: str(shutdown_timeout_for(grace_seconds))}


def shutdown_timeout(command: Sequence[str], env: Mapping[str, str]) -> float | None:
    """Seconds torchrun in ``command`` (bare or through the launch script) gives its
    workers after SIGTERM, with ``env`` as the container's environment; None when
    ``command`` is not torchrun. A value torchrun could not parse reads as its default (it
    would refuse to start, which other checks do not hide)."""
    inner = list(command[4:]) if is_wrapped(command) else list(command)
    if not is_torchrun(inner):
        return None
    # Only the launcher's own arguments: everything from the script on is the worker's.
    given = _flag(_launcher_arguments(inner), *SHUTDOWN_TIMEOUT_FLAGS)
    for value in (given, env.get(SHUTDOWN_TIMEOUT_FLAG_ENV), env.get(SHUTDOWN_TIMEOUT_ENV)):
        if value is None:
            continue
        try:
            seconds = int(value)
        except ValueError:
            return DEFAULT_SHUTDOWN_TIMEOUT
        return seconds if seconds >= 0 else DEFAULT_SHUTDOWN_TIMEOUT
    return DEFAULT_SHUTDOWN_TIMEOUT


def worker_grace(grace_seconds: float, env: Mapping[str, str]) -> float:
    """How much of ``grace_seconds`` a process started with ``env`` can use for its final
    save: all of it, unless torchrun started it, which stops it after its shutdown timeout
    (read from the variables the worker inherits; a ``--shutdown-timeout`` flag is not
    visible to the worker, and ``spotproof plan``/``check`` flag a pod where it is short).
    A torchrun too old to read any of them waits :data:`DEFAULT_SHUTDOWN_TIMEOUT`."""
    if WORKER_RUN_ID_ENV not in env:
        return grace_seconds
    timeout = DEFAULT_SHUTDOWN_TIMEOUT
    if agent_reads_shutdown_timeout():
        timeout = int(shutdown_timeout(["torchrun"], env) or DEFAULT_SHUTDOWN_TIMEOUT)
    return min(grace_seconds, float(timeout))


def agent_reads_shutdown_timeout() -> bool:
    """Whether the installed torchrun honours a shutdown timeout at all (torch with
    pytorch/pytorch#172596: ``LaunchConfig`` has the field)."""
    # Only a worker under torchrun asks, and torch is there; the Pulumi side never does.
    from torch.distributed.launcher.api import LaunchConfig  # noqa: PLC0415

    return any(field.name == "shutdown_timeout" for field in fields(LaunchConfig))


def _launcher_arguments(command: Sequence[str]) -> list[str]:
    """torchrun's own arguments in ``command``: up to the first word that is not a flag
    or a flag's value (the training script, or ``--no-python``'s executable)."""
    words = list(command)
    start = 1 if os.path.basename(words[0]) in TORCHRUN_PROGRAMS else words.index("-m") + 2
    taken = words[:start]
    index = start
    while index < len(words) and words[index].startswith("-"):
        word = words[index]
        taken.append(word)
        if "=" not in word and word not in _BARE_FLAGS and index + 1 < len(words):
            taken.append(words[index + 1])
            index += 1
        index += 1
    return taken


_BARE_FLAGS = frozenset(
    {
        "--standalone",
        "-m",
        "--module",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--virtual-local-rank",
        "--virtual_local_rank",
    }
)
"""torchrun's flags that take no value (``action=check_env`` in torch 2.13
``distributed/run.py``)."""


def is_wrapped(command: Sequence[str]) -> bool:
    """Started through :data:`LAUNCH_SCRIPT` by a POSIX shell, however a manifest written by
    hand spaces the script."""
    return (
        len(command) > 4
        and os.path.basename(command[0]) in ("sh", "bash", "dash")
        and command[1] == "-c"
        and command[2].split()
        in [script.split() for script in (LAUNCH_SCRIPT, *EARLIER_LAUNCH_SCRIPTS)]
        and command[3] == LAUNCHER_NAME
    )


def is_torchrun(command: Sequence[str]) -> bool:
    """torchrun itself, or ``python -m torch.distributed.run`` (or the older ``launch``), or
    spotproof's torchrun (:data:`WARM_TORCHRUN`) either way."""
    if not command:
        return False
    if os.path.basename(command[0]) in TORCHRUN_PROGRAMS:
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
