"""Every config key the spec reads, fed values of every wrong shape: the answer is a fleet
or one ``SpecError`` line (exit 2 from the CLI), never a traceback.

The keys are not listed by hand: each real stack is read once with the spec's field
reader instrumented, so a key added to the spec is fuzzed without touching this file.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spotproof.fleet import SpecError, fleet_from_config
from spotproof.fleet.fields import ConfigObject
from tests.support import BILLION_LAUGHS, STACKS, run_cli, stack_config

WRONG_VALUES: tuple[Any, ...] = (
    "",
    "bad value",
    "trailing\n",
    "x" * 300,
    "ünïcödé",
    -1,
    0,
    10**12,
    10**5000,
    -(10**40),
    1.5,
    1e308,
    float("nan"),
    True,
    [],
    [1, "two"],
    [{"name": "x"}],
    {},
    {"unknown": 1},
    {"name": [1]},
    "y" * 100_000,
)
Path_ = tuple[str | int, ...]


def _path(key: str) -> Path_:
    """``spotproof:gpuPools[1].maxNodes`` -> ("spotproof:gpuPools", 1, "maxNodes")."""
    return tuple(
        name if name else int(index) for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", key)
    )


def _keys_read(stack: str) -> set[Path_]:
    """Every field path the spec asks for while reading ``stack``."""
    seen: set[Path_] = set()
    original = ConfigObject.field

    def field(self: ConfigObject, name: str, parse: Callable, *default: Any) -> Any:
        seen.add(_path(self.key_of(name)))
        return original(self, name, parse, *default)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ConfigObject, "field", field)
        fleet_from_config(stack, stack_config(stack))
    return seen


def _with(config: dict[str, Any], path: Path_, value: Any) -> dict[str, Any]:
    mutated = copy.deepcopy(config)
    target: Any = mutated
    for step in path[:-1]:
        if isinstance(step, str) and isinstance(target, dict) and step not in target:
            target[step] = {}
        target = target[step]
    target[path[-1]] = value
    return mutated


def _cases() -> Iterator[tuple[str, Path_]]:
    for stack in STACKS:
        for path in sorted(_keys_read(stack), key=str):
            yield stack, path


CASES = list(_cases())


def test_the_fuzz_reaches_every_section_of_the_spec() -> None:
    keys = {".".join(map(str, path)) for _, path in CASES}
    for expected in (
        "spotproof:gpuPools.0.machineType",
        "spotproof:gpuPools.0.instanceFamilies",
        "spotproof:flexStartPool.maxRunHours",
        "spotproof:autoprovisioning.gpuLimits",
        "spotproof:network.cidr",
        "spotproof:network.subnets",
        "spotproof:karpenter.version",
        "spotproof:checkpointBucket.kmsKeyArn",
        "spotproof:smokeTest.gracePeriodSeconds",
        "spotproof:systemPool.minNodes",
    ):
        assert expected in keys


@pytest.mark.parametrize(("stack", "path"), CASES, ids=[f"{s}:{p}" for s, p in CASES])
def test_every_wrong_value_is_a_fleet_or_one_spec_error(stack: str, path: Path_) -> None:
    config = stack_config(stack)
    for value in WRONG_VALUES:
        try:
            fleet_from_config(stack, _with(config, path, value))
        except SpecError as error:
            text = str(error)
            assert "\n" not in text and len(text) < 600, text
            assert text.startswith(str(error.key)), text


BAD_CONFIG_NAMED_BY_THE_ISSUE: list[tuple[str, Path_, Any, str]] = [
    ("eks-dev", ("spotproof:checkpointBucket", "name"), "amzn-s3-demo-bucket", "name"),
    ("eks-dev", ("spotproof:checkpointBucket", "name"), "my-bucket--x-s3", "name"),
    ("eks-dev", ("spotproof:checkpointBucket", "name"), "my-bucket--table-s3", "name"),
    ("eks-dev", ("spotproof:network", "cidr"), "127.0.0.0/16", "cidr"),
    ("eks-dev", ("spotproof:network", "cidr"), "169.254.0.0/16", "cidr"),
    ("eks-dev", ("spotproof:network", "cidr"), "0.0.0.0/16", "cidr"),
    ("eks-dev", ("spotproof:network", "cidr"), "240.0.0.0/16", "cidr"),
    ("eks-dev", ("spotproof:network", "zones"), ["us-west-2a", "us-west-2z"], "zones"),
    ("gke-prod", ("spotproof:gpuPools", 3, "zones"), ["us-central1-a", "us-central1-z"], "zones"),
    (
        "eks-prod",
        ("spotproof:checkpointBucket", "kmsKeyArn"),
        "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "kmsKeyArn",
    ),
    ("gke-dev", ("spotproof:smokeTest", "namespace"), "n" * 64, "namespace"),
    ("gke-dev", ("spotproof:smokeTest", "namespace"), "spotproof\n", "namespace"),
    ("gke-dev", ("spotproof:gpuPools", 0, "name"), "l4-spot\n", "name"),
    ("eks-dev", ("spotproof:karpenter", "version"), "1.99.0", "version"),
    ("gke-dev", ("spotproof:smokeTest", "totalSteps"), 10**13, "totalSteps"),
    ("gke-dev", ("spotproof:checkpointBucket", "prefix"), "p" * 100_000, "prefix"),
    ("gke-dev", ("spotproof:checkpointBucket", "prefix"), "a//b", "prefix"),
    ("gke-dev", ("spotproof:smokeTest", "namespace"), "default", "namespace"),
    ("aks-dev", ("spotproof:gpuPools", 0, "vmSize"), ["Standard_NC4as_T4_v3"], "vmSize"),
    ("eks-dev", ("spotproof:gpuPools", 0, "instanceFamilies"), [{"g5": 1}], "instanceFamilies"),
]


@pytest.mark.parametrize(
    "case",
    BAD_CONFIG_NAMED_BY_THE_ISSUE,
    ids=[f"{s}:{v!r}"[:60] for s, _, v, _ in BAD_CONFIG_NAMED_BY_THE_ISSUE],
)
def test_value_the_cloud_would_refuse_exits_2_in_one_line(
    case: tuple[str, Path_, Any, str],
    make_project: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack, path, value, named = case
    root = make_project(_with(stack_config(stack), path, value), stack=stack)

    code, out, err = run_cli(capsys, "plan", "--stack", stack, "--project-dir", str(root))

    assert code == 2, out
    assert err.count("\n") == 1 and "Traceback" not in err
    assert named in err.split(" = ")[0], err


def test_stack_file_that_is_not_utf8_exits_2_in_one_line(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(stack_config("gke-dev"), stack="gke-dev")
    stack_file = root / "stacks" / "Pulumi.gke-dev.yaml"
    stack_file.write_bytes(stack_file.read_bytes() + b"# caf\xe9\n")

    code, _, err = run_cli(capsys, "plan", "--stack", "gke-dev", "--project-dir", str(root))

    assert code == 2
    assert err.count("\n") == 1 and "not UTF-8" in err


# --- stack files nobody should write, and someone will --------------------------------

HOSTILE_STACK_FILES = {
    "deep nesting": "config:\n  spotproof:x: " + "[" * 900 + "]" * 900 + "\n",
    "a 5,000-digit integer": "config:\n  spotproof:x: " + "9" * 5000 + "\n",
    "billion laughs": "config:\n  spotproof:x:\n"
    + "".join("    " + line + "\n" for line in BILLION_LAUGHS.splitlines()),
    "a million-item list": "config:\n  spotproof:x:\n" + "    - 1\n" * 1_000_000,
    "a duplicate key": "config:\n  spotproof:cloud: gke\n  spotproof:cloud: eks\n",
    "a python tag": "config:\n  spotproof:x: !!python/object/apply:os.system [true]\n",
}


@pytest.mark.parametrize("kind", list(HOSTILE_STACK_FILES))
def test_a_hostile_stack_file_exits_2_in_one_line_within_seconds(
    kind: str, make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(stack_config("gke-dev"), stack="gke-dev")
    (root / "stacks" / "Pulumi.gke-dev.yaml").write_text(HOSTILE_STACK_FILES[kind])
    started = time.monotonic()

    code, _, err = run_cli(capsys, "plan", "--stack", "gke-dev", "--project-dir", str(root))

    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err and "Pulumi.gke-dev.yaml" in err
    assert time.monotonic() - started < 20
