"""``GET /api/v1/allocations/{id}/utilisation/?window=1h|24h|7d``: an allocation's utilisation.

Visible to whoever may read the allocation (its department's people, their admins and auditors,
platform admins); anyone else gets 404, as for the allocation itself.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.catalogue.selectors import allocation_get
from kernel.api.base import filters
from kernel.api.openapi import errors
from kernel.api.views import ApiView
from kernel.clock import clock_now
from telemetry.models import UsageSource
from telemetry.usage import reads

SOURCES = UsageSource.choices


@extend_schema_serializer(component_name="UtilisationBucket")
class BucketOut(serializers.Serializer[Any]):
    start = serializers.DateTimeField(help_text="The bucket's start (5 minutes, or an hour for window=7d).")
    # a field named "source" shadows Field.source for the type checker only (declared fields are collected)
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=SOURCES, help_text="Where it was read: dcgm-exporter, HAMi or the node agent."
    )
    devices = serializers.IntegerField(help_text="Booked devices its data covered.")
    coverage = serializers.FloatField(min_value=0, max_value=1, help_text="Fraction of the expected samples present.")
    activity = serializers.FloatField(
        allow_null=True, min_value=0, max_value=1,
        help_text="Mean busy fraction of the allocation's devices; null when unknown (too little data), never 0 for missing data.",
    )  # fmt: skip
    granted_gpu_eq = serializers.FloatField(help_text="GPU-equivalents the allocation held.")
    used_gpu_eq = serializers.FloatField(allow_null=True, help_text="activity × granted; null when unknown.")
    memory_used_bytes = serializers.IntegerField(allow_null=True, help_text="Peak GPU memory used; null when unknown.")
    memory_granted_bytes = serializers.IntegerField(
        allow_null=True, help_text="GPU memory the allocation's share entitles it to."
    )


@extend_schema_serializer(component_name="UtilisationSummary")
class SummaryOut(serializers.Serializer[Any]):
    buckets = serializers.IntegerField(help_text="5-minute buckets recorded in the window.")
    known_buckets = serializers.IntegerField(help_text="... of which the activity is known.")
    mean_activity = serializers.FloatField(
        allow_null=True, min_value=0, max_value=1, help_text="Mean of the known buckets."
    )
    coverage = serializers.FloatField(min_value=0, max_value=1, help_text="Mean coverage of the recorded buckets.")
    granted_gpu_eq_hours = serializers.FloatField()
    used_gpu_eq_hours = serializers.FloatField(help_text="Over the known buckets only.")
    memory_used_bytes = serializers.IntegerField(allow_null=True, help_text="Peak GPU memory used in the window.")
    memory_granted_bytes = serializers.IntegerField(allow_null=True)
    memory_used_ratio = serializers.FloatField(allow_null=True, help_text="Peak used / granted.")
    sources = serializers.ListField(child=serializers.ChoiceField(choices=SOURCES))


@extend_schema_serializer(component_name="AllocationUtilisation")
class UtilisationOut(serializers.Serializer[Any]):
    allocation = serializers.IntegerField()
    window = serializers.ChoiceField(choices=list(reads.WINDOWS))
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    bucket_seconds = serializers.IntegerField()
    buckets = BucketOut(many=True)
    summary = SummaryOut()


class AllocationUtilisationApi(ApiView):
    class Filter(serializers.Serializer[Any]):
        window = serializers.ChoiceField(choices=list(reads.WINDOWS), required=False, default="24h")

    @extend_schema(parameters=[Filter], responses={200: UtilisationOut, **errors(400, 401, 404)})
    def get(self, request: Request, allocation_id: int) -> Response:
        params = filters(self.Filter, request)
        allocation = allocation_get(user=request.user, allocation_id=allocation_id)
        data = reads.allocation_utilisation(allocation=allocation, window=params["window"], now=clock_now())
        return Response(UtilisationOut(data).data)
