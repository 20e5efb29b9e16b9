"""Small pieces shared by the API views: tenant-scoped relation fields, ids, input helpers and
pagination.

Every view reads its input through ``validated`` (the body), ``target`` (the one body field a
permission check needs, before the rest of the body is looked at) or ``filters`` (the query
string). The first and the last refuse NUL and lone surrogate characters anywhere in the input,
whatever field type would receive them, so that no such string reaches the database (PostgreSQL
refuses NUL in text, and neither driver can encode a lone surrogate).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kernel.api.ordering import ordered
from kernel.api.pagination import Pagination

DB_INT_MAX = 2**63 - 1
"""The largest value a 64-bit database integer (every primary key) can hold."""

_HOSTILE_TEXT = re.compile("[\x00\ud800-\udfff]")


def iso_datetime(moment: datetime.datetime) -> str:
    """A datetime as DRF's ``DateTimeField`` writes it (ISO 8601 in the current time zone, UTC as
    ``Z``): for answers written without their serializer on hot paths."""
    text = timezone.localtime(moment).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class IdField(serializers.IntegerField):
    """An object's id in a filter or a body: 1 to 2**63-1, so an id beyond the database's 64-bit
    range is a 400 naming the field instead of an overflow in the database driver."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", DB_INT_MAX)
        super().__init__(**kwargs)


class ScopedRelatedField(serializers.PrimaryKeyRelatedField[Any]):
    """A primary key resolved only among the objects the requesting user may see, so an
    outsider's id reads exactly like an id that does not exist (as does one beyond 64 bits)."""

    def __init__(self, *, scope: Callable[[Any], QuerySet[Any]], **kwargs: Any) -> None:
        self.scope = scope
        super().__init__(**kwargs)

    def get_queryset(self) -> QuerySet[Any]:
        request = self.context["request"]
        return self.scope(request.user)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) or not isinstance(data, (int, str)):
            self.fail("incorrect_type", data_type=type(data).__name__)
        try:
            number = int(data)
        except ValueError:
            self.fail("incorrect_type", data_type=type(data).__name__)
        if not 1 <= number <= DB_INT_MAX:
            self.fail("does_not_exist", pk_value=data)
        return super().to_internal_value(number)


def _text_error(text: str) -> str | None:
    found = _HOSTILE_TEXT.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "Null characters are not allowed."
    return f"Surrogate characters are not allowed: U+{ord(found.group()):X}."


def refuse_hostile_text(data: Any) -> None:
    """Raise a 400 naming the top-level field when any string (or key) in ``data`` holds a NUL or
    a lone surrogate character. Iterative: the JSON parser has already bounded the nesting."""
    if hasattr(data, "lists"):  # a QueryDict: every value of a repeated parameter
        top: Any = data.lists()
    elif isinstance(data, Mapping):
        top = data.items()
    else:
        top = [("non_field_errors", data)]
    errors: dict[str, list[str]] = {}
    for name, value in top:
        stack: list[Any] = [name, value]
        while stack:
            item = stack.pop()
            message = _text_error(item) if isinstance(item, str) else None
            if message is not None:
                errors["non_field_errors" if item is name else str(name)] = [message]
                break
            if isinstance(item, Mapping):
                for key, inner in item.items():
                    stack.extend((key, inner))
            elif isinstance(item, (list, tuple)):
                stack.extend(item)
    if errors:
        raise ValidationError(errors)


def actor(request: Request) -> User:
    """The authenticated user behind a request (every API view requires authentication)."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied("Authentication required.")
    return user


def paginated(
    *, view: APIView, request: Request, queryset: QuerySet[Any], serializer: type[serializers.Serializer[Any]], context: dict[str, Any] | None = None
) -> Response:
    """One page of ``queryset``, sorted as ``?ordering=`` asks (``kernel.api.ordering``)."""
    paginator = Pagination()
    page = paginator.paginate_queryset(ordered(queryset, view=view, request=request), request, view=view)
    data = serializer(page, many=True, context=context or {"request": request}).data
    return paginator.get_paginated_response(data)


def validated(
    serializer: type[serializers.Serializer[Any]], request: Request, *, partial: bool = False, **context: Any
) -> dict[str, Any]:
    """The body, validated by ``serializer``. Check the caller's permission before calling this."""
    refuse_hostile_text(request.data)
    instance = serializer(data=request.data, partial=partial, context={"request": request, **context})
    unknown = unknown_fields(instance, request.data)
    if not instance.is_valid() or unknown:
        raise ValidationError({**instance.errors, **unknown})
    return dict(instance.validated_data)


UNKNOWN_FIELD = "Unknown field."


def unknown_fields(serializer: serializers.BaseSerializer[Any], data: Any, prefix: str = "") -> dict[str, list[str]]:
    """``{"name": ["Unknown field."]}`` for each key of ``data`` that ``serializer`` does not take
    (read-only fields included: the schema does not document them in a request), through nested
    serializers and lists of them; a nested name is written with dots (``members.0.role``)."""
    found: dict[str, list[str]] = {}
    if isinstance(serializer, serializers.ListSerializer):
        if isinstance(data, list) and isinstance(serializer.child, serializers.BaseSerializer):
            for index, item in enumerate(data):
                found.update(unknown_fields(serializer.child, item, f"{prefix}{index}."))
        return found
    if not isinstance(serializer, serializers.Serializer) or not isinstance(data, Mapping):
        return found
    fields = serializer.fields
    for name, value in data.items():
        field = fields.get(name)
        if field is None or field.read_only:
            found[f"{prefix}{name}"] = [UNKNOWN_FIELD]
        elif isinstance(field, serializers.BaseSerializer):
            found.update(unknown_fields(field, value, f"{prefix}{name}."))
        elif isinstance(field, serializers.ListField) and isinstance(field.child, serializers.BaseSerializer) and isinstance(value, list):
            for index, item in enumerate(value):
                found.update(unknown_fields(field.child, item, f"{prefix}{name}.{index}."))
    return found


def target(serializer: type[serializers.Serializer[Any]], request: Request, name: str, **context: Any) -> Any:
    """The one field ``name`` of the body, validated alone: the object a permission check is about
    (a department, a project), resolved before the rest of the body is looked at. An unknown or
    invisible one answers as the whole body would: 400 naming the field."""
    if not isinstance(request.data, Mapping):
        validated(serializer, request, **context)  # raises: the body is not an object
    refuse_hostile_text({name: request.data.get(name)})
    field = serializer(data=request.data, context={"request": request, **context}).fields[name]
    try:
        return field.run_validation(field.get_value(request.data))
    except ValidationError as error:
        raise ValidationError({name: error.detail}) from None


def filters(serializer: type[serializers.Serializer[Any]], request: Request) -> dict[str, Any]:
    refuse_hostile_text(request.query_params)
    instance = serializer(data=request.query_params)
    instance.is_valid(raise_exception=True)
    return {key: value for key, value in instance.validated_data.items() if value is not None}
