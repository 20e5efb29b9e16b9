"""REST endpoints for changes of the rules waiting for a second platform admin
(``allocations.rules.changes``): ``/rule-changes/`` (list, read, approve, reject, withdraw), and
what the catalogue's writes take and answer for them (an emergency and its reason; 202 with the
pending change).

As everywhere: the change must be visible first (404 otherwise), then the caller must hold the role
the action needs (403), and only then is the body read."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.api.grants import DecisionIn
from allocations.models.rule_changes import REASON_LIMIT, RuleChange, RuleChangeKind, RuleChangeState
from allocations.rules import changes as rule_changes
from kernel.api.base import IdField, actor, filters, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from tenants.access import require_platform_admin


class RuleChangeOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    proposed_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField[Any](
        slug_field="username", read_only=True, allow_null=True,
        help_text="Who approved or rejected it (or withdrew it); its author for an emergency; null while pending.",
    )
    quota = serializers.IntegerField(source="quota_id", allow_null=True, read_only=True,
                                     help_text="The quota it changes; null for a new quota or a priority class.")
    priority_class = serializers.IntegerField(source="priority_class_id", allow_null=True, read_only=True,
                                              help_text="The priority class it changes; null for a new one or a quota.")
    department = serializers.IntegerField(source="department_id", allow_null=True, read_only=True,
                                          help_text="A quota change's department.")
    proposed = serializers.DictField(read_only=True, help_text="What the change sets, as the catalogue's write took it.")
    before = serializers.DictField(read_only=True, help_text="What the rule was when the change was proposed.")

    class Meta:
        model = RuleChange
        fields = [
            "id", "kind", "state", "quota", "priority_class", "department", "proposed", "before", "emergency", "reason",
            "proposed_by", "decided_by", "decided_at", "decision_comment", "created_at",
        ]


class EmergencyIn(serializers.Serializer):  # type: ignore[type-arg]
    """What every write of the rules takes besides its own fields (``GPUPORTAL_FOUR_EYES``)."""

    emergency = serializers.BooleanField(
        required=False, default=False,
        help_text="Apply at once, without a second platform admin: needs `reason` (audited as an emergency and told "
        "to the other platform admins).",
    )
    reason = serializers.CharField(
        max_length=REASON_LIMIT, required=False, allow_blank=True, default="",
        help_text="Why: an emergency's stated reason (required then, 400 naming `reason`), or a proposal's note.",
    )


def emergency_of(data: dict[str, Any]) -> dict[str, Any]:
    """Take ``emergency`` and ``reason`` out of a validated body, as the proposal's keywords."""
    return {"emergency": bool(data.pop("emergency", False)), "reason": str(data.pop("reason", "") or "")}


FOUR_EYES = (
    " With four-eyes on (`GPUPORTAL_FOUR_EYES`, the default) the change waits for another platform admin: 202 with the "
    "pending rule change (`/api/v1/rule-changes/{id}/approve/`); `emergency` with a `reason` applies it at once."
)


def pending_response(outcome: rule_changes.RuleOutcome) -> Response | None:
    """202 with the pending change, or None when the change was applied."""
    if not outcome.pending:
        return None
    return Response(RuleChangeOut(outcome.change).data, status=status.HTTP_202_ACCEPTED)


class RuleChangeListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "created_at": "created_at", "decided_at": "decided_at", "state": "state"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        state = serializers.ChoiceField(choices=RuleChangeState.choices, required=False)
        kind = serializers.ChoiceField(choices=RuleChangeKind.choices, required=False)
        quota = IdField(required=False)
        priority_class = IdField(required=False)

    @extend_schema(
        parameters=[OpenApiParameter("state", str, enum=RuleChangeState.values),
                    OpenApiParameter("kind", str, enum=RuleChangeKind.values), OpenApiParameter("quota", int),
                    OpenApiParameter("priority_class", int)],
        responses={200: RuleChangeOut(many=True), **errors(400, 401, 404)},
        description="Changes of quotas and priority classes, newest first: all for platform admins and organisation-wide "
        "readers, a department's quota changes for its readers.",
    )
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        queryset = rule_changes.rule_change_list(
            user=request.user, state=params.get("state"), kind=params.get("kind"), quota_id=params.get("quota"),
            priority_class_id=params.get("priority_class"),
        )
        return paginated(view=self, request=request, queryset=queryset, serializer=RuleChangeOut)


class RuleChangeDetailApi(ApiView):
    @extend_schema(responses={200: RuleChangeOut, **errors(401, 404)})
    def get(self, request: Request, change_id: int) -> Response:
        return Response(RuleChangeOut(rule_changes.rule_change_get(user=request.user, change_id=change_id)).data)


DECIDE_RESPONSES = {200: RuleChangeOut, **errors(400, 401, 403, 404, 409)}
DECIDERS = " Platform admins only, and never the change's proposer (four-eyes: 403 `four_eyes`)."


class _RuleChangeActionApi(ApiView):
    def _decider(self, request: Request, change_id: int) -> None:
        rule_changes.rule_change_get(user=request.user, change_id=change_id)
        require_platform_admin(actor(request), to=rule_changes.DECIDE)

    def _respond(self, change: RuleChange) -> Response:
        fresh = RuleChange.objects.select_related("proposed_by", "decided_by").get(pk=change.pk)
        return Response(RuleChangeOut(fresh).data)


class RuleChangeApproveApi(_RuleChangeActionApi):
    @extend_schema(
        request=DecisionIn, responses=DECIDE_RESPONSES,
        description="Apply a pending change; the catalogue's rules are checked against what holds now (400 naming the "
        "field: the change stays pending); 409 when it is not pending." + DECIDERS,
    )
    def post(self, request: Request, change_id: int) -> Response:
        self._decider(request, change_id)
        data = validated(DecisionIn, request)
        return self._respond(rule_changes.rule_change_approve(actor=actor(request), change_id=change_id,
                                                              comment=data["comment"]))


class RuleChangeRejectApi(_RuleChangeActionApi):
    @extend_schema(request=DecisionIn, responses=DECIDE_RESPONSES,
                   description="Reject a pending change; a rejection needs a comment (400 naming `comment`)." + DECIDERS)
    def post(self, request: Request, change_id: int) -> Response:
        self._decider(request, change_id)
        data = validated(DecisionIn, request)
        return self._respond(rule_changes.rule_change_reject(actor=actor(request), change_id=change_id,
                                                             comment=data["comment"]))


class RuleChangeWithdrawApi(_RuleChangeActionApi):
    @extend_schema(request=None, responses=DECIDE_RESPONSES, description="Withdraw a pending change: its proposer only.")
    def post(self, request: Request, change_id: int) -> Response:
        rule_changes.rule_change_get(user=request.user, change_id=change_id)
        return self._respond(rule_changes.rule_change_withdraw(actor=actor(request), change_id=change_id))
