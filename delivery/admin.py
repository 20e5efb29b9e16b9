"""The cluster's admin page, with the actions that reach the cluster (sync, discovery, drift)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

from audit import actions as audit_actions
from audit.admin_base import AuditedAdmin
from clusters.credentials import cluster_kubeconfig_set
from clusters.models import Cluster
from delivery import services
from delivery.cluster_settings import switch_off_refusal
from delivery.discovery import cluster_discover
from delivery.drivers import DriverError
from kernel.errors import ApplicationError


class ClusterForm(forms.ModelForm):  # type: ignore[type-arg]
    new_kubeconfig = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "autocomplete": "off"}),
        help_text="Paste a kubeconfig to replace the stored one (stored encrypted, never shown again).",
    )

    # https by default when the scheme is left out (the users' API server and OIDC issuer).
    user_api_server_url = forms.URLField(required=False, max_length=500, assume_scheme="https",
                                         help_text="The API server's URL as users reach it; empty: not shown.")
    user_oidc_issuer_url = forms.URLField(required=False, max_length=500, assume_scheme="https",
                                          help_text="OIDC issuer the API server trusts (its --oidc-issuer-url).")

    class Meta:
        model = Cluster
        fields = [
            "name", "display_name", "driver", "is_active", "use_hami", "use_volcano", "pin_bookings",
            "sharing_reserve_percent", "sharing_reserve_per_unit_mib", "gpu_operator_namespace",
            "user_api_server_url", "user_ca_certificate", "user_oidc_issuer_url", "user_oidc_client",
        ]

    def clean(self) -> dict[str, Any]:
        """The API's refusal: no switching HAMi or Volcano off under live vGPU bookings."""
        cleaned = super().clean() or {}
        if self.instance.pk is not None:
            stored = Cluster.objects.get(pk=self.instance.pk)
            changes = {name: cleaned[name] for name in ("use_hami", "use_volcano") if name in cleaned}
            refusal = switch_off_refusal(stored, changes)
            if refusal is not None:
                raise forms.ValidationError({str(refusal.details["field"]): refusal.message})
        return cleaned


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
            cluster_kubeconfig_set(actor=self._actor(request), cluster_id=obj.pk, kubeconfig=kubeconfig)

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
