"""Routes of the audit API; the project mounts them at ``/api/v1/audit/``."""

from __future__ import annotations

from django.urls import path

from compliance.apis import (
    AuditCheckpointConsistencyApi,
    AuditCheckpointLatestApi,
    AuditCheckpointPublishApi,
    AuditEventListApi,
    AuditExportApi,
    AuditKeysApi,
)

app_name = "audit"

urlpatterns = [
    path("events/", AuditEventListApi.as_view(), name="event-list"),
    path("export/", AuditExportApi.as_view(), name="export"),
    path("checkpoints/", AuditCheckpointPublishApi.as_view(), name="checkpoint-publish"),
    path("checkpoints/latest/", AuditCheckpointLatestApi.as_view(), name="checkpoint-latest"),
    path("checkpoints/consistency/", AuditCheckpointConsistencyApi.as_view(), name="checkpoint-consistency"),
    path("keys/", AuditKeysApi.as_view(), name="keys"),
]
