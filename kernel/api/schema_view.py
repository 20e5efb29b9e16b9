"""``GET /api/schema/``: drf-spectacular's view, answering under ``kernel.api.schema.SCHEMA_LOCK``.

A module of its own: drf-spectacular's views module reads ``DEFAULT_SCHEMA_CLASS`` (the portal's
``kernel.api.schema.AutoSchema``) when it is imported, so ``kernel.api.schema`` cannot import it.
The lock is taken around ``dispatch``, not ``get``: ``get`` carries the view's own schema
(``extend_schema``), which an override would drop.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase
from drf_spectacular.views import SpectacularAPIView

from kernel.api.schema import SCHEMA_LOCK


class SchemaView(SpectacularAPIView):
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        with SCHEMA_LOCK:
            return super().dispatch(request, *args, **kwargs)
