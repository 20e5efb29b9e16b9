"""``/api/v1/what-ifs/`` (docs/twin.md, "What-if"): ask for a what-if (202, run by a worker),
read one (state, progress, current against proposed per department), list them.

As everywhere: a department the caller cannot see is a 404, one it can see but does not
administer a 403, and only then is the body read (400 naming the field)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kernel.api.base import IdField, actor, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from whatifs import selectors, services
from whatifs.models import HISTORY_DAYS_MAX, WhatIf


@extend_schema_serializer(component_name="WhatIf")
class WhatIfOut(serializers.ModelSerializer[WhatIf]):
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    department_slug = serializers.CharField(source="department.slug", read_only=True, allow_null=True, default=None)
    url = serializers.SerializerMethodField()

    class Meta:
        model = WhatIf
        fields = ["id", "url", "title", "requested_by", "department", "department_slug", "changes", "source",
                  "history_days", "history_until", "workload_format", "state", "progress", "result", "error",
                  "created_at", "started_at", "finished_at"]  # fmt: skip

    def get_url(self, obj: WhatIf) -> str:
        return reverse("api-what-if", args=[obj.pk])


@extend_schema_serializer(component_name="WhatIfSummary")
class WhatIfListOut(WhatIfOut):
    class Meta(WhatIfOut.Meta):
        fields = [name for name in WhatIfOut.Meta.fields if name != "result"]


class WhatIfIn(serializers.Serializer[Any]):
    changes = serializers.JSONField(help_text="The proposed changes: a list of objects with a kind (docs/twin.md).")
    department = IdField(required=False, allow_null=True, default=None,
                         help_text="Whose what-if: a department you administer (platform admins: empty for the platform's).")
    history_days = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                            max_value=HISTORY_DAYS_MAX, help_text="Replay the last N days of requests.")
    workload = serializers.CharField(required=False, allow_null=True, default=None, trim_whitespace=False,
                                     help_text="Or a workload in the twin's format (JSON Lines or CSV).")
    workload_format = serializers.ChoiceField(choices=services.FORMATS, default="jsonl")
    title = serializers.CharField(required=False, allow_blank=True, default="", max_length=200)


class WhatIfListApi(ApiView):
    pagination_class = Pagination
    ordering_fields = {"id": "id", "created_at": "created_at"}

    @extend_schema(responses={200: WhatIfListOut(many=True), **errors(401, 404)})
    def get(self, request: Request) -> Response:
        return paginated(view=self, request=request, queryset=selectors.what_if_list(user=request.user),
                         serializer=WhatIfListOut)  # fmt: skip

    @extend_schema(request=WhatIfIn, responses={202: WhatIfOut, **errors(400, 401, 403, 404)},
                   description="Ask for a what-if (platform admins: anything; department admins: changes inside their "
                               "subtree); audited `what_if.requested`; poll the Location for its result.")  # fmt: skip
    def post(self, request: Request) -> Response:
        department = request.data.get("department") if isinstance(request.data, dict) else None
        services.what_if_scope(user=request.user, department_id=department if isinstance(department, int) else None)
        data = validated(WhatIfIn, request)
        created = services.what_if_create(actor=actor(request), changes=data["changes"], department_id=data["department"],
                                          history_days=data["history_days"], workload=data["workload"],
                                          workload_format=data["workload_format"], title=data["title"])  # fmt: skip
        created.refresh_from_db()
        response = Response(WhatIfOut(created).data, status=status.HTTP_202_ACCEPTED)
        response["Location"] = reverse("api-what-if", args=[created.pk])
        return response


class WhatIfDetailApi(ApiView):
    @extend_schema(responses={200: WhatIfOut, **errors(401, 404)})
    def get(self, request: Request, what_if_id: int) -> Response:
        return Response(WhatIfOut(selectors.what_if_get(user=request.user, what_if_id=what_if_id)).data)
