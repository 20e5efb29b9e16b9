"""``?ordering=`` on the API's lists: one field, ``-`` in front for descending, ties broken by id.

A list view declares ``ordering_fields``: the names a caller may give, each mapped to the database
lookup it sorts by. The schema documents exactly these names (``kernel.api.schema``), and anything
else is a 400 naming ``ordering``. Without ``ordering`` a list keeps its selector's own order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from django.db.models import QuerySet
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

ORDERING_PARAM = "ordering"

_Q = TypeVar("_Q", bound=QuerySet[Any])


def ordering_fields_of(view: Any) -> Mapping[str, str]:
    """The ``{api name: database lookup}`` a view sorts by; empty when it takes no ordering."""
    fields: Mapping[str, str] | None = getattr(view, "ordering_fields", None)
    return fields or {}


def ordering_choices(fields: Mapping[str, str]) -> list[str]:
    """Every accepted value: each name ascending, then descending."""
    return [*fields, *(f"-{name}" for name in fields)]


def ordering_description(fields: Mapping[str, str]) -> str:
    names = ", ".join(f"`{name}`" for name in fields)
    return (
        f"Sort by one of {names}; a leading `-` sorts descending. Ties are broken by id in the same direction. "
        "Without it the list keeps its default order."
    )


def ordered(queryset: _Q, *, view: Any, request: Request) -> _Q:
    """``queryset`` sorted as the request's ``ordering`` asks (a 400 naming it when it is not one of
    the view's choices), else unchanged."""
    values = [value for value in request.query_params.getlist(ORDERING_PARAM) if value]
    if not values:  # absent or empty: the default order
        return queryset
    fields = ordering_fields_of(view)
    if len(values) > 1:
        raise ValidationError({ORDERING_PARAM: ["Give one ordering."]})
    value = values[0]
    name = value[1:] if value.startswith("-") else value
    if name not in fields:
        choices = ", ".join(ordering_choices(fields))
        raise ValidationError({ORDERING_PARAM: [f'"{value}" is not a valid ordering; choose one of: {choices}.']})
    sign = "-" if value.startswith("-") else ""
    lookup = fields[name]
    keys = [f"{sign}{lookup}"] if lookup in ("id", "pk") else [f"{sign}{lookup}", f"{sign}pk"]
    return queryset.order_by(*keys)
