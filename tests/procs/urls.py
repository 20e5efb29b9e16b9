"""The portal's URL table with one test-only path in front: ``/test-only/kept-state/``, where a
web process compares its own kept placement state with a fresh rebuild (``tests/procs/kept_check.py``).
Only ``tests/procs/settings.py`` routes here."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from gpuportal import urls as portal
from tests.procs.kept_check import kept_state_check

urlpatterns: list[URLPattern | URLResolver] = [
    path("test-only/kept-state/", kept_state_check, name="test-kept-state"),
    *portal.urlpatterns,
]

handler400 = portal.handler400
handler403 = portal.handler403
handler404 = portal.handler404
handler500 = portal.handler500
