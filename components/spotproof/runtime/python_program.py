"""A Python program run in a forked process as ``python`` would run it.

``spotproof-torchrun`` (``runtime.warm_torchrun``) forks a gang's workers, and ``spotproof
smoke --command`` (``smoke.processes.warm``) forks a user's single process, from a process
that has already imported torch: a start then costs a fork instead of seconds of imports.
What the program must not notice is that it was not started afresh. This module is what
both do in the fork, in the order the interpreter does it:

1. :func:`after_fork`: the state a fresh interpreter would not share with its siblings.
   numpy's global generator (torch's compiler stack imports ``numpy.random``) is reseeded
   from the OS, as numpy seeds it at its import; ``OMP_NUM_THREADS`` is applied to torch,
   which read it when it was imported, before the process had its own environment.
2. :func:`run_as_main`: the program's code in a fresh ``__main__`` module that stays
   ``sys.modules["__main__"]`` for the rest of the process (its threads and ``atexit``
   handlers may pickle what it defines), with ``sys.argv`` and ``sys.path[0]`` as
   ``python script.py`` and ``python -m module`` set them (CPython ``Modules/main.c``,
   ``pymain_run_python``; ``runpy._run_module_as_main`` for ``-m``).
3. :func:`finish`: its end as the interpreter's (``Py_FinalizeEx``): an uncaught
   exception printed by ``sys.excepthook`` first, then its non-daemon threads joined, then
   its ``atexit`` handlers; a ``SystemExit`` whose code is not a number printed and read
   as 1; a ``KeyboardInterrupt`` ended by SIGINT itself, as CPython 3.8+ ends it.

What stays different from a fresh ``python``, and is documented for users: modules the
parent imported were imported once, with the parent's environment; the hash seed of
``str`` is the parent's (``PYTHONHASHSEED``), so siblings iterate a set of strings in the
same order; ``sys.flags``, ``sys.orig_argv`` and ``os.getppid()`` are the parent's, and a
warning the parent already showed is not shown again.
"""

from __future__ import annotations

import atexit
import builtins
import importlib.util
import io
import os
import shutil
import signal
import sys
import threading
import types
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.machinery import SourceFileLoader


@dataclass(frozen=True)
class PythonWorker:
    """A command this interpreter can run from a fork: a script or a module."""

    target: str
    """The script's path, or the module's name."""
    module: bool
    args: tuple[str, ...]


def python_worker(
    command: str, args: Sequence[str], path: str | None = None
) -> PythonWorker | None:
    """The Python program ``command args`` runs, when ``command`` is this interpreter (the
    same file in the same environment's folder, found on ``path``, by default this
    process's ``PATH``) and ``args`` give it no flag but ``-u``; None when the command
    must run as it is."""
    found = shutil.which(command, path=path)
    if found is None or not _same_interpreter(found, sys.executable):
        return None
    words = list(args)
    while words and words[0] == "-u":
        words.pop(0)
    if words[:1] == ["-m"] and len(words) > 1:
        return PythonWorker(words[1], True, tuple(words[2:]))
    if not words or words[0].startswith("-"):
        return None
    return PythonWorker(words[0], False, tuple(words[1:]))


def _same_interpreter(found: str, executable: str) -> bool:
    """Same binary and same folder: a venv's ``python`` links to the system's, whose own
    ``site-packages`` differ from the venv's."""
    return os.path.realpath(found) == os.path.realpath(executable) and os.path.dirname(
        os.path.abspath(found)
    ) == os.path.dirname(os.path.abspath(executable))


def after_fork() -> None:
    """Step 1 (module docstring), in the forked child before the program runs."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
    follow_thread_settings()


def follow_thread_settings() -> None:
    """Apply ``OMP_NUM_THREADS`` from this process's environment to torch, as a fresh
    interpreter's import of torch would have read it. A process forked from one that
    imported torch earlier keeps the thread count OpenMP read at that import: torchrun sets
    the variable (to 1 with more than one worker a node, ``distributed/run.py``
    ``config_from_args``) after its agent imported torch, and a rehearsal's process gets
    its environment only at its fork. Setting the count starts no thread."""
    torch = sys.modules.get("torch")
    value = os.environ.get("OMP_NUM_THREADS", "")
    if torch is not None and value.isdigit() and int(value) > 0:
        torch.set_num_threads(int(value))


def python_streams(*, unbuffered: bool) -> None:
    """``sys.stdout`` and ``sys.stderr`` opened afresh on fds 1 and 2, as ``python`` opens
    them (``python -u``'s where ``unbuffered``): the parent's were opened on what its own
    fds were then, and buffered as such."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),  # type: ignore[arg-type]
            encoding=old.encoding,
            errors="backslashreplace" if name == "stderr" else old.errors,
            line_buffering=name == "stderr" and not unbuffered,
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def run_as_main(program: PythonWorker) -> None:
    """Step 2 (module docstring): run ``program``'s code as ``__main__``; whatever it
    raises propagates."""
    main = types.ModuleType("__main__")
    if program.module:
        spec = importlib.util.find_spec(program.target)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{program.target}.__main__")  # a package's
        if spec is None or spec.loader is None or spec.origin is None:
            print(f"{sys.executable}: No module named {program.target}", file=sys.stderr)
            raise SystemExit(1)
        code = spec.loader.get_code(spec.name)  # type: ignore[attr-defined]
        main.__dict__.update(
            __file__=spec.origin,
            __cached__=spec.cached,
            __loader__=spec.loader,
            __package__=spec.parent,
            __spec__=spec,
        )
        sys.argv = [spec.origin, *program.args]
        sys.path[0] = os.getcwd()
    else:
        with io.open_code(program.target) as source:
            code = compile(source.read(), program.target, "exec", dont_inherit=True)
        main.__dict__.update(
            __file__=program.target,
            __cached__=None,
            __loader__=SourceFileLoader("__main__", program.target),
            __package__=None,
            __spec__=None,
        )
        sys.argv = [program.target, *program.args]
        sys.path[0] = os.path.dirname(os.path.realpath(program.target))
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def finish() -> None:
    """The interpreter's own end: its non-daemon threads joined, then ``atexit``."""
    threading._shutdown()  # type: ignore[attr-defined]  # as Py_FinalizeEx does
    atexit._run_exitfuncs()


def run_as_python(program: PythonWorker) -> int:
    """Steps 1 to 3 (module docstring): the exit code ``python`` would leave; a program
    ended by a ``KeyboardInterrupt`` does not return (it is ended by SIGINT)."""
    after_fork()
    interrupted = False
    try:
        run_as_main(program)
        code = 0
    except SystemExit as leaving:
        code = _exit_code(leaving.code)
    except BaseException as error:  # uncaught: printed before the threads are joined
        sys.excepthook(type(error), error, error.__traceback__)
        interrupted, code = isinstance(error, KeyboardInterrupt), 1
    finish()
    sys.stdout.flush()
    sys.stderr.flush()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _exit_code(code: object) -> int:
    """``SystemExit.code`` as the interpreter reads it: None is 0, a number is itself,
    anything else is printed to stderr and read as 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
