"""Kubernetes quantities read as the API reads them."""

from __future__ import annotations

import pytest

from spotproof.scheduling import quantity


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
    ],
)
def test_suffixes_and_exponents_scale_the_number(text: str | int, amount: float) -> None:
    assert quantity.parse(text) == pytest.approx(amount)


@pytest.mark.parametrize("text", ["", "many", "16GB", "1..5", "Gi"])
def test_anything_else_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        quantity.parse(text)


@pytest.mark.parametrize(("value", "amount"), [(None, 0.0), ("many", 0.0), ("2", 2.0), (8, 8.0)])
def test_a_limit_unset_or_no_quantity_holds_nothing(value: str | int | None, amount: float) -> None:
    assert quantity.amount_or_zero(value) == amount
