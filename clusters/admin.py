from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

from audit import actions as audit_actions
from clusters import services
from clusters.discovery import cluster_discover
from clusters.drivers import DriverError
from clusters.models import Cluster, ClusterDrift, ClusterPush, Gpu, Node
from gpuportal.admin_audit import AuditedAdmin, ReadOnlyAdmin
from gpuportal.errors import ApplicationError


class GpuInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Gpu
    extra = 0


class ClusterForm(forms.ModelForm):  # type: ignore[type-arg]
    new_kubeconfig = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "autocomplete": "off"}),
        help_text="Paste a kubeconfig to replace the stored one (stored encrypted, never shown again).",
    )

    class Meta:
        model = Cluster
        fields = ["name", "display_name", "driver", "is_active", "use_hami", "use_volcano", "gpu_operator_namespace"]


@admin.register(Cluster)
class ClusterAdmin(AuditedAdmin):
    form = ClusterForm
    list_display = ["name", "driver", "is_active", "has_kubeconfig", "last_sync_at", "last_drift_at"]
    readonly_fields = ["last_sync_at", "last_sync_error", "last_drift_at"]
    actions = ["sync_now", "discover_nodes", "check_drift"]
    audit_created = audit_actions.CLUSTER_CREATED
    audit_updated = audit_actions.CLUSTER_UPDATED

    def department_id_of(self, obj: Cluster) -> int | None:
        return None

    @admin.display(boolean=True, description="kubeconfig")
    def has_kubeconfig(self, obj: Cluster) -> bool:
        return obj.has_kubeconfig

    def save_model(self, request: HttpRequest, obj: Any, form: forms.ModelForm, change: bool) -> None:  # type: ignore[type-arg]
        form.changed_data[:] = [name for name in form.changed_data if name != "new_kubeconfig"]
        super().save_model(request, obj, form, change)
        kubeconfig = form.cleaned_data.get("new_kubeconfig")
        if kubeconfig:
            services.cluster_kubeconfig_set(actor=self._actor(request), cluster_id=obj.pk, kubeconfig=kubeconfig)

    def _actor(self, request: HttpRequest) -> User:
        assert isinstance(request.user, User)
        return request.user

    def _each(self, request: HttpRequest, queryset: QuerySet[Cluster], verb: str, call: Any) -> None:
        for cluster in queryset.order_by("pk"):
            try:
                outcome = call(cluster.pk)
            except (ApplicationError, DriverError) as error:
                self.message_user(request, f"{cluster.name}: {getattr(error, 'message', error)}", level=messages.ERROR)
                continue
            self.message_user(request, f"{cluster.name}: {verb} {outcome}", level=messages.SUCCESS)

    @admin.action(description="Sync the selected clusters now (queued)")
    def sync_now(self, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
        self._each(request, queryset, "queued pushes:",
                   lambda pk: services.cluster_sync_request(actor=self._actor(request), cluster_id=pk))

    @admin.action(description="Discover the nodes of the selected clusters")
    def discover_nodes(self, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
        self._each(request, queryset, "GPU nodes found:",
                   lambda pk: len(cluster_discover(actor=self._actor(request), cluster_id=pk)))

    @admin.action(description="Check the selected clusters for drift and repair it")
    def check_drift(self, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
        self._each(request, queryset, "objects re-applied:",
                   lambda pk: len(services.cluster_sync(cluster_id=pk, repair_drift=True)[0].changes))


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
