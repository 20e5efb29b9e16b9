"""Small pieces shared by the API views: tenant-scoped relation fields and pagination."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kernel.api.pagination import Pagination


class ScopedRelatedField(serializers.PrimaryKeyRelatedField[Any]):
    """A primary key resolved only among the objects the requesting user may see, so an
    outsider's id reads exactly like an id that does not exist."""

    def __init__(self, *, scope: Callable[[Any], QuerySet[Any]], **kwargs: Any) -> None:
        self.scope = scope
        super().__init__(**kwargs)

    def get_queryset(self) -> QuerySet[Any]:
        request = self.context["request"]
        return self.scope(request.user)


def actor(request: Request) -> User:
    """The authenticated user behind a request (every API view requires authentication)."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied("Authentication required.")
    return user


def paginated(
    *, view: APIView, request: Request, queryset: QuerySet[Any], serializer: type[serializers.Serializer[Any]], context: dict[str, Any] | None = None
) -> Response:
    paginator = Pagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    data = serializer(page, many=True, context=context or {"request": request}).data
    return paginator.get_paginated_response(data)


def validated(serializer: type[serializers.Serializer[Any]], request: Request, **context: Any) -> dict[str, Any]:
    instance = serializer(data=request.data, context={"request": request, **context})
    instance.is_valid(raise_exception=True)
    return dict(instance.validated_data)


def filters(serializer: type[serializers.Serializer[Any]], request: Request) -> dict[str, Any]:
    instance = serializer(data=request.query_params)
    instance.is_valid(raise_exception=True)
    return {key: value for key, value in instance.validated_data.items() if value is not None}
