"""Single settings of the real stacks' rendered objects, each there for one behaviour: a
table whose rows name the behaviour, the object (stack, type, name), the path to the
setting in its inputs, and the value the behaviour needs. What takes several settings
together is a test of its own beside its component (test_kube, test_gke, ...)."""

from __future__ import annotations

import functools
import operator
from typing import Any

import pytest

from tests.support import plan_of

JOB = "kubernetes:batch/v1:Job"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
GKE_POOL = "gcp:container/nodePool:NodePool"
POD = ("spec", "template", "spec")
"""A Job's pod spec."""


@pytest.mark.parametrize(
    ("stack", "type_", "name", "path", "expected"),
    [
        pytest.param(
            "gke-dev",
            JOB,
            "gke-dev-smoke-job",
            (*POD, "restartPolicy"),
            "Never",
            id="smoke-job-never-restarts-in-place",
        ),
        pytest.param(
            "gke-dev",
            JOB,
            "gke-dev-smoke-job",
            (*POD, "terminationGracePeriodSeconds"),
            15,
            id="smoke-job-grace-fits-gke-notice-for-non-system-pods",
        ),
        pytest.param(
            "gke-dev",
            JOB,
            "gke-dev-smoke-job",
            (*POD, "containers", 0, "resources", "limits", "nvidia.com/gpu"),
            "1",  # a quantity string, as the API spells it
            id="smoke-job-declares-its-gpu-limit",
        ),
        pytest.param(
            "gke-dev",
            JOB,
            "gke-dev-smoke-job",
            (*POD, "volumes"),
            [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
            id="smoke-job-scratch-tmp-is-capped-so-it-cannot-fill-the-node",
        ),
        pytest.param(
            "gke-dev",
            JOB,
            "gke-dev-smoke-job",
            (*POD, "automountServiceAccountToken"),
            False,
            id="trainer-pods-get-no-kubernetes-api-token",
        ),
        pytest.param(
            "gke-dev",
            SERVICE_ACCOUNT,
            "gke-dev-trainer",
            ("automountServiceAccountToken",),
            False,
            id="trainer-account-mounts-no-kubernetes-api-token",
        ),
        pytest.param(
            "gke-dev",
            GKE_POOL,
            "gke-dev-t4-spot",
            ("nodeConfig", "guestAccelerators"),
            [
                {
                    "type": "nvidia-tesla-t4",
                    "count": 1,
                    "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"},
                }
            ],
            id="gke-gpu-pools-declare-accelerators-with-managed-driver",
        ),
        pytest.param(
            "gke-prod",
            GKE_POOL,
            "gke-prod-h100-flex",
            ("queuedProvisioning",),
            {"enabled": True},
            id="gke-queued-provisioning-is-enabled-when-asked",
        ),
        pytest.param(
            "gke-prod",
            GKE_POOL,
            "gke-prod-h100-spot",
            ("nodeLocations",),
            ["us-central1-a", "us-central1-c"],
            id="gke-zones-pin-a-pool-to-those-zones",
        ),
    ],
)
def test_a_rendered_setting_holds_the_value_its_behaviour_needs(
    stack: str, type_: str, name: str, path: tuple[str | int, ...], expected: Any
) -> None:
    inputs = plan_of(stack).recording.one(type_, name).inputs
    setting = functools.reduce(operator.getitem, path, inputs)
    # The type too: False is no 0, and the quantity "1" no number.
    assert (type(setting), setting) == (type(expected), expected)
