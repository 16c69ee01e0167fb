#!/usr/bin/env python3
"""Checks a release's artifacts before anything publishes them (the release workflow's build
job runs it on dist/; standard library only).

    python scripts/check_dist.py dist v0.1.0

It fails, naming what is wrong in one line, unless ``dist`` holds exactly one sdist and one
wheel of spotproof, both of the version the tag names, each carrying Karpenter's bundled
schemas (``scripts/bundle_karpenter_schemas.sh``: the validators, their licence and the
package they came from, the very version package-lock.json pins), the schema runner and the
CrossGuard pack. A wheel without the schemas would install and plan, but an EKS plan from it
would skip the checks and fail under --strict: this is where that is caught.
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path

PACKAGE = "spotproof"
CARRIED = (
    "plan/schemas/karpenter_schemas/validators.mjs",
    "plan/schemas/karpenter_schemas/LICENSE",
    "plan/schemas/karpenter_schemas/SOURCE",
    "plan/schemas/karpenter_schema.mjs",
    "policy/pack/PulumiPolicy.yaml",
    "policy/pack/__main__.py",
    "py.typed",
)
"""Files of the package, from ``components/spotproof/``, that each artifact must carry."""
SCHEMAS_PACKAGE = "@kubernetes-models/karpenter"


class DistError(Exception):
    """What is wrong with the artifacts; one line."""


def check(dist: Path, tag: str, lockfile: Path | None = None) -> str:
    """The version both artifacts carry, once they are found right."""
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    others = sorted(set(dist.iterdir()) - set(wheels) - set(sdists))
    if len(wheels) != 1 or len(sdists) != 1 or others:
        names = ", ".join(p.name for p in sorted(dist.iterdir())) or "nothing"
        raise DistError(f"{dist}: expected one wheel and one sdist, found {names}")
    [wheel], [sdist] = wheels, sdists
    match = re.fullmatch(rf"{PACKAGE}-(.+)-py3-none-any\.whl", wheel.name)
    if not match:
        raise DistError(f"{wheel.name}: not a pure-Python wheel of {PACKAGE}")
    version = match.group(1)
    if tag != f"v{version}":
        raise DistError(f"the tag {tag} names another version than the artifacts' {version}")
    if sdist.name != f"{PACKAGE}-{version}.tar.gz":
        raise DistError(f"{sdist.name}: not the sdist of {PACKAGE} {version}")
    with zipfile.ZipFile(wheel) as archive:
        _carries(wheel.name, set(archive.namelist()), f"{PACKAGE}/")
        source = archive.read(f"{PACKAGE}/plan/schemas/karpenter_schemas/SOURCE").decode()
    with tarfile.open(sdist) as archive:
        in_sdist = {member.name for member in archive.getmembers() if member.isfile()}
    _carries(sdist.name, in_sdist, f"{PACKAGE}-{version}/components/{PACKAGE}/")
    if lockfile is not None and lockfile.is_file():
        pinned = json.loads(lockfile.read_text())["packages"][f"node_modules/{SCHEMAS_PACKAGE}"]
        if source.strip() != f"{SCHEMAS_PACKAGE} {pinned['version']}":
            raise DistError(
                f"{wheel.name}: bundles {source.strip()!r}, while {lockfile.name} pins "
                f"{SCHEMAS_PACKAGE} {pinned['version']}"
            )
    return version


def _carries(artifact: str, names: set[str], prefix: str) -> None:
    missing = [path for path in CARRIED if prefix + path not in names]
    if missing:
        raise DistError(f"{artifact} lacks {', '.join(missing)} (run the bundle script first)")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: check_dist.py DIST TAG", file=sys.stderr)
        return 2
    try:
        version = check(Path(argv[0]), argv[1], Path("package-lock.json"))
    except (DistError, OSError, KeyError, zipfile.BadZipFile, tarfile.TarError) as error:
        print(f"check_dist: {error}", file=sys.stderr)
        return 1
    print(f"{PACKAGE} {version}: one wheel and one sdist, Karpenter's schemas in both")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
