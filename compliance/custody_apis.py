"""``GET /api/v1/custody/``: who held a device, what a pod held, what a grant's pods held, between
two times; JSON, or a download (CSV, JSON Lines, a verifiable bundle). Scoped as the audit log."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from compliance.apis import _JsonErrors
from compliance.custody_reads import custody_export_response, custody_query_for
from custody.exports import OUTPUTS, row_record
from custody.selectors import custody_answer
from kernel.api.base import IdField
from kernel.api.openapi import errors
from kernel.api.views import ApiView


class CustodyFilterSerializer(serializers.Serializer[Any]):
    device = serializers.CharField(required=False, max_length=128, help_text="GPU UUID, MIG device UUID or replica ID")
    pod = serializers.CharField(required=False, max_length=320, help_text="pod UID, or namespace/name")
    allocation = IdField(required=False, help_text="an allocation (grant) id")
    to = serializers.DateTimeField(required=False, help_text="intervals that started before this time")
    output = serializers.ChoiceField(choices=OUTPUTS, default="json")

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField(required=False, help_text="intervals that ended after this time")
        return fields


class CustodyApi(ApiView):
    content_negotiation_class = _JsonErrors
    renderer_classes = [JSONRenderer]

    @extend_schema(
        parameters=[CustodyFilterSerializer],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="count, truncated, results (intervals and gaps)"),
                   (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="CSV"),
                   (200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR, description="JSON Lines or bundle"),
                   **errors(400, 401, 404)},
    )  # fmt: skip
    def get(self, request: Request) -> Any:
        serializer = CustodyFilterSerializer(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        query = custody_query_for(
            user=request.user, device=data.get("device", ""), pod=data.get("pod", ""),
            allocation_id=data.get("allocation"), time_from=data.get("from"), time_to=data.get("to"),
        )
        if data["output"] != "json":
            return custody_export_response(actor=request.user, query=query, output=data["output"])
        rows, truncated = custody_answer(query=query)
        return Response({"count": len(rows), "truncated": truncated, "results": [row_record(row) for row in rows]})
