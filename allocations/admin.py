from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

from allocations import services
from allocations.models import Allocation, Flavor, PriorityClass, Quota, Reservation
from audit import actions
from audit.admin_base import AuditedAdmin, ReadOnlyAdmin
from kernel.errors import ApplicationError


@admin.register(Flavor)
class FlavorAdmin(AuditedAdmin):
    list_display = ["name", "gpu_model", "sharing_mode", "resource_name", "gpu_equivalents", "is_active"]
    list_filter = ["sharing_mode", "gpu_model", "is_active"]
    audit_created = actions.FLAVOR_CREATED
    audit_updated = actions.FLAVOR_UPDATED


@admin.register(PriorityClass)
class PriorityClassAdmin(AuditedAdmin):
    list_display = ["name", "value", "preemption_policy", "oversubscription_factor"]
    audit_created = actions.PRIORITY_CLASS_CREATED
    audit_updated = actions.PRIORITY_CLASS_UPDATED


@admin.register(Quota)
class QuotaAdmin(AuditedAdmin):
    list_display = ["department", "flavor", "guaranteed", "limit"]
    list_filter = ["department"]
    audit_created = actions.QUOTA_SET
    audit_updated = actions.QUOTA_SET
    audit_deleted = actions.QUOTA_DELETED


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

