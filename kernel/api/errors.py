"""One place that turns every error into ``{"error": {"code", "message", "fields"}}``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from kernel.errors import ApplicationError


def _flatten(detail: Any) -> dict[str, list[str]]:
    """DRF's nested error detail as ``{"field": [messages]}``; nested fields joined with dots."""
    fields: dict[str, list[str]] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        elif isinstance(value, list):
            if all(not isinstance(item, (dict, list)) for item in value):
                fields.setdefault(prefix or "non_field_errors", []).extend(str(item) for item in value)
            else:
                for index, inner in enumerate(value):
                    walk(f"{prefix}.{index}" if prefix else str(index), inner)
        else:
            fields.setdefault(prefix or "non_field_errors", []).append(str(value))

    walk("", detail)
    return fields


def error_body(code: str, message: str, fields: dict[str, list[str]] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "fields": fields or {}}
    body.update(extra)
    return {"error": body}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        extra = {"details": exc.details} if exc.details else {}
        return Response(error_body(exc.code, exc.message, exc.fields, **extra), status=exc.status)
    if isinstance(exc, DjangoValidationError):
        fields = _flatten(as_serializer_error(exc))
        return Response(error_body("invalid", _summary(fields), fields), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ParseError):
        fields = {"body": [str(exc.detail)]}
        response.data = error_body("parse_error", "The request body is not valid JSON.", fields)
    elif isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        response.data = error_body("invalid", _summary(fields), fields)
    elif isinstance(exc, exceptions.APIException):
        detail = exc.detail
        code = exc.get_codes() if not isinstance(exc.get_codes(), (dict, list)) else exc.default_code
        response.data = error_body(str(code), str(detail))
    return response


def _summary(fields: dict[str, list[str]]) -> str:
    names = ", ".join(sorted(fields))
    return f"Invalid input in: {names}." if names else "Invalid input."
