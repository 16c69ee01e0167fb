"""``spotproof check`` on manifests nobody should write, and someone will: every answer is
findings or one line with exit 2, within seconds, never a traceback or a hang.

The generated corpus takes every key of the shipped examples and puts a value of each
wrong shape there: a null, a list, a list holding null, an object, a number, a string, a
boolean. Without a stack every key gets every shape (an object, a number and a string in
the test that also reads the findings for the field's name, the rest in the one that
looks for crashes); against a stack (a whole plan per case) every other key gets one of
the shapes in turn, so the corpus stays within seconds."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.check import CheckInputError, check, load_all
from tests.support import BILLION_LAUGHS, REPO, plan_of, run_cli

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
WRONG_SHAPES: tuple[Any, ...] = (None, [], ["x"], [None], {}, {"a": 1}, 7, "text", True, -1)

JOB_HEAD = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: spotproof}\n"
HOSTILE_FILES = {
    "billion laughs": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n"
    + "".join(f"  {line}\n" for line in BILLION_LAUGHS.splitlines()),
    "10,000 documents": "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n" * 10_000,
    "a python tag": JOB_HEAD + "spec: !!python/object/apply:os.system [true]\n",
    "kind as a list": "apiVersion: v1\nkind: [Pod]\nmetadata: {name: x}\n",
    "metadata as a string": "apiVersion: v1\nkind: Pod\nmetadata: just a name\n",
    "containers as a number": JOB_HEAD + "spec: {template: {spec: {containers: 3}}}\n",
    "a null toleration": JOB_HEAD + "spec:\n  template:\n    spec:\n      tolerations: [null]\n"
    "      containers: [{name: c, image: i}]\n",
    "a duplicate key": JOB_HEAD + "spec: {backoffLimit: 1, backoffLimit: 2}\n",
    "deep nesting": JOB_HEAD + "spec: " + "[" * 500 + "]" * 500 + "\n",
    "a 5,000-digit number": JOB_HEAD + "spec: {backoffLimit: " + "9" * 5000 + "}\n",
}


def _check_cli(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, str, str]:
    started = time.monotonic()
    code, out, err = run_cli(capsys, "check", str(path), *extra, "--project-dir", str(REPO))
    assert time.monotonic() - started < 20, "took too long"
    assert "Traceback" not in out + err
    return code, out, err


@pytest.mark.parametrize("kind", list(HOSTILE_FILES))
def test_a_hostile_manifest_file_is_findings_or_one_line(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(HOSTILE_FILES[kind])
    code, out, err = _check_cli(capsys, path)
    assert code in (1, 2)
    if code == 2 and "would refuse" not in out:
        assert err.count("\n") == 1 and str(path) in err


def test_a_fifo_given_as_a_manifest_is_refused_without_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    code, _, err = _check_cli(capsys, fifo)
    assert code == 2 and "not a regular file" in err


def test_dev_zero_given_as_a_manifest_is_refused_without_reading_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = _check_cli(capsys, Path("/dev/zero"))
    assert code == 2 and "not a regular file" in err


def test_a_huge_manifest_file_is_refused_by_its_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as sparse:
        sparse.truncate(64 * 2**20)
    code, _, err = _check_cli(capsys, path)
    assert code == 2 and "larger than" in err


def test_a_field_of_the_wrong_type_is_a_schema_finding_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(HOSTILE_FILES["containers as a number"])
    code, out, _ = _check_cli(capsys, path, "--stack", "gke-dev")
    assert code == 2
    assert "[kubernetes-schema]" in out and "containers" in out and "not of type" in out
    assert "the API server would refuse 1 of the objects (exit 2)" in out


# --- the generated corpus ---------------------------------------------------------------


def _mutants(shapes: tuple[Any, ...] = WRONG_SHAPES) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, object) for every key of every example with every one of ``shapes``."""
    for example in EXAMPLES:
        for document in load_all([example]):
            for key_path in document.lines:
                for value in shapes:
                    mutated = copy.deepcopy(document.obj)
                    parent = mutated
                    for step in key_path[:-1]:
                        parent = parent[step]
                    parent[key_path[-1]] = value
                    yield f"{example.name}:{'.'.join(map(str, key_path))}={value!r}", mutated


def _judged(tmp_path: Path, obj: dict[str, Any], planned: Any) -> None:
    path = tmp_path / "mutant.yaml"
    path.write_text(yaml.safe_dump(obj))
    try:
        documents = load_all([path])
    except CheckInputError as error:
        assert "\n" not in str(error)
        return
    check(documents, planned)


def test_every_key_with_every_wrong_shape_is_checked_without_a_stack(tmp_path: Path) -> None:
    # An object, a number and a string are checked, and their findings read, by the test
    # of named fields; a null, lists and a boolean here.
    crashed = []
    for label, obj in _mutants((None, ["x"], [None], True)):
        try:
            _judged(tmp_path, obj, None)
        except Exception as error:
            crashed.append(f"{label}: {type(error).__name__}: {error}")
    assert crashed == []


def test_every_key_with_a_wrong_shape_is_checked_against_a_stack(tmp_path: Path) -> None:
    planned = plan_of("gke-dev")
    crashed = []
    for index, (label, obj) in enumerate(_mutants()):
        key = index // len(WRONG_SHAPES)
        if index % len(WRONG_SHAPES) != key % len(WRONG_SHAPES) or key % 2:
            continue  # one shape per key, rotating, every other key: a whole plan each
        try:
            _judged(tmp_path, obj, planned)
        except Exception as error:
            crashed.append(f"{label}: {type(error).__name__}: {error}")
    assert crashed == []


def _named(key_path: tuple[str | int, ...]) -> str:
    """The field a mutation changed, as a message names it: its key, or its list's."""
    return str(next(step for step in reversed(key_path) if isinstance(step, str)))


def test_every_refused_mutant_names_the_field_it_got_wrong(tmp_path: Path) -> None:
    """Over 200 objects, each a real Job's or JobSet's with one field of the wrong shape:
    every one the API server would refuse is reported naming that field."""
    unnamed, refused = [], 0
    for example in EXAMPLES:
        for document in load_all([example]):
            for key_path in document.lines:
                for value in WRONG_SHAPES[5:8]:  # {"a": 1}, 7, "text"
                    mutated = copy.deepcopy(document.obj)
                    parent = mutated
                    for step in key_path[:-1]:
                        parent = parent[step]
                    parent[key_path[-1]] = value
                    path = tmp_path / "mutant.yaml"
                    path.write_text(yaml.safe_dump(mutated))
                    try:
                        result = check(load_all([path]), None)
                    except CheckInputError as error:
                        refused += 1
                        if _named(key_path) not in str(error) and "kind" not in key_path:
                            unnamed.append(f"{key_path}={value!r}: {error}")
                        continue
                    if not result.refused:
                        continue
                    refused += 1
                    schema = [f.message for f in result.findings if f.policy == "kubernetes-schema"]
                    if not any(_named(key_path) in message for message in schema):
                        unnamed.append(f"{key_path}={value!r}: {schema}")
    assert refused >= 200
    assert unnamed == [], "\n".join(unnamed)
