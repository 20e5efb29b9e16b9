"""Tests marked ``pure`` use no database, service or cluster: ``scripts/test.sh`` runs them in a
process of their own beside the rest of the suite (the second core), so one that reached the
suite's database or started a cluster would race the other process. ``tests/conftest.py`` refuses,
at collection, a ``pure`` test that asks for one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

IMPURE_MARKERS = frozenset({"django_db", "postgres"})
IMPURE_FIXTURES = frozenset({"db", "transactional_db", "django_db_setup", "live_server", "kube_cluster",
                             "kwok_controller"})


def pure_refusals(items: Iterable[Any]) -> list[str]:
    """One line per ``pure`` test that carries a database marker or reaches an impure fixture
    (``fixturenames`` holds every fixture a test reaches, through others too)."""
    refusals: list[str] = []
    for item in items:
        if item.get_closest_marker("pure") is None:
            continue
        markers = sorted(name for name in IMPURE_MARKERS if item.get_closest_marker(name) is not None)
        fixtures = sorted(IMPURE_FIXTURES.intersection(getattr(item, "fixturenames", ())))
        if markers or fixtures:
            reached = ", ".join([f"marker {name}" for name in markers] + [f"fixture {name}" for name in fixtures])
            refusals.append(f"{item.nodeid}: marked pure but uses {reached}")
    return refusals
