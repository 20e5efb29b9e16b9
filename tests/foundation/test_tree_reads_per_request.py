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

from tenants.access import access_forget
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


@pytest.mark.parametrize("persona", PERSONAS)
def test_a_departments_usage_reads_the_tree_once(scene: Scene, persona: str) -> None:
    """The usage of one department (its subtree, and its quotas' subtrees) takes every subtree from
    the tree the access check read."""
    usage = next(row for row in READS if row.route == "api-usage")
    one = Row(usage.route, "get", usage.expect, body=lambda s, p: {"department": s.world.nlp.pk, "granularity": "day"})
    assert tree_reads(scene, one, persona) == (200, 1)
