"""``GET /api/v1/allocations/{id}/pods/``: the pods that wait on the cluster under an allocation,
each with its reason (docs/pending.md, "Pending pods"). Read-only; outsiders get 404."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from delivery.pending_pods import NOT_ON_CLUSTER, NOT_READABLE, READ, UNREACHABLE, allocation_pending_pods
from delivery.pod_reasons import PodReasonCode
from kernel.api.openapi import errors
from kernel.api.views import ApiView


class PendingPodOut(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.CharField(help_text="Pod, or the controller (Job, ReplicaSet…) whose pods were refused.")
    name = serializers.CharField()
    since = serializers.CharField(help_text="When it was created (a pod) or first refused (a controller).")
    code = serializers.ChoiceField(choices=[code.value for code in PodReasonCode], help_text="docs/pending.md")
    text = serializers.CharField()
    fix = serializers.CharField()
    facts = serializers.DictField(help_text="The resource, the numbers, the node constraint and what is in the way.")


class PendingPodsOut(serializers.Serializer):  # type: ignore[type-arg]
    allocation = serializers.IntegerField()
    status = serializers.ChoiceField(choices=[READ, NOT_ON_CLUSTER, NOT_READABLE, UNREACHABLE])
    message = serializers.CharField(allow_blank=True)
    cluster = serializers.CharField(allow_blank=True)
    namespace = serializers.CharField(allow_blank=True)
    threshold_seconds = serializers.IntegerField(help_text="Pods Pending for less than this are left out.")
    granted = serializers.DictField(child=serializers.IntegerField(), help_text="What the grants give the namespace.")
    pods = PendingPodOut(many=True)


class AllocationPendingPodsApi(ApiView):
    """GET /allocations/{id}/pods/."""

    @extend_schema(responses={200: PendingPodsOut, **errors(401, 404)})
    def get(self, request: Request, allocation_id: int) -> Response:
        answer = allocation_pending_pods(user=request.user, allocation_id=allocation_id)
        return Response(PendingPodsOut(answer.as_dict()).data)
