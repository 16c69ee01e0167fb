"""spotproof: make spot and preemptible GPU capacity safe for AI work.

The package is split by concern (see docs/layout.md):

- ``spotproof.catalog``    facts about clouds: machine types, GPU families, preemption notice.
- ``spotproof.fleet``       the cloud-neutral fleet description and its validation.
- ``spotproof.scheduling`` taints, labels, tolerations, affinity, priorities; the fit check.
- ``spotproof.kube``       cloud-neutral Kubernetes objects (Pulumi components).
- ``spotproof.gke``        the GKE hybrid cluster (Pulumi components).
- ``spotproof.eks``        the EKS hybrid cluster with Karpenter (Pulumi components).
- ``spotproof.policy``     rules over planned resources, shared by ``plan`` and CrossGuard.
- ``spotproof.plan``       the offline engine behind ``spotproof plan``.
- ``spotproof.runtime``    what runs inside the training container (no Pulumi import).

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
