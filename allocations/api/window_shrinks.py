"""``GET /quota-windows/shrinks/``: the shrinks of quotas coming soon, with the grants each would
leave beyond its new limit and their owners (``allocations.windows.shrinks``). Everyone sees the
shrinks of the quotas of the departments they have a role in (platform admins: all)."""

from __future__ import annotations

import datetime
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.models.windows import EdgeKind, ShrinkPolicy
from allocations.quotas.windows import PAGE_BUDGET
from allocations.windows.shrinks import WARN_WITHIN, ComingShrink, quota_window_shrinks_coming
from kernel.api.base import filters
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.clock import clock_now
from kernel.numbers import plain
from tenants.access import access_for

LONGEST_WITHIN = 7 * 24 * 60


class ShrinkNumbersOut(serializers.Serializer):  # type: ignore[type-arg]
    guaranteed = serializers.CharField(help_text="A decimal, as a string.")
    limit = serializers.CharField(help_text="A decimal, as a string.")


class ShrinkGrantOut(serializers.Serializer):  # type: ignore[type-arg]
    allocation = serializers.IntegerField()
    project = serializers.CharField()
    department = serializers.CharField()
    flavor = serializers.CharField()
    quantity = serializers.IntegerField()
    priority_class = serializers.CharField()
    state = serializers.CharField()
    ends_at = serializers.DateTimeField()
    notice_minutes = serializers.IntegerField(help_text="Under shrink policy reclaim: how long it keeps running.")
    requested_by = serializers.CharField()
    members = serializers.ListField(child=serializers.CharField(), help_text="The project's members.")


class ShrinkOut(serializers.Serializer):  # type: ignore[type-arg]
    window = serializers.IntegerField(help_text="The quota window whose edge this is.")
    quota = serializers.IntegerField()
    department = serializers.CharField()
    flavor = serializers.CharField(allow_null=True, help_text="Null: the department's GPU-equivalents.")
    priority_class = serializers.CharField(allow_null=True, help_text="Set: the shrink is of this class's share.")
    scope = serializers.CharField(help_text="What shrinks, in words.")
    at = serializers.DateTimeField()
    kind = serializers.ChoiceField(choices=EdgeKind.choices, help_text="Whether the window begins or ends then.")
    shrink_policy = serializers.ChoiceField(choices=ShrinkPolicy.choices)
    before = ShrinkNumbersOut()
    after = ShrinkNumbersOut()
    grants = ShrinkGrantOut(many=True, help_text="The grants beyond the new limit: reclaimed with their notice under "
                       "policy reclaim, left to run under policy wait. Most important first to keep.")
    owners = serializers.ListField(child=serializers.CharField(), help_text="Who to tell: requesters and members.")


def _shrink_out(shrink: ComingShrink) -> dict[str, Any]:
    window = shrink.window
    return {
        "window": window.pk, "quota": window.quota_id, "department": window.quota.department.slug,
        "flavor": window.quota.flavor.name if window.quota.flavor is not None else None,
        "priority_class": window.priority_class.name if window.priority_class is not None else None,
        "scope": shrink.scope, "at": shrink.at, "kind": shrink.kind, "shrink_policy": window.shrink_policy,
        "before": {"guaranteed": plain(shrink.before.guaranteed), "limit": plain(shrink.before.limit)},
        "after": {"guaranteed": plain(shrink.after.guaranteed), "limit": plain(shrink.after.limit)},
        "grants": [{**grant.victim.as_details(), "ends_at": grant.ends_at, "requested_by": grant.requested_by,
                    "members": list(grant.members)} for grant in shrink.grants],
        "owners": shrink.owners,
    }


class QuotaWindowShrinksApi(ApiView):
    pagination_class = Pagination  # the schema's list shape

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        within = serializers.IntegerField(min_value=1, max_value=LONGEST_WITHIN, required=False)

    @extend_schema(
        parameters=[OpenApiParameter("within", int, description=f"Minutes ahead to look (1 to {LONGEST_WITHIN}; "
                                     f"default {int(WARN_WITHIN.total_seconds() // 60)}).")],
        responses={200: ShrinkOut(many=True), **errors(400, 401, 404)},
        description="The quota shrinks coming within the next `within` minutes (a window beginning that lowers a "
        "quota, or one ending that raised it), soonest first, for the quotas of the departments within the "
        "caller's reach, each with the grants it would leave beyond its new limit and their owners.",
    )
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        minutes = params.get("within", int(WARN_WITHIN.total_seconds() // 60))
        access = access_for(request.user)
        shrinks = quota_window_shrinks_coming(
            now=clock_now(), within=datetime.timedelta(minutes=minutes),
            department_ids=None if access.reads_everything else access.readable, budget=PAGE_BUDGET,
        )
        paginator = Pagination()
        rows: list[dict[str, Any]] = [_shrink_out(shrink) for shrink in shrinks]
        page: list[dict[str, Any]] | None = paginator.paginate_queryset(rows, request, view=self)  # type: ignore[arg-type]
        return paginator.get_paginated_response(ShrinkOut(page, many=True).data)
