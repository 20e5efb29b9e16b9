"""Read-only views of the audit log in the Django admin: nothing can be added, changed or deleted."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from audit.models import AuditCheckpoint, AuditEvent


class _ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(_ReadOnlyAdmin):
    list_display = ("seq", "occurred_at", "actor_username", "action", "target_type", "target_id", "department_id",
                    "outcome")
    list_filter = ("outcome", "action")
    search_fields = ("actor_username", "target_id", "request_id")
    readonly_fields = ("seq", "occurred_at", "actor_id", "actor_username", "action", "target_type", "target_id",
                       "department_id", "department_seq", "outcome", "request_id", "hash", "record")


@admin.register(AuditCheckpoint)
class AuditCheckpointAdmin(_ReadOnlyAdmin):
    list_display = ("number", "size", "created_at")
    readonly_fields = ("number", "size", "root", "created_at", "note")
    exclude = ("frontier", "departments")
