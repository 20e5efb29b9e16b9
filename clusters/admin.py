from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from audit import actions as audit_actions
from audit.admin_base import AuditedAdmin, ReadOnlyAdmin
from clusters.models import ClusterDrift, ClusterPush, Gpu, Node


class GpuInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Gpu
    extra = 0


@admin.register(Node)
class NodeAdmin(AuditedAdmin):
    list_display = ["name", "cluster", "sharing", "sharing_replicas", "cpu_millicores", "memory_mib", "is_schedulable"]
    list_filter = ["cluster", "sharing"]
    inlines = [GpuInline]
    audit_created = audit_actions.NODE_UPDATED
    audit_updated = audit_actions.NODE_UPDATED

    def department_id_of(self, obj: Node) -> int | None:
        return None


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["node", "index", "model", "memory_mib", "mig_capable"]
    list_filter = ["model", "mig_capable"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(ClusterPush)
class ClusterPushAdmin(ReadOnlyAdmin):
    list_display = ["id", "cluster", "project", "allocation", "state", "attempts", "available_at", "last_error"]
    list_filter = ["state", "cluster"]


@admin.register(ClusterDrift)
class ClusterDriftAdmin(ReadOnlyAdmin):
    list_display = ["detected_at", "cluster", "kind", "namespace", "name", "change"]
    list_filter = ["cluster", "kind"]
