"""The fair-share page: each department's shares, decayed usage and Fair Tree standing, the tree
indented (``allocations.fair_share``; docs/accounting.md, "Fair share"). Everyone with a role opens
it and sees the departments they read (ranks are the whole tree's); others get 404."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from allocations.fair_share.reads import FairShareRow, fair_share_table_for
from frontend.http import portal_user
from kernel.clock import clock_now

DEEPEST_INDENT = 4
"""Rows deeper than this are indented as far (``.fs-depth-N`` in portal.css; no inline style)."""


@dataclass(frozen=True)
class Line:
    row: FairShareRow
    indent: int


@require_GET
@login_required
def fair_share(request: HttpRequest) -> HttpResponse:
    table = fair_share_table_for(user=portal_user(request), now=clock_now())
    lines = [Line(row=row, indent=min(row.depth, DEEPEST_INDENT)) for row in table.rows]
    return render(request, "frontend/fair_share.html", {"title": "Fair share", "table": table, "lines": lines})
