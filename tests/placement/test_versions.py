"""Driver and CUDA versions (``allocations.models.versions``): compared part by part as integers, unknown
reports meet no minimum, and the minimums' format is checked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from allocations.models.versions import Minimums, minimum_errors, version_at_least, version_parse


@pytest.mark.parametrize(
    ("reported", "minimum", "meets"),
    [
        ("535.104.05", "535.104.05", True),
        ("535.104.05", "535", True),
        ("535", "535.104.05", False),  # 535 is 535.0.0, older than 535.104.05
        ("535.54.03", "535.104.05", False),  # 54 < 104: numbers, not text ("54" > "104" as text)
        ("550.54.15", "535.104.05", True),
        ("470.57.02", "535", False),
        ("1000.0", "999.99.99", True),
        ("535.104.5", "535.104.05", True),  # 05 is 5
        ("12.2", "12.2", True),
        ("12.10", "12.9", True),  # CUDA 12.10 is newer than 12.9
        ("12.0", "12", True),
        ("11.8", "12.0", False),
        ("12.4", "", True),  # no minimum
        ("", "12.0", False),  # never reported
        (None, "535", False),
        ("535.104.05-open", "535", False),  # not a version: unknown
        (" 12.2 ", "12.2", True),
    ],
)
def test_a_reported_version_meets_a_minimum_as_the_table_says(reported: str | None, minimum: str, meets: bool) -> None:
    assert version_at_least(reported, minimum) is meets


versions = st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=4)


def _text(parts: list[int]) -> str:
    return ".".join(str(part) for part in parts)


@given(versions, versions)
def test_the_order_is_the_integer_tuples_order_with_missing_parts_as_zero(left: list[int], right: list[int]) -> None:
    width = max(len(left), len(right))
    padded_left = tuple(left) + (0,) * (width - len(left))
    padded_right = tuple(right) + (0,) * (width - len(right))
    assert version_at_least(_text(left), _text(right)) is (padded_left >= padded_right)
    assert version_at_least(_text(left), _text(right)) or version_at_least(_text(right), _text(left))  # total


@given(versions)
def test_a_version_meets_itself_and_parses_back(parts: list[int]) -> None:
    assert version_at_least(_text(parts), _text(parts))
    assert version_parse(_text(parts)) == tuple(parts)


@pytest.mark.parametrize(
    ("driver", "cuda", "fields"),
    [
        ("535.104.05", "12.2", set()),
        ("535", "12", set()),
        ("", "", set()),
        ("r535", "", {"min_driver_version"}),
        ("535.104.05-open", "", {"min_driver_version"}),
        ("535..1", "", {"min_driver_version"}),
        ("", "12.2.1", {"min_cuda_version"}),
        ("", "twelve", {"min_cuda_version"}),
        ("5.3.5.1.0", "v12", {"min_driver_version", "min_cuda_version"}),
    ],
)
def test_minimums_must_be_versions(driver: str, cuda: str, fields: set[str]) -> None:
    assert set(minimum_errors(min_driver_version=driver, min_cuda_version=cuda)) == fields


def test_minimums_describe_themselves_and_what_a_node_reports() -> None:
    both = Minimums("535.104.05", "12.2")
    old = SimpleNamespace(name="a100-0", driver_version="470.57.02", cuda_version="")
    new = SimpleNamespace(name="a100-1", driver_version="550.54.15", cuda_version="12.4")
    assert both.describe() == "driver ≥ 535.104.05 and CUDA ≥ 12.2"
    assert both.reported(old) == "a100-0: driver 470.57.02, CUDA unknown"
    assert not both.met_by_node(old) and both.met_by_node(new)
    assert Minimums("", "11.0").reported(old) == "a100-0: CUDA unknown"
    assert not Minimums() and Minimums().met_by_node(old)  # none set: any node, even one never reported
