"""The API's URL table, composed from each app's own ``urls.py`` (mounted at ``/api/v1/``)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [
    path("", include("tenants.urls")),
    path("", include("notifications.urls")),
    path("", include("allocations.urls")),
    path("", include("clusters.urls")),
    path("", include("delivery.urls")),
    path("audit/", include("compliance.urls")),
    path("custody/", include("compliance.custody_urls")),
    path("", include("telemetry.urls")),
    path("", include("accounting.urls")),
    path("", include("whatifs.urls")),
]
