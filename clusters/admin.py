from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from audit import actions
from clusters.models import Cluster, Gpu, Node
from gpuportal.admin_audit import AuditedAdmin


class GpuInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Gpu
    extra = 0


@admin.register(Cluster)
class ClusterAdmin(AuditedAdmin):
    list_display = ["name", "driver", "is_active", "last_sync_at"]
    readonly_fields = ["last_sync_at", "last_sync_error"]
    audit_created = actions.CLUSTER_CREATED
    audit_updated = actions.CLUSTER_UPDATED

    def department_id_of(self, obj: Cluster) -> int | None:
        return None


@admin.register(Node)
class NodeAdmin(AuditedAdmin):
    list_display = ["name", "cluster", "cpu_millicores", "memory_mib", "is_schedulable"]
    list_filter = ["cluster"]
    inlines = [GpuInline]
    audit_created = actions.NODE_UPDATED
    audit_updated = actions.NODE_UPDATED

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
