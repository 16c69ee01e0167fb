"""``spotproof plan``: run a stack's Pulumi program offline and check what it would build.

``run`` loads a stack and runs its program under mocks (``recording``); ``judge`` checks
what it registered, within each cluster it declares, into a ``result``; ``command`` is
the command line. ``cloud`` is what the plan asks of each cloud's module (``gke``, ``eks``,
``aks``), in the terms of ``model``.
"""

# The Pulumi SDK before any module that reads YAML: an install without the extra is then
# told of the module the extra is for, not of one it happens to bring along.
import pulumi  # noqa: F401

from spotproof.plan.config.project import PlanInputError, find_project
from spotproof.plan.config.stack import StackConfig, stack_config
from spotproof.plan.judge import check, check_existing, recheck
from spotproof.plan.result import ClusterPlan, PlanResult, StackFacts
from spotproof.plan.run import load, plan, run_plan

__all__ = [
    "ClusterPlan",
    "PlanInputError",
    "PlanResult",
    "StackConfig",
    "StackFacts",
    "check",
    "check_existing",
    "find_project",
    "load",
    "plan",
    "recheck",
    "run_plan",
    "stack_config",
]
