"""Which spotproof the workflow installs: exactly the artifact the user chose, checked here so
that nothing is ever installed by a name alone.

spotproof has no release on PyPI yet, so ``spotproof==X`` names a project whoever registers
it first would own, and its code would run in the ``preview`` job, which holds the cloud's
OIDC credentials. The choices, each fixed to one artifact:

- ``url``    a release wheel's https URL with its digest (``...whl#sha256=<64 hex>``): the
  lock names the URL with ``--hash``, and pip refuses any other bytes;
- ``wheel``  a wheel file here (``make dist`` builds one): copied into the repository beside
  the locks, its sha256 computed now;
- ``git``    ``git+https://<host>/<org>/spotproof@<40-hex commit>``: the commit is the pin
  (git verifies every object by its id), never a branch or tag, which move. pip cannot
  hash a checkout, so the workflow builds it with ``--no-deps --no-build-isolation`` after
  the lock has put its dependencies and its build backend in place, each by hash;
- ``source`` ``.``, spotproof's own repository only: the checkout the workflow runs in.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

HOME = ".github/spotproof"
"""Where ``ci init`` writes the locks (and a chosen wheel file), from the repository root."""

ALLOWED = (
    "allowed: a release wheel's https URL with its digest (https://.../"
    "spotproof-<version>-py3-none-any.whl#sha256=<64 hex>), a wheel file, or "
    "git+https://github.com/<org>/spotproof@<40-hex commit>"
)
WHEEL_NAME = re.compile(r"spotproof-([0-9][0-9A-Za-z.+!_]*)-py3-none-any\.whl")
SHA256 = re.compile(r"[0-9a-f]{64}")
COMMIT = re.compile(r"[0-9a-f]{40}")
GIT_URL = re.compile(r"git\+https://[A-Za-z0-9.-]+(:[0-9]+)?/[\w.-]+(/[\w.-]+)+")


class ChoiceError(ValueError):
    """A choice that cannot be verified; the message is one line."""


@dataclass(frozen=True)
class Choice:
    kind: str
    """``url``, ``wheel``, ``git`` or ``source``."""
    given: str
    """What the user passed to ``--spotproof``."""
    location: str
    """The URL (no fragment), the wheel's path from the repository root, the git URL with
    its commit, or ``.``."""
    sha256: str | None = None
    version: str | None = None
    """The wheel's version, from its file name; None for a build from source."""
    wheel_file: Path | None = None
    """The wheel file the user gave, copied to ``location`` when the locks are written."""

    @property
    def described(self) -> str:
        """The choice as the workflow and the locks name it: the wheel by its path in the
        repository, anything else as given."""
        return self.location if self.kind == "wheel" else self.given

    @property
    def from_source(self) -> bool:
        """Built on the runner (a commit or the checkout), after the lock is installed."""
        return self.kind in ("git", "source")

    def requirement(self, extras: str, repository: Path) -> str:
        """What pip resolves here for one environment: the artifact itself, by its digest."""
        name = f"spotproof[{extras}]" if extras else "spotproof"
        if self.kind == "url":
            return f"{name} @ {self.location}#sha256={self.sha256}"
        if self.kind == "wheel":
            assert self.wheel_file is not None
            return f"{name} @ {self.wheel_file.resolve().as_uri()}#sha256={self.sha256}"
        if self.kind == "git":
            return f"{name} @ {self.location}"
        return f"{name} @ {repository.resolve().as_uri()}"

    def lock_line(self, extras: str) -> str | None:
        """Its line in a lock, with its hash; None for a build from source (pip cannot hash
        a source tree, so the workflow installs it after the lock)."""
        name = f"spotproof[{extras}]" if extras else "spotproof"
        if self.kind == "url":
            return f"{name} @ {self.location} \\\n    --hash=sha256:{self.sha256}"
        if self.kind == "wheel":
            # pip expands ${VAR} in a requirements file: the runner's checkout, wherever it is.
            url = f"file://${{GITHUB_WORKSPACE}}/{self.location}"
            return f"{name} @ {url} \\\n    --hash=sha256:{self.sha256}"
        return None

    def source_install(self) -> str | None:
        """The argument of the workflow's ``pip install --no-deps --no-build-isolation``."""
        if self.kind == "git":
            return f'"spotproof @ {self.location}"'
        if self.kind == "source":
            return '"${GITHUB_WORKSPACE}"'
        return None


def parse(given: str | None, repository: Path) -> Choice:
    """The user's ``--spotproof``, checked; :class:`ChoiceError` names what is missing."""
    if not given:
        raise ChoiceError(
            "say which spotproof the workflow installs with --spotproof (spotproof has no "
            f"release on PyPI yet, so a name alone could install anyone's code); {ALLOWED}"
        )
    text = given.strip()
    if text == ".":
        return _source(repository)
    if text.startswith("git+"):
        return _git(text)
    if text.startswith("https://"):
        return _url(text)
    if "://" in text or text.startswith(("git@", "http:")):
        raise ChoiceError(f"{text}: neither https nor a git commit over https; {ALLOWED}")
    path = Path(text).expanduser()
    if path.exists() or text.endswith(".whl") or "/" in text:
        return _wheel(path)
    raise ChoiceError(
        f"{text}: a name or version from the package index, where spotproof has no release "
        f"yet and whoever registers the name decides what it installs; {ALLOWED}"
    )


def _url(text: str) -> Choice:
    url, _, fragment = text.partition("#")
    digest = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else ""
    if not SHA256.fullmatch(digest.lower()):
        raise ChoiceError(
            f"{url}: a URL without its sha256, which nothing could verify; add "
            "#sha256=<the wheel's 64-hex digest> (sha256sum prints it)"
        )
    match = WHEEL_NAME.fullmatch(url.rsplit("/", 1)[-1])
    if not match:
        raise ChoiceError(f"{url}: not a spotproof wheel (spotproof-<version>-py3-none-any.whl)")
    return Choice("url", text, url, digest.lower(), match.group(1))


def _git(text: str) -> Choice:
    url, at, ref = text.rpartition("@")
    if not at or not GIT_URL.fullmatch(url):
        raise ChoiceError(
            f"{text}: not a git commit over https "
            "(git+https://github.com/<org>/spotproof@<40-hex commit>)"
        )
    if not COMMIT.fullmatch(ref):
        raise ChoiceError(
            f"{text}: {ref!r} is a branch, tag or short name, which can move to other code; "
            "give the full 40-hex commit (git rev-parse <ref> prints it)"
        )
    return Choice("git", text, text)


def _wheel(path: Path) -> Choice:
    if not path.is_file():
        raise ChoiceError(f"{path}: no such wheel file; {ALLOWED}")
    match = WHEEL_NAME.fullmatch(path.name)
    if not match:
        raise ChoiceError(f"{path}: not a spotproof wheel (spotproof-<version>-py3-none-any.whl)")
    version = match.group(1)
    try:
        with zipfile.ZipFile(path) as wheel:
            metadata = wheel.read(f"spotproof-{version}.dist-info/METADATA").decode()
    except (zipfile.BadZipFile, KeyError, OSError, UnicodeDecodeError):
        raise ChoiceError(f"{path}: not a wheel with spotproof's metadata") from None
    fields = dict(
        line.split(": ", 1) for line in metadata.splitlines() if ": " in line and line[0] != " "
    )
    if (fields.get("Name"), fields.get("Version")) != ("spotproof", version):
        raise ChoiceError(f"{path}: its metadata names another distribution than its file name")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Choice("wheel", str(path), f"{HOME}/{path.name}", digest, version, path)


def _source(repository: Path) -> Choice:
    try:
        project = tomllib.loads((repository / "pyproject.toml").read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        project = {}
    if project.get("name") != "spotproof":
        raise ChoiceError(
            f"'.' is spotproof's own checkout, for spotproof's repository; {repository} is "
            f"another; {ALLOWED}"
        )
    return Choice("source", ".", ".")
