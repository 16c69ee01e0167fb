"""``spotproof:reclaimModel``: what the plan assumes about reclaims and prices when it
advises a checkpoint interval (``plan.simulation.intervals``).

Every key is optional. Left out, the reclaim rate is the one the stack's cloud publishes
(``catalog.profile.PublishedRate``, with its source and the date it was read); the other
defaults are assumptions, each saying where it comes from. A stack that knows better (the
Azure portal's eviction rate for its VM size, its negotiated prices, its image's pull
time) says so here, and the plan's advice follows::

    spotproof:reclaimModel:
      reclaimsPerNodeHour: 0.105   # Azure's 5-10% an hour, at its upper end
      onDemandGpuHourUsd: 2.5      # what you pay: costs print in USD too

A program of components on a cluster spotproof did not create states the same object as
``spotproof:existingCluster.reclaimModel``.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotproof.fleet.fields import Checked, setting
from spotproof.fleet.readers import number


@dataclass(frozen=True)
class ReclaimModel(Checked):
    """The goodput model's inputs that are the stack's to state."""

    reclaims_per_node_hour: float | None = setting("reclaimsPerNodeHour", number(0, 10), None)
    """Reclaims per node per hour, 0 to 10, as a Poisson rate (a share ``p`` reclaimed per
    hour is ``-ln(1 - p)``); default the rate the cloud publishes
    (``CloudProfile.reclaims``)."""
    unannounced_share: float = setting("unannouncedShare", number(0, 1), 0.1)
    """Share of reclaims, 0 to 1, that cost the work since the last periodic checkpoint even
    when the final save fits the grace period: a notice that never reaches the pod, a save
    that fails. Every cloud calls its notice best effort and none publishes how often it
    misses, so the default 0.1 is an assumption."""
    spot_price_ratio: float = setting("spotPriceRatio", number(0.01, 1), 0.4)
    """Spot price over on-demand price, 0.01 to 1; default 0.4, the low end of Google's
    older "60-91% discount" wording (https://cloud.google.com/compute/docs/instances/
    preemptible; the Spot VMs page now says "up to 91%"); AWS and Azure say "up to 90%"
    (the EKS best-practices guide, AKS's cost best practices)."""
    on_demand_gpu_hour_usd: float | None = setting("onDemandGpuHourUsd", number(0.01, 1000), None)
    """The on-demand price of one GPU-hour in USD, 0.01 to 1000; given, costs print in USD
    as well as in multiples of it."""
    image_pull_seconds: float = setting("imagePullSeconds", number(0, 3600), 60.0)
    """Seconds a new node takes to pull the trainer's image, 0 to 3600; default 60, an
    assumption: the EKS best-practices guide puts a PyTorch CUDA runtime image at 3.03 GB
    (``latest/bpg/aiml/aiml_performance.adoc``), about a minute at 50 MB/s (no cloud
    publishes a pull rate). GKE's image streaming cuts it to seconds
    (https://cloud.google.com/blog/products/containers-kubernetes/introducing-container-image-streaming-in-gke)."""
