"""Admin: node tokens can be looked at and revoked here (issued through the API, which shows the
token once); observed state is read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.admin_base import ReadOnlyAdmin
from telemetry import node_tokens
from telemetry.models import NodeReportState, NodeToken, ObservedGpu, ObservedMigInstance


@admin.action(description="Revoke the selected node tokens")
def revoke_tokens(modeladmin: Any, request: HttpRequest, queryset: QuerySet[NodeToken]) -> None:
    assert isinstance(request.user, User)
    for token in queryset.order_by("pk"):
        node_tokens.node_token_revoke(actor=request.user, token_id=token.pk)
    modeladmin.message_user(request, "Revoked.", messages.SUCCESS)


@admin.register(NodeToken)
class NodeTokenAdmin(ReadOnlyAdmin):
    list_display = ["node_name", "cluster", "key_id", "description", "created_at", "revoked_at", "last_used_at"]
    list_filter = ["cluster"]
    search_fields = ["node_name", "key_id"]
    exclude = ["secret_hash"]
    actions = [revoke_tokens]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None  # the change list (and its revoke action), not the edit form


@admin.register(NodeReportState)
class NodeReportStateAdmin(ReadOnlyAdmin):
    list_display = ["node", "received_at", "stale_at", "is_stale", "mig_mismatch", "mig_reset_pending", "agent_version"]
    list_filter = ["is_stale", "mig_mismatch", "mig_reset_pending"]


class MigInstanceInline(admin.TabularInline):  # type: ignore[type-arg]
    model = ObservedMigInstance
    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ObservedGpu)
class ObservedGpuAdmin(ReadOnlyAdmin):
    list_display = ["node", "index", "uuid", "name", "is_present", "last_seen_at", "gpu_percent", "memory_used_bytes"]
    list_filter = ["is_present"]
    search_fields = ["uuid"]
    inlines = [MigInstanceInline]
