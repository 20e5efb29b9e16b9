"""REST endpoints for priority classes and department quotas (the flavors' are in ``apis``).

Reads are open to everyone with a role (quotas within their departments); writes to platform
admins. Each write checks visibility (404), then the role (403), and only then reads the body; the
services check the role again and hold the rules (``allocations.rules.catalogue``)."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.api.rule_changes import FOUR_EYES, EmergencyIn, RuleChangeOut, emergency_of, pending_response
from allocations.catalogue import selectors
from allocations.models import PreemptionPolicy, PriorityClass, RuleChangeKind
from allocations.quotas.usage import QuotaUsage, quota_usages
from allocations.rules import catalogue as catalog
from allocations.rules import changes as rule_changes
from allocations.windows.services import HORIZON
from kernel.api.base import IdField, ScopedRelatedField, actor, filters, paginated, target, validated
from kernel.api.openapi import errors
from kernel.api.ordering import ordered
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.clock import clock_now
from tenants.access import DepartmentTree, access_for, require_platform_admin
from tenants.models import NAMESPACE_SLUG_VALIDATOR
from tenants.selectors import department_list

CATALOGUE = catalog.CATALOGUE


class PriorityClassOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = PriorityClass
        fields = [
            "id", "name", "value", "preemption_policy", "oversubscription_factor", "description", "notice_minutes",
            "preemptible",
        ]


class PriorityClassIn(EmergencyIn):
    name = serializers.CharField(
        max_length=63, validators=[NAMESPACE_SLUG_VALIDATOR],
        help_text="The Kubernetes PriorityClass's name; it cannot change once created.",
    )
    value = serializers.IntegerField(min_value=-2147483648, max_value=1000000000)
    preemption_policy = serializers.ChoiceField(choices=PreemptionPolicy.choices, default=PreemptionPolicy.PREEMPT_LOWER_PRIORITY)
    oversubscription_factor = serializers.DecimalField(
        max_digits=5, decimal_places=2, min_value=Decimal(1), default=Decimal(1)
    )
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    notice_minutes = serializers.IntegerField(
        min_value=0, max_value=10080, required=False, default=15,
        help_text="How long a grant of this class keeps running after it is chosen for reclaim.",
    )
    preemptible = serializers.BooleanField(
        required=False, default=False, help_text="Grants of this class are reclaimed without notice."
    )


class PriorityClassListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "name": "name", "value": "value"}

    @extend_schema(responses={200: PriorityClassOut(many=True), **errors(401, 404)})
    def get(self, request: Request) -> Response:
        queryset = selectors.priority_class_list(user=request.user)
        return paginated(view=self, request=request, queryset=queryset, serializer=PriorityClassOut)

    @extend_schema(request=PriorityClassIn, responses={201: PriorityClassOut, 202: RuleChangeOut, **errors(400, 401, 403)},
                   description="Create a priority class." + FOUR_EYES)
    def post(self, request: Request) -> Response:
        require_platform_admin(actor(request), to=CATALOGUE)
        data = validated(PriorityClassIn, request)
        outcome = rule_changes.rule_change_propose(
            actor=actor(request), kind=RuleChangeKind.PRIORITY_CLASS_CREATE, **emergency_of(data), fields=data
        )
        return pending_response(outcome) or Response(PriorityClassOut(outcome.applied).data, status=status.HTTP_201_CREATED)


class PriorityClassDetailApi(ApiView):
    @extend_schema(responses={200: PriorityClassOut, **errors(401, 404)})
    def get(self, request: Request, priority_class_id: int) -> Response:
        found = selectors.priority_class_get(user=request.user, priority_class_id=priority_class_id)
        return Response(PriorityClassOut(found).data)

    @extend_schema(
        request=PriorityClassIn(partial=True),
        responses={200: PriorityClassOut, 202: RuleChangeOut, **errors(400, 401, 403, 404)},
        description="Change a priority class; a change of value, preemption policy or description is pushed to "
        "every active cluster. The name cannot change (400 naming `name`)." + FOUR_EYES,
    )
    def patch(self, request: Request, priority_class_id: int) -> Response:
        selectors.priority_class_get(user=request.user, priority_class_id=priority_class_id)
        require_platform_admin(actor(request), to=CATALOGUE)
        data = validated(PriorityClassIn, request, partial=True)
        outcome = rule_changes.rule_change_propose(
            actor=actor(request), kind=RuleChangeKind.PRIORITY_CLASS_UPDATE, priority_class_id=priority_class_id,
            **emergency_of(data), fields=data,
        )
        return pending_response(outcome) or Response(PriorityClassOut(outcome.applied).data)

    @extend_schema(
        request=EmergencyIn, responses={204: None, 202: RuleChangeOut, **errors(400, 401, 403, 404, 409)},
        description="Remove a priority class no allocation refers to (409 otherwise) and its PriorityClass from "
        "every active cluster." + FOUR_EYES,
    )
    def delete(self, request: Request, priority_class_id: int) -> Response:
        selectors.priority_class_get(user=request.user, priority_class_id=priority_class_id)
        require_platform_admin(actor(request), to=CATALOGUE)
        data = validated(EmergencyIn, request)
        outcome = rule_changes.rule_change_propose(
            actor=actor(request), kind=RuleChangeKind.PRIORITY_CLASS_DELETE, priority_class_id=priority_class_id,
            **emergency_of(data),
        )
        return pending_response(outcome) or Response(status=status.HTTP_204_NO_CONTENT)


def _amount(**kwargs: Any) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=14, decimal_places=4, **kwargs)


class QuotaOut(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.IntegerField(source="quota.id")
    department = serializers.CharField(source="quota.department.slug", read_only=True)
    department_id = serializers.IntegerField(source="quota.department_id")
    flavor = serializers.CharField(
        source="quota.flavor.name", read_only=True, allow_null=True, help_text="null: a quota of GPU-equivalents."
    )
    flavor_id = serializers.IntegerField(source="quota.flavor_id", allow_null=True)
    unit = serializers.SerializerMethodField()
    guaranteed = serializers.DecimalField(source="quota.guaranteed", max_digits=10, decimal_places=4)
    limit = serializers.DecimalField(source="quota.limit", max_digits=10, decimal_places=4)
    lending_limit = serializers.DecimalField(
        source="quota.lending_limit", max_digits=10, decimal_places=4, allow_null=True,
        help_text="How much of its unused guarantee the department lends to its siblings; null: all of it.",
    )
    at = serializers.DateTimeField(help_text="The instant the numbers below are of: now, or the query's `at`.")
    in_use = _amount(
        help_text="What the grants of the department's whole subtree that hold at `at` hold (a grant holds while its "
        "interval contains the instant): never grants that do not hold then."
    )
    effective_guaranteed = _amount(help_text="The guarantee in force at `at` (the approved quota windows applied).")
    effective_limit = _amount(help_text="The limit in force at `at` (the approved quota windows applied).")
    limit_by = serializers.IntegerField(
        allow_null=True, help_text="The quota window whose value `effective_limit` is; null: the quota's own limit."
    )
    available = _amount(help_text="The effective limit less what is in use, never negative.")
    borrowed = _amount(
        help_text="What is in use beyond the effective guarantee (lent by others, may be reclaimed), never negative."
    )
    pending_changes = serializers.SerializerMethodField(
        help_text="The ids of the quota's changes waiting for a second platform admin (`/api/v1/rule-changes/{id}/`)."
    )

    def get_unit(self, usage: QuotaUsage) -> str:
        return "units" if usage.quota.flavor_id else "gpu_equivalents"

    def get_pending_changes(self, usage: QuotaUsage) -> list[int]:
        pending: dict[int, list[int]] = self.context.get("pending", {})
        return pending.get(usage.quota.pk, [])


def _number_in(**kwargs: Any) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=10, decimal_places=4, min_value=0, **kwargs)


LENDING_HELP = "How much of its unused guarantee the department lends to its siblings; null: all of it."


class QuotaIn(EmergencyIn):
    department = ScopedRelatedField(scope=lambda user: department_list(user=user))
    flavor = ScopedRelatedField(scope=lambda user: selectors.flavor_list(user=user), allow_null=True, required=False, default=None)
    guaranteed = _number_in()
    limit = _number_in()
    lending_limit = _number_in(allow_null=True, required=False, default=None, help_text=LENDING_HELP)


class QuotaNumbersIn(EmergencyIn):
    """A quota's numbers; its department and flavor name it and do not change."""

    guaranteed = _number_in()
    limit = _number_in()
    lending_limit = _number_in(allow_null=True, help_text=LENDING_HELP)


QUOTA_RULES = (
    " The guarantee may not exceed the limit, nor the lending limit the guarantee; the guarantees of a "
    "department's children in the same scope must fit within its limit (400 naming `limit` or `guaranteed`, "
    "with the numbers)."
)


class InstantField(serializers.DateTimeField):
    """An instant to read quota use at: ISO 8601, within the windows' horizon of now (400 naming the
    parameter otherwise)."""

    def to_internal_value(self, value: Any) -> datetime.datetime:
        moment: datetime.datetime = super().to_internal_value(value)
        now = clock_now()
        if not now - HORIZON <= moment <= now + HORIZON:
            raise serializers.ValidationError(f"Must lie within {HORIZON.days} days of now.")
        return moment


class AtFilter(serializers.Serializer):  # type: ignore[type-arg]
    at = InstantField(
        required=False,
        help_text=f"The instant to read the use and the numbers in force at (ISO 8601, within {HORIZON.days} days of "
        "now); default: now.",
    )


def _quota_out(quota: Any, at: datetime.datetime | None = None, *, tree: DepartmentTree | None = None) -> dict[str, Any]:
    pending = rule_changes.rule_changes_pending(quota_ids=[quota.pk])
    return dict(QuotaOut(quota_usages(quotas=[quota], at=at, tree=tree)[0], context={"pending": pending}).data)


class QuotaListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "department": "department__slug", "guaranteed": "guaranteed", "limit": "limit"}

    class Filter(AtFilter):
        department = IdField(required=False)

    @extend_schema(parameters=[Filter], responses={200: QuotaOut(many=True), **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        quotas = selectors.quota_list(user=request.user, department_id=params.get("department"))
        paginator = Pagination()
        page = paginator.paginate_queryset(ordered(quotas, view=self, request=request), request, view=self) or []
        usages = quota_usages(quotas=list(page), at=params.get("at"), tree=access_for(request.user).tree)
        pending = rule_changes.rule_changes_pending(quota_ids=[usage.quota.pk for usage in usages])
        return paginator.get_paginated_response(QuotaOut(usages, many=True, context={"pending": pending}).data)

    @extend_schema(
        request=QuotaIn, responses={201: QuotaOut, 202: RuleChangeOut, **errors(400, 401, 403)},
        description="Set the quota of a department for a flavor (or for GPU-equivalents): created, or replaced."
        + QUOTA_RULES + FOUR_EYES,
    )
    def post(self, request: Request) -> Response:
        target(QuotaIn, request, "department")
        require_platform_admin(actor(request), to=CATALOGUE)
        data = validated(QuotaIn, request)
        outcome = rule_changes.rule_change_propose(
            actor=actor(request), kind=RuleChangeKind.QUOTA_SET, **emergency_of(data), fields=data
        )
        return pending_response(outcome) or Response(_quota_out(outcome.applied), status=status.HTTP_201_CREATED)


class QuotaDetailApi(ApiView):
    @extend_schema(parameters=[AtFilter], responses={200: QuotaOut, **errors(400, 401, 404)})
    def get(self, request: Request, quota_id: int) -> Response:
        at = filters(AtFilter, request).get("at")
        return Response(_quota_out(selectors.quota_get(user=request.user, quota_id=quota_id), at,
                                   tree=access_for(request.user).tree))

    @extend_schema(
        request=QuotaNumbersIn(partial=True), responses={200: QuotaOut, 202: RuleChangeOut, **errors(400, 401, 403, 404)},
        description="Change some of a quota's numbers; the others stay." + QUOTA_RULES + FOUR_EYES,
    )
    def patch(self, request: Request, quota_id: int) -> Response:
        selectors.quota_get(user=request.user, quota_id=quota_id)
        require_platform_admin(actor(request), to=CATALOGUE)
        data = validated(QuotaNumbersIn, request, partial=True)
        outcome = rule_changes.rule_change_propose(
            actor=actor(request), kind=RuleChangeKind.QUOTA_UPDATE, quota_id=quota_id, **emergency_of(data), fields=data
        )
        return pending_response(outcome) or Response(_quota_out(outcome.applied))

    @extend_schema(
        request=EmergencyIn, responses={204: None, 202: RuleChangeOut, **errors(400, 401, 403, 404)},
        description="Remove a quota." + FOUR_EYES,
    )
    def delete(self, request: Request, quota_id: int) -> Response:
        selectors.quota_get(user=request.user, quota_id=quota_id)
        require_platform_admin(actor(request), to=CATALOGUE)
        data = validated(EmergencyIn, request)
        outcome = rule_changes.rule_change_propose(
            actor=actor(request), kind=RuleChangeKind.QUOTA_DELETE, quota_id=quota_id, **emergency_of(data)
        )
        return pending_response(outcome) or Response(status=status.HTTP_204_NO_CONTENT)
