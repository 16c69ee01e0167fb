"""The examples of the README and of the docs it sends readers to run as written: the
components on a cluster you already have (docs/components.md), under the mocks
``spotproof.testing`` gives users, declaring what the text says they declare; the whole
fleet and the TrainingJob on an existing cluster (README.md); the runtime's loops (README.md
and docs/runtime.md)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pulumi
import pytest

from spotproof.fleet import BucketSpec
from spotproof.kube.workload import ServiceAccountRef
from spotproof.plan import run_plan
from spotproof.testing import record
from tests.support import documentation, run_cli, section

CODE = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)
COMPONENTS = "docs/components.md"
"""Where the components' examples on a cluster you already have live."""
TRAINER = "Your trainer, on a cluster you already have"
"""The README's third way in: ``training()``, and a TrainingJob on an existing cluster."""


def _examples() -> dict[str, str]:
    """Each example, by the package it imports its components from."""
    examples = {}
    for code in CODE.findall(section(COMPONENTS, "On a cluster you already have")):
        package = re.search(r"^from spotproof\.(gke|eks|aks) import", code, re.M)
        assert package, f"an example imports no cloud package:\n{code}"
        examples[package.group(1)] = code
    return examples


def _run(code: str) -> list[str]:
    """The types of the resources the example registers."""

    def program() -> None:
        kubernetes = pulumi.ProviderResource("kubernetes", "existing", {"kubeconfig": "{}"})
        # What the text around the examples assumes is already in scope.
        scope = {
            "pulumi": pulumi,
            "BucketSpec": BucketSpec,
            "ServiceAccountRef": ServiceAccountRef,
            "infra": pulumi.StackReference("acme/platform/prod"),
            "kubernetes_provider": kubernetes,
        }
        exec(compile(code, COMPONENTS, "exec"), scope)

    return [r.type for r in record(program, stack="research", project="ml-infra").resources]


def test_there_is_an_example_for_each_cloud() -> None:
    assert set(_examples()) == {"gke", "eks", "aks"}


@pytest.mark.parametrize(
    ("cloud", "declared"),
    [
        (
            "gke",
            {"gcp:container/nodePool:NodePool", "gcp:storage/bucket:Bucket"},
        ),
        (
            "eks",
            {
                "kubernetes:karpenter.sh/v1:NodePool",
                "aws:sqs/queue:Queue",
                "aws:s3/bucket:Bucket",
            },
        ),
        (
            "aks",
            {
                "azure-native:containerservice:AgentPool",
                "azure-native:storage:StorageAccount",
                "azure-native:managedidentity:FederatedIdentityCredential",
            },
        ),
    ],
)
def test_the_example_builds_its_pieces_on_an_existing_cluster(
    cloud: str, declared: set[str]
) -> None:
    types = _run(_examples()[cloud])
    assert declared <= set(types), sorted(set(types))
    assert not any(t.endswith(":HybridCluster") for t in types)


YAML = re.compile(r"^```yaml\n(config:\n.*?)^```$", re.M | re.S)


def test_every_stack_config_the_readme_shows_is_accepted_as_written() -> None:
    import yaml  # noqa: PLC0415

    from spotproof.fleet import fleet_from_config  # noqa: PLC0415

    configs = [yaml.safe_load(block)["config"] for block in YAML.findall(documentation())]
    shown = [c for c in configs if "spotproof:cloud" in c]
    assert len(shown) >= 2
    for config in shown:
        fleet_from_config(f"readme-{config['spotproof:cloud']}", config)


def test_the_whole_fleet_example_builds_a_cluster() -> None:
    text = section("README.md", "Components in your own Pulumi program")
    fleet = re.search(
        r"^The whole fleet, from the same config keys a stack file uses:$(.*)", text, re.M | re.S
    )
    assert fleet, "README lost its whole-fleet example"
    [code] = CODE.findall(fleet.group(1))
    types = [r.type for r in record(lambda: exec(code, {}), stack="dev", project="ml").resources]
    assert "spotproof:gke:HybridCluster" in types


ANY_PYTHON = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)


def test_every_python_block_of_the_readme_and_docs_is_python() -> None:
    blocks = ANY_PYTHON.findall(documentation())
    assert len(blocks) >= 10
    for block in blocks:
        compile(block, "README.md or docs/", "exec")


def _runtime_examples() -> list[tuple[str, str]]:
    """The README's loop of one import, and docs/runtime.md's same loop by hand, each with
    the page it is on."""
    [one_import] = [
        code
        for code in CODE.findall(section("README.md", TRAINER))
        if "from spotproof import training" in code
    ]
    [by_hand] = CODE.findall(section("docs/runtime.md", "The same loop, by hand"))
    return [(one_import, "README.md"), (by_hand, "docs/runtime.md")]


def _train_as_written(
    example: tuple[str, str], url: str, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """The steps an example trains, with a small model, against ``url``."""
    import torch  # noqa: PLC0415

    monkeypatch.setenv("CHECKPOINT_URL", url)
    monkeypatch.setenv("CHECKPOINT_INTERVAL", "4")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trained: list[int] = []
    scope = {
        "os": os,
        "sys": sys,
        "model": model,
        "optimizer": optimizer,
        "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=5),
        "total_steps": 10,
        "interval": 4,
        "train_one_step": lambda *_: trained.append(len(trained)),
    }
    code, page = example
    exec(compile(code, page, "exec"), scope)
    return trained


@pytest.mark.parametrize("example", ["one import", "by hand"])
def test_each_runtime_example_trains_as_written_and_a_rerun_resumes_past_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example: str
) -> None:
    written = dict(zip(["one import", "by hand"], _runtime_examples(), strict=True))[example]
    url = f"file://{tmp_path}/checkpoints"
    assert _train_as_written(written, url, monkeypatch) == list(range(10))
    # Both commit the finished state, so a rerun of a finished Job finishes at once.
    assert _train_as_written(written, url, monkeypatch) == []


# --- a TrainingJob on a cluster you already have -----------------------------------------


def readme_training_on_an_existing_cluster() -> str:
    """The GKE example of docs/components.md's "On a cluster you already have" and the
    README's TrainingJob that continues it, as one program, with the Kubernetes provider the
    text assumes."""
    text = section("README.md", TRAINER)
    [job] = [code for code in CODE.findall(text) if "TrainingJob(" in code]
    provider = (
        "import pulumi_kubernetes as k8s\n"
        "kubernetes_provider = k8s.Provider(\n"
        '    "existing", kubeconfig=infra.get_output("kubeconfig")\n'
        ")\n"
    )
    return "import pulumi\n" + _examples()["gke"] + provider + job


def test_the_readmes_training_job_on_an_existing_cluster_plans_without_a_violation(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = {"gcp:project": "my-project", "gcp:region": "europe-west4"}
    root = make_project(config, stack="prod", program=readme_training_on_an_existing_cluster())
    code, out, _ = run_cli(capsys, "plan", "--stack", "prod", "--project-dir", str(root))
    assert code == 0, out
    assert "0 violations" in out
    assert "Job ml/llm-finetune: fits l4-spot" in out
    assert "SIGTERM at 0 s with 15 s grace (declared 15 s)" in out
    kinds = {
        (r.type.rsplit(":", 1)[-1], (r.inputs.get("metadata") or {}).get("namespace"))
        for r in run_plan("prod", root).recording.kubernetes_objects()
    }
    assert {("Job", "ml"), ("PodDisruptionBudget", "ml"), ("NetworkPolicy", "ml")} <= kinds
    assert ("Namespace", None) not in kinds  # ml is the team's: trusted to exist
