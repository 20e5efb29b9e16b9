from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path, re_path
from drf_spectacular.views import SpectacularSwaggerView

from kernel.api.errors import api_unknown_path
from kernel.api.schema_view import SchemaView

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("gpuportal.api_urls")),
    path("api/schema/", SchemaView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    # Any other path under /api/: the JSON 404, even with DEBUG on (Django's own page is HTML).
    re_path(r"^api/", api_unknown_path, name="api-unknown-path"),
    path("", include("observability.urls")),
    path("", include("frontend.urls")),
]

# Under /api/ errors are the JSON envelope (kernel.api.errors); every other path keeps Django's pages.
handler400 = "kernel.api.errors.api_bad_request"
handler403 = "kernel.api.errors.api_permission_denied"
handler404 = "kernel.api.errors.api_not_found"
handler500 = "kernel.api.errors.api_server_error"
