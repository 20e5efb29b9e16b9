"""GET /allocations/{id}/placement-preview/: what approving a pending request would do now: where
its units would go, which grants it would reclaim (and why, with their notice), or why it would be
refused. Read without locks: approval decides again under its locks."""

from __future__ import annotations

import datetime
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.admission.planning import admission_decide, admission_reads
from allocations.api.submit_body import AllocationIn
from allocations.booking.preview import candidate_clusters, placement_preview
from allocations.catalogue import selectors
from allocations.grants import services
from allocations.models import Allocation, AllocationState
from allocations.quotas.usage import checks_with_segments
from kernel.api.base import actor, target, validated
from kernel.api.openapi import errors
from kernel.api.views import ApiView
from kernel.clock import clock_now
from kernel.errors import NotAllowed, TransitionNotAllowed
from kernel.words import counted
from tenants.access import DepartmentTree, access_for


class ClusterFitOut(serializers.Serializer):  # type: ignore[type-arg]
    cluster = serializers.CharField()
    fits = serializers.BooleanField()
    requested = serializers.IntegerField(help_text="Units asked for.")
    placed = serializers.IntegerField(help_text="Units that would find a place now.")
    free = serializers.IntegerField(help_text="Units of the flavor that would fit now, one after another.")
    free_is_lower_bound = serializers.BooleanField(help_text="The count stopped at its limit: at least `free`.")
    reason = serializers.CharField(help_text="Why the next unit finds no place; empty when it fits.")
    kind = serializers.CharField(help_text="whole-gpus, gpu-share, mig-slice, cpu-or-memory, no-such-model, not-offered")
    where = serializers.DictField(child=serializers.ListField(child=serializers.CharField()),
                                  help_text="Node → GPUs the units would take now (gpu3; gpu2@4 for a MIG instance).")
    pending_adoption = serializers.IntegerField(help_text="Allocations here granted before GPU placement, booked first.")


class ReclaimOut(serializers.Serializer):  # type: ignore[type-arg]
    allocation = serializers.IntegerField(help_text="The grant approval would reclaim.")
    project = serializers.CharField()
    department = serializers.CharField()
    flavor = serializers.CharField()
    quantity = serializers.IntegerField()
    priority_class = serializers.CharField()
    state = serializers.CharField()
    why = serializers.ChoiceField(choices=["borrowed", "oversubscribed", "lower-priority"])
    notice_minutes = serializers.IntegerField(help_text="How long it keeps running after approval (0: at once).")
    units = serializers.IntegerField(
        help_text="How many of its units approval would take (fewer than its quantity: a partial reclaim, it keeps the rest)."
    )
    facts = serializers.CharField(help_text="Why it may be taken, worded from the facts that make it a victim.")


class QuotaSegmentOut(serializers.Serializer):  # type: ignore[type-arg]
    def get_fields(self) -> dict[str, serializers.Field]:  # type: ignore[type-arg]
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField()
        fields["until"] = serializers.DateTimeField()
        return fields

    in_use = serializers.CharField(help_text="What the department's grants that hold during the segment hold.")
    limit = serializers.CharField(help_text="The limit in force during the segment (windows applied).")


class QuotaCheckOut(serializers.Serializer):  # type: ignore[type-arg]
    def get_fields(self) -> dict[str, serializers.Field]:  # type: ignore[type-arg]
        fields = super().get_fields()  # "from" is a Python keyword: added under its name here
        fields["from"] = serializers.DateTimeField(help_text="The start of the interval this line checks.")
        fields["until"] = serializers.DateTimeField(help_text="Its end (exclusive).")
        return fields

    department = serializers.CharField()
    flavor = serializers.CharField(allow_null=True, help_text="Null: the department's GPU-equivalents.")
    priority_class = serializers.CharField(
        required=False, help_text="Present when the line checks this priority class's share of the quota."
    )
    requested = serializers.CharField()
    in_use = serializers.CharField(
        help_text="What admission counts against the quota in its binding step (the step of the line's interval "
        "with the least room): the grants that hold then, never grants that do not overlap added up; `segments` "
        "say what holds at each moment."
    )
    limit = serializers.CharField()
    effective_limit = serializers.CharField(
        help_text="The limit in force in the binding step times the priority class's oversubscription factor."
    )
    binding_from = serializers.DateTimeField(
        required=False, help_text="When the binding step starts (present when the interval has several steps)."
    )
    binding_until = serializers.DateTimeField(required=False, help_text="When the binding step ends (exclusive).")
    limit_by = serializers.IntegerField(required=False, help_text="The quota window that set the limit.")
    segments = QuotaSegmentOut(
        many=True, help_text="The line's interval cut where what holds or the limit in force changes: the use moment "
        "by moment, never grants that do not overlap added up.",
    )


class RefusalOut(serializers.Serializer):  # type: ignore[type-arg]
    code = serializers.CharField()
    message = serializers.CharField()


class PlacementPreviewOut(serializers.Serializer):  # type: ignore[type-arg]
    allocation = serializers.IntegerField()
    fits = serializers.BooleanField(help_text="Whether the units would find room now without reclaiming anything.")
    admitted = serializers.BooleanField(help_text="Whether approving now would succeed (reclaiming `reclaim`).")
    starts = serializers.ChoiceField(
        choices=["now", "at-start", "after-notice"], allow_null=True,
        help_text="When an approval now would reach the cluster: now, at its start, or once its victims' notice ends.",
    )
    reclaim = ReclaimOut(many=True, help_text="The grants approval would reclaim, in the order they are taken.")
    quota_checks = QuotaCheckOut(many=True, help_text="Every quota on the department chain that applies, after reclaim.")
    refusal = RefusalOut(allow_null=True, help_text="Why approval would be refused now; null when it would succeed.")
    clusters = ClusterFitOut(many=True, help_text="The clusters approval would try, in its order.")


class AllocationPlacementPreviewApi(ApiView):
    """GET /allocations/{id}/placement-preview/: whether a pending allocation fits now, where, or why not.
    Read without locks: approval decides again."""

    @extend_schema(responses={200: PlacementPreviewOut, **errors(401, 404, 409)})
    def get(self, request: Request, allocation_id: int) -> Response:
        allocation = selectors.allocation_get(user=request.user, allocation_id=allocation_id)
        if allocation.state != AllocationState.PENDING:
            raise TransitionNotAllowed(
                f"Allocation #{allocation.pk} is {allocation.state}; only a pending allocation has a preview "
                "(a granted one shows its placement).",
                details={"state": allocation.state},
            )
        fits = placement_preview(flavor=allocation.flavor, quantity=allocation.quantity, cluster=allocation.cluster,
                                 project=allocation.project)
        body: dict[str, Any] = {"allocation": allocation.pk, "fits": any(fit.fits for fit in fits), "clusters": fits}
        body.update(admission_preview(allocation_id=allocation.pk, tree=access_for(request.user).tree))
        return Response(PlacementPreviewOut(body).data)


def admission_preview(*, allocation_id: int, tree: DepartmentTree | None = None) -> dict[str, Any]:
    """The admission part of the preview (a selector's work: read-only, no locks); ``tree``: the
    department tree the request's access check read, so that the preview does not read it again."""
    allocation = Allocation.objects.select_related("project", "flavor", "priority_class", "cluster").get(
        pk=allocation_id
    )
    clusters = list(candidate_clusters(flavor=allocation.flavor, cluster=allocation.cluster))
    decision = admission_decide(allocation=allocation, clusters=clusters,
                                reads=admission_reads(tree=tree) if tree is not None else None)
    refusal = decision.refusal
    starts = None
    if refusal is None:
        waits = any(victim.notice_minutes > 0 and victim.state != AllocationState.SCHEDULED for victim in decision.victims)
        starts = "after-notice" if waits else ("at-start" if allocation.starts_at > clock_now() else "now")
    return {
        "admitted": refusal is None,
        "starts": starts,
        "reclaim": [victim.as_details() for victim in decision.victims],
        "quota_checks": checks_with_segments(allocation=allocation, checks=decision.checks, tree=tree),
        "refusal": {"code": refusal.code, "message": refusal.message} if refusal is not None else None,
    }


UNSAVED_PK = 0
"""The primary key of a request asked about before it is made, which no row has (ids start at 1):
admission counts a grant already reclaimed for the request (``reclaimed_for_id == pk``) as
promised to it, and with ``None`` every grant reclaimed for nobody would match."""


class RequestPreviewOut(serializers.Serializer):  # type: ignore[type-arg]
    admitted = serializers.BooleanField(help_text="Whether approving it now would succeed (reclaiming `reclaim`).")
    needs_confirmation = serializers.BooleanField(
        help_text="Approval would reclaim grants or be refused: the portal's form asks the requester to confirm."
    )
    summary = serializers.CharField(help_text="What approval would do, in one sentence.")
    starts = serializers.ChoiceField(choices=["now", "at-start", "after-notice"], allow_null=True)
    reclaim = ReclaimOut(many=True, help_text="The grants approval would reclaim, in the order they are taken.")
    refusal = RefusalOut(allow_null=True, help_text="Why approval would be refused now; null when it would succeed.")


class AllocationRequestPreviewApi(ApiView):
    """POST /allocations/preview/: what approving a request with this body would do now, before it
    is made (nothing is saved): the request form's confirmation, for clients of the API. Read
    without locks: approval decides again."""

    @extend_schema(request=AllocationIn, responses={200: RequestPreviewOut, **errors(400, 401, 403)})
    def post(self, request: Request) -> Response:
        return Response(RequestPreviewOut(request_preview(allocation=hypothetical_request(request))).data)


def hypothetical_request(request: Request) -> Allocation:
    """The request a body of ``AllocationIn`` would make, not saved (``UNSAVED_PK``), checked as
    submitting it would be: a member of the project, every field valid. The preview and the
    simulation of why it would wait both decide on it."""
    user = actor(request)
    project = target(AllocationIn, request, "project")
    if not services.allocation_request_allowed(actor=user, project=project, remember=True):
        raise NotAllowed(f"You are not a member of project {project.slug}.")
    fields = validated(AllocationIn, request, project=project)
    start = fields["starts_at"] or clock_now()
    return Allocation(
        pk=UNSAVED_PK, project=fields["project"], flavor=fields["flavor"], quantity=fields["quantity"],
        priority_class=fields["priority_class"], cluster=fields["cluster"], starts_at=start,
        ends_at=max(fields["ends_at"], start + datetime.timedelta(minutes=1)), state=AllocationState.PENDING,
        requested_by_id=user.pk,
    )


def request_preview(*, allocation: Allocation) -> dict[str, Any]:
    """What approving ``allocation`` (not saved) would do now (a selector's work: read-only, no locks)."""
    clusters = list(candidate_clusters(flavor=allocation.flavor, cluster=allocation.cluster))
    decision = admission_decide(allocation=allocation, clusters=clusters)
    refusal = decision.refusal
    victims = decision.victims if refusal is None else []
    starts = None
    if refusal is None:
        waits = any(victim.notice_minutes > 0 and victim.state != AllocationState.SCHEDULED for victim in victims)
        starts = "after-notice" if waits else ("at-start" if allocation.starts_at > clock_now() else "now")
    if refusal is not None:
        summary = f"As things stand, approval would be refused: {refusal.message}"
    elif victims:
        summary = f"Approval would reclaim {counted(len(victims), 'grant')}."
    else:
        summary = "Approval would reclaim nothing: it fits within the quotas and on the GPUs."
    return {
        "admitted": refusal is None, "needs_confirmation": refusal is not None or bool(victims), "summary": summary,
        "starts": starts, "reclaim": [victim.as_details() for victim in victims],
        "refusal": {"code": refusal.code, "message": refusal.message} if refusal is not None else None,
    }
