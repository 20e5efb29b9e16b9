"""Tests that ``scripts/test.sh`` runs in processes of their own beside the rest of the suite (the
second core), so that one that reached what the other process uses would race it:

- marked ``pure``: no database, service or cluster at all;
- marked ``apart`` (the fidelity cases and the simulation run, long and CPU-bound): PostgreSQL,
  on a test database of their own (``scripts/test.sh`` names another database for that process),
  but no cluster, no live server and nothing of another process's.

``tests/conftest.py`` refuses, at collection, a test that asks for what its marker rules out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

IMPURE_MARKERS = frozenset({"django_db", "postgres"})
IMPURE_FIXTURES = frozenset({"db", "transactional_db", "django_db_setup", "live_server", "kube_cluster",
                             "kwok_controller"})
SHARED_FIXTURES = frozenset({"live_server", "kube_cluster", "kwok_controller"})
"""What an ``apart`` test may not reach: the suite's one test cluster, and a server on a port."""


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


def apart_refusals(items: Iterable[Any]) -> list[str]:
    """One line per ``apart`` test that is also ``pure`` or reaches a shared fixture."""
    refusals: list[str] = []
    for item in items:
        if item.get_closest_marker("apart") is None:
            continue
        reached = ["marker pure"] if item.get_closest_marker("pure") is not None else []
        reached += [f"fixture {name}" for name in sorted(SHARED_FIXTURES.intersection(getattr(item, "fixturenames", ())))]
        if reached:
            refusals.append(f"{item.nodeid}: marked apart but uses {', '.join(reached)}")
    return refusals
