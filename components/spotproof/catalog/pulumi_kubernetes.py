"""How the Pulumi Kubernetes provider treats the objects spotproof renders.

Facts from https://www.pulumi.com/docs/reference/pkg/kubernetes/batch/v1/job (provider
v4.24) and pulumi/pulumi-kubernetes#417. Nothing here imports Pulumi.
"""

from __future__ import annotations

SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"
"""With ``"true"``, the provider registers the object as soon as the API server accepts it.

Without it a ``batch/v1`` Job is awaited until its ``Complete`` condition, and an update
is marked failed after 10 minutes: a training run (hours, suspended while Kueue queues
it, restarted after reclaims) would fail every ``pulumi up`` that creates it."""

JOB_AWAIT_TIMEOUT_MINUTES = 10
"""How long an awaited Job may take to complete before the update fails."""
