from __future__ import annotations

from django.urls import URLPattern, path

from observability.health import livez_view, readyz_view
from observability.views import metrics_view

urlpatterns: list[URLPattern] = [
    path("metrics", metrics_view, name="metrics"),
    path("livez", livez_view, name="livez"),
    path("readyz", readyz_view, name="readyz"),
]
