"""The package as its users install it: a wheel built from this checkout the way a release
is built (Karpenter's schemas bundled in), installed into clean virtual environments, one
per kind of user: a trainer image, a GKE or an EKS Pulumi project, the CrossGuard pack.

Each environment's installed size is printed at the end of the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from spotproof import __version__, policy
from spotproof.ci import lock
from spotproof.plan.recording.manifests import manifest
from spotproof.plan.schemas import karpenter
from spotproof.runtime import launcher
from spotproof.runtime.events import parse
from tests import venvs
from tests.support import INSTALLED_SIZES, REPO, plan_of, run_cli
from tests.test_readme_examples import readme_training_on_an_existing_cluster
from tests.test_training_loop import SCRIPT as USER_LOOP
from tests.venvs import clean_env

pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]

SITE = Path("lib") / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
VENV_SEED = {"pip", "setuptools"}  # what `python -m venv` installs on Python 3.11
IAC_MODULES = ("pulumi", "pulumi_kubernetes", "kubernetes_validate", "yaml")
CLOUD_MODULES = ("pulumi_gcp", "pulumi_aws", "boto3", "gcsfs", "adlfs")
CIPHERTEXT = "v1:c2VjcmV0LWNpcGhlcnRleHQ="


# --- building and installing -----------------------------------------------------------


class Venv:
    """A clean virtual environment holding the wheel with some extras (see tests.venvs)."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root, self.wheel = root, wheel
        venvs.create(root)
        self.bare_size = self.size()

    def install(self, extras: str, label: str, *, constrained: bool = True) -> None:
        """Installs ``spotproof[extras]`` and records the environment's size as ``label``."""
        constraints = (REPO / "constraints.txt",) if constrained else ()
        requirement = f"{self.wheel}[{extras}]" if extras else str(self.wheel)
        venvs.install(self.python, requirement, constraints=constraints)
        INSTALLED_SIZES[label] = self.size() - self.bare_size

    def size(self) -> int:
        """Bytes in site-packages, less the bytecode its processes have written since."""
        return sum(
            f.stat().st_size
            for f in (self.root / SITE).rglob("*")
            if f.is_file() and "__pycache__" not in f.parts
        )

    def pip(self, *args: str) -> str:
        command = [str(self.python), "-m", "pip", "--disable-pip-version-check", *args]
        return venvs.run(command, env=clean_env())

    def run(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> Done:
        return Done(
            subprocess.run(
                [str(self.python), *args],
                capture_output=True,
                text=True,
                check=False,
                cwd=cwd,
                env=env or clean_env(),
            )
        )

    def spotproof(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> Done:
        return self.run(str(self.root / "bin" / "spotproof"), *args, cwd=cwd, env=env)

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def distributions(self) -> set[str]:
        listed = json.loads(self.pip("list", "--format", "json"))
        return {entry["name"].lower().replace("_", "-") for entry in listed}

    def importable(self, *modules: str) -> dict[str, bool]:
        probe = (
            "import importlib.util, json, sys; "
            "print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))"
        )
        return json.loads(self.run("-c", probe, *modules, cwd=self.root).out)


class Done:
    def __init__(self, completed: subprocess.CompletedProcess[str]) -> None:
        self.code, self.out, self.err = completed.returncode, completed.stdout, completed.stderr


# Each kind of user's environment: extras, the label its size is printed under, and whether
# constraints.txt applies. The pack's does not: pulumi-policy pins protobuf ~=5.29, while
# constraints.txt holds the protobuf 6 that gcsfs needs.
ENVIRONMENTS = {
    "runtime": ("", "runtime alone: spotproof", True),
    "gcp": ("gcp", "Pulumi program for GKE: spotproof[gcp]", True),
    "aws": ("aws", "Pulumi program for EKS: spotproof[aws]", True),
    "azure": ("azure", "Pulumi program for AKS: spotproof[azure]", True),
    "policy": ("policy", "CrossGuard pack: spotproof[policy]", False),
}


def _environment(name: str) -> Any:
    """The module fixture ``<name>_venv``: a clean environment holding the wheel with the
    extras :data:`ENVIRONMENTS` gives ``name``, its size recorded under its label."""
    extras, label, constrained = ENVIRONMENTS[name]

    @pytest.fixture(scope="module", name=f"{name}_venv")
    def environment(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Venv:
        """The wheel with one kind of user's extras, in a clean environment of its own."""
        venv = Venv(tmp_path_factory.mktemp("venv") / name, wheel)
        venv.install(extras, label, constrained=constrained)
        return venv

    return environment


runtime_venv = _environment("runtime")
gcp_venv = _environment("gcp")
aws_venv = _environment("aws")
azure_venv = _environment("azure")
policy_venv = _environment("policy")


# --- the wheel -------------------------------------------------------------------------


def test_the_wheel_declares_its_version_and_license(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        headers = archive.read(metadata).decode().split("\n\n", 1)[0].splitlines()
        names = archive.namelist()
    assert f"Version: {__version__}" in headers
    assert "License-Expression: Apache-2.0" in headers
    assert "License-File: LICENSE" in headers
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_the_wheel_carries_the_policy_pack_and_the_karpenter_schemas(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {
        "spotproof/py.typed",
        "spotproof/policy/pack/PulumiPolicy.yaml",
        "spotproof/policy/pack/__main__.py",
        "spotproof/plan/schemas/karpenter_schema.mjs",
        "spotproof/plan/schemas/karpenter_schemas/validators.mjs",
        "spotproof/plan/schemas/karpenter_schemas/LICENSE",
    } <= names
    assert not any(n.startswith(("tests/", "infra/", "stacks/", "benchmarks/")) for n in names)


def test_the_policy_pack_version_is_the_package_version() -> None:
    pack = yaml.safe_load((REPO / "components/spotproof/policy/pack/PulumiPolicy.yaml").read_text())
    assert pack["version"] == __version__


# --- a trainer image -------------------------------------------------------------------


def test_the_runtime_installs_with_fsspec_and_crc32c_alone_and_never_imports_pulumi(
    runtime_venv: Venv,
) -> None:
    assert runtime_venv.distributions() - VENV_SEED == {"spotproof", "fsspec", "crc32c"}
    script = textwrap.dedent(
        """
        import sys, tempfile
        from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
        from spotproof.runtime.guard import PreemptionGuard
        store = CheckpointStore("file://" + tempfile.mkdtemp())
        store.save(3, {"state": b"weights" * 1000})
        loaded = store.load_latest()
        print(loaded.step, bytes(loaded.blobs["state"]) == b"weights" * 1000)
        """
    )
    done = runtime_venv.run("-c", script, cwd=runtime_venv.root)
    assert (done.code, done.out) == (0, "3 True\n"), done.err
    assert not any(runtime_venv.importable(*IAC_MODULES, *CLOUD_MODULES).values())


def test_a_trainer_image_gets_torch_and_one_store_and_trains_like_the_checkout(
    runtime_venv: Venv, tmp_path: Path
) -> None:
    runtime_venv.install("train,s3", "trainer image: spotproof[train,s3]")
    found = runtime_venv.importable("torch", "s3fs", *IAC_MODULES, *CLOUD_MODULES)
    assert {module for module, present in found.items() if present} == {"torch", "s3fs"}
    env = {
        "CHECKPOINT_INTERVAL": "2",
        "TOTAL_STEPS": "6",
        "SEED": "7",
        "MODEL_MB": "1",
    }
    installed = runtime_venv.run(
        "-m",
        "spotproof.smoke.train",
        cwd=tmp_path,
        env=clean_env(**env, CHECKPOINT_URL=f"file://{tmp_path}/installed"),
    )
    checkout = subprocess.run(
        [sys.executable, "-m", "spotproof.smoke.train"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env, "CHECKPOINT_URL": f"file://{tmp_path}/checkout"},
    )
    assert installed.code == 0, installed.err
    done = _done_event(installed.out)
    assert done["step"] == 6
    assert done["digest"] == _done_event(checkout.stdout)["digest"]


def _done_event(stdout: str) -> dict:
    """The trainer's "done" event: the JSON line after its last step, before "exit"."""
    events = [event for line in stdout.splitlines() if (event := parse(line)) is not None]
    return next(event for event in reversed(events) if event["event"] == "done")


def test_a_users_own_loop_runs_on_the_installed_runtime_and_resumes(
    runtime_venv: Venv, tmp_path: Path
) -> None:
    """The runtime alone, in a user's own training script: one import around the loop."""
    runtime_venv.install("train,s3", "trainer image: spotproof[train,s3]")
    script = tmp_path / "train.py"
    script.write_text(USER_LOOP)
    env = clean_env(CHECKPOINT_URL=f"file://{tmp_path}/ckpt", CHECKPOINT_INTERVAL="5", TOTAL="12")
    first = runtime_venv.run(str(script), cwd=tmp_path, env=env)
    again = runtime_venv.run(str(script), cwd=tmp_path, env=env)
    assert first.code == 0, first.err
    assert first.out.splitlines()[0] == "resumed 0" and "step 12" in first.out
    assert again.out.splitlines()[0] == "resumed 12"
    assert again.out.splitlines()[-1] == first.out.splitlines()[-1]  # the same weights


def test_a_users_loop_runs_as_a_gang_under_the_installed_spotproof_torchrun(
    runtime_venv: Venv, tmp_path: Path
) -> None:
    """Every gang pod's launcher, from the wheel: its console script, the user's script as
    each worker, forked from a forkserver that has imported torch already."""
    runtime_venv.install("train,s3", "trainer image: spotproof[train,s3]")
    script = tmp_path / "train.py"
    # Each rank's lines in a file of its own: two ranks' unbuffered prints interleave.
    own_output = (
        "import os, sys\n"
        "sys.stdout = open(f\"rank-{os.environ['RANK']}.out\", 'w', buffering=1)\n"
        "print('preloaded', 'torch' in sys.modules)\n"
    )
    script.write_text(own_output + USER_LOOP)
    env = clean_env(CHECKPOINT_URL=f"file://{tmp_path}/ckpt", CHECKPOINT_INTERVAL="5", TOTAL="12")
    torchrun = runtime_venv.root / "bin" / launcher.WARM_TORCHRUN
    done = runtime_venv.run(
        str(torchrun), "--standalone", "--nproc-per-node=2", str(script), cwd=tmp_path, env=env
    )
    assert done.code == 0, done.err
    ranks = [(tmp_path / f"rank-{rank}.out").read_text().splitlines() for rank in (0, 1)]
    for lines in ranks:
        assert lines[:2] == ["preloaded True", "resumed 0"] and "step 12" in lines, lines
    assert ranks[0][-1].startswith("done ") and ranks[0][-1] == ranks[1][-1]  # one model


# --- Pulumi programs, in a user's own project ------------------------------------------


def _user_project(root: Path, project_config: dict[str, Any], stack: str, config: dict) -> Path:
    """A project of the user's own, outside this checkout: its own name, Pulumi.yaml
    defaults and values, a secret, and a program that reads them next to spotproof's."""
    root.mkdir(parents=True)
    settings = {
        "name": "acme-ml",
        "runtime": {"name": "python", "options": {"virtualenv": "venv"}},
        "config": project_config,
    }
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    (root / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    program = """
        import pulumi
        from spotproof.program import main

        main()
        config = pulumi.Config()
        pulumi.export("team", config.require("team"))
        pulumi.export("alerts", config.require_secret("alertsWebhook"))
    """
    (root / "__main__.py").write_text(textwrap.dedent(program))
    return root


def _project_config(cloud: str, region: dict[str, str]) -> dict[str, Any]:
    """Values for other namespaces, a typed default and a required secret of its own."""
    return {
        **region,
        "spotproof:cloud": cloud,
        "team": {"type": "string", "default": "vision"},
        "alertsWebhook": {"type": "string", "secret": True},
    }


GKE_PROJECT_CONFIG = _project_config("gke", {"gcp:region": "europe-west4"})
GKE_STAGING = {
    "gcp:project": "acme-ml-staging",
    "spotproof:apiAccess": {"authorizedNetworks": ["198.51.100.0/24"]},
    "spotproof:gpuPools": [{"name": "l4-spot", "machineType": "g2-standard-8", "maxNodes": 2}],
    "acme-ml:alertsWebhook": {"secure": CIPHERTEXT},
}


def _one(document: dict[str, Any], type_token: str) -> dict[str, Any]:
    [resource] = [r for r in document["resources"] if r["type"] == type_token]
    return resource


def test_gcp_install_plans_a_user_project_with_pulumi_defaults_and_secrets(
    gcp_venv: Venv, tmp_path: Path
) -> None:
    root = _user_project(
        tmp_path / "acme",
        GKE_PROJECT_CONFIG,
        "gke-staging",
        GKE_STAGING,
    )
    done = gcp_venv.spotproof(
        "plan", "--stack", "gke-staging", "--json", "plan.json", "--strict", cwd=root
    )
    assert done.code == 0, done.out + done.err
    report = (root / "plan.json").read_text()
    cluster = _one(json.loads(report), "gcp:container/cluster:Cluster")
    assert (cluster["inputs"]["project"], cluster["inputs"]["location"]) == (
        "acme-ml-staging",
        "europe-west4",
    )
    assert CIPHERTEXT not in done.out + done.err + report
    assert "0 violations" in done.out


def test_gcp_install_reports_a_missing_required_secret_in_one_line(
    gcp_venv: Venv, tmp_path: Path
) -> None:
    root = _user_project(
        tmp_path / "acme",
        GKE_PROJECT_CONFIG,
        "gke-staging",
        {"gcp:project": "acme-ml-staging"},
    )
    done = gcp_venv.spotproof("plan", "--stack", "gke-staging", cwd=root)
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "spotproof plan: stack 'gke-staging' is missing configuration value "
        "'acme-ml:alertsWebhook': set it in Pulumi.gke-staging.yaml or give a default in "
        "Pulumi.yaml\n"
    )


def test_a_drill_from_the_gcp_install_names_its_extra_then_asks_for_the_stacks_grant(
    gcp_venv: Venv, tmp_path: Path
) -> None:
    (tmp_path / "outputs.json").write_text(json.dumps({"cluster_name": "ml"}))
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    drill = ("drill", "--cloud", "gke", "--kubeconfig", "kubeconfig", "--outputs", "outputs.json")
    drill += ("--job", "trainer")

    without = gcp_venv.spotproof(*drill, cwd=tmp_path)
    gcp_venv.install("gcp,drill-gcp", "drill for GKE: spotproof[gcp,drill-gcp]")
    done = gcp_venv.spotproof(*drill, cwd=tmp_path)

    assert (without.code, without.out) == (2, "")
    assert "install the drill extra of your cloud: spotproof[drill-gcp]" in without.err
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "spotproof drill: --outputs outputs.json has no 'drill' output, so the drill may "
        "reclaim none of its nodes; set spotproof:drill.enabled true, run pulumi up, then "
        "drill again\n"
    )
    assert "No broken requirements found." in gcp_venv.pip("check")


def test_the_installed_cli_names_its_version(gcp_venv: Venv) -> None:
    done = gcp_venv.spotproof("--version", cwd=gcp_venv.root)
    assert (done.code, done.out) == (0, f"spotproof {__version__}\n")


EKS_STACK = {
    "spotproof:apiAccess": {"authorizedNetworks": ["198.51.100.0/24"]},
    "spotproof:karpenter": {"version": "1.6.3"},
    "spotproof:gpuPools": [
        {"name": "gpu-spot", "instanceFamilies": ["g6", "g5"], "gpuLimit": 8},
    ],
    "spotproof:checkpointBucket": {"name": "acme-ml-staging-checkpoints"},
    "acme-ml:alertsWebhook": {"secure": CIPHERTEXT},
}
EKS_PROJECT_CONFIG = _project_config("eks", {"aws:region": "us-west-2"})


def _eks_project(root: Path) -> Path:
    return _user_project(root, EKS_PROJECT_CONFIG, "eks-staging", EKS_STACK)


def test_aws_install_checks_karpenter_objects_with_the_bundled_schemas(
    aws_venv: Venv, tmp_path: Path
) -> None:
    root = _eks_project(tmp_path / "acme")
    done = aws_venv.spotproof("plan", "--stack", "eks-staging", "--strict", cwd=root)
    assert done.code == 0, done.out + done.err
    assert "skipped" not in done.out
    assert "0 violations: schemas" in done.out


def test_aws_install_without_nodejs_says_it_skipped_the_schemas_and_fails_unless_allowed(
    aws_venv: Venv, tmp_path: Path
) -> None:
    root = _eks_project(tmp_path / "acme")
    no_node = clean_env(PATH=str(aws_venv.root / "bin"))
    done = aws_venv.spotproof("plan", "--stack", "eks-staging", cwd=root, env=no_node)
    allowed = aws_venv.spotproof(
        "plan", "--stack", "eks-staging", "--allow-skipped", cwd=root, env=no_node
    )
    assert (done.code, allowed.code) == (1, 0)
    assert "skipped: Karpenter schema check (2 objects): Node.js not found" in done.out


def test_the_bundled_schemas_judge_like_the_npm_package(aws_venv: Venv) -> None:
    bundle = aws_venv.root / SITE / "spotproof/plan/schemas/karpenter_schemas/validators.mjs"
    eks_dev = plan_of("eks-dev")
    pool = manifest(
        eks_dev.recording.one(
            "kubernetes:karpenter.sh/v1:NodePool", "eks-dev-karpenter-gpu-spot-nodepool"
        )
    )
    broken = json.loads(json.dumps(pool))
    broken["spec"]["template"]["spec"]["expireAfter"] = 5
    broken["spec"]["bogus"] = True
    from_npm = karpenter.schema_errors([pool, broken], REPO / karpenter.PACKAGE)
    from_bundle = karpenter.schema_errors([pool, broken], bundle)
    assert from_bundle == from_npm
    assert from_npm[0] == [] and "/spec/bogus: unknown field" in from_npm[1]


AKS_PROJECT_CONFIG = _project_config("aks", {"azure-native:location": "westeurope"})


def test_azure_install_plans_a_user_aks_project_with_node_auto_provisioning(
    azure_venv: Venv, tmp_path: Path
) -> None:
    root = _user_project(
        tmp_path / "acme",
        AKS_PROJECT_CONFIG,
        "aks-staging",
        {
            "spotproof:apiAccess": {"authorizedNetworks": ["198.51.100.0/24"]},
            "spotproof:autoProvisionedPools": [
                {"name": "gpu-spot", "vmSizes": ["Standard_NC24ads_A100_v4"], "gpuLimit": 8},
            ],
            "acme-ml:alertsWebhook": {"secure": CIPHERTEXT},
        },
    )
    done = azure_venv.spotproof(
        "plan", "--stack", "aks-staging", "--json", "plan.json", "--strict", cwd=root
    )
    assert done.code == 0, done.out + done.err
    document = json.loads((root / "plan.json").read_text())
    cluster = _one(document, "azure-native:containerservice:ManagedCluster")
    assert cluster["inputs"]["location"] == "westeurope"
    assert cluster["inputs"]["nodeProvisioningProfile"]["mode"] == "Auto"
    assert "0 violations" in done.out
    # Neither the GKE nor the EKS provider came with this extra.
    assert azure_venv.importable("pulumi_gcp", "pulumi_aws") == {
        "pulumi_gcp": False,
        "pulumi_aws": False,
    }


def test_a_gcp_install_planning_an_aks_stack_names_the_azure_extra_in_one_line(
    gcp_venv: Venv, tmp_path: Path
) -> None:
    root = _user_project(
        tmp_path / "acme",
        AKS_PROJECT_CONFIG,
        "aks-staging",
        {
            "spotproof:apiAccess": {"authorizedNetworks": ["198.51.100.0/24"]},
            "spotproof:gpuPools": [
                {"name": "spott4", "vmSize": "Standard_NC8as_T4_v3", "maxNodes": 2}
            ],
            "acme-ml:alertsWebhook": {"secure": CIPHERTEXT},
        },
    )
    done = gcp_venv.spotproof("plan", "--stack", "aks-staging", cwd=root)
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "spotproof plan: the Python module 'pulumi_azure_native' is missing; "
        "install spotproof[azure]\n"
    )


CLOUD_EXTRA = "the extra of your cloud: spotproof[gcp], spotproof[aws] or spotproof[azure]"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ["plan", "--stack", "gke-dev"],
            f"spotproof plan: the Python module 'pulumi' is missing; install {CLOUD_EXTRA}",
        ),
        (
            ["check", "job.yaml"],
            f"spotproof check: the Python module 'yaml' is missing; install {CLOUD_EXTRA}",
        ),
        (
            ["smoke"],
            "spotproof smoke: the Python module 'pulumi' is missing; install spotproof[smoke]",
        ),
    ],
    ids=["plan", "check", "smoke"],
)
def test_a_bare_install_names_the_extra_each_command_needs_in_one_line(
    runtime_venv: Venv, tmp_path: Path, command: list[str], expected: str
) -> None:
    (tmp_path / "job.yaml").write_text("kind: Job\n")
    done = runtime_venv.spotproof(*command, cwd=tmp_path)
    assert (done.code, done.out, done.err) == (2, "", expected + "\n")


def test_the_rehearsal_from_a_cloud_install_names_its_extra_in_one_line(
    gcp_venv: Venv, tmp_path: Path
) -> None:
    """A Pulumi program's environment has no torch: the rehearsal's trainers, started as
    processes of their own, would each end in a traceback of their own."""
    done = gcp_venv.spotproof("smoke", cwd=tmp_path)
    expected = "spotproof smoke: the Python module 'torch' is missing; install spotproof[smoke]"
    assert (done.code, done.out, done.err) == (2, "", expected + "\n")


@pytest.mark.parametrize("venv", ["gcp_venv", "aws_venv", "azure_venv", "policy_venv"])
def test_every_install_is_free_of_dependency_conflicts(
    venv: str, request: pytest.FixtureRequest
) -> None:
    installed: Venv = request.getfixturevalue(venv)
    assert "No broken requirements found." in installed.pip("check")


# --- the CrossGuard pack, as the Pulumi engine runs it ---------------------------------


@pytest.fixture(scope="module")
def analyzer(policy_venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The installed pack started the way the engine starts a Python pack
    (``python -m pulumi.policy <engine> <pack dir>``), and a gRPC client of it."""
    pack = venvs.run([str(policy_venv.root / "bin" / "spotproof"), "policy-pack"]).strip()
    assert Path(pack).is_relative_to(policy_venv.root / SITE)
    server = subprocess.Popen(
        [str(policy_venv.python), "-u", "-m", "pulumi.policy", "127.0.0.1:1", pack],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path_factory.mktemp("pack-run"),
        env=clean_env(),
    )
    try:
        port = server.stdout.readline().strip() if server.stdout else ""
        assert port.isdigit(), server.stderr.read() if server.stderr else ""
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        server.kill()
        server.wait()


def test_the_installed_pack_serves_every_rule_as_mandatory(analyzer: Any) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
    rules = {r.name for r in policy.RESOURCE_RULES} | {r.name for r in policy.STACK_RULES}
    assert info.name == "spotproof"
    assert {p.name for p in info.policies} == rules
    mandatory = analyzer_pb2.EnforcementLevel.Value("MANDATORY")
    assert {p.enforcementLevel for p in info.policies} == {mandatory}


def _analyze(analyzer: Any, resource: Any) -> list[tuple[str, str]]:
    """The (policy, message) pairs the pack reports for one planned resource."""
    properties = struct_pb2.Struct()
    properties.update(json.loads(json.dumps(resource.inputs, default=str)))
    request = analyzer_pb2.AnalyzeRequest(
        type=resource.type, properties=properties, urn=resource.urn, name=resource.name
    )
    return [(d.policyName, d.message) for d in analyzer.Analyze(request, timeout=30).diagnostics]


def test_the_installed_pack_reports_an_untainted_spot_pool(analyzer: Any) -> None:
    pool = plan_of("gke-dev").recording.one("gcp:container/nodePool:NodePool", "gke-dev-l4-spot")
    pool.inputs["nodeConfig"]["taints"] = []
    found = _analyze(analyzer, pool)
    assert any(
        name == "gke-spot-pool-isolated" and "lacks taint spotproof.dev/capacity=spot" in message
        for name, message in found
    ), found


def test_the_installed_pack_reports_an_aks_spot_pool_without_aks_spot_taint(
    analyzer: Any,
) -> None:
    """The pack reads AKS agent pools without the Azure provider installed."""
    pool = plan_of("aks-dev").recording.one(
        "azure-native:containerservice:AgentPool", "aks-dev-gpu-spott4"
    )
    pool.inputs["nodeTaints"] = [
        t for t in pool.inputs["nodeTaints"] if not t.startswith("kubernetes.azure.com/")
    ]
    found = _analyze(analyzer, pool)
    assert any(
        name == "aks-agent-pool-safe"
        and "must declare kubernetes.azure.com/scalesetpriority=spot:NoSchedule" in message
        for name, message in found
    ), found


def _analyze_stack(analyzer: Any, resources: list[Any]) -> list[tuple[str, str]]:
    """The (policy, message) pairs the pack's stack policies report for ``resources``,
    with the dependencies the plan recorded."""
    request = analyzer_pb2.AnalyzeStackRequest()
    for resource in resources:
        properties = struct_pb2.Struct()
        properties.update(json.loads(json.dumps(resource.inputs, default=str)))
        request.resources.append(
            analyzer_pb2.AnalyzerResource(
                type=resource.type,
                properties=properties,
                urn=resource.urn,
                name=resource.name,
                dependencies=list(resource.dependencies or ()),
            )
        )
    found = analyzer.AnalyzeStack(request, timeout=60).diagnostics
    return [(d.policyName, d.message) for d in found]


def test_the_installed_pack_follows_dependencies_to_a_workloads_identity(analyzer: Any) -> None:
    """The pack hands stack rules each resource's dependencies as the engine sends them:
    a Job that depends on its Pod Identity association and role policy passes, the same
    Job without them is reported."""
    recording = plan_of("eks-dev").recording
    association = recording.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "eks-dev-checkpoints-trainer-identity",
    )
    role_policy = recording.one(
        "aws:iam/rolePolicy:RolePolicy", "eks-dev-checkpoints-trainer-checkpoints"
    )
    job = recording.one("kubernetes:batch/v1:Job", "eks-dev-smoke-job")
    job.dependencies = (association.urn, role_policy.urn)
    waiting = _analyze_stack(analyzer, [association, role_policy, job])
    assert [n for n, _ in waiting if n == "workload-identity-ready"] == []
    job.dependencies = ()
    found = _analyze_stack(analyzer, [association, role_policy, job])
    assert any(
        name == "workload-identity-ready" and "eks-dev-checkpoints-trainer-identity" in message
        for name, message in found
    ), found


# --- the pull-request workflow, run step by step on a user's repository ------------------

GITHUB_SHELL = ("bash", "--noprofile", "--norc", "-eo", "pipefail")
"""How GitHub's Ubuntu runners run a ``run:`` step (``shell: bash``, the default)."""


def _github_step(script: str, cwd: Path, venv: Venv, **env: str) -> Done:
    """A ``run:`` step as the runner runs it: the script in a file, under bash -eo pipefail,
    with the set-up Python first on PATH."""
    path = cwd / ".github-step.sh"
    path.write_text(script)
    try:
        return Done(
            subprocess.run(
                [*GITHUB_SHELL, str(path)],
                capture_output=True,
                text=True,
                check=False,
                cwd=cwd,
                env=clean_env(PATH=f"{venv.root / 'bin'}:{os.environ['PATH']}", **env),
            )
        )
    finally:
        path.unlink()


def _acme_repository(root: Path) -> Path:
    """A repository whose Pulumi project lives in ``infra/``, with a stack on each cloud."""
    (root / ".git").mkdir(parents=True)
    project = _user_project(
        root / "infra",
        {
            "team": {"type": "string", "default": "vision"},
            "alertsWebhook": {"type": "string", "secret": True},
        },
        "gke-staging",
        {
            "spotproof:cloud": "gke",
            "gcp:project": "acme-ml-staging",
            "gcp:region": "europe-west4",
            "spotproof:apiAccess": {"authorizedNetworks": ["198.51.100.0/24"]},
            "spotproof:gpuPools": [
                {"name": "l4-spot", "machineType": "g2-standard-8", "maxNodes": 2}
            ],
            "acme-ml:alertsWebhook": {"secure": CIPHERTEXT},
        },
    )
    stacks = {
        "eks-staging": {**EKS_STACK, "spotproof:cloud": "eks", "aws:region": "us-west-2"},
        "aks-staging": {
            "spotproof:cloud": "aks",
            "azure-native:location": "westeurope",
            "spotproof:apiAccess": {"authorizedNetworks": ["198.51.100.0/24"]},
            "spotproof:gpuPools": [
                {"name": "spott4", "vmSize": "Standard_NC8as_T4_v3", "maxNodes": 2}
            ],
            "acme-ml:alertsWebhook": {"secure": CIPHERTEXT},
        },
    }
    for stack, config in stacks.items():
        (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    return project


def test_the_workflow_ci_init_writes_plans_each_stack_of_a_user_repository_step_by_step(
    wheel: Path,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repository = tmp_path_factory.mktemp("acme-repo")
    project = _acme_repository(repository)
    # The locks as pip resolves them, held to constraints.txt (except the pack's, whose
    # protobuf differs) so that each runner below already holds its lock's versions.
    resolve = lock.resolve
    constrained = ["--constraint", str(REPO / "constraints.txt")]
    monkeypatch.setattr(
        lock,
        "resolve",
        lambda asked: resolve(asked if "[policy]" in asked[0] else asked + constrained),
    )
    code, _, err = run_cli(
        capsys, "ci", "init", "--spotproof", str(wheel), "--project-dir", str(project)
    )
    assert code == 0, err
    written = yaml.safe_load((repository / ".github/workflows/spotproof.yml").read_text())
    workdir = repository / written["defaults"]["run"]["working-directory"]
    assert workdir == project
    runner = {"GITHUB_WORKSPACE": str(repository)}

    # Job `stacks`: a bare Python, then the listing step as written.
    bare = Venv(tmp_path_factory.mktemp("runner") / "python", wheel)
    output = workdir / ".github-output"
    [listing] = [s for s in written["jobs"]["stacks"]["steps"] if s.get("id") == "list"]
    listed = _github_step(listing["run"], workdir, bare, GITHUB_OUTPUT=str(output), **runner)
    assert listed.code == 0, listed.out + listed.err
    key, _, value = output.read_text().strip().partition("=")
    matrix = json.loads(value)
    assert key == "stacks"
    assert [(m["stack"], m["extra"]) for m in matrix] == [
        ("aks-staging", "azure"),
        ("eks-staging", "aws"),
        ("gke-staging", "gcp"),
    ]
    assert not bare.importable("pulumi")["pulumi"]  # listing needed no SDK

    # Job `plan`, once per matrix entry, on a runner holding only that entry's extra: its
    # lock's install finds every file already there, spotproof the very wheel.
    runners = {extra: request.getfixturevalue(f"{extra}_venv") for extra in ("gcp", "aws", "azure")}
    scripts = [s["run"] for s in written["jobs"]["plan"]["steps"] if "run" in s]
    for entry in matrix:
        summary = workdir / f"summary-{entry['stack']}.md"
        for script in scripts:
            step = _github_step(
                script,
                workdir,
                runners[entry["extra"]],
                STACK=entry["stack"],
                EXTRA=entry["extra"],
                GITHUB_STEP_SUMMARY=str(summary),
                PIP_NO_INDEX="1",  # each runner has its lock already: nothing to fetch
                **runner,
            )
            assert step.code == 0, f"{entry['stack']}: {script}\n{step.out}\n{step.err}"
        assert f"`{entry['stack']}`: ✅ 0 violations" in summary.read_text()


# --- components on a cluster the user already has, and two clusters in one stack -------

EXISTING_PROGRAMS = {
    "gcp": (
        {"gcp:project": "acme-ml-prod", "gcp:region": "us-central1"},
        """
import pulumi
from spotproof.gke import CheckpointBucket, CheckpointBucketArgs, GpuNodePools, GpuNodePoolsArgs
from spotproof.kube.workload import ServiceAccountRef
from spotproof.fleet import BucketSpec
from spotproof.fleet.gke_pools import GkeGpuPool

infra = pulumi.StackReference("acme/gke-platform/prod")
GpuNodePools("gpu", GpuNodePoolsArgs(
    cluster_name=infra.get_output("cluster_name"), project="acme-ml-prod",
    location="us-central1", node_service_account=infra.get_output("node_service_account"),
    pools=[GkeGpuPool(name="l4-spot", machine_type="g2-standard-8", gpu_type="nvidia-l4",
                      gpus_per_node=1, max_nodes=4, zones=("us-central1-a", "us-central1-b"))]))
CheckpointBucket("ckpt", CheckpointBucketArgs(
    bucket=BucketSpec(name="acme-ml-prod-ckpt", location="us-central1"),
    project="acme-ml-prod", trainer=ServiceAccountRef("ml", "trainer")))
""",
    ),
    "aws": (
        {"aws:region": "us-west-2"},
        """
import pulumi
import pulumi_kubernetes as k8s
from spotproof.eks import CheckpointBucket, CheckpointBucketArgs, Karpenter, KarpenterArgs
from spotproof.kube.workload import ServiceAccountRef
from spotproof.fleet import BucketSpec
from spotproof.fleet.eks import KarpenterPool, KarpenterSpec

infra = pulumi.StackReference("acme/eks-platform/prod")
cluster = infra.get_output("cluster_name")
provider = k8s.Provider("existing", kubeconfig=infra.get_output("kubeconfig"))
Karpenter("karpenter", KarpenterArgs(
    settings=KarpenterSpec(version="1.6.3"), cluster_name=cluster, region="us-west-2",
    provider=provider,
    pools=[KarpenterPool(name="gpu-spot", instance_families=("g6", "g5"), gpu_limit=16)]))
CheckpointBucket("ckpt", CheckpointBucketArgs(
    bucket=BucketSpec(name="acme-research-ckpt", location="us-west-2"), region="us-west-2",
    cluster_name=cluster, trainer=ServiceAccountRef("ml", "trainer")))
""",
    ),
    "azure": (
        {
            "azure-native:location": "westeurope",
            # The cluster runs the GPU Operator: AKS itself installs the driver only.
            "spotproof:existingCluster": {"gpusAdvertised": True},
        },
        """
import pulumi
from spotproof.aks import CheckpointBucket, CheckpointBucketArgs, GpuAgentPools, GpuAgentPoolsArgs
from spotproof.kube.workload import ServiceAccountRef
from spotproof.fleet import BucketSpec
from spotproof.fleet.aks import GpuAgentPool

infra = pulumi.StackReference("acme/aks-platform/prod")
GpuAgentPools("gpu", GpuAgentPoolsArgs(
    cluster_name=infra.get_output("cluster_name"),
    resource_group_name=infra.get_output("resource_group_name"),
    pools=(GpuAgentPool(name="spota100", vm_size="Standard_NC24ads_A100_v4", gpus_per_node=1,
                        max_nodes=4, zones=("1", "2")),)))
CheckpointBucket("ckpt", CheckpointBucketArgs(
    bucket=BucketSpec(name="acmeresearchckpt", location="westeurope"),
    resource_group_name=infra.get_output("resource_group_name"), location="westeurope",
    oidc_issuer_url=infra.get_output("oidc_issuer_url"),
    trainer=ServiceAccountRef("ml", "trainer")))
""",
    ),
}


def _program_project(root: Path, config: dict[str, Any], program: str) -> Path:
    """A user's project whose own program uses spotproof's components (no fleet config)."""
    root.mkdir(parents=True)
    (root / "Pulumi.yaml").write_text("name: acme-gpu\nruntime: python\n")
    (root / "Pulumi.prod.yaml").write_text(yaml.safe_dump({"config": config}))
    (root / "__main__.py").write_text(textwrap.dedent(program))
    return root


@pytest.mark.parametrize("extra", sorted(EXISTING_PROGRAMS))
def test_components_on_a_cluster_the_user_has_plan_from_each_clouds_install(
    extra: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    venv: Venv = request.getfixturevalue(f"{extra}_venv")
    config, program = EXISTING_PROGRAMS[extra]
    root = _program_project(tmp_path / "acme", config, program)
    done = venv.spotproof("plan", "--stack", "prod", "--strict", cwd=root)
    assert done.code == 0, done.out + done.err
    assert "reference-add-on: fits existing-system-pool" in done.out
    assert "0 violations" in done.out and "unknown stack" not in done.err


def test_the_readmes_training_job_on_an_existing_cluster_plans_from_the_gcp_install(
    gcp_venv: Venv, tmp_path: Path
) -> None:
    config = {"gcp:project": "my-project", "gcp:region": "europe-west4"}
    root = _program_project(tmp_path / "acme", config, readme_training_on_an_existing_cluster())
    done = gcp_venv.spotproof("plan", "--stack", "prod", "--strict", cwd=root)
    assert done.code == 0, done.out + done.err
    assert "Job ml/llm-finetune: fits l4-spot" in done.out
    assert "0 violations" in done.out


def test_two_clusters_in_one_stack_plan_from_the_gcp_install(
    gcp_venv: Venv, tmp_path: Path
) -> None:
    program = """
        import pulumi
        from spotproof.gke import HybridCluster, HybridClusterArgs
        from spotproof.program import stack_config
        from spotproof.fleet import fleet_from_config

        us = stack_config()
        eu = {**us, "gcp:region": "europe-west4",
              "spotproof:checkpointBucket": {"name": "acme-ml-eu-ckpt", "location": "europe-west4"}}
        for name, config in (("us", us), ("eu", eu)):
            HybridCluster(name, HybridClusterArgs(fleet_from_config(pulumi.get_stack(), config)))
    """
    root = _user_project(
        tmp_path / "acme",
        GKE_PROJECT_CONFIG,
        "gke-staging",
        GKE_STAGING,
    )
    (root / "__main__.py").write_text(textwrap.dedent(program))
    done = gcp_venv.spotproof("plan", "--stack", "gke-staging", "--json", "plan.json", cwd=root)
    assert done.code == 0, done.out + done.err
    clusters = [
        r
        for r in json.loads((root / "plan.json").read_text())["resources"]
        if r["type"] == "gcp:container/cluster:Cluster"
    ]
    assert sorted(c["inputs"]["name"] for c in clusters) == ["eu", "us"]
