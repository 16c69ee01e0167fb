"""``spotproof plan`` reads a project's config the way ``pulumi preview`` does: project
defaults and values from ``Pulumi.yaml``, stack values over them, typed keys checked,
``secure:`` values kept secret and never decrypted."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from spotproof.fleet import SpecError
from spotproof.plan import PlanInputError, find_project, run_plan, stack_config
from spotproof.plan.recording.recorder import Secret
from spotproof.plan.reporting import formats
from tests.support import REPO, run_cli
from tests.support import stack_config as repo_stack_config

PROGRAM = (REPO / "infra" / "__main__.py").read_text()


def _project(root: Path, project_config: dict | None, stack: dict, name: str = "fleet") -> Path:
    """A user's own project: its Pulumi.yaml, one stack file ``dev``, spotproof's program."""
    (root / "infra").mkdir(parents=True)
    (root / "infra" / "__main__.py").write_text(PROGRAM)
    settings = {"name": name, "runtime": "python", "main": "infra/", "stackConfigDir": "stacks"}
    if project_config is not None:
        settings["config"] = project_config
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    (root / "stacks").mkdir()
    (root / "stacks" / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": stack}))
    return root


def _gke_dev_without(*keys: str) -> dict:
    return {k: v for k, v in repo_stack_config("gke-dev").items() if k not in keys}


def test_project_values_fill_keys_the_stack_leaves_out(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        {"gcp:project": {"value": "acme-ml"}, "spotproof:kubernetesVersion": "1.32"},
        _gke_dev_without("gcp:project", "spotproof:kubernetesVersion"),
    )
    result = run_plan("dev", root)
    assert (result.spec.platform.project, result.spec.kubernetes_version) == ("acme-ml", "1.32")
    assert result.violations == []


def test_stack_values_override_project_values(tmp_path: Path) -> None:
    root = _project(tmp_path, {"gcp:project": {"value": "acme-ml"}}, _gke_dev_without())
    assert run_plan("dev", root).spec.platform.project == "spotproof-dev"


def test_shorthand_is_a_default_in_the_project_namespace_and_a_value_elsewhere(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path, {"team": "vision", "gcp:zone": "us-central1-a"}, {})
    project = find_project(root)
    assert project.config["fleet:team"].default == "vision"
    assert project.config["gcp:zone"].value == "us-central1-a"
    assert stack_config(project, "dev").values["fleet:team"] == "vision"


def test_values_reach_the_program_as_the_engine_passes_them(tmp_path: Path) -> None:
    root = _project(tmp_path, {"replicas": 3, "debug": False, "zones": ["a", "b"]}, {})
    values = stack_config(find_project(root), "dev").values
    assert (values["fleet:replicas"], values["fleet:debug"]) == ("3", "false")
    assert json.loads(values["fleet:zones"]) == ["a", "b"]


def test_a_required_project_key_the_stack_does_not_set_is_bad_input(tmp_path: Path) -> None:
    root = _project(tmp_path, {"owner": {"type": "string"}, "team": None}, {})
    with pytest.raises(PlanInputError, match="missing configuration values 'fleet:owner' and"):
        stack_config(find_project(root), "dev")


def test_a_stack_value_of_the_wrong_declared_type_is_bad_input(tmp_path: Path) -> None:
    root = _project(tmp_path, {"replicas": {"type": "integer"}}, {"replicas": "three"})
    with pytest.raises(PlanInputError, match=r"fleet:replicas = 'three' must be of type integer"):
        stack_config(find_project(root), "dev")


@pytest.mark.parametrize(
    ("declared", "value"),
    [("integer", "12"), ("integer", 12), ("boolean", "true"), ("string", 7)],
)
def test_declared_types_accept_what_pulumi_accepts(
    tmp_path: Path, declared: str, value: object
) -> None:
    # The engine checks the stored text: "12" is an integer, 7 is stored as the string "7".
    root = _project(tmp_path, {"x": {"type": declared}}, {"x": value})
    assert stack_config(find_project(root), "dev").values["fleet:x"] == str(value).lower()


def test_typed_arrays_check_their_items(tmp_path: Path) -> None:
    declared = {"ports": {"type": "array", "items": {"type": "integer"}}}
    root = _project(tmp_path, declared, {"ports": [80, "http"]})
    with pytest.raises(PlanInputError, match=r"must be of type array<integer>"):
        stack_config(find_project(root), "dev")


@pytest.mark.parametrize(
    ("declaration", "problem"),
    [
        ({"x": {"default": 1, "value": 2}}, "cannot have both a 'default' and a 'value'"),
        ({"x": {"type": "array"}}, "declares an array without its 'items' type"),
        ({"x": {"type": "integer", "default": "many"}}, "not of the declared type integer"),
        ({"x": {"type": "float"}}, "unknown type 'float'; allowed: string, integer"),
        ({"gcp:region": {"default": "us-east1"}}, "may only give a 'value'"),
        ({"gcp:region": {}}, "must give a 'value'"),
        ({"x": {"typ": "string"}}, "unknown field 'typ'"),
    ],
)
def test_project_declarations_pulumi_would_refuse_are_bad_input(
    tmp_path: Path, declaration: dict, problem: str
) -> None:
    root = _project(tmp_path, declaration, {})
    with pytest.raises(PlanInputError, match=problem):
        find_project(root)


def test_secure_values_are_secret_and_their_ciphertext_never_reaches_the_program(
    tmp_path: Path,
) -> None:
    stack = {**_gke_dev_without(), "wandbKey": {"secure": "v1:Y2lwaGVydGV4dA=="}}
    root = _project(tmp_path, {"wandbKey": {"type": "string", "secret": True}}, stack)
    config = stack_config(find_project(root), "dev")
    assert config.secret_keys == {"fleet:wandbKey"}
    assert config.values["fleet:wandbKey"] == "[secret]"
    assert "Y2lwaGVydGV4dA" not in json.dumps(config.values)


def test_a_secret_nested_in_an_object_marks_the_whole_key_secret(tmp_path: Path) -> None:
    stack = {"tracker": {"url": "https://wandb.example", "token": {"secure": "v1:abc"}}}
    config = stack_config(find_project(_project(tmp_path, None, stack)), "dev")
    assert "fleet:tracker" in config.secret_keys
    assert json.loads(config.values["fleet:tracker"])["token"] == "[secret]"


def test_a_key_declared_secret_but_set_in_plain_text_is_bad_input(tmp_path: Path) -> None:
    root = _project(tmp_path, {"token": {"type": "string", "secret": True}}, {"token": "abc"})
    with pytest.raises(PlanInputError, match="must be set with `pulumi config set --secret`"):
        stack_config(find_project(root), "dev")


def test_a_secret_spotproof_setting_is_refused_without_showing_it(tmp_path: Path) -> None:
    stack = {**_gke_dev_without(), "gcp:project": {"secure": "v1:c2VjcmV0"}}
    with pytest.raises(SpecError) as raised:
        run_plan("dev", _project(tmp_path, None, stack))
    assert raised.value.key == "gcp:project"
    assert "c2VjcmV0" not in str(raised.value) and "[secret]" in str(raised.value)


def test_secret_config_the_program_reads_is_a_secret_input(tmp_path: Path) -> None:
    program = PROGRAM + textwrap.dedent(
        """
        import pulumi
        import pulumi_kubernetes as k8s
        token = pulumi.Config().require_secret("token")
        k8s.core.v1.Secret("tracker", string_data={"token": token})
        """
    )
    stack = {**_gke_dev_without(), "token": {"secure": "v1:dG9rZW4="}}
    root = _project(tmp_path, None, stack)
    (root / "infra" / "__main__.py").write_text(program)
    result = run_plan("dev", root)
    tracker = result.recording.one("kubernetes:core/v1:Secret", "tracker")
    assert isinstance(tracker.inputs["stringData"], Secret)
    assert "dG9rZW4" not in json.dumps(formats.as_json(result), default=formats.redact)


def test_esc_environment_imports_are_named_as_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _project(tmp_path, None, _gke_dev_without())
    stack_file = root / "stacks" / "Pulumi.dev.yaml"
    stack_file.write_text(stack_file.read_text() + "environment:\n  - acme/ml-prod\n")
    code, _, err = run_cli(capsys, "plan", "--stack", "dev", "--project-dir", str(root))
    assert code == 0
    assert "imports ESC environments" in err


def test_a_key_set_twice_in_the_stack_file_is_bad_input(tmp_path: Path) -> None:
    root = _project(tmp_path, None, {"team": "a", "fleet:team": "b"})
    with pytest.raises(PlanInputError, match="fleet:team is set twice"):
        stack_config(find_project(root), "dev")


@pytest.mark.parametrize(
    "stack", ["gke-dev", "gke-prod", "eks-dev", "eks-prod", "aks-dev", "aks-prod"]
)
def test_a_stack_without_spotproof_cloud_is_one_line_naming_the_clouds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stack: str
) -> None:
    config = {k: v for k, v in repo_stack_config(stack).items() if k != "spotproof:cloud"}
    root = _project(tmp_path, None, config, name="spotproof")
    code, out, err = run_cli(capsys, "plan", "--stack", "dev", "--project-dir", str(root))
    assert (code, out) == (2, "")
    assert "Traceback" not in err and err.count("\n") == 1
    assert err == "spotproof plan: spotproof:cloud = None: required; allowed: gke, eks, aks\n"
