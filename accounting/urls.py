"""Routes under ``/api/v1/`` (included by ``gpuportal.api_urls``)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from accounting import apis

urlpatterns: list[URLPattern | URLResolver] = [
    path("usage/", apis.UsageApi.as_view(), name="api-usage"),
]
