"""REST endpoints for allocations and flavors (priority classes and quotas: ``catalog_apis``).
Views stay thin: validate, call a selector or service, serialise."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.api.sharing import SharingModeOut, guidance_of, min_cuda_version_field, min_driver_version_field
from allocations.api.submit_body import AllocationIn, submit_body, submit_project
from allocations.catalogue import selectors
from allocations.grants import services
from allocations.models import (
    EXTENDED_RESOURCE_VALIDATOR,
    Allocation,
    AllocationState,
    ChangeKind,
    Flavor,
    PlacementPolicy,
    SharingMode,
)
from allocations.rules import catalogue as catalog
from kernel.api.base import IdField, actor, filters, paginated, validated
from kernel.api.openapi import errors
from kernel.api.pagination import Pagination
from kernel.api.views import ApiView
from kernel.errors import NotAllowed
from kernel.limits import TEXT_LIMIT
from kernel.numbers import plain
from tenants.access import access_for, require_platform_admin
from tenants.models import NAMESPACE_SLUG_VALIDATOR

# Every write checks the caller's permission before it reads the body (the services check again):
# a body names its target first when the permission depends on it, and an invisible target reads as
# an unknown one (400 naming the field, as before).
CATALOGUE = "change the catalogue"


class FlavorOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Flavor
        fields = [
            "id", "name", "display_name", "gpu_model", "sharing_mode", "resource_name", "mig_profile", "replicas",
            "memory_mib", "compute_percent", "gpu_equivalents", "cpu_millicores_per_unit", "memory_mib_per_unit",
            "reserve_percent", "reserve_per_unit_mib", "placement_policy", "is_active", "min_driver_version",
            "min_cuda_version", "guidance",
        ]

    guidance = serializers.SerializerMethodField(help_text="What the flavor's sharing mode is for and its caveats.")

    @extend_schema_field(SharingModeOut)
    def get_guidance(self, flavor: Flavor) -> dict[str, Any] | None:
        return guidance_of(flavor.sharing_mode)


class FlavorIn(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(max_length=63, validators=[NAMESPACE_SLUG_VALIDATOR])
    display_name = serializers.CharField(max_length=200)
    gpu_model = serializers.CharField(max_length=100)
    sharing_mode = serializers.ChoiceField(choices=SharingMode.choices)
    resource_name = serializers.CharField(max_length=253, validators=[EXTENDED_RESOURCE_VALIDATOR])
    mig_profile = serializers.CharField(max_length=32, required=False, allow_blank=True, default="")
    replicas = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=2, max_value=1000)
    memory_mib = serializers.IntegerField(min_value=1, max_value=10_000_000)
    compute_percent = serializers.IntegerField(min_value=1, max_value=100)
    gpu_equivalents = serializers.DecimalField(max_digits=6, decimal_places=4, min_value=Decimal("0.0001"), max_value=1)
    cpu_millicores_per_unit = serializers.IntegerField(min_value=0, max_value=10_000_000, required=False, default=8000)
    memory_mib_per_unit = serializers.IntegerField(min_value=0, max_value=100_000_000, required=False, default=65536)
    reserve_percent = serializers.IntegerField(
        min_value=0, max_value=90, required=False, allow_null=True, default=None,
        help_text="Percent of a shared GPU's memory its units leave free (null: the cluster's setting).",
    )
    reserve_per_unit_mib = serializers.IntegerField(
        min_value=0, max_value=65536, required=False, allow_null=True, default=None,
        help_text="MiB of a shared GPU's memory left free per unit on it (null: the cluster's setting).",
    )
    placement_policy = serializers.ChoiceField(
        choices=PlacementPolicy.choices, required=False, default=PlacementPolicy.BINPACK
    )
    is_active = serializers.BooleanField(required=False, default=True)
    min_driver_version = min_driver_version_field()
    min_cuda_version = min_cuda_version_field()


class FlavorListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {"id": "id", "name": "name", "gpu_model": "gpu_model", "gpu_equivalents": "gpu_equivalents"}

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        active = serializers.BooleanField(required=False, default=False)

    @extend_schema(parameters=[Filter], responses={200: FlavorOut(many=True), **errors(400, 401, 404)})
    def get(self, request: Request) -> Response:
        params = filters(self.Filter, request)
        queryset = selectors.flavor_list(user=request.user, active_only=params.get("active", False))
        return paginated(view=self, request=request, queryset=queryset, serializer=FlavorOut)

    @extend_schema(request=FlavorIn, responses={201: FlavorOut, **errors(400, 401, 403)})
    def post(self, request: Request) -> Response:
        require_platform_admin(actor(request), to=CATALOGUE)
        flavor = catalog.flavor_create(actor=actor(request), **validated(FlavorIn, request))
        return Response(FlavorOut(flavor).data, status=status.HTTP_201_CREATED)


class FlavorDetailApi(ApiView):
    @extend_schema(responses={200: FlavorOut, **errors(401, 404)})
    def get(self, request: Request, flavor_id: int) -> Response:
        return Response(FlavorOut(selectors.flavor_get(user=request.user, flavor_id=flavor_id)).data)

    @extend_schema(request=FlavorIn(partial=True), responses={200: FlavorOut, **errors(400, 401, 403, 404)})
    def patch(self, request: Request, flavor_id: int) -> Response:
        selectors.flavor_get(user=request.user, flavor_id=flavor_id)
        require_platform_admin(actor(request), to=CATALOGUE)
        data = validated(FlavorIn, request, partial=True)
        flavor = catalog.flavor_update(actor=actor(request), flavor_id=flavor_id, **data)
        return Response(FlavorOut(flavor).data)


class ReservationOut(serializers.Serializer):  # type: ignore[type-arg]
    """One unit booked on concrete GPUs (live reservations only)."""

    unit = serializers.IntegerField()
    node = serializers.CharField(source="node.name")
    gpus = serializers.ListField(child=serializers.IntegerField(), source="gpu_indices")
    share_milli = serializers.IntegerField(source="gpu_milli", help_text="Share of each GPU in thousandths; 0 for MIG.")
    mig_profile = serializers.CharField(allow_blank=True)
    mig_start = serializers.IntegerField(allow_null=True, help_text="First memory slice of the MIG instance.")


class PendingChangeOut(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=ChangeKind.choices)


class AllocationOut(serializers.ModelSerializer):  # type: ignore[type-arg]
    project = serializers.SlugRelatedField[Any](slug_field="slug", read_only=True)
    department = serializers.SlugRelatedField[Any](source="project.department", slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField[Any](slug_field="name", read_only=True)
    priority_class = serializers.SlugRelatedField[Any](slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField[Any](slug_field="name", read_only=True, allow_null=True)
    requested_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField[Any](slug_field="username", read_only=True, allow_null=True)
    gpu_equivalents = serializers.SerializerMethodField()
    placement = serializers.SerializerMethodField(help_text="Where each granted unit is booked; empty until approved.")
    pending_change = serializers.SerializerMethodField(help_text="The change waiting for approval (renew, resize), or null.")

    class Meta:
        model = Allocation
        fields = [
            "id", "project", "project_id", "department", "flavor", "flavor_id", "quantity", "gpu_equivalents",
            "priority_class", "cluster", "state", "starts_at", "ends_at", "justification", "requested_by",
            "decided_by", "decided_at", "decision_comment", "failure_reason", "created_at", "updated_at", "placement",
            "original_ends_at", "reclaim_deadline", "reclaim_reason", "reclaimed_for", "reclaim_units", "pending_change",
        ]
        extra_kwargs = {
            "reclaim_deadline": {"help_text": "Reclaiming, or giving back units: when its notice ends and its capacity "
                                 "(or those units) is released."},
            "reclaim_reason": {"help_text": "Reclaiming or reclaimed: which request took it, and why."},
            "reclaimed_for": {"help_text": "Reclaiming or reclaimed: the id of the request it made room for."},
            "reclaim_units": {"help_text": "A partial reclaim: how many of its units it gives back at reclaim_deadline "
                              "(it keeps the rest and its state); null otherwise."},
        }

    def get_gpu_equivalents(self, allocation: Allocation) -> str:
        return plain(allocation.flavor.gpu_equivalents_for(allocation.quantity))

    @extend_schema_field(ReservationOut(many=True))
    def get_placement(self, allocation: Allocation) -> list[dict[str, Any]]:
        return list(ReservationOut(selectors.live_reservations(allocation), many=True).data)

    @extend_schema_field(PendingChangeOut(allow_null=True))
    def get_pending_change(self, allocation: Allocation) -> dict[str, Any] | None:
        pending = selectors.pending_changes(allocation)
        return {"id": pending[0].pk, "kind": pending[0].kind} if pending else None


_allocation_out: AllocationOut | None = None


def allocation_out(allocation: Allocation) -> dict[str, Any]:
    """``AllocationOut(allocation).data`` from one serializer kept per process: a ModelSerializer
    builds its fields from the model on every instance (about half a millisecond of a submit's CPU),
    and reading one allocation changes nothing in them (no context, no state between calls)."""
    global _allocation_out
    if _allocation_out is None:
        _allocation_out = AllocationOut()
    return dict(_allocation_out.to_representation(allocation))


class AllocationListApi(ApiView):
    pagination_class = Pagination  # the schema's list shape (paginated() pages with it)
    ordering_fields = {
        "id": "id", "created_at": "created_at", "updated_at": "updated_at", "starts_at": "starts_at", "ends_at": "ends_at",
        "state": "state", "quantity": "quantity",
    }

    class Filter(serializers.Serializer):  # type: ignore[type-arg]
        state = serializers.MultipleChoiceField(choices=AllocationState.choices, required=False)
        project = IdField(required=False)
        department = IdField(required=False)
        flavor = IdField(required=False)
        cluster = IdField(required=False)
        mine = serializers.BooleanField(required=False, default=False)

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, many=True, enum=AllocationState.values),
            OpenApiParameter("project", int),
            OpenApiParameter("department", int),
            OpenApiParameter("flavor", int),
            OpenApiParameter("cluster", int),
            OpenApiParameter("mine", bool),
        ],
        responses={200: AllocationOut(many=True), **errors(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        data = self.Filter(data={**request.query_params.dict(), "state": request.query_params.getlist("state")})
        data.is_valid(raise_exception=True)
        params = data.validated_data
        queryset = selectors.allocation_list(
            user=request.user,
            state=sorted(params.get("state") or []),
            project_id=params.get("project"),
            department_id=params.get("department"),
            flavor_id=params.get("flavor"),
            cluster_id=params.get("cluster"),
            mine=params.get("mine", False),
        )
        return paginated(view=self, request=request, queryset=queryset, serializer=AllocationOut)

    @extend_schema(request=AllocationIn, responses={201: AllocationOut, **errors(400, 401, 403, 409)})
    def post(self, request: Request) -> Response:
        user = actor(request)
        project = submit_project(request, user)
        if not services.allocation_request_allowed(actor=user, project=project, remember=True):
            raise NotAllowed(f"You are not a member of project {project.slug}.")
        allocation = services.allocation_request(actor=user, **submit_body(request, user, project=project))
        # A request just written is pending: no unit booked, no change waiting (no query to say so).
        allocation.live_reservations = []  # type: ignore[attr-defined]
        allocation.pending_changes = []  # type: ignore[attr-defined]
        return Response(allocation_out(allocation), status=status.HTTP_201_CREATED)


class AllocationDetailApi(ApiView):
    @extend_schema(responses={200: AllocationOut, **errors(401, 404)})
    def get(self, request: Request, allocation_id: int) -> Response:
        return Response(AllocationOut(selectors.allocation_get(user=request.user, allocation_id=allocation_id)).data)


class DecisionIn(serializers.Serializer):  # type: ignore[type-arg]
    comment = serializers.CharField(max_length=TEXT_LIMIT, required=False, allow_blank=True, default="")


DECISION_RESPONSES = {200: AllocationOut, **errors(400, 401, 403, 404, 409)}


class _AllocationActionApi(ApiView):
    """POST /allocations/{id}/<action>/: the allocation must be visible first (404 otherwise), then
    the caller must hold the role the action needs (403), and only then is the body read."""

    def _visible(self, request: Request, allocation_id: int) -> Allocation:
        return selectors.allocation_visible(user=request.user, allocation_id=allocation_id)

    def _decider(self, request: Request, allocation_id: int) -> None:
        allocation = self._visible(request, allocation_id)
        if not access_for(request.user).can_administer_department(allocation.project.department_id):
            raise NotAllowed("Only an admin of the allocation's department may decide on it.")

    def _changer(self, request: Request, allocation_id: int) -> None:
        allocation = self._visible(request, allocation_id)
        if not selectors.allocation_may_change(user=request.user, allocation=allocation):
            raise NotAllowed("Only the project's members or the department's admins may change this allocation.")

    def _respond(self, allocation: Allocation) -> Response:
        fresh = Allocation.objects.select_related(
            "project__department", "flavor", "priority_class", "cluster", "requested_by", "decided_by"
        ).get(pk=allocation.pk)
        return Response(AllocationOut(fresh).data)


class AllocationApproveApi(_AllocationActionApi):
    @extend_schema(request=DecisionIn, responses=DECISION_RESPONSES)
    def post(self, request: Request, allocation_id: int) -> Response:
        self._decider(request, allocation_id)
        data = validated(DecisionIn, request)
        return self._respond(services.allocation_approve(actor=actor(request), allocation_id=allocation_id, comment=data["comment"]))


class AllocationRejectApi(_AllocationActionApi):
    @extend_schema(request=DecisionIn, responses=DECISION_RESPONSES)
    def post(self, request: Request, allocation_id: int) -> Response:
        self._decider(request, allocation_id)
        data = validated(DecisionIn, request)
        return self._respond(services.allocation_reject(actor=actor(request), allocation_id=allocation_id, comment=data["comment"]))


class AllocationReleaseApi(_AllocationActionApi):
    @extend_schema(request=DecisionIn, responses=DECISION_RESPONSES)
    def post(self, request: Request, allocation_id: int) -> Response:
        self._changer(request, allocation_id)
        data = validated(DecisionIn, request)
        return self._respond(services.allocation_release(actor=actor(request), allocation_id=allocation_id, comment=data["comment"]))


class AllocationRetryApi(_AllocationActionApi):
    @extend_schema(request=None, responses=DECISION_RESPONSES)
    def post(self, request: Request, allocation_id: int) -> Response:
        self._visible(request, allocation_id)
        return self._respond(services.allocation_retry(actor=actor(request), allocation_id=allocation_id))
