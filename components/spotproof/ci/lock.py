"""The locks ``spotproof ci init`` writes beside the workflow: one requirements file per
environment the workflow builds, every line pinned by its sha256, so each job installs with
``pip install --require-hashes -r`` and plans the same code on every run.

pip's own resolver chooses them, against the indexes this environment's pip is set up with
(``pip install --dry-run --report``, which reads each file's digest from the index and
downloads only the metadata it lacks), for the runner rather than this machine: CPython
:data:`RUNNER_PYTHON`'s wheels for Linux x86_64 (``ubuntu-latest``), binary only. Markers
(``sys_platform``, ``python_version``) are still this interpreter's, a limit of pip: a lock
written on another system may lack a dependency the runner needs, and pip on the runner
then refuses the install (it never installs an unhashed file) until ``ci init`` runs again
on Linux.

One file per environment, because pip installs the whole of a requirements file and the
environments differ: ``stacks`` (the bare package and PyYAML, to list stacks), one per
cloud extra among the project's stacks, and ``policy`` (the CrossGuard pack, whose protobuf
pin the cloud extras cannot share).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from spotproof.ci.artifact import HOME, Choice

RUNNER_PYTHON = "3.11"
RUNNER_PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(39, 16, -1)),  # ubuntu-24.04: glibc 2.39
    "manylinux2014_x86_64",  # pip adds manylinux2010 and manylinux1 to it
)
BUILD_REQUIRES = ("setuptools>=77",)
"""spotproof's build backend (pyproject.toml's build-system), locked too where the runner
builds spotproof from a commit or the checkout, so the build fetches nothing unhashed."""
STACKS = "stacks"
POLICY = "policy"
EXTRA_REQUIREMENTS = {STACKS: ("pyyaml>=6",)}
"""Beyond spotproof itself: listing stacks reads YAML (``spotproof ci stacks``)."""


class LockError(ValueError):
    """A lock that cannot be resolved; the message is one line."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str

    def line(self) -> str:
        return f"{self.name}=={self.version} \\\n    --hash=sha256:{self.sha256}"


def environments(cloud_extras: list[str]) -> dict[str, str]:
    """Each lock's name and the extras of spotproof it installs."""
    return {STACKS: "", **{extra: extra for extra in sorted(set(cloud_extras))}, POLICY: POLICY}


def path_of(name: str) -> str:
    """A lock's path from the repository root."""
    return f"{HOME}/{name}.txt"


def write(choice: Choice, repository: Path, cloud_extras: list[str]) -> list[Path]:
    """Resolves every environment's lock (a few at once: most of the time is the index's)
    and writes them; nothing is written unless all resolve."""
    wanted = environments(cloud_extras)
    with ThreadPoolExecutor(max_workers=3) as pool:
        texts = dict(
            zip(
                wanted,
                pool.map(lambda item: lock_text(choice, repository, *item), wanted.items()),
                strict=True,
            )
        )
    written = []
    for name, text in texts.items():
        path = repository / path_of(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def lock_text(choice: Choice, repository: Path, name: str, extras: str) -> str:
    """One environment's lock: the chosen artifact by its hash, then every dependency."""
    requirements = [choice.requirement(extras, repository), *EXTRA_REQUIREMENTS.get(name, ())]
    if choice.from_source:
        requirements += BUILD_REQUIRES
    pins = resolve(requirements)
    what = f"spotproof[{extras}]" if extras else "spotproof"
    where = "this repository's checkout" if choice.kind == "source" else choice.location
    built = (
        f"# spotproof itself is built from {where} after this file is installed\n"
        "# (pip cannot hash a source tree); its build backend is locked here.\n"
        if choice.from_source
        else ""
    )
    first = choice.lock_line(extras)
    lines = [first] if first else []
    lines += [pin.line() for pin in pins]
    return (
        f"# What the workflow installs for {what}, every file by its sha256:\n"
        f"#   python -m pip install --require-hashes -r {path_of(name)}\n"
        "# Written by `spotproof ci init`, resolved by pip for CPython "
        f"{RUNNER_PYTHON} on Linux x86_64 (the\n# runner) from --spotproof {choice.described}\n"
        "# Run it again (--force) to update.\n"
        f"{built}" + "\n".join(lines) + "\n"
    )


def resolve(requirements: list[str]) -> list[Pin]:
    """What pip would install for ``requirements`` on the runner, every file with its sha256,
    spotproof itself left out (its line comes from the choice)."""
    with tempfile.TemporaryDirectory(prefix="spotproof-lock-") as scratch:
        report = Path(scratch) / "report.json"
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--disable-pip-version-check",
            "--report",
            str(report),
            "--target",
            str(Path(scratch) / "target"),
            "--python-version",
            RUNNER_PYTHON,
            "--implementation",
            "cp",
            "--abi",
            "cp" + RUNNER_PYTHON.replace(".", ""),
            "--only-binary=:all:",
            *(f"--platform={platform}" for platform in RUNNER_PLATFORMS),
            *requirements,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as error:
            raise LockError(f"cannot run pip: {error.strerror}") from None
        if done.returncode != 0 or not report.is_file():
            raise LockError(f"pip could not resolve {requirements[0]}: {_last_error(done)}")
        installs = json.loads(report.read_text())["install"]
    pins = [_pin(item) for item in installs if item["metadata"]["name"].lower() != "spotproof"]
    return sorted(pins, key=lambda pin: pin.name.lower())


def _pin(item: dict) -> Pin:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    info = item.get("download_info") or {}
    if item.get("is_direct"):
        raise LockError(f"{name} comes from a direct URL ({info.get('url')}), not an index")
    archive = info.get("archive_info") or {}
    digest = (archive.get("hashes") or {}).get("sha256")
    if not digest and str(archive.get("hash", "")).startswith("sha256="):
        digest = archive["hash"].removeprefix("sha256=")
    if not digest and info.get("url", "").startswith("file:"):
        digest = hashlib.sha256(Path(unquote(urlparse(info["url"]).path)).read_bytes()).hexdigest()
    if not digest:
        raise LockError(f"the index gave no sha256 for {name} {version} ({info.get('url')})")
    return Pin(name, version, digest)


def _last_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = [
        line.strip()
        for line in done.stderr.splitlines()
        if line.strip() and "is ignored: it is neither a file nor a directory" not in line
    ]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or [f"exit status {done.returncode}"])[-1].removeprefix("ERROR: ")
