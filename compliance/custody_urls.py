"""Route of the custody API; the project mounts it at ``/api/v1/custody/``."""

from __future__ import annotations

from django.urls import path

from compliance.custody_apis import CustodyApi

app_name = "custody"

urlpatterns = [path("", CustodyApi.as_view(), name="custody")]
