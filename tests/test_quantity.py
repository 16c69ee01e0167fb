"""Kubernetes quantities read as the API server reads them (k8s.io/apimachinery
``pkg/api/resource/quantity.go``): its grammar, its refusals, its rounding and its cap,
each in one line and without arithmetic on the size of what a file says."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spotproof.scheduling import quantity
from tests.support import REPO, run_cli

CAP = float(2**63 - 1)


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("500m", 0.5),
        ("2", 2.0),
        (8, 8.0),
        ("16Gi", 16 * 2**30),
        ("128M", 128e6),
        ("1e3", 1000.0),
        ("1E", 1e18),
        ("2E3", 2000.0),
        ("1.5k", 1500.0),
        ("22464G", 22464e9),
        ("1.G", 1e9),
        ("1e+3", 1000.0),
        (" 1 ", 1.0),  # UnmarshalJSON trims white space before it parses
    ],
)
def test_suffixes_and_exponents_scale_the_number(text: str | int, amount: float) -> None:
    assert quantity.parse(text) == pytest.approx(amount)


@pytest.mark.parametrize("text", [".", "+", "-.", "Gi"])
def test_what_the_api_server_reads_as_zero_is_zero(text: str) -> None:
    # parseQuantityString: an empty numerator is "0" (quantity_test.go reads "." and "-.").
    assert quantity.parse(text) == 0.0


@pytest.mark.parametrize(
    "text",
    ["", "many", "16GB", "1..5", "1e", "1ee3", "1e3.5", "1kk", "1.1.M", "0.1mi", ".5i", "-3.01e-"],
)
def test_anything_else_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        quantity.parse(text)


@pytest.mark.parametrize(
    ("text", "amount"),
    [("0.0000000001", 1e-9), ("0.00000012345", 124e-9), ("0.9n", 1e-9), ("-0.5e-9", -1e-9)],
)
def test_a_non_zero_amount_is_rounded_up_to_a_whole_nano(text: str, amount: float) -> None:
    assert quantity.parse(text) == pytest.approx(amount, rel=1e-12)


@pytest.mark.parametrize(
    "text", ["1e9223372036854775808", "1e-9223372036854775809", "1e" + "9" * 5000]
)
def test_an_exponent_beyond_64_bits_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        quantity.parse(text)
    said = str(refused.value)
    assert "its exponent does not fit a 64-bit integer" in said
    assert "\n" not in said and len(said) < 200


@pytest.mark.parametrize(("text", "amount"), [("1e4294967296", 1.0), ("1e4294967299", 1000.0)])
def test_an_exponent_is_cut_to_32_bits_as_the_api_server_cuts_it(text: str, amount: float) -> None:
    assert quantity.parse(text) == amount  # int32(parsed) in suffix.go's interpret


@pytest.mark.parametrize("text", ["1e400", "-1e400", "9223372036854775807Ki", "1e999999999"])
def test_an_amount_beyond_2_to_the_63_is_capped(text: str) -> None:
    assert quantity.parse(text) == (-CAP if text.startswith("-") else CAP)


@pytest.mark.parametrize(
    "text", ["1e999999999", "1e-999999999", "7" * 4_000_000, "0." + "0" * 4_000_000 + "1Ei"]
)
def test_a_huge_exponent_or_number_costs_no_cpu(text: str) -> None:
    started = time.process_time()
    quantity.parse(text)
    assert time.process_time() - started < 1.0  # 10**999999999 alone took over 90 s


@pytest.mark.parametrize(("value", "amount"), [(None, 0.0), ("many", 0.0), ("2", 2.0), (8, 8.0)])
def test_a_limit_unset_or_no_quantity_holds_nothing(value: str | int | None, amount: float) -> None:
    assert quantity.amount_or_zero(value) == amount


def test_check_reads_a_request_of_1e400_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = (REPO / "examples" / "finetune-job.yaml").read_text()
    assert 'cpu: "4"' in manifest
    said = []
    for cpu in ("4", "1e400"):
        path = tmp_path / "job.yaml"
        path.write_text(manifest.replace('cpu: "4"', f'cpu: "{cpu}"'))
        said.append(run_cli(capsys, "check", str(path), "--project-dir", str(REPO)))
    # Without a stack nothing compares CPUs: the API server's reading of 1e400 is as good
    # as 4 for the schemas and the Job rules, and the example's one finding is all there is.
    assert said[1] == said[0]
    assert said[1][0] == 1 and "Traceback" not in said[1][2]


def test_check_refuses_an_exponent_beyond_64_bits_in_one_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = (REPO / "examples" / "finetune-job.yaml").read_text()
    path = tmp_path / "job.yaml"
    path.write_text(manifest.replace('cpu: "4"', 'cpu: "1e9223372036854775808"'))
    code, out, _ = run_cli(capsys, "check", str(path), "--project-dir", str(REPO))
    assert code == 2
    [finding] = [line for line in out.splitlines() if "[kubernetes-schema]" in line]
    assert "requests.cpu: '1e9223372036854775808': its exponent does not fit" in finding
