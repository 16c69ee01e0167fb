"""Warm starts for the rehearsal's trainers: each is forked from a zygote that has already
imported the trainer.

A trainer's start costs about 5 CPU-seconds before its first step: importing torch, and
the compiler stack torch loads at the first optimizer it builds. A rehearsal starts a
trainer for its reference run and one after each interruption; on a 2-core machine those
imports were most of its time. A replacement pod on a real node pays far more (scheduling,
pulling the image), so a cold start is no truer to a cluster than a warm one; what the
rehearsal judges (the steps lost, the checkpoint resumed, the final digest) starts at the
trainer's ``main``, which a forked trainer runs exactly as a fresh one would.

The protocol, over a ``SOCK_SEQPACKET`` socket pair (one message a datagram):

- the zygote imports the trainer, builds a throwaway optimizer (the compiler stack is
  loaded once, here), then says ``{"ready": true}``;
- for each ``{"env": {...}}`` that comes with two file descriptors (the new trainer's
  stdout and stderr), it forks; the child takes those as its fd 1 and 2 and exactly that
  environment, runs the trainer's ``main`` and leaves with its exit code, without the
  interpreter's teardown (the zygote's own atexit handlers are not the trainer's); the
  zygote answers ``{"forked": pid}``;
- a request that also names a ``"program"`` (a user's ``python train.py``, or ``-m``'s
  module: ``runtime.python_program.PythonWorker``, with its working directory) runs that
  instead, in that directory, with ``sys.stdout`` and ``sys.stderr`` opened afresh on its
  fds (unbuffered where ``PYTHONUNBUFFERED`` says), as ``python`` runs it and to the exit
  code ``python`` would leave (``runtime.python_program.run_as_python``);
- each child that ends is reaped at once and reported, ``{"exited": pid, "code": c}``,
  ``c`` as :attr:`subprocess.Popen.returncode` gives it (``-N`` for signal N);
- the zygote leaves when the socket closes, and its children are killed with it.

Why a protocol of its own and not multiprocessing's forkserver, which a pod's
``spotproof-torchrun`` uses (``runtime.warm_torchrun``): a rehearsal's trainer stands for a
pod's process, so the harness needs it as it would a ``subprocess.Popen``: its own stdout
and stderr, exactly the pod's environment, a PID to signal and hold, and its end as a
return code. A forkserver's child shares the server's stdio and starts from the server's
environment, and under torchrun the agent supplies the rest; here nothing would.

The zygote runs no thread of its own and does no tensor work before it forks: a child of a
process with threads, or with torch's thread pools started, could inherit a lock held
forever.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from typing import IO, Any

from spotproof.runtime import python_program
from spotproof.runtime.python_program import PythonWorker

_MESSAGE = 1 << 20
"""Largest message: an environment, with room to spare."""


class ForkedTrainer:
    """A trainer forked by a :class:`Zygote`: what the rehearsal reads of a
    :class:`subprocess.Popen` (``pid``, ``returncode``, ``poll``, ``wait``,
    ``send_signal``, ``stdout`` and ``stderr`` as text)."""

    def __init__(self, pid: int, stdout: IO[str], stderr: IO[str], zygote: Zygote) -> None:
        self.pid, self.stdout, self.stderr = pid, stdout, stderr
        self._zygote = zygote

    @property
    def returncode(self) -> int | None:
        return self._zygote.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._zygote.await_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"trainer {self.pid}", timeout or 0)
        return code

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)


class Zygote:
    """A process that has imported ``spotproof.smoke.train`` (torch, its compiler stack and
    spotproof's loop with it) and forks trainers from it."""

    def __init__(self, timeout: float = 120) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        # A file, not a pipe: a pipe nobody reads could fill and block the zygote.
        self._said = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "spotproof.smoke.processes.warm", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._said,
        )
        theirs.close()
        self._changed = threading.Condition()
        self._exits: dict[int, int] = {}
        self._forked: list[int] = []
        self._spawning = threading.Lock()
        ours.settimeout(timeout)
        try:
            ready, why = self._receive(), "it said nothing"
        except (OSError, ValueError) as error:
            ready, why = {}, str(error)
        if not ready.get("ready"):
            self._said.seek(0)
            said = self._said.read().decode(errors="replace").strip().splitlines()
            self.close()
            raise RuntimeError(f"the trainer's zygote did not start: {(said or [why])[-1]}")
        ours.settimeout(None)
        threading.Thread(target=self._read, daemon=True, name="zygote-reader").start()

    def spawn(
        self,
        env: Mapping[str, str],
        program: PythonWorker | None = None,
        *,
        cwd: str | None = None,
        merge_output: bool = False,
    ) -> ForkedTrainer:
        """A trainer with exactly ``env``, forked: the reference trainer, or ``program`` (a
        user's ``python train.py``) run in ``cwd`` as ``python`` would run it. With
        ``merge_output``, its stderr goes where its stdout goes, and ``stderr`` is empty."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            with self._spawning, self._changed:
                before = len(self._forked)
                request: dict[str, Any] = {"env": dict(env)}
                if program is not None:
                    request["program"] = {**asdict(program), "cwd": cwd or os.getcwd()}
                message = json.dumps(request).encode()
                fds = [out_write, out_write if merge_output else err_write]
                socket.send_fds(self._socket, [message], fds)
                if not self._changed.wait_for(lambda: len(self._forked) > before, timeout=60):
                    raise RuntimeError("the trainer's zygote did not fork within 60 s")
                pid = self._forked[before]
        except BaseException:
            os.close(out_read)
            os.close(err_read)
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        stdout = open(out_read, encoding="utf-8", errors="replace")  # noqa: SIM115
        stderr = open(err_read, encoding="utf-8", errors="replace")  # noqa: SIM115
        return ForkedTrainer(pid, stdout, stderr, self)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exits.get(pid)

    def await_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits, timeout)
            return self._exits.get(pid)

    def close(self) -> None:
        """Stop the zygote; trainers still running are killed with it."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes the reader, and ends the zygote
        self._socket.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._said.close()

    def _receive(self) -> dict[str, Any]:
        data = self._socket.recv(_MESSAGE)
        if not data:
            raise ValueError("the zygote closed its socket")
        return dict(json.loads(data))

    def _read(self) -> None:
        while True:
            try:
                message = self._receive()
            except (OSError, ValueError):
                message = {}
            with self._changed:
                if "forked" in message:
                    self._forked.append(int(message["forked"]))
                elif "exited" in message:
                    self._exits[int(message["exited"])] = int(message["code"])
                else:  # gone: whatever still runs is reported killed, as it is
                    for pid in self._forked:
                        self._exits.setdefault(pid, -signal.SIGKILL)
                    self._changed.notify_all()
                    return
                self._changed.notify_all()


@contextlib.contextmanager
def warm_trainers() -> Iterator[Zygote]:
    """A zygote for as long as the block runs."""
    zygote = Zygote()
    try:
        yield zygote
    finally:
        zygote.close()


# --- the zygote's side -------------------------------------------------------------------


def _serve(channel: socket.socket) -> None:
    import torch  # noqa: PLC0415

    from spotproof.smoke import train  # noqa: PLC0415

    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])  # loads the compiler stack
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    channel.send(json.dumps({"ready": True}).encode())
    try:
        while True:
            readable, _, _ = select.select([channel, wake_read], [], [])
            if wake_read in readable:
                os.read(wake_read, 4096)
                _reap(channel, children)
            if channel in readable:
                message, fds, _, _ = socket.recv_fds(channel, _MESSAGE, 2)
                if not message:
                    return
                pid = os.fork()
                if pid == 0:
                    _child(train, json.loads(message), fds, channel, wake_read, wake_write)
                for fd in fds:
                    os.close(fd)
                children.add(pid)
                channel.send(json.dumps({"forked": pid}).encode())
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _reap(channel: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        channel.send(json.dumps({"exited": pid, "code": code}).encode())


def _child(
    train: Any, request: dict[str, Any], fds: list[int], *inherited: socket.socket | int
) -> None:
    """In the forked child: become a trainer started with the request's environment (the
    reference trainer, or the user's program), and never return."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for thing in inherited:
            if isinstance(thing, socket.socket):
                thing.close()
            else:
                os.close(thing)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in set(fds):
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        program = request.get("program")
        if program is None:
            python_program.after_fork()
            sys.argv = [train.__file__]
            code = train.main()
        else:
            os.chdir(program.pop("cwd"))
            python_program.python_streams(unbuffered=bool(os.environ.get("PYTHONUNBUFFERED")))
            code = python_program.run_as_python(
                PythonWorker(**{**program, "args": tuple(program["args"])})
            )
    except SystemExit as leaving:  # as the interpreter reads it: None is success
        code = 0 if leaving.code is None else leaving.code if isinstance(leaving.code, int) else 1
    except BaseException:
        import traceback  # noqa: PLC0415

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
