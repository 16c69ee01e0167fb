"""The package's build, with one step of its own: Karpenter's published schemas bundled in.

``spotproof plan`` checks EKS stacks' NodePools and EC2NodeClasses against the schemas of
the npm package ``@kubernetes-models/karpenter``; an installed package carries them as one
bundled module (``scripts/bundle_karpenter_schemas.sh``). Every build of the package from
a checkout where ``npm ci`` has run bundles them, however it is started: ``make dist``,
``python -m build`` (the sdist carries the bundle to the wheel built from it), ``pip wheel
.`` or ``pip install .``. A checkout without ``node_modules`` builds without them, and a
plan of an EKS stack from that install says the check could not run (``--strict`` fails
it). Everything else about the package is in ``pyproject.toml``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
BUNDLE = ROOT / "components/spotproof/plan/schemas/karpenter_schemas/validators.mjs"
PUBLISHED = ROOT / "node_modules/@kubernetes-models/karpenter/package.json"


def bundle_schemas() -> None:
    """Bundle the schemas where the npm package is there and no bundle is yet."""
    if PUBLISHED.is_file() and not BUNDLE.is_file():
        subprocess.run([str(ROOT / "scripts/bundle_karpenter_schemas.sh")], check=True)


class BuildPy(build_py):
    def run(self) -> None:
        bundle_schemas()
        super().run()


class Sdist(sdist):
    def run(self) -> None:
        bundle_schemas()
        super().run()


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
