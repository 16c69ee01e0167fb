"""spotproof: make spot and preemptible GPU capacity safe for AI work.

The package is split by concern (see README.md, "Layout"):

- ``spotproof.catalog``    facts about clouds: machine types, GPU families, preemption notice.
- ``spotproof.spec``       the cloud-neutral fleet description and its validation.
- ``spotproof.scheduling`` taints, labels, tolerations, affinity, priorities; the fit check.
- ``spotproof.kube``       cloud-neutral Kubernetes objects (Pulumi components).
- ``spotproof.gke``        the GKE hybrid cluster (Pulumi components).
- ``spotproof.eks``        the EKS hybrid cluster with Karpenter (Pulumi components).
- ``spotproof.policy``     rules over planned resources, shared by ``plan`` and CrossGuard.
- ``spotproof.plan``       the offline engine behind ``spotproof plan``.
- ``spotproof.runtime``    what runs inside the training container (no Pulumi import).

Importing this package imports nothing heavy; each subpackage pulls in only its own SDKs.
"""

__version__ = "0.1.0"
