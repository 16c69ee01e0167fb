"""spotproof: make spot and preemptible GPU capacity safe for AI work.

The package is split by concern (docs/layout.md has every module), lowest first:

- ``spotproof.catalog``     facts about clouds and controllers: machine types, GPUs, notice.
- ``spotproof.fleet``       what a stack declares, cloud-neutral plus one section per cloud.
- ``spotproof.scheduling``  where pods may run: the contract, and the fit check over it.
- ``spotproof.runtime``     what runs in the training or worker container (no Pulumi).
- ``spotproof.kube``        cloud-neutral Kubernetes objects (Pulumi components).
- ``spotproof.gke``, ``spotproof.eks``, ``spotproof.aks``  each cloud's hybrid cluster
  (Pulumi components, each importing only its own cloud's SDK).
- ``spotproof.program``     the Pulumi program every stack runs: config, fleet, components.
- ``spotproof.testing``     ``record``: a user's own program run under mocks, for its tests.
- ``spotproof.policy``      rules over planned resources, shared by ``plan`` and CrossGuard.
- ``spotproof.plan``        ``spotproof plan``: the program run offline, then simulated.
- ``spotproof.check``       ``spotproof check``: a user's own manifests against a plan.
- ``spotproof.smoke``       ``spotproof smoke``: the local preemption rehearsal.
- ``spotproof.ci``          ``spotproof ci``: the pull-request workflow.
- ``spotproof.cli``         the parser of every command.

Importing this package imports nothing heavy; each subpackage pulls in only its own SDKs.
The one name a training script needs is here: ``from spotproof import training``
(``spotproof.runtime.loop``, which imports torch when it is first used).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "training"]


def __getattr__(name: str) -> Any:
    # Lazily, so that `import spotproof` stays free of torch for everything but training.
    if name in ("training", "Training"):
        from spotproof.runtime import loop  # noqa: PLC0415

        return getattr(loop, name)
    raise AttributeError(f"module 'spotproof' has no attribute {name!r}")
