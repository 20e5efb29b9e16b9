"""REST endpoints for changes to a grant's terms (``allocations.grants.changes``): renew and resize an
allocation, and list, read, approve, reject and withdraw the changes that wait for approval.

As everywhere: the object must be visible first (404 otherwise), then the caller must hold the
role the action needs (403), and only then is the body read. A change applied at once answers 200
with the allocation; one that waits for a department admin answers 202 with the change.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.api.grants import AllocationOut, DecisionIn, _AllocationActionApi
from allocations.catalogue import selectors
from allocations.grants import changes
from allocations.models import Allocation, AllocationChange, ChangeState
from kernel.api.base import IdField, actor, filters, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.clock import clock_now
from kernel.errors import NotAllowed
from kernel.limits import QUANTITY_MAX, TEXT_LIMIT
from tenants.access import access_for


class ChangeOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    requested_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField[Any](
        slug_field="username", read_only=True, allow_null=True,
        help_text="Who approved or rejected it (or withdrew it, when cancelled); null while pending.",
    )
    project = serializers.SlugRelatedField[Any](source="allocation.project", slug_field="slug", read_only=True)

    class Meta:
        model = AllocationChange
        fields = [
            "id", "allocation", "project", "kind", "state", "ends_at", "quantity", "justification", "requested_by",
            "decided_by", "decided_at", "decision_comment", "created_at",
        ]
        extra_kwargs = {
            "allocation": {"help_text": "The id of the allocation it changes."},
            "ends_at": {"help_text": "Renewals: the new end; null for resizes."},
            "quantity": {"help_text": "Resizes: the new quantity; null for renewals."},
        }


class AllocationChangedOut(AllocationOut):
    change = ChangeOut(allow_null=True, read_only=True, help_text="Null: the change was applied at once.")

    class Meta(AllocationOut.Meta):
        fields = [*AllocationOut.Meta.fields, "change"]


class RenewIn(serializers.Serializer):  # type: ignore[type-arg]
    ends_at = serializers.DateTimeField()
    justification = serializers.CharField(max_length=TEXT_LIMIT, required=False, allow_blank=True, default="")


class ResizeIn(serializers.Serializer):  # type: ignore[type-arg]
    quantity = serializers.IntegerField(min_value=1, max_value=QUANTITY_MAX)
    justification = serializers.CharField(max_length=TEXT_LIMIT, required=False, allow_blank=True, default="")


CHANGE_RESPONSES = {200: AllocationChangedOut, 202: ChangeOut, **errors(400, 401, 403, 404, 409)}


class _ChangeRequestApi(_AllocationActionApi):
    def _outcome(self, outcome: changes.ChangeOutcome) -> Response:
        if not outcome.applied:
            assert outcome.change is not None
            return Response(ChangeOut(outcome.change).data, status=status.HTTP_202_ACCEPTED)
        fresh = Allocation.objects.select_related(
            "project__department", "flavor", "priority_class", "cluster", "requested_by", "decided_by"
        ).get(pk=outcome.allocation.pk)
        fresh.change = None  # type: ignore[attr-defined]
        return Response(AllocationChangedOut(fresh).data)


class AllocationRenewApi(_ChangeRequestApi):
    @extend_schema(
        request=RenewIn, responses=CHANGE_RESPONSES,
        description="Within the self-service window the end moves at once (200); beyond it the renewal "
        "waits for a department admin (202, the pending change).",
    )
    def post(self, request: Request, allocation_id: int) -> Response:
        self._changer(request, allocation_id)
        data = validated(RenewIn, request)
        if data["ends_at"] <= clock_now():
            raise serializers.ValidationError({"ends_at": ["The new end must be in the future."]})
        return self._outcome(changes.allocation_renew(actor=actor(request), allocation_id=allocation_id, **data))


class AllocationResizeApi(_ChangeRequestApi):
    @extend_schema(
        request=ResizeIn, responses=CHANGE_RESPONSES,
        description="Fewer units apply at once (200); more units wait for a department admin (202).",
    )
    def post(self, request: Request, allocation_id: int) -> Response:
        self._changer(request, allocation_id)
        data = validated(ResizeIn, request)
        return self._outcome(changes.allocation_resize(actor=actor(request), allocation_id=allocation_id, **data))


class AllocationChangeListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "created_at": "created_at", "decided_at": "decided_at", "state": "state"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        state = serializers.ChoiceField(choices=ChangeState.choices, required=False)
        allocation = IdField(required=False)

    @extend_schema(
        parameters=[OpenApiParameter("state", str, enum=ChangeState.values), OpenApiParameter("allocation", int)],
        responses={200: ChangeOut(many=True), **errors(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        queryset = changes.allocation_change_list(
            user=request.user, state=params.get("state"), allocation_id=params.get("allocation")
        )
        return paginated(view=self, request=request, queryset=queryset, serializer=ChangeOut)


class AllocationChangeDetailApi(ApiView):
    @extend_schema(responses={200: ChangeOut, **errors(401, 404)})
    def get(self, request: Request, change_id: int) -> Response:
        return Response(ChangeOut(changes.allocation_change_get(user=request.user, change_id=change_id)).data)


DECIDE_RESPONSES = {200: ChangeOut, **errors(400, 401, 403, 404, 409)}


class _ChangeActionApi(ApiView):
    def _decider(self, request: Request, change_id: int) -> None:
        change = changes.allocation_change_get(user=request.user, change_id=change_id)
        if not access_for(request.user).can_administer_department(change.allocation.project.department_id):
            raise NotAllowed("Only an admin of the allocation's department may decide on a change to it.")

    def _respond(self, change: AllocationChange) -> Response:
        return Response(ChangeOut(AllocationChange.objects.select_related(
            "allocation__project", "requested_by", "decided_by"
        ).get(pk=change.pk)).data)


class AllocationChangeApproveApi(_ChangeActionApi):
    @extend_schema(request=DecisionIn, responses=DECIDE_RESPONSES)
    def post(self, request: Request, change_id: int) -> Response:
        self._decider(request, change_id)
        data = validated(DecisionIn, request)
        return self._respond(changes.allocation_change_approve(actor=actor(request), change_id=change_id, comment=data["comment"]))


class AllocationChangeRejectApi(_ChangeActionApi):
    @extend_schema(request=DecisionIn, responses=DECIDE_RESPONSES, description="A rejection needs a comment.")
    def post(self, request: Request, change_id: int) -> Response:
        self._decider(request, change_id)
        data = validated(DecisionIn, request)
        return self._respond(changes.allocation_change_reject(actor=actor(request), change_id=change_id, comment=data["comment"]))


class AllocationChangeCancelApi(_ChangeActionApi):
    @extend_schema(request=None, responses={200: ChangeOut, **errors(401, 403, 404, 409)})
    def post(self, request: Request, change_id: int) -> Response:
        change = changes.allocation_change_get(user=request.user, change_id=change_id)
        user = actor(request)
        if change.requested_by_id != user.pk and not selectors.allocation_may_change(user=user, allocation=change.allocation):
            raise NotAllowed("Only the change's requester, the project's members or the department's admins may withdraw it.")
        return self._respond(changes.allocation_change_cancel(actor=user, change_id=change_id))
