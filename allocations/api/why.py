"""GET /allocations/{id}/why/ and POST /allocations/simulate/: why a request waits, what would
start now instead and an estimate of its start (docs/pending.md). Read-only; researchers see it
for the requests they may read, outsiders get 404."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.admission.reasons import WAITING_STATES, ReasonCode
from allocations.admission.why import allocation_why, request_simulate
from allocations.api.preview import hypothetical_request
from allocations.api.submit_body import AllocationIn
from allocations.catalogue import selectors
from kernel.api.base import actor
from kernel.api.openapi import errors
from kernel.api.views import ApiView
from kernel.errors import TransitionNotAllowed


class ReasonOut(serializers.Serializer):  # type: ignore[type-arg]
    code = serializers.ChoiceField(choices=[code.value for code in ReasonCode], help_text="docs/pending.md")
    text = serializers.CharField()
    facts = serializers.DictField(help_text="The numbers and names behind it (limit, effective limit, held, asked…).")


class EstimateOut(serializers.Serializer):  # type: ignore[type-arg]
    starts_at = serializers.DateTimeField(allow_null=True, help_text="The earliest start found; null: none within 30 days.")
    basis = serializers.CharField()
    reliability = serializers.CharField()
    decisions_tried = serializers.IntegerField()


class WhyOut(serializers.Serializer):  # type: ignore[type-arg]
    allocation = serializers.IntegerField(allow_null=True, help_text="Null for a simulated request.")
    state = serializers.CharField()
    reason = ReasonOut(help_text="The one primary reason.")
    secondary = ReasonOut(many=True)
    quota = serializers.ListField(child=serializers.DictField(),
                                  help_text="Admission's quota lines, every level of the chain, with the limit now.")
    holders = serializers.DictField(allow_null=True, help_text="Who holds the capacity in the way, as far as you may see.")
    alternatives = serializers.ListField(child=serializers.DictField(), help_text="What admission would admit now instead.")
    queue = serializers.DictField(allow_null=True, help_text="Position among the pending requests its deciders see.")
    estimate = EstimateOut(allow_null=True)


class AllocationWhyApi(ApiView):
    """GET /allocations/{id}/why/: why a request that has not started waits, and until when."""

    @extend_schema(responses={200: WhyOut, **errors(401, 404, 409)})
    def get(self, request: Request, allocation_id: int) -> Response:
        allocation = selectors.allocation_get(user=request.user, allocation_id=allocation_id)
        if allocation.state not in WAITING_STATES:
            raise TransitionNotAllowed(
                f"Allocation #{allocation.pk} is {allocation.state}: it is not waiting.", details={"state": allocation.state}
            )
        return Response(WhyOut(allocation_why(allocation=allocation, viewer=request.user).as_dict()).data)


class AllocationSimulateApi(ApiView):
    """POST /allocations/simulate/: the same answer for a request with this body, not yet made
    (nothing is written)."""

    @extend_schema(request=AllocationIn, responses={200: WhyOut, **errors(400, 401, 403)})
    def post(self, request: Request) -> Response:
        return Response(WhyOut(simulated(request)).data)


def simulated(request: Request) -> dict[str, Any]:
    return request_simulate(allocation=hypothetical_request(request), viewer=actor(request)).as_dict()
