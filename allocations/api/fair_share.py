"""``/api/v1/fair-share/``: each department's shares, decayed usage and Fair Tree rank; platform
admins set a department's shares (docs/accounting.md, "Fair share").

Reads are open to everyone with a role, each seeing the departments they read (the ranks are the
whole tree's). A write checks visibility (404), then the role (403), and only then reads the body.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.fair_share.reads import fair_share_department_get, fair_share_table_for
from allocations.fair_share.services import fair_share_shares_set
from allocations.models.fair_share import SHARES_MAX
from kernel.api.base import actor, validated
from kernel.api.openapi import errors
from kernel.api.views import ApiView
from kernel.clock import clock_now
from tenants.access import require_platform_admin


@extend_schema_serializer(component_name="FairShareRow")
class RowOut(serializers.Serializer[Any]):
    department = serializers.IntegerField(source="department_id")
    slug = serializers.CharField()
    name = serializers.CharField(help_text='The department\'s name, or "own projects".')
    parent = serializers.IntegerField(  # type: ignore[assignment]  # shadows Field.parent, as tenants' does
        source="parent_id", allow_null=True,
        help_text="The parent in the fair-share tree (own projects: their department).",
    )
    depth = serializers.IntegerField(help_text="0 for a top-level department.")
    own_projects = serializers.BooleanField(
        help_text="The department's own projects, a leaf among its sub-departments (1 share, its own usage)."
    )
    shares = serializers.IntegerField()
    share = serializers.FloatField(help_text="S: shares / the siblings' shares (its own included).")
    usage_gpu_hours = serializers.FloatField(
        source="usage", help_text="Decayed GPU-equivalent-hours (a department with sub-departments: its subtree's)."
    )
    usage_share = serializers.FloatField(help_text="U: usage / the siblings' usage (0 when none used anything).")
    level_fairshare = serializers.FloatField(source="level_fs", allow_null=True,
                                             help_text="S / U; null when U is 0 (infinite: it ranks first).")
    rank = serializers.IntegerField(allow_null=True, help_text="Leaves only: leaf_count is the best.")
    factor = serializers.FloatField(allow_null=True, help_text="rank / leaf_count: 1.0 is the best served.")


@extend_schema_serializer(component_name="FairShareTable")
class TableOut(serializers.Serializer[Any]):
    half_life_hours = serializers.IntegerField(help_text="Usage weighs half as much this much later.")
    as_of = serializers.DateTimeField(allow_null=True, help_text="The last decay tick (null: none yet).")
    now = serializers.DateTimeField(help_text="The moment the usage is decayed to.")
    leaf_count = serializers.IntegerField(help_text="How many leaves are ranked (the whole tree's).")
    rows = RowOut(many=True, help_text="Depth-first, siblings by slug, a department's own projects first.")


class SharesIn(serializers.Serializer[Any]):
    shares = serializers.IntegerField(min_value=1, max_value=SHARES_MAX)


class FairShareApi(ApiView):
    @extend_schema(responses={200: TableOut, **errors(401, 404)})
    def get(self, request: Request) -> Response:
        return Response(TableOut(fair_share_table_for(user=request.user, now=clock_now())).data)


class FairShareDepartmentApi(ApiView):
    @extend_schema(request=SharesIn, responses={200: RowOut, **errors(400, 401, 403, 404)},
                   description="Set a department's shares (platform admins; audited `fair_share.shares_set`).")
    def patch(self, request: Request, department_id: int) -> Response:
        fair_share_department_get(user=request.user, department_id=department_id)
        require_platform_admin(request.user, to="set fair-share shares")
        data = validated(SharesIn, request)
        fair_share_shares_set(actor=actor(request), department_id=department_id, shares=data["shares"])
        table = fair_share_table_for(user=request.user, now=clock_now())
        row = next(row for row in table.rows if row.department_id == department_id and not row.own_projects)
        return Response(RowOut(row).data)
