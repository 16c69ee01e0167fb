"""What a plan found about a stack: its pools, each workload's outcome, the violations and
warnings, the checkpoint-interval advice, and each cluster's part where a program declares
several. ``plan.judge`` makes one; the reports (``plan.reporting``), ``spotproof check``
and the drills read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spotproof.catalog import Cloud
from spotproof.commands import EXIT_FAILED, EXIT_OK
from spotproof.fleet import FleetSpec
from spotproof.fleet.advice import SpecWarning
from spotproof.fleet.existing import ExistingCluster
from spotproof.plan.model import Pool
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation import workloads
from spotproof.plan.simulation.intervals import IntervalAdvice
from spotproof.plan.simulation.outcomes import Outcome
from spotproof.policy import Violation
from spotproof.scheduling import fit


@dataclass(frozen=True)
class StackFacts:
    """What every check knows of the stack, whichever program declared its resources."""

    stack: str
    cloud: Cloud
    kubernetes_version: str
    protect: bool | None
    """None where no fleet decides it: each component's own ``protect`` does."""
    existing: ExistingCluster | None = None
    """The cluster a program adds components to, as the stack describes it."""

    @property
    def cluster_version(self) -> str | None:
        """The cluster's minor as the stack states it: always for a fleet (its cluster is
        created at it), for another cluster only where ``spotproof:existingCluster`` says."""
        if self.existing is None:
            return self.kubernetes_version
        return self.existing.kubernetes_version

    @classmethod
    def of_fleet(cls, spec: FleetSpec) -> StackFacts:
        return cls(spec.stack, spec.cloud, spec.kubernetes_version, spec.protect)


@dataclass
class ClusterPlan:
    """One cluster's part of a plan: its resources with the shared ones, and its pools."""

    recording: Recording
    pools: list[Pool]


@dataclass
class PlanResult:
    facts: StackFacts
    spec: FleetSpec | None
    """The fleet spotproof's program builds; None for a program of components on a
    cluster spotproof did not create."""
    recording: Recording
    pools: list[Pool]
    outcomes: list[Outcome] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Checks that could not run here, with why; any fails the plan unless
    ``--allow-skipped``."""
    warnings: list[SpecWarning] = field(default_factory=list)
    """Settings that build but that a real preemption may not honour (never an exit 1)."""
    intervals: list[IntervalAdvice] = field(default_factory=list)
    """Each training workload's checkpoint interval and goodput (``intervals``)."""
    clusters: list[ClusterPlan] = field(default_factory=list)
    """One per cluster the program declares, where it declares several; else one, the
    whole plan."""

    @property
    def nodes(self) -> list[fit.NodeShape]:
        return [pool.shape for pool in self.pools]

    def placements(self) -> dict[str, list[str]]:
        """Which pools each workload fits (and the platform's add-ons), within its cluster."""
        if len(self.clusters) < 2:
            return workloads.placements(self.recording, self.nodes)
        return {
            label: fits
            for cluster in self.clusters
            for label, fits in workloads.placements(
                cluster.recording, [pool.shape for pool in cluster.pools]
            ).items()
        }

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.violations else EXIT_OK
