"""torchrun whose workers start warm: forked from a process that has already imported them.

**Why.** When a rank of a replace-rank gang is replaced (``runtime.elastic``), torchrun's
agent on every surviving pod stops its workers and starts new ones for the new membership.
Each new worker is a fresh interpreter: it imports torch, the compiler stack its first
optimizer loads and the trainer's own modules (5 CPU-seconds on a quiet core, more on a
busy one, before a restore can begin), and every pod of the gang pays it at the same moment.
Measured, that start is most of a replaced rank's stall (docs/performance.md, issue 44).

**What.** This is torchrun, with one change: a worker that is a Python program is started
by multiprocessing's *forkserver*, preloaded with those imports. The forkserver is one
process per agent, forked from the agent once the agent has imported torch (so a pod
imports torch once: :func:`start_forkserver`), importing the rest while the agent waits in
the rendezvous; every worker forks from it, so a start costs a fork and the trainer's
``main``: a survivor's restart, and a replacement pod's first start too once its forkserver
is ready. Everything else is torchrun's own
code, unchanged: the parser (every flag and its ``PET_`` variable), ``LaunchConfig``, the
rendezvous, the agent, its shutdown (SIGTERM to each worker, the shutdown timeout, SIGKILL)
and its exit codes (torch 2.13 ``distributed/run.py`` ``config_from_args``, whose function
entrypoints torchrun itself starts by ``--start-method``; ``distributed/launcher/api.py``
``elastic_launch``; ``distributed/elastic/multiprocessing/api.py`` ``MultiprocessContext``).
torchrun's own ``--run-path`` starts no worker warm when torchrun runs as ``python -m``: its
forkserver preloads only ``__main__`` by path, which ``-m`` does not give.

**What a warm worker sees**, as a worker started ``python -u script.py args`` would
(``runtime.python_program``): ``sys.argv``; the script run as ``__main__`` (or ``-m``'s
module), which stays ``__main__`` to its end; the script's folder (for ``-m``, the working
directory) first on ``sys.path`` in place of the agent's; unbuffered output (the forked
forkserver opens its stdout and stderr afresh, unbuffered); the agent's environment with
torchrun's variables for the worker (set by torchrun's ``_wrap``), ``OMP_NUM_THREADS``
applied; numpy's global generator seeded afresh; at its end, the interpreter's own teardown
(non-daemon threads joined, then ``atexit``). What differs, and is documented for users: a
preloaded module was imported once, with the agent's environment, before the worker's own
variables (``RANK`` and the rest) were set; the workers share the agent's hash seed; a
worker's parent is the forkserver; a KeyboardInterrupt ends it with 0 (torch
``multiprocessing/spawn.py`` ``_wrap``); an exception's traceback reaches the agent's log
as torchrun's error record rather than the worker's stderr. CUDA is never
initialized by the preload (a child of a process that has it cannot use it): the forkserver
refuses to run a worker forked from a preload that did.

**What stays cold**: a command that is not this interpreter running ``[-u] script.py`` or
``[-u] -m module`` (a shell script, another Python, other interpreter flags) is run exactly
as torchrun runs it. ``SPOTPROOF_WARM_IMPORTS`` adds the trainer's own heavy modules to the
preload; a value that is not module names stops the agent with exit 2, in one line.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
import threading
import uuid
from collections.abc import Sequence
from multiprocessing import connection, forkserver, resource_tracker

from spotproof.runtime import exit_codes, python_program, settings
from spotproof.runtime.python_program import PythonWorker, python_worker

PRELOAD = ("torch", "torch._dynamo", "spotproof.runtime.loop")
"""What every worker imports before its first step: torch, the compiler stack torch's
optimizers load at their first construction, and spotproof's training loop."""
UNBUFFERED = "PYTHONUNBUFFERED"


def run_worker(target: str, module: bool, *args: str) -> None:
    """A worker's body, in a child of the forkserver: the program as ``python -u`` runs it
    (``runtime.python_program``), ended as the interpreter ends (its threads joined, then
    ``atexit``); what it raises reaches torchrun, which records it as a worker's failure."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda._is_in_bad_fork():
        print(
            f"spotproof: {settings.WARM_IMPORTS.name}: a preloaded module initialized CUDA, "
            "which a forked worker cannot use; allowed: modules that leave CUDA to the worker",
            file=sys.stderr,
        )
        sys.exit(exit_codes.BAD_CONFIG)
    python_program.after_fork()
    try:
        python_program.run_as_main(PythonWorker(target, module, args))
    finally:
        python_program.finish()


def preload(extra: Sequence[str]) -> list[str]:
    """The modules the forkserver imports: :data:`PRELOAD` and the user's, each once. One
    that fails to import is left to the worker, which imports it itself (cold, and with its
    own error), as multiprocessing's forkserver does."""
    return list(dict.fromkeys([*PRELOAD, *extra]))


def start_forkserver(modules: Sequence[str]) -> None:
    """Start multiprocessing's forkserver for this agent, preloading ``modules``: forked
    from the agent, which has imported torch already, where that is safe; else spawned.

    A spawned forkserver is a new interpreter that imports torch again (2.9 CPU-seconds
    on the development VM, 2026-11-30) before the compiler stack and the loop. Forked, it
    starts from the agent's imports and adds only what torch's import did not bring. The
    agent is then still single-threaded in Python (its rendezvous and monitor threads
    come later); the one native thread torch's import leaves, OpenBLAS's idle thread
    server, resets itself in a forked child (its ``pthread_atfork`` handlers), as it does
    for any forked numpy program. What the forkserver does once started is CPython's own
    (``multiprocessing/forkserver.py`` ``main``, 3.11 to 3.13): the socket it listens on
    and its "alive" pipe are set up here as its ``ensure_running`` would set them up, with
    the socket in a private directory of mode 0700 and itself of mode 0600. Spawned,
    as before, where any of that does not hold: another thread running, a Python whose
    forkserver has a handshake (3.14) or differs, a platform without ``fork``."""
    server = forkserver._forkserver  # type: ignore[attr-defined]
    # Both ways: should the forkserver die, the agent's next worker start spawns a new one
    # (``connect_to_new_process``), which then preloads the same.
    multiprocessing.set_forkserver_preload(list(modules))
    if not _forkable(server, threading.active_count()):
        forkserver.ensure_running()
        return
    resource_tracker.ensure_running()
    address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_read, alive_write = os.pipe()
        sys.stdout.flush()  # or the child would write what the agent had buffered again
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            os.close(alive_read)
            os.close(alive_write)
            raise
        if pid == 0:
            _serve(listener, alive_read, alive_write, modules)
        os.close(alive_read)
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_write
    server._forkserver_pid = pid


def _serve(
    listener: socket.socket, alive_read: int, alive_write: int, modules: Sequence[str]
) -> None:
    """The forked forkserver: CPython's, until every agent-side holder of the "alive" pipe
    is gone; never returns. Its stdout and stderr are opened afresh, unbuffered, as the
    ``python -u`` a spawned one would be (``PYTHONUNBUFFERED`` is set for it), so every
    worker forked from it writes at once: a worker's last lines are not lost with it."""
    code = 1
    try:
        os.close(alive_write)
        python_program.python_streams(unbuffered=True)
        python_program.follow_thread_settings()
        forkserver.main(listener.fileno(), alive_read, list(modules))
    except SystemExit:
        code = 0
    except BaseException:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
    finally:
        sys.stderr.flush()
        os._exit(code)


def _forkable(server: object, threads: int) -> bool:
    """Whether an agent running ``threads`` Python threads may fork its forkserver
    (:func:`start_forkserver`)."""
    return (
        hasattr(os, "fork")
        and sys.version_info < (3, 14)
        and threads == 1
        and getattr(server, "_forkserver_pid", 0) is None
        and all(hasattr(server, name) for name in ("_forkserver_address", "_forkserver_alive_fd"))
    )


def main(argv: Sequence[str] | None = None) -> None:
    """torchrun's ``main`` with Python workers forked warm (module docstring), its failure
    recorded as torchrun records its own (``TORCHELASTIC_ERROR_FILE``)."""
    # The agent's own import of torch, here: the plan reads this module without torch.
    from torch.distributed.elastic.multiprocessing.errors import record  # noqa: PLC0415

    record(_launch)(list(sys.argv[1:] if argv is None else argv))


def _launch(argv: list[str]) -> None:
    from torch.distributed import run  # noqa: PLC0415
    from torch.distributed.launcher.api import elastic_launch  # noqa: PLC0415

    args = run.parse_args(argv)
    if args.standalone:  # one node, its own rendezvous: as torchrun's ``run`` sets it up
        args.rdzv_backend, args.rdzv_endpoint = "c10d", "localhost:0"
        args.rdzv_id = str(uuid.uuid4())
    config, command, command_args = run.config_from_args(args)
    worker = python_worker(command, command_args) if isinstance(command, str) else None
    if worker is None:
        elastic_launch(config, command)(*command_args)
        return
    try:
        modules = preload(settings.WARM_IMPORTS.read(os.environ))
    except settings.ConfigError as error:
        print(f"spotproof: {error}", file=sys.stderr)
        sys.exit(exit_codes.BAD_CONFIG)
    os.environ[UNBUFFERED] = "1"  # the forkserver's, so every worker's: python -u
    # Now, not at the first worker's start: a replacement pod's forkserver imports while its
    # agent waits in the rendezvous, so even its first worker starts warm.
    start_forkserver(modules)
    config.start_method = "forkserver"
    elastic_launch(config, run_worker)(worker.target, worker.module, *worker.args)


if __name__ == "__main__":
    main()
