"""Routes under ``/api/v1/`` (included by ``gpuportal.api_urls``)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from whatifs import apis

urlpatterns: list[URLPattern | URLResolver] = [
    path("what-ifs/", apis.WhatIfListApi.as_view(), name="api-what-ifs"),
    path("what-ifs/<int:what_if_id>/", apis.WhatIfDetailApi.as_view(), name="api-what-if"),
]
