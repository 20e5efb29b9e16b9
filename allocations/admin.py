from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

from allocations.grants import services
from allocations.models import (
    Allocation,
    Flavor,
    PriorityClass,
    ProjectQuota,
    Quota,
    QuotaWindow,
    QuotaWindowEdge,
    Reservation,
    RuleChange,
    RuleChangeKind,
)
from allocations.rules import catalogue as catalog
from allocations.rules.changes import RuleOutcome, rule_change_needs_second, rule_change_propose
from audit import actions
from audit.admin_base import AuditedAdmin, ReadOnlyAdmin
from kernel.errors import ApplicationError, FieldError
from tenants.access import access_for


@admin.register(Flavor)
class FlavorAdmin(AuditedAdmin):
    list_display = ["name", "gpu_model", "sharing_mode", "resource_name", "gpu_equivalents", "is_active"]
    list_filter = ["sharing_mode", "gpu_model", "is_active"]
    audit_created = actions.FLAVOR_CREATED
    audit_updated = actions.FLAVOR_UPDATED


class CatalogueAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Priority classes and quotas change through ``allocations.rules.changes`` here too: the same
    rules, the same audit events (``via: admin``) and the same pushes as through the API; only
    platform admins may change them, and only where a change needs no second admin (four-eyes off,
    ``rule_change_needs_second``): with four-eyes on these pages are read-only, and a change is
    proposed through the API (``/api/v1/rule-changes/``) for another platform admin to approve."""

    def _actor(self, request: HttpRequest) -> User:
        assert isinstance(request.user, User)
        return request.user

    def _may_change(self, request: HttpRequest) -> bool:
        return access_for(request.user).is_platform_admin and not rule_change_needs_second()

    def _propose(self, request: HttpRequest, kind: str, **arguments: Any) -> RuleOutcome:
        return rule_change_propose(actor=self._actor(request), kind=kind, via="admin", **arguments)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._may_change(request) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may_change(request) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may_change(request) and super().has_delete_permission(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(PriorityClass)
class PriorityClassAdmin(CatalogueAdmin):
    list_display = ["name", "value", "preemption_policy", "oversubscription_factor", "notice_minutes", "preemptible"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["name"] if obj is not None else []  # the Kubernetes object's name

    def save_model(self, request: HttpRequest, obj: Any, form: forms.ModelForm, change: bool) -> None:  # type: ignore[type-arg]
        if change:
            fields = {name: form.cleaned_data[name] for name in form.changed_data}
            self._propose(request, RuleChangeKind.PRIORITY_CLASS_UPDATE, priority_class_id=obj.pk, fields=fields)
        else:
            fields = {name: form.cleaned_data[name] for name in form.fields}
            applied = self._propose(request, RuleChangeKind.PRIORITY_CLASS_CREATE, fields=fields).applied
            assert applied is not None
            obj.pk = applied.pk

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self._propose(request, RuleChangeKind.PRIORITY_CLASS_DELETE, priority_class_id=obj.pk)


class QuotaForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Quota
        fields = ["department", "flavor", "guaranteed", "limit", "lending_limit"]

    def clean(self) -> dict[str, Any]:
        """The service's rules, as form errors. The admin's transaction spans the form and the save,
        so the department chain locked here stays locked until the change commits."""
        data: dict[str, Any] = super().clean() or {}
        department = data.get("department") if "department" in self.fields else self.instance.department
        flavor = data.get("flavor") if "flavor" in self.fields else self.instance.flavor
        if department is None or data.get("guaranteed") is None or data.get("limit") is None:
            return data  # a field's own error says what is missing
        try:
            catalog.quota_check(department_id=department.pk, flavor=flavor, guaranteed=data["guaranteed"],
                                limit=data["limit"], lending_limit=data.get("lending_limit"))
        except FieldError as error:
            for field, messages in error.fields.items():
                self.add_error(field if field in self.fields else None, messages)
        return data


@admin.register(Quota)
class QuotaAdmin(CatalogueAdmin):
    form = QuotaForm
    list_display = ["department", "flavor", "guaranteed", "limit", "lending_limit"]
    list_filter = ["department"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["department", "flavor"] if obj is not None else []  # they name the quota

    def save_model(self, request: HttpRequest, obj: Any, form: forms.ModelForm, change: bool) -> None:  # type: ignore[type-arg]
        numbers = {name: form.cleaned_data.get(name) for name in catalog.QUOTA_NUMBERS}
        if change:
            self._propose(request, RuleChangeKind.QUOTA_UPDATE, quota_id=obj.pk, fields=numbers)
        else:
            applied = self._propose(request, RuleChangeKind.QUOTA_SET, fields={
                "department": obj.department, "flavor": obj.flavor, "guaranteed": form.cleaned_data["guaranteed"],
                "limit": form.cleaned_data["limit"], "lending_limit": form.cleaned_data.get("lending_limit"),
            }).applied
            assert applied is not None
            obj.pk = applied.pk

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self._propose(request, RuleChangeKind.QUOTA_DELETE, quota_id=obj.pk)


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    """Read-only: allocations change only through the workflow's actions."""

    list_display = ["id", "project", "flavor", "quantity", "state", "cluster", "ends_at", "requested_by"]
    list_filter = ["state", "flavor", "cluster"]
    search_fields = ["project__slug", "justification"]
    actions = ["approve", "reject", "retry_provisioning"]


    def _actor(self, request: HttpRequest) -> User:
        assert isinstance(request.user, User)
        return request.user

    def _each(self, request: HttpRequest, queryset: QuerySet[Allocation], verb: str, call: Any) -> None:
        done = 0
        for allocation in queryset.order_by("pk"):
            try:
                call(allocation.pk)
                done += 1
            except ApplicationError as error:
                self.message_user(request, f"#{allocation.pk}: {error.message}", level=messages.ERROR)
        if done:
            self.message_user(request, f"{verb} {done} allocation(s).", level=messages.SUCCESS)

    @admin.action(description="Approve the selected allocations")
    def approve(self, request: HttpRequest, queryset: QuerySet[Allocation]) -> None:
        self._each(request, queryset, "Approved",
                   lambda pk: services.allocation_approve(actor=self._actor(request), allocation_id=pk, comment="approved in admin"))

    @admin.action(description="Reject the selected allocations")
    def reject(self, request: HttpRequest, queryset: QuerySet[Allocation]) -> None:
        self._each(request, queryset, "Rejected",
                   lambda pk: services.allocation_reject(actor=self._actor(request), allocation_id=pk, comment="rejected in admin"))

    @admin.action(description="Retry provisioning of the selected failed allocations")
    def retry_provisioning(self, request: HttpRequest, queryset: QuerySet[Allocation]) -> None:
        self._each(request, queryset, "Retrying", lambda pk: services.allocation_retry(actor=self._actor(request), allocation_id=pk))


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyAdmin):
    """Read-only: reservations are written by approval, release, expiry and placement_defrag."""

    list_display = ["id", "allocation", "unit", "node", "gpu_indices", "mig_profile", "mig_start", "gpu_milli",
                    "policy", "created_at", "released_at", "release_reason"]
    list_filter = ["node__cluster", "mig_profile", "release_reason"]
    search_fields = ["node__name", "allocation__project__slug"]


@admin.register(QuotaWindow)
class QuotaWindowAdmin(ReadOnlyAdmin):
    """Read-only: windows are asked for, decided and cancelled through ``allocations.windows.services``
    (the API and the portal), which check four-eyes and audit each step."""

    list_display = ["id", "quota", "kind", "state", "begins_at", "ends_at", "rrule", "timezone", "duration_minutes",
                    "guaranteed_delta", "limit_delta", "guaranteed", "limit", "priority_class", "requested_by", "decided_by"]
    list_filter = ["state", "kind", "shrink_policy"]
    search_fields = ["quota__department__slug", "justification"]


@admin.register(RuleChange)
class RuleChangeAdmin(ReadOnlyAdmin):
    """Read-only: changes of the rules are proposed, decided and withdrawn through
    ``allocations.rules.changes`` (the API and the portal), which check four-eyes and audit each step."""

    list_display = ["id", "kind", "state", "quota", "priority_class", "emergency", "proposed_by", "decided_by", "created_at"]
    list_filter = ["state", "kind", "emergency"]


@admin.register(QuotaWindowEdge)
class QuotaWindowEdgeAdmin(ReadOnlyAdmin):
    """Read-only: the tick applies each edge once and records it here."""

    list_display = ["id", "window", "kind", "at", "applied_at"]
    list_filter = ["kind"]


@admin.register(ProjectQuota)
class ProjectQuotaAdmin(ReadOnlyAdmin):
    """Read-only: project caps are set by department admins on the Department page or through
    ``PUT /api/v1/projects/{id}/quotas/`` (audited as ``project.quota_set``)."""

    list_display = ["project", "flavor", "limit", "updated_at"]
    list_filter = ["project__department", "flavor"]
    search_fields = ["project__slug"]
