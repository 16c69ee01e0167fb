"""Helpers the tests share: real plans, stack configs, the CLI run in-process."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof import cli
from spotproof.catalog.gke import LIST_PREFIX_ATTRIBUTE
from spotproof.plan import PlanResult, run_plan

REPO = Path(__file__).resolve().parents[1]
STACKS = ("gke-dev", "gke-prod", "eks-dev", "eks-prod", "aks-dev", "aks-prod")
"""The stacks this repository ships under ``stacks/``."""
_PLANS: dict[str, PlanResult] = {}
INSTALLED_SIZES: dict[str, int] = {}
"""Environment label -> bytes in its site-packages, filled by ``test_packaging``."""


def plan_of(stack: str) -> PlanResult:
    """A private copy of the real plan of ``stack``: tests may mutate it freely."""
    if stack not in _PLANS:
        _PLANS[stack] = run_plan(stack, REPO)
    return copy.deepcopy(_PLANS[stack])


def smoke_checkpoint_url(plan: PlanResult) -> str:
    """Where the stack's smoke Job checkpoints: its ``CHECKPOINT_URL``."""
    job = plan.recording.one("kubernetes:batch/v1:Job", f"{plan.spec.stack}-smoke-job").inputs
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    return next(e["value"] for e in env if e["name"] == "CHECKPOINT_URL")


def stack_config(stack: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def set_key(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to a stack config: ``path`` like ``spotproof:gpuPools.1.gpusPerNode``."""

    def mutate(config: dict[str, Any]) -> None:
        key, *rest = path.split(".")
        if not rest:
            config[key] = value
            return
        node = config[key]
        for part in rest[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = rest[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def plan_refuses_config(capsys: pytest.CaptureFixture[str], root: Path, stack: str) -> str:
    """``spotproof plan`` refuses ``stack``'s config in the project at ``root`` as bad input:
    exit 2, nothing on stdout, one line on stderr that says what is allowed; that line."""
    code, out, err = run_cli(capsys, "plan", "--stack", stack, "--project-dir", str(root))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1, err
    assert "allowed:" in err
    return err


def refuses_changed_stack(
    capsys: pytest.CaptureFixture[str],
    make_project: Callable[..., Path],
    stack: str,
    change: Callable[[dict[str, Any]], None],
) -> str:
    """``spotproof plan`` refuses a copy of ``stack`` with ``change`` made to its config in
    one line (:func:`plan_refuses_config`); that line."""
    config = copy.deepcopy(stack_config(stack))
    change(config)
    return plan_refuses_config(capsys, make_project(config), "gke-test")


def iam_condition_allows(
    expression: str,
    resource_name: str,
    *,
    list_prefix: str | None = None,
    resource_type: str = "",
) -> bool:
    """Evaluate an IAM condition (CEL) for a call on ``resource_name`` (of ``resource_type``),
    as IAM does; a listing carries its ``prefix`` as the API attribute
    ``storage.googleapis.com/objectListPrefix``, any other call no API attribute."""
    import celpy  # noqa: PLC0415 - only the tests that check conditions need it

    def get_attribute(api: Any, name: Any, default: Any) -> Any:
        return api.get(name, default)

    environment = celpy.Environment()
    program = environment.program(
        environment.compile(expression),
        functions={"getAttribute": get_attribute, "extract": iam_extract},
    )
    api = {} if list_prefix is None else {LIST_PREFIX_ATTRIBUTE: list_prefix}
    resource = {"name": resource_name, "type": resource_type}
    return bool(program.evaluate(celpy.json_to_cel({"resource": resource, "api": api})))


def iam_extract(value: Any, template: Any) -> Any:
    """IAM Conditions' ``extract`` (not standard CEL): the part of ``value`` where the
    template's ``{placeholder}`` stands, between the first occurrence of the text before it
    and the next of the text after it (the rest, when nothing follows the placeholder); an
    empty string where the template does not match
    (https://cloud.google.com/iam/docs/conditions-attribute-reference, ``extract``)."""
    import celpy  # noqa: PLC0415

    head, _, rest = str(template).partition("{")
    tail = rest.partition("}")[2]
    text = str(value)
    start = text.find(head)
    if start < 0:
        return celpy.celtypes.StringType("")
    start += len(head)
    end = text.find(tail, start) if tail else len(text)
    return celpy.celtypes.StringType(text[start:end] if end >= 0 else "")


PRUNING_RUN = {
    "CHECKPOINT_INTERVAL": "5",
    "TOTAL_STEPS": "40",
    "STEP_SECONDS": "0.02",
    "KEEP_CHECKPOINTS": "2",
    "MODEL_MB": "1",
    "CHECKPOINT_PART_KB": "64",
}
"""A short trainer run that checkpoints, prunes old checkpoints and splits its state into
parts: every kind of request the runtime sends."""


def two_trainer_runs(env: dict[str, str], checkpoint_url: str) -> None:
    """A fresh :data:`PRUNING_RUN`, then one that resumes the finished run; both complete.
    Both are forked warm (``smoke.processes.warm``): the zygote makes no request of the store."""
    from spotproof.runtime import exit_codes  # noqa: PLC0415
    from spotproof.smoke.processes.trainer_process import TrainerProcess  # noqa: PLC0415
    from spotproof.smoke.processes.warm import warm_trainers  # noqa: PLC0415

    with warm_trainers() as zygote:
        for _ in range(2):
            run = TrainerProcess(
                {**env, **PRUNING_RUN, "CHECKPOINT_URL": checkpoint_url},
                time.monotonic(),
                zygote=zygote,
            )
            run.finish(timeout=120)
            assert run.popen.returncode == exit_codes.COMPLETED, run.stderr[-3:]


BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)
"""Nine levels of nine aliases each: a few lines that stand for 9^9 values once expanded."""


def documentation() -> str:
    """The README and every page under ``docs/``, one after the other: what users read."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return "\n".join(page.read_text() for page in pages)


def section(page: str, heading: str) -> str:
    """The text under ``heading`` (a Markdown heading's text, of any level) on ``page`` (a path
    below the repository: ``README.md``, ``docs/plan.md``), up to the next heading of the same
    level or above; lines in fenced code blocks are never headings (a ``# comment`` is not)."""
    lines = (REPO / page).read_text().splitlines(keepends=True)
    fenced, level, found = False, 0, []
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        hashes = len(line) - len(line.lstrip("#"))
        is_heading = not fenced and 0 < hashes <= 6 and line[hashes : hashes + 1] == " "
        if level and is_heading and hashes <= level:
            break
        if level:
            found.append(line)
        elif is_heading and line[hashes + 1 :].strip() == heading:
            level = hashes
    assert level, f"{page} lost its section {heading!r}"
    return "".join(found)
