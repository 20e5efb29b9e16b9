"""The project's URL table plus two views that always fail, for the tests of the 500 answers
(``@pytest.mark.urls("tests.security.boom_urls")``). The error handlers are the project's own."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path

from gpuportal import urls


class Boom(Exception):
    """What the failing views raise."""


def boom(request: HttpRequest) -> HttpResponse:
    raise Boom("a test-only view that always fails")


urlpatterns: list[URLPattern | URLResolver] = [
    path("api/v1/test-boom/", boom),
    path("portal-boom/", boom),
    *urls.urlpatterns,
]

handler400 = urls.handler400
handler403 = urls.handler403
handler404 = urls.handler404
handler500 = urls.handler500
