"""Routes under ``/api/v1/`` (included by ``gpuportal.api_urls``)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from telemetry import apis
from telemetry.usage import apis as usage_apis

urlpatterns: list[URLPattern | URLResolver] = [
    # The agent's URL has no trailing slash (agent.portal_client.REPORT_PATH).
    path("nodes/<str:node_name>/report", apis.NodeReportApi.as_view(), name="api-node-report"),
    path("node-tokens/", apis.NodeTokenListApi.as_view(), name="api-node-tokens"),
    path("node-tokens/<int:token_id>/", apis.NodeTokenDetailApi.as_view(), name="api-node-token"),
    path("node-tokens/<int:token_id>/revoke/", apis.NodeTokenRevokeApi.as_view(), name="api-node-token-revoke"),
    path("telemetry/nodes/", apis.TelemetryNodeListApi.as_view(), name="api-telemetry-nodes"),
    path("telemetry/nodes/<int:node_id>/", apis.TelemetryNodeDetailApi.as_view(), name="api-telemetry-node"),
    path("telemetry/gpus/<int:gpu_id>/samples/", apis.GpuSampleListApi.as_view(), name="api-telemetry-gpu-samples"),
    path(
        "allocations/<int:allocation_id>/utilisation/", usage_apis.AllocationUtilisationApi.as_view(),
        name="api-allocation-utilisation",
    ),
]
