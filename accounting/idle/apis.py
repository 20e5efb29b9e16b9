"""``/api/v1/idle-policies/`` and ``/api/v1/idle-cases/`` (docs/accounting.md, "Idle grants").

As everywhere: the object must be visible first (404), then the caller must hold the role the
action needs (403), and only then is the body read (400 naming the field).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounting.idle import cases, policies, selectors
from accounting.idle_models import IdleCase, IdlePolicy, IdleState
from allocations.models import PriorityClass
from clusters.models import Cluster
from kernel.api.base import IdField, actor, filters, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.limits import TEXT_LIMIT
from tenants.access import require_platform_admin
from tenants.models import Department

OPEN = "open"


@extend_schema_serializer(component_name="IdlePolicy")
class PolicyOut(serializers.ModelSerializer[IdlePolicy]):
    department_slug = serializers.CharField(source="department.slug", read_only=True, allow_null=True, default=None)

    class Meta:
        model = IdlePolicy
        fields = ["id", "name", "description", "department", "department_slug", "cluster", "priority_class", "threshold",
                  "window_minutes", "grace_minutes", "action", "max_keeps", "keep_hours", "is_active", "created_at",
                  "updated_at"]  # fmt: skip


class PolicyIn(serializers.ModelSerializer[IdlePolicy]):
    department = serializers.PrimaryKeyRelatedField[Department](
        queryset=Department.objects.all(), required=False, allow_null=True,
        help_text="Applies to this department's subtree; null: every department.",
    )
    cluster = serializers.PrimaryKeyRelatedField[Cluster](
        queryset=Cluster.objects.all(), required=False, allow_null=True, help_text="Only on this cluster; null: all."
    )
    priority_class = serializers.PrimaryKeyRelatedField[PriorityClass](
        queryset=PriorityClass.objects.all(), required=False, allow_null=True,
        help_text="Only grants of this priority class; null: every class.",
    )

    class Meta:
        model = IdlePolicy
        fields = ["name", "description", "department", "cluster", "priority_class", "threshold", "window_minutes",
                  "grace_minutes", "action", "max_keeps", "keep_hours", "is_active"]  # fmt: skip
        extra_kwargs: dict[str, dict[str, Any]] = {"name": {"validators": []}}  # uniqueness: the service's full_clean names it


class PolicyListApi(ApiView):
    pagination_class = Pagination
    ordering_fields = {"id": "id", "name": "name", "created_at": "created_at", "updated_at": "updated_at"}

    @extend_schema(responses={200: PolicyOut(many=True), **errors(401, 404)})
    def get(self, request: Request) -> Response:
        return paginated(view=self, request=request, queryset=selectors.idle_policy_list(user=request.user),
                         serializer=PolicyOut)  # fmt: skip

    @extend_schema(request=PolicyIn, responses={201: PolicyOut, **errors(400, 401, 403, 404)},
                   description="Create an idle policy (platform admins; audited `idle_policy.created`).")  # fmt: skip
    def post(self, request: Request) -> Response:
        selectors.idle_policy_list(user=request.user)  # 404 without a role
        require_platform_admin(request.user, to=policies.POLICIES)
        created = policies.idle_policy_create(actor=actor(request), **validated(PolicyIn, request))
        return Response(PolicyOut(created).data, status=status.HTTP_201_CREATED)


class PolicyDetailApi(ApiView):
    @extend_schema(responses={200: PolicyOut, **errors(401, 404)})
    def get(self, request: Request, policy_id: int) -> Response:
        return Response(PolicyOut(selectors.idle_policy_get(user=request.user, policy_id=policy_id)).data)

    @extend_schema(request=PolicyIn(partial=True), responses={200: PolicyOut, **errors(400, 401, 403, 404)},
                   description="Change an idle policy (platform admins; audited `idle_policy.updated`); "
                   "retire one with `is_active: false`. It applies from the next evaluation.")  # fmt: skip
    def patch(self, request: Request, policy_id: int) -> Response:
        selectors.idle_policy_get(user=request.user, policy_id=policy_id)
        require_platform_admin(request.user, to=policies.POLICIES)
        data = validated(PolicyIn, request, partial=True)
        return Response(PolicyOut(policies.idle_policy_update(actor=actor(request), policy_id=policy_id, **data)).data)


@extend_schema_serializer(component_name="IdleCase")
class CaseOut(serializers.ModelSerializer[IdleCase]):
    project = serializers.CharField(source="allocation.project.slug", read_only=True)
    department = serializers.CharField(source="allocation.project.department.slug", read_only=True)
    department_id = serializers.IntegerField(source="allocation.project.department_id", read_only=True)
    flavor = serializers.CharField(source="allocation.flavor.name", read_only=True)
    quantity = serializers.IntegerField(source="allocation.quantity", read_only=True)
    owner = serializers.CharField(source="allocation.requested_by.username", read_only=True)
    allocation_state = serializers.CharField(source="allocation.state", read_only=True)
    policy_name = serializers.CharField(source="policy.name", read_only=True)
    action = serializers.CharField(source="policy.action", read_only=True, help_text="What follows the warning.")
    decided_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True, allow_null=True)
    evidence = serializers.DictField(
        read_only=True, help_text="What the last evaluation went by: the policy's numbers, known and unknown "
        "minutes, the newest reading."
    )

    class Meta:
        model = IdleCase
        fields = ["id", "allocation", "allocation_state", "project", "department", "department_id", "flavor", "quantity",
                  "owner", "policy", "policy_name", "action", "state", "opened_at", "idle_since", "idle_minutes",
                  "warned_at", "action_due_at", "closed_at", "rearm_at", "reason", "decided_by", "last_evaluated_at",
                  "evidence"]  # fmt: skip


class CaseFilter(serializers.Serializer[Any]):
    state = serializers.ChoiceField(
        choices=[OPEN, *IdleState.values], required=False,
        help_text="`open` (observing or warned), or one state.",
    )
    department = IdField(required=False, help_text="A department id (its sub-departments included).")
    allocation = IdField(required=False, help_text="An allocation id.")


class CaseListApi(ApiView):
    pagination_class = Pagination
    ordering_fields = {"id": "id", "opened_at": "opened_at", "idle_since": "idle_since", "action_due_at": "action_due_at", "state": "state"}

    @extend_schema(parameters=[CaseFilter], responses={200: CaseOut(many=True), **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        params = filters(CaseFilter, request)
        state = params.get("state")
        states = [IdleState.OBSERVING, IdleState.WARNED] if state == OPEN else [state] if state else None
        rows = selectors.idle_case_list(
            user=request.user, states=states, department_id=params.get("department"),
            allocation_id=params.get("allocation"),
        )  # fmt: skip
        return paginated(view=self, request=request, queryset=rows, serializer=CaseOut)


class CaseDetailApi(ApiView):
    @extend_schema(responses={200: CaseOut, **errors(401, 404)})
    def get(self, request: Request, case_id: int) -> Response:
        return Response(CaseOut(selectors.idle_case_get(user=request.user, case_id=case_id)).data)


class KeepIn(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=TEXT_LIMIT, help_text="Why the grant should stay although it is idle.")


class ExemptIn(serializers.Serializer[Any]):
    until = serializers.DateTimeField(help_text="When the exemption ends (at most the longest allocation ahead).")
    reason = serializers.CharField(max_length=TEXT_LIMIT)


class ReleaseIn(serializers.Serializer[Any]):
    comment = serializers.CharField(max_length=TEXT_LIMIT, required=False, allow_blank=True, default="")


ACTION_ERRORS = errors(400, 401, 403, 404, 409)


class CaseKeepApi(ApiView):
    @extend_schema(request=KeepIn, responses={200: CaseOut, **ACTION_ERRORS},
                   description="Keep an idle grant for the policy's keep_hours (its project's members and its "
                   "department's admins; at most max_keeps times in 7 days, 409 `keeps_exhausted` beyond).")  # fmt: skip
    def post(self, request: Request, case_id: int) -> Response:
        cases.idle_case_may_keep(actor=actor(request), case=selectors.idle_case_get(user=request.user, case_id=case_id))
        data = validated(KeepIn, request)
        kept = cases.idle_case_keep(actor=actor(request), case_id=case_id, reason=data["reason"])
        return Response(CaseOut(selectors.idle_case_get(user=request.user, case_id=kept.pk)).data)


class CaseExemptApi(ApiView):
    @extend_schema(request=ExemptIn, responses={200: CaseOut, **ACTION_ERRORS},
                   description="Exempt an idle grant until a date (its department's admins, never their own grant "
                   "under four-eyes).")  # fmt: skip
    def post(self, request: Request, case_id: int) -> Response:
        cases.idle_case_may_exempt(actor=actor(request), case=selectors.idle_case_get(user=request.user, case_id=case_id))
        data = validated(ExemptIn, request)
        exempted = cases.idle_case_exempt(actor=actor(request), case_id=case_id, until=data["until"], reason=data["reason"])
        return Response(CaseOut(selectors.idle_case_get(user=request.user, case_id=exempted.pk)).data)


class CaseReleaseApi(ApiView):
    @extend_schema(request=ReleaseIn, responses={200: CaseOut, **ACTION_ERRORS},
                   description="Release the idle grant now and close its case.")  # fmt: skip
    def post(self, request: Request, case_id: int) -> Response:
        cases.idle_case_may_keep(actor=actor(request), case=selectors.idle_case_get(user=request.user, case_id=case_id))
        data = validated(ReleaseIn, request)
        released = cases.idle_case_release(actor=actor(request), case_id=case_id, comment=data["comment"])
        return Response(CaseOut(selectors.idle_case_get(user=request.user, case_id=released.pk)).data)
