"""Cloud-neutral Kubernetes objects, as Pulumi components.

Every object here takes its placement (tolerations, selectors, priority) from
``spotproof.scheduling`` and its cloud specifics (workload identity annotations,
checkpoint URL, grace period) from the caller, so the same components render on GKE,
EKS and AKS.
"""

from spotproof.kube.baseline import ClusterBaseline, ClusterBaselineArgs
from spotproof.kube.jobset import GangRecovery
from spotproof.kube.smoke import SmokeTestJob, SmokeTestJobArgs
from spotproof.kube.spares import WarmSpares, WarmSparesArgs
from spotproof.kube.training import Trainer, TrainingJob, TrainingJobArgs
from spotproof.kube.workload import ServiceAccountRef, TargetPlacement, WorkloadIdentity

__all__ = [
    "ClusterBaseline",
    "ClusterBaselineArgs",
    "GangRecovery",
    "ServiceAccountRef",
    "SmokeTestJob",
    "SmokeTestJobArgs",
    "TargetPlacement",
    "Trainer",
    "TrainingJob",
    "TrainingJobArgs",
    "WarmSpares",
    "WarmSparesArgs",
    "WorkloadIdentity",
]
