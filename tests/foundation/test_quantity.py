"""``kernel.quantity.parse_quantity`` reads quantities exactly as the Kubernetes client does (the
portal has its own copy so that a start need not load the client)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as client_parse_quantity

from kernel.quantity import parse_quantity

SUFFIXES = ["", "n", "u", "m", "k", "K", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "ki", "mi", "X", "i"]


def client_outcome(quantity: object) -> object:
    try:
        return client_parse_quantity(quantity)
    except ValueError:
        return ValueError


def our_outcome(quantity: object) -> object:
    try:
        return parse_quantity(quantity)  # type: ignore[arg-type]
    except ValueError:
        return ValueError


@pytest.mark.parametrize(
    ("quantity", "value"),
    [("500m", Decimal("0.5")), ("16Gi", Decimal(16 * 1024**3)), ("1.5", Decimal("1.5")), ("2k", Decimal(2000)),
     ("128974848", Decimal(128974848)), ("129e6", Decimal(129000000)), ("100n", Decimal("1E-7")), (3, Decimal(3))],
)  # fmt: skip
def test_it_reads_the_forms_the_api_server_writes(quantity: str | int, value: Decimal) -> None:
    assert parse_quantity(quantity) == value


@pytest.mark.parametrize("quantity", ["", "Gi", "1ki", "abc", "1.2.3M", "5X"])
def test_it_refuses_what_is_no_quantity(quantity: str) -> None:
    with pytest.raises(ValueError, match="Invalid number format|unknown suffix"):
        parse_quantity(quantity)


@given(
    number=st.one_of(st.integers(-(10**12), 10**12).map(str), st.decimals(allow_nan=False).map(str),
                     st.text(alphabet="0123456789.e-+", max_size=6)),
    suffix=st.sampled_from(SUFFIXES),
)  # fmt: skip
def test_it_agrees_with_the_kubernetes_client_on_every_string(number: str, suffix: str) -> None:
    assert our_outcome(number + suffix) == client_outcome(number + suffix)
