"""Every scoped read computes who may see what once: one read of the department tree per request,
whatever the endpoint asks of the tree after the access check (a department's subtree, a quota's
ancestors). Counted in queries, not timed.

Inside the test's transaction ``department_parent_map`` always reads the parents (it never trusts
the per-process copy there), so each computation of the tree shows as one query: the parents, or
the tree's signature outside a transaction.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection, transaction
from django.http import StreamingHttpResponse
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from tenants.access import DepartmentTree, access_forget, department_subtree_ids
from tests.foundation.conftest_matrix import Scene, audit_keys_fixture, scene_fixture  # noqa: F401 (fixtures)
from tests.foundation.test_role_matrix import ROWS, Row

# the parents of every department (no WHERE: the whole tree), or the tree's signature
TREE_READ = re.compile(
    r'^SELECT "tenants_department"\."id"( AS "\w+")?, "tenants_department"\."parent_id"( AS "\w+")? '
    r'FROM "tenants_department"(?! WHERE)'
    r'|SUM\("tenants_department"\."tree_stamp"\)'
)
PERSONAS = ("nlp_admin", "auditor", "platform")
READS = [row for row in ROWS if row.method == "get"]


def tree_reads(scene: Scene, row: Row, persona: str) -> tuple[int, int]:
    """(status, tree reads) of one request, as a fresh request sees it (no access kept on the user)."""
    user = scene.world.users[persona]
    access_forget(user)
    url = reverse(row.route, kwargs=row.kwargs(scene))
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        response: Any = scene.world.client(persona).get(url, row.body(scene, persona) or {})
        if isinstance(response, StreamingHttpResponse):
            response.getvalue()
        transaction.set_rollback(True)
    return response.status_code, sum(1 for query in queries.captured_queries if TREE_READ.search(query["sql"]))


def test_the_pattern_counts_the_tree_reads(scene: Scene) -> None:
    """Guards the count itself: the access check of a department admin reads the tree once."""
    from tenants.access import access_for

    user = scene.world.users["nlp_admin"]
    access_forget(user)
    with CaptureQueriesContext(connection) as queries:
        access_for(user)
    assert sum(1 for query in queries.captured_queries if TREE_READ.search(query["sql"])) == 1, queries.captured_queries


@pytest.mark.parametrize("persona", PERSONAS)
def test_every_scoped_read_reads_the_tree_at_most_once(scene: Scene, persona: str) -> None:
    answered = {row.id: tree_reads(scene, row, persona) for row in READS}
    assert {route: found for route, found in answered.items() if found[1] > 1} == {}
    assert any(reads == 1 for _, reads in answered.values())


@pytest.mark.parametrize("route", ["api-usage", "api-idle-cases"])
@pytest.mark.parametrize("persona", PERSONAS)
def test_a_departments_reads_take_its_subtree_from_the_same_tree(scene: Scene, persona: str, route: str) -> None:
    """Narrowed to one department (its subtree; for the usage, its quotas' subtrees too), a read
    takes every subtree from the tree the access check read."""
    listed = next(row for row in READS if row.route == route)
    one = Row(route, "get", listed.expect, body=lambda s, p: {"department": s.world.nlp.pk})
    assert tree_reads(scene, one, persona) == (200, 1)


@given(st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=40),
       st.lists(st.integers(min_value=0, max_value=45), max_size=4))
def test_the_indexed_tree_answers_what_the_parent_walk_answers(picks: list[int], roots: list[int]) -> None:
    """``DepartmentTree.subtree`` (children indexed once, answers kept) equals
    ``department_subtree_ids`` on any forest, asked once or again."""
    parents: dict[int, int | None] = {1: None}
    for child, pick in enumerate(picks, start=2):
        parents[child] = None if pick == 0 else 1 + pick % (child - 1)  # an earlier department, or a new root
    tree = DepartmentTree.of(parents)
    expected = department_subtree_ids(root_ids=roots, parents=parents)
    assert tree.subtree(*roots) == expected
    assert tree.subtree(*reversed(roots)) == expected  # kept: the same roots in any order
