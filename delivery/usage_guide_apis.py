"""``GET /api/v1/allocations/{id}/usage-guide/``: how to run work under a grant (docs/using.md)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from delivery.usage_guide import PREVIEW, READY
from delivery.usage_guide_reads import allocation_usage_guide
from kernel.api.openapi import errors
from kernel.api.views import ApiView


class ResourceLineOut(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(help_text="The resource name exactly as a container's limits name it.")
    per_pod = serializers.IntegerField(help_text="The most one pod (one container) can ask for.")
    total = serializers.IntegerField(help_text="What the grant adds to the namespace's quota.")


class ContainerLimitsOut(serializers.Serializer):  # type: ignore[type-arg]
    default_request = serializers.DictField(child=serializers.CharField())
    default = serializers.DictField(child=serializers.CharField())
    max = serializers.DictField(child=serializers.CharField())


class ExamplesOut(serializers.Serializer):  # type: ignore[type-arg]
    pod = serializers.CharField(help_text="A Pod manifest (YAML) for this allocation.")
    job = serializers.CharField(help_text="A batch/v1 Job manifest (YAML) running as many such pods as the grant holds.")


class KubeconfigOut(serializers.Serializer):  # type: ignore[type-arg]
    method = serializers.ChoiceField(choices=["oidc", "ask-platform-team"])
    instructions = serializers.CharField()
    snippet = serializers.CharField(allow_blank=True, help_text="Shell commands (kubectl config ...); empty without OIDC settings.")


class UsageGuideOut(serializers.Serializer):  # type: ignore[type-arg]
    status = serializers.ChoiceField(
        choices=[READY, PREVIEW], help_text="ready: active (or reclaiming); preview: not on the cluster yet."
    )
    allocation_id = serializers.IntegerField()
    state = serializers.CharField()
    cluster = serializers.CharField()
    namespace = serializers.CharField()
    flavor = serializers.CharField()
    sharing_mode = serializers.CharField()
    priority_class = serializers.CharField(help_text="Set it as the pods' priorityClassName.")
    resources = ResourceLineOut(many=True)
    container_limits = ContainerLimitsOut(help_text="The namespace's LimitRange for each container.")
    examples = ExamplesOut()
    kubeconfig = KubeconfigOut()
    notes = serializers.ListField(child=serializers.CharField())


class AllocationUsageGuideApi(ApiView):
    @extend_schema(
        responses={200: UsageGuideOut, **errors(401, 404, 409)},
        description="How to use an allocation on its cluster: namespace, resource names and quantities, the priority "
        "class, Pod and Job examples, container limits and how to get a kubeconfig. Whoever may read the allocation; "
        "for scheduled, approved and provisioning allocations a preview (status preview); 409 (not_usable) for other "
        "states (pending, rejected, cancelled, failed, released, expired, reclaimed).",
    )
    def get(self, request: Request, allocation_id: int) -> Response:
        guide = allocation_usage_guide(user=request.user, allocation_id=allocation_id)
        return Response(UsageGuideOut(guide.as_dict()).data)
