"""What the OpenAPI schema says beyond the serialisers: the error envelope of every 4xx and 5xx
answer (``kernel.api.errors``), that a tenant-scoped relation is written as an integer id, and the
decimals a request may send as exactly as a pattern can say it.

Each app's ``apis.py`` lists its operations' error statuses with ``errors(...)``, so that the schema
names every status an operation answers (``make test``'s fuzz step checks that it does).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiResponse, extend_schema_serializer, inline_serializer
from rest_framework import serializers

ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Invalid input: `fields` names each bad field or query parameter with its messages, an unknown one as "
    "\"Unknown field.\" or \"Unknown parameter.\".",
    401: "No valid credentials.",
    403: "The object is visible, but the caller's role does not allow the action.",
    404: "No such object within the caller's reach (or no such page of a list).",
    406: "No representation the `Accept` header allows (the API answers `application/json`).",
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
    """``kernel.api.base.ScopedRelatedField`` (and its subclasses) takes the related object's
    integer primary key."""

    target_class = "kernel.api.base.ScopedRelatedField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {"type": "integer", "format": "int64", "minimum": 1, "maximum": 2**63 - 1}


def decimal_pattern(field: serializers.DecimalField) -> str:
    """The strings ``field`` accepts: its digits before and after the point, no sign when it has no
    negative values, and for the bounds the catalogue uses (at most 1, at least 1, more than 0)
    only the values within them."""
    places = field.decimal_places or 0
    whole = field.max_digits - places if field.max_digits is not None else None
    fraction = rf"(\.\d{{1,{places}}})?" if places else ""
    low = Decimal(field.min_value) if field.min_value is not None else None
    high = Decimal(field.max_value) if field.max_value is not None else None
    if low is not None and high == 1 and places and Decimal(0) <= low <= Decimal(1).scaleb(-places):
        # 0.0001 (the smallest step above 0) up to 1: a fraction with a non-zero digit, or 1.
        if low == 0:
            below_one = rf"0{fraction}"
        else:
            below_one = "0\\.(" + "|".join(f"0{{{zeros}}}[1-9]\\d{{0,{places - zeros - 1}}}" for zeros in range(places)) + ")"
        return rf"^({below_one}|1(\.0{{1,{places}}})?)$"
    digits = f"{{1,{whole}}}" if whole else "+"
    if low is not None and low >= 1:
        rest = f"{{0,{whole - 1}}}" if whole else "*"
        return rf"^[1-9]\d{rest}{fraction}$"
    sign = "" if low is not None and low >= 0 else "-?"
    return rf"^{sign}\d{digits}{fraction}$"


class DecimalFieldSchema(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """A decimal sent in a request: DRF's own schema, with ``decimal_pattern`` as its pattern (DRF's
    admits "", "-" and ".", and negative values a minimum forbids)."""

    target_class = "rest_framework.serializers.DecimalField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if direction == "request" and schema.get("type") == "string":
            schema["pattern"] = decimal_pattern(self.target)
        return schema
