from __future__ import annotations

from django.urls import URLPattern, path

from observability.views import metrics_view

urlpatterns: list[URLPattern] = [path("metrics", metrics_view, name="metrics")]
