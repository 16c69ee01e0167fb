"""Which optional extra installs which import, so that a command run without it says so.

The bare package is the training runtime; ``plan``, ``check``, ``smoke`` and each cloud's
components need an extra (``pyproject.toml`` lists them). A missing one surfaces as a
:class:`ModuleNotFoundError` deep in an import chain; :func:`missing_extra` turns it into
the one line a user can act on. The stores' and queues' extras are read from their records
(``runtime.storage.backends``, ``runtime.batch.queue_backends``), which is why this module
sits above the runtime (``tests/test_layout.py``).
"""

from __future__ import annotations

from spotproof.catalog import PROFILES
from spotproof.runtime.batch.queue_backends import QUEUE_BACKENDS
from spotproof.runtime.storage.backends import STORE_BACKENDS

PACKAGE_EXTRAS: dict[str, str] = {
    # Pulumi components and `plan`/`check`: the core, then one extra per cloud provider.
    "pulumi": "iac",
    "pulumi_kubernetes": "iac",
    "yaml": "iac",
    "kubernetes_validate": "iac",
    "grafana_foundation_sdk": "iac",
    **{profile.sdk_module: profile.extra for profile in PROFILES.values()},
    "pulumi_policy": "policy",
    # The runtime's torch integration, its metrics and its stores (from their registry).
    "torch": "train",
    "prometheus_client": "metrics",
    **{name: store.extra for store in STORE_BACKENDS if store.extra for name in store.imports},
    # Queue-fed batch workers, one queue per cloud (from their registry), and the result table.
    **{name: queue.extra for queue in QUEUE_BACKENDS for name in queue.imports},
    "psycopg": "batch-sql",
    # `spotproof drill`: the Kubernetes client, and each cloud's reclaim call.
    "kubernetes": "drill",
    "google.cloud.compute_v1": "drill-gcp",
    "azure.mgmt.compute": "drill-azure",
    # The local rehearsal: emulators and the timeline picture.
    "moto": "smoke",
    "gcs_server": "smoke",
    "matplotlib": "smoke",
}


_CLOUD_EXTRA_NAMES = [f"spotproof[{profile.extra}]" for profile in PROFILES.values()]
CLOUD_EXTRAS = f"{', '.join(_CLOUD_EXTRA_NAMES[:-1])} or {_CLOUD_EXTRA_NAMES[-1]}"
"""Every cloud's extra, as the error that cannot tell which one a user needs names them."""


def extra_for(module: str) -> str | None:
    """The extra that installs ``module`` (a dotted import name), if it is one of ours."""
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        extra = PACKAGE_EXTRAS.get(".".join(parts[:length]))
        if extra:
            return extra
    # A missing parent (``google``, ``azure``) stands for the packages under it.
    return next((e for name, e in PACKAGE_EXTRAS.items() if name.startswith(f"{module}.")), None)


MOVED = {
    "spotproof.spec": "spotproof.fleet",
    "spotproof.fit": "spotproof.scheduling.fit",
    "spotproof.pool_shapes": "spotproof.scheduling.node_shapes",
    "spotproof.podtemplates": "spotproof.scheduling.pod_templates",
    "spotproof.quantity": "spotproof.scheduling.quantity",
    "spotproof.matrix": "spotproof.scheduling.work_matrix",
    "spotproof.node_resources": "spotproof.scheduling.node_resources",
    "spotproof.kube.connect": "spotproof.kube.cluster",
    "spotproof.kube.queues": "spotproof.kube.provisioning_queue",
    "spotproof.runtime.variables": "spotproof.runtime.settings",
    "spotproof.smoke.batch_worker": "spotproof.runtime.batch",
    **{
        f"spotproof.runtime.{name}": f"spotproof.runtime.checkpointer.{name}"
        for name in (
            "checkpoint",
            "manifest",
            "async_save",
            "gang",
            "integrity",
            "transfer",
            "torch_state",
        )
    },
}
"""Modules of spotproof 0.1.0 that live elsewhere now: a program still importing one is
told where, not that it is missing."""


def moved_to(module: str) -> str | None:
    """Where ``module``, or the package above it, lives now, if it moved."""
    parts = module.split(".")
    for length in range(len(parts), 1, -1):
        old = ".".join(parts[:length])
        if old in MOVED:
            return MOVED[old] + module[len(old) :]
    return None


def missing_extra(error: ModuleNotFoundError, command: str) -> str | None:
    """One line saying which extra ``command`` needs, or None when the missing module is
    not one an extra of ours installs (the user's own program imported it)."""
    module = error.name or ""
    extra = extra_for(module)
    if extra is None:
        return None
    if command == "smoke":
        # The rehearsal runs every store and queue: its extra holds them all.
        extra = "smoke"
    if command == "drill" and module.split(".")[0] in ("boto3", "azure"):
        # The drill's clients of these clouds, not the batch queues' under the same name.
        extra = "drill-aws" if module.startswith("boto3") else "drill-azure"
    if extra == "iac":
        # Every cloud's extra brings the components' core; the user knows their cloud.
        install = f"the extra of your cloud: {CLOUD_EXTRAS}"
    elif extra == "drill":
        # The Kubernetes client alone drills nothing: each cloud's extra brings its SDK too.
        install = (
            "the drill extra of your cloud: spotproof[drill-gcp], [drill-aws] or [drill-azure]"
        )
    else:
        install = f"spotproof[{extra}]"
    return f"spotproof {command}: the Python module {module!r} is missing; install {install}"


def not_installed(error: ModuleNotFoundError, command: str) -> str:
    """What a command needs installed, without the command's prefix: an extra of ours, or a
    module the stack's own program imports."""
    line = missing_extra(error, command)
    if line:
        return line.removeprefix(f"spotproof {command}: ")
    moved = moved_to(error.name or "")
    if moved:
        return f"the program imports {error.name!r}, which is now {moved}"
    return f"the program imports {error.name!r}, which is not installed in this environment"
