"""Clean virtual environments for the tests that install something (the package as its users
install it, a runner's fresh Python, a tool of its own), made with uv rather than pip.

pip spent most of those tests' time: ``python -m venv`` byte-compiles the pip and setuptools
it seeds (7 s of CPU each), and ``pip install`` unpacks every file of every wheel it fetched
again, for every environment (pulumi-gcp, -aws and -azure-native are 270 to 360 MiB each,
torch 750 MiB), with nothing cached here. uv links each file from its cache, which ``make
test`` has filled already with everything but the CrossGuard pack's protobuf and checkov.

What the environments hold is unchanged: the venv is the one ``python -m venv`` makes (the
same pip and setuptools, from ensurepip's own wheels), and the installs use the package
sources pip is set up with (pip.conf, ``PIP_*``; uv reads neither), taking the best version
across them as pip does. That pip itself resolves each cloud's extra is what ``spotproof ci
init``'s locks prove (``test_packaging``'s workflow test, and ``test_ci_lock``), and ``pip
check`` still judges every environment.

Commands run in these environments without ``PYTHONDONTWRITEBYTECODE`` (see
:func:`clean_env`): as in a user's own environment, a module is compiled the first time a
process imports it, not again in every process (a plan from a cloud's install spent half its
CPU compiling pulumi_gcp where CI sets the variable).
"""

from __future__ import annotations

import ast
import ensurepip
import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from uv import find_uv_bin

DROPPED = ("PYTHONPATH", "VIRTUAL_ENV", "SPOTPROOF_NODE_MODULES", "PYTHONDONTWRITEBYTECODE")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would let an installed copy find this
    checkout (``PYTHONPATH``, ``VIRTUAL_ENV``, ``SPOTPROOF_NODE_MODULES``) and without
    ``PYTHONDONTWRITEBYTECODE``, plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if k not in DROPPED}, **extra}


def run(command: list[str], **kwargs: Any) -> str:
    """``command``'s standard output; the test fails with its output unless it exits 0."""
    done = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def uv() -> str:
    """The uv of this checkout's environment (the dev extra, pinned in constraints.txt)."""
    return find_uv_bin()


def create(root: Path) -> Path:
    """What ``python -m venv root`` makes, this interpreter's pip and setuptools seeded from
    ensurepip's own wheels, but uncompiled (compiled when first imported): its python."""
    run([sys.executable, "-m", "venv", "--without-pip", str(root)])
    python = root / "bin" / "python"
    bundled = _ensurepip_wheels()
    run([uv(), "pip", "install", "--quiet", "--python", str(python), "--no-index", *bundled])
    return python


def _ensurepip_wheels() -> list[str]:
    """The wheels ``python -m venv`` would seed with (pip, and setuptools before 3.12)."""
    folders = [Path(ensurepip.__file__).parent / "_bundled"]
    if getattr(ensurepip, "_WHEEL_PKG_DIR", None):  # a distribution's own copies
        folders.insert(0, Path(ensurepip._WHEEL_PKG_DIR))
    packages = getattr(ensurepip, "_get_packages", lambda: None)() or {}
    found = []
    for name, package in sorted(packages.items()):
        path = package.wheel_path or next(
            (str(f / package.wheel_name) for f in folders if (f / package.wheel_name).is_file()),
            None,
        )
        assert path, f"ensurepip has no wheel of {name}"
        found.append(str(path))
    assert found, "ensurepip names no wheels"
    return found


def install(python: Path, *requirements: str, constraints: tuple[Path, ...] = ()) -> None:
    """``pip install requirements`` into ``python``'s environment, by uv, from the sources
    pip is set up with."""
    options, env = pip_sources()
    command = [uv(), "pip", "install", "--quiet", "--python", str(python), *options]
    for path in constraints:
        command += ["--constraint", str(path)]
    run([*command, *requirements], env={**os.environ, **env})


@functools.cache
def pip_sources() -> tuple[tuple[str, ...], dict[str, str]]:
    """uv's options (and environment) for the indexes, links, constraints and certificates
    this machine's pip is set up with, as ``pip config list`` shows them (its files, then
    ``PIP_*`` variables, which win)."""
    listed = run([sys.executable, "-m", "pip", "config", "list"])
    settings: dict[str, str] = {}
    rank = {"global": 0, "install": 1, ":env:": 2}
    seen: dict[str, int] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.partition(".")
        if section in rank and rank[section] >= seen.get(name, -1):
            settings[name], seen[name] = str(ast.literal_eval(value)), rank[section]
    options = ["--index-strategy", "unsafe-best-match"]  # pip's: the best of every index
    flags = {
        "index-url": "--index-url",
        "extra-index-url": "--extra-index-url",
        "find-links": "--find-links",
        "constraint": "--constraint",
        "trusted-host": "--allow-insecure-host",
    }
    for name, flag in flags.items():
        for value in settings.get(name, "").split():
            options += [flag, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        options.append("--no-index")
    env = {"SSL_CERT_FILE": settings["cert"]} if settings.get("cert") else {}
    return tuple(options), env
