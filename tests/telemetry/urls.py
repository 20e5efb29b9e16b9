"""The portal's routes plus telemetry's, until gpuportal/api/urls.py includes them (then removed)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

from gpuportal.urls import urlpatterns as portal_urlpatterns

urlpatterns: list[URLPattern | URLResolver] = [
    path("api/v1/", include("clusters.telemetry.urls")),
    *portal_urlpatterns,
]
