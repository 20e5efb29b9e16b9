"""Read-only views of the audit log in the Django admin: nothing can be added, changed or deleted."""

from __future__ import annotations

from django.contrib import admin

from audit.admin_base import ReadOnlyAdmin
from audit.models import AuditCheckpoint, AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("seq", "occurred_at", "actor_username", "action", "target_type", "target_id", "department_id",
                    "outcome")
    list_filter = ("outcome", "action")
    search_fields = ("actor_username", "target_id", "request_id")
    readonly_fields = ("seq", "occurred_at", "actor_id", "actor_username", "action", "target_type", "target_id",
                       "department_id", "department_seq", "outcome", "request_id", "hash", "record")


@admin.register(AuditCheckpoint)
class AuditCheckpointAdmin(ReadOnlyAdmin):
    list_display = ("number", "size", "created_at")
    readonly_fields = ("number", "size", "root", "created_at", "note")
    exclude = ("frontier", "departments")
