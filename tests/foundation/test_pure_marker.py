"""The guards of the ``pure`` and ``apart`` markers (``tests/pure.py``): a test that runs beside the
suite in a process of its own may not reach what the other process uses (a pure one no database or
cluster, an apart one no cluster or live server), and the guard says which test reaches what."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from tests.pure import apart_refusals, pure_refusals

pytestmark = pytest.mark.pure  # no database: runs beside the suite (tests/pure.py)


@dataclass
class _Item:
    nodeid: str
    markers: tuple[str, ...] = ()
    fixturenames: list[str] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> Any:
        return SimpleNamespace(name=name) if name in self.markers else None


def test_a_pure_test_reaching_the_database_through_a_fixture_is_refused_by_name() -> None:
    item = _Item("tests/x.py::test_a", ("pure",), ["world", "db", "django_db_setup", "tmp_path"])
    assert pure_refusals([item]) == ["tests/x.py::test_a: marked pure but uses fixture db, fixture django_db_setup"]


def test_a_pure_test_marked_for_the_database_or_the_cluster_is_refused() -> None:
    marked = _Item("tests/x.py::test_b", ("pure", "django_db"))
    clustered = _Item("tests/x.py::test_c", ("pure",), ["kube_cluster"])
    assert pure_refusals([marked, clustered]) == ["tests/x.py::test_b: marked pure but uses marker django_db",
                                                  "tests/x.py::test_c: marked pure but uses fixture kube_cluster"]


def test_pure_tests_of_plain_fixtures_and_unmarked_tests_of_the_database_pass() -> None:
    assert pure_refusals([_Item("tests/x.py::test_d", ("pure",), ["tmp_path", "monkeypatch"]),
                          _Item("tests/x.py::test_e", ("django_db",), ["db", "live_server"])]) == []


def test_the_guard_reads_a_collected_test_as_pytest_gives_it(request: pytest.FixtureRequest) -> None:
    """Its markers and every fixture it reaches, from pytest's own item (this one is pure)."""
    assert request.node.get_closest_marker("pure") is not None
    assert pure_refusals([request.node]) == []


def test_an_apart_test_reaching_the_cluster_or_a_live_server_or_also_pure_is_refused_by_name() -> None:
    clustered = _Item("tests/x.py::test_f", ("apart", "django_db"), ["db", "kube_cluster", "live_server"])
    both = _Item("tests/x.py::test_g", ("apart", "pure"))
    assert apart_refusals([clustered, both]) == [
        "tests/x.py::test_f: marked apart but uses fixture kube_cluster, fixture live_server",
        "tests/x.py::test_g: marked apart but uses marker pure",
    ]


def test_an_apart_test_of_the_database_and_unmarked_tests_of_the_cluster_pass() -> None:
    assert apart_refusals([_Item("tests/x.py::test_h", ("apart", "django_db", "postgres"), ["db", "transactional_db"]),
                           _Item("tests/x.py::test_i", ("django_db",), ["kube_cluster"])]) == []
