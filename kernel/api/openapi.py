"""What the OpenAPI schema says beyond the serialisers: the error envelope of every 4xx and 5xx
answer (``kernel.api.errors``), and that a tenant-scoped relation is written as an integer id.

Each app's ``apis.py`` lists its operations' error statuses with ``errors(...)``, so that the schema
names every status an operation answers (``make test``'s fuzz step checks that it does).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiResponse, extend_schema_serializer, inline_serializer
from rest_framework import serializers

ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Invalid input: `fields` names each bad field (or query parameter) with its messages.",
    401: "No valid credentials.",
    403: "The object is visible, but the caller's role does not allow the action.",
    404: "No such object within the caller's reach (or no such page of a list).",
    409: "The object's state forbids the action, or a quota or capacity would be exceeded (`details` has the numbers).",
    413: "The request body is over the limit.",
    415: "The request body is not JSON.",
    429: "Too many failed sign-ins; try again later.",
    502: "The cluster could not be reached.",
    503: "The audit log cannot sign a checkpoint now (no signing key, or the log failed its own verification).",
}


@extend_schema_serializer(component_name="Error")
class ErrorOut(serializers.Serializer[Any]):
    # inline: a serializer cannot declare a field named "fields"
    error = inline_serializer(
        "ErrorBody",
        {
            "code": serializers.CharField(help_text="Machine-readable, e.g. invalid, not_found, quota_exceeded."),
            "message": serializers.CharField(),
            "fields": serializers.DictField(
                child=serializers.ListField(child=serializers.CharField()), help_text="Bad field → its messages."
            ),
            "details": serializers.DictField(
                required=False, help_text="More about a refusal, e.g. requested, in_use, limit."
            ),
        },
    )


def errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """``{status: the error envelope}`` for an ``extend_schema(responses=...)``."""
    return {status: OpenApiResponse(ErrorOut, description=ERROR_DESCRIPTIONS[status]) for status in statuses}


class ScopedRelatedFieldSchema(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """``kernel.api.base.ScopedRelatedField`` takes the related object's integer primary key."""

    target_class = "kernel.api.base.ScopedRelatedField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {"type": "integer"}
